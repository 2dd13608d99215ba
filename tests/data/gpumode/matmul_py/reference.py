"""c = a @ b, with a (m x k) given in column-major order and b (k x n) in row-major."""

import torch
from task import input_t, output_t
from utils import compare, device


def generate_input(m: int, n: int, k: int, seed: int) -> input_t:
    gen = torch.Generator(device=device()).manual_seed(seed)
    a = torch.randn(k, m, device=device(), generator=gen).t()  # column-major m x k
    b = torch.randn(k, n, device=device(), generator=gen)
    return a, b


def ref_kernel(data: input_t) -> output_t:
    a, b = data
    return (a.double() @ b.double()).float()


def check_implementation(data: input_t, output: output_t) -> str:
    ok, message = compare(output, ref_kernel(data), rtol=1e-4, atol=1e-4)
    return "" if ok else message
