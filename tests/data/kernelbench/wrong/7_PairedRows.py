"""Wrong: pairs every element with the one half a row away instead of its neighbour."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        half = x.shape[1] // 2
        return x[:, :half] + x[:, half:]
