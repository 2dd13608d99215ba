"""Dither a float32 vector: add noise far below the check's tolerance. The reference draws
the noise from torch's global generator, so it gives other bits on every call: a problem
nondeterministic by design, whose own check accepts any output within 1e-3 of the input."""

import torch
from task import input_t, output_t
from utils import device


def generate_input(size: int, seed: int) -> input_t:
    gen = torch.Generator(device=device()).manual_seed(seed)
    return torch.randn(size, device=device(), generator=gen)


def ref_kernel(data: input_t) -> output_t:
    return data + 1e-5 * torch.randn(data.shape, device=data.device)


def check_implementation(data: input_t, output: output_t) -> tuple[bool, str]:
    off = float((output - data).abs().max())
    return off <= 1e-3, f"{off:.3g} away from the input, more than 1e-3"
