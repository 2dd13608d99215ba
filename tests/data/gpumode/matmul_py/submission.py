"""a @ b, relying on the layout the problem promises: a is column-major."""

import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    a, b = data
    if a.stride(0) != 1:
        raise ValueError(f"a should be column-major, its strides are {a.stride()}")
    # a.T is a row-major k x m view of the same memory
    return torch.mm(a.t().t(), b)
