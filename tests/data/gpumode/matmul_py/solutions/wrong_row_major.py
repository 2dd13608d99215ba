"""Wrong: reads a's memory as if it were row-major."""

import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    a, b = data
    m, k = a.shape
    as_row_major = torch.as_strided(a, (m, k), (k, 1))
    return as_row_major @ b
