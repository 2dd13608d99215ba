"""Cross-entropy over a batch of class scores (a krung test problem in KernelBench's format,
laid out as level-1 95_CrossEntropyLoss is: the scores' width derives from num_classes)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """The mean cross-entropy of the scores against integer targets."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.nn.functional.cross_entropy(predictions, targets)


batch_size = 64
num_classes = 40
input_shape = (num_classes,)
dim = 1


def get_inputs():
    return [torch.rand(batch_size, *input_shape), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
