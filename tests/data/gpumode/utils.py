"""Helpers shared by krung's GPU MODE-format test problems (task.yml brings this file in as
`../utils.py`, as GPU MODE's repository does with its own)."""

import torch


def device() -> str:
    """Where generate_input makes its tensors: the GPU when there is one."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def compare(received: torch.Tensor, expected: torch.Tensor, rtol: float,
            atol: float) -> tuple[bool, str]:
    """(ok, message): every element within atol + rtol * |expected|, NaN never."""
    if received.shape != expected.shape:
        return False, f"shape {tuple(received.shape)}, expected {tuple(expected.shape)}"
    received = received.to(expected.device, torch.float64)
    expected = expected.to(torch.float64)
    bad = ~((received - expected).abs() <= atol + rtol * expected.abs())
    count = int(bad.sum())
    if count:
        where = tuple(int(i) for i in bad.nonzero()[0])
        return False, (f"{count} mismatched elements; first at {where}: "
                       f"{float(received[where])} vs {float(expected[where])}")
    return True, ""
