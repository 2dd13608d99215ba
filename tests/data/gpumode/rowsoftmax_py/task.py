from typing import TypedDict

import torch


class input_t(TypedDict):
    x: torch.Tensor
    temperature: float


output_t = torch.Tensor
