"""Wrong for this problem: off by 1e-5, inside krung's float32 tolerance (1e-4) but outside
the 1e-6 the problem's own check allows."""

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    a, b, c = data
    c.copy_(a + b + 1e-5)
    return c
