"""An exclusive scan where an inclusive one is asked for: every element one step behind."""

import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    x, y = data
    y[0] = 0
    y[1:] = torch.cumsum(x, dim=0)[:-1]
    return y
