"""A linear layer, dropout and softmax (a krung test problem in KernelBench's format, laid out
as level-2 66_Matmul_Dropout_Softmax is: the model stays in training mode, so dropout draws a
new mask on every call and the reference disagrees with itself)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, dropout_p):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x):
        return torch.softmax(self.dropout(self.matmul(x)), dim=1)


batch_size = 8
in_features = 32
out_features = 48
dropout_p = 0.5


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, dropout_p]
