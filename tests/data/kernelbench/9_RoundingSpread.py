"""A sum whose order varies between calls (a krung test problem in KernelBench's format, as
level-2 93_ConvTranspose2d_Add_Min_GELU_Multiply behaves on a GPU: cuDNN adds partial sums in
an order that varies, so the reference disagrees with itself in the last bits). Most outputs
are 0 and a few 1, which keeps the RMS, and so krung's atol, far below the largest values;
the small ones pass through an intermediate 16 times the largest output, rounded one way or
another as the call draws (from its own generator, not torch's global one)."""

import os

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, ones, small):
        draw = torch.Generator(device=small.device)
        draw.manual_seed(int.from_bytes(os.urandom(7), "little"))
        other_order = torch.rand(small.shape, generator=draw, device=small.device) < 0.5
        carried = (small + 16.0) - 16.0  # rounded at 16's precision
        return ones + torch.where(other_order, carried, small)


batch_size = 64
width = 4096


def get_inputs():
    ones = (torch.rand(batch_size, width) < 2e-5).float()
    ones[0, 0] = 1.0  # the largest output, whatever the draw
    return [ones, torch.rand(batch_size, width) * 1e-4]


def get_init_inputs():
    return []
