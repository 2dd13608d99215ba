"""GPU MODE's own submission pattern: the float32 prefix sum written into the buffer."""

import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    x, y = data
    y[...] = torch.cumsum(x, dim=0)
    return y
