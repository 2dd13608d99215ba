"""row_logsumexp: log(sum(exp(x))) over each row, a row-wise reduction."""

from __future__ import annotations

import torch

description = "logsumexp over the last dimension of a (rows, cols) tensor, in float32, returned in x's dtype."

forbid = ["torch.logsumexp", "torch.Tensor.logsumexp", "torch.special.logsumexp"]
forbid_ops = ["logsumexp"]


def reference(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    top = xf.amax(dim=-1, keepdim=True)
    return (top.squeeze(-1) + torch.log(torch.exp(xf - top).sum(dim=-1))).to(x.dtype)


def make_inputs(case: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = 4 * torch.randn(case["rows"], case["cols"], generator=g, device=device)
    return (x.to(getattr(torch, case["dtype"])),)


test_cases = [{"rows": r, "cols": c, "dtype": d}
              for r, c in ((1, 1), (2, 7), (13, 129), (40, 1000), (6, 4099))
              for d in ("float32", "bfloat16")]
# rows wider than one block: a version that loops over a row needs its loop checked
bench_cases = [{"rows": 16384, "cols": 1024, "dtype": "bfloat16"},
               {"rows": 4096, "cols": 32768, "dtype": "float32"}]


def flops(case: dict) -> int:
    return 4 * case["rows"] * case["cols"]


def bytes_moved(case: dict) -> int:
    return case["rows"] * (case["cols"] + 1) * getattr(torch, case["dtype"]).itemsize
