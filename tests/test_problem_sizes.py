"""The sizes of a problem: KernelBench's module-level constants and what derives from each,
and how a scale shrinks sizes, on files written here and read the way the judge reads them."""

from __future__ import annotations

import random

import pytest

from krung.judge.problem.native import import_file
from krung.judge.problem.scale import case_changes, scale_cases, scaled_size, scaled_value
from krung.judge.problem.sizes import Constants, names_read
from tests.conftest import write

LAYOUT = """
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, dim, groups):
            super().__init__()
            self.dim = dim  # Model's own parameter, not the module's `dim`
            self.norm = nn.GroupNorm(groups, channels)
        def forward(self, x):
            return self.norm(x).sum(dim=self.dim)

    batch_size = 16
    channels = 64
    depth, height, width = 8, 32, 48
    groups = channels // 8
    dim = 1
    input_shape = (channels, depth, height, width)

    def get_inputs():
        return [torch.randn(batch_size, *input_shape)]

    def get_init_inputs():
        return [dim, groups]
"""


@pytest.fixture
def constants(tmp_path):
    path = write(tmp_path / "9_Layout.py", LAYOUT)
    return Constants(path, import_file(path, f"krung_test_layout_{random.randrange(1 << 30)}"))


def test_what_each_constant_derives_from(constants):
    assert constants.roots(["input_shape"]) == ["channels", "depth", "height", "width"]
    assert constants.roots(["groups"]) == ["channels"]
    # Model reads the module's `channels` (in GroupNorm) but its `dim` is a parameter
    assert constants.read_by("Model") == ["channels"]
    assert constants.read_by("get_init_inputs") == ["dim", "groups"]


def test_a_moved_size_moves_what_derives_from_it_and_is_restored(constants):
    module = constants.module
    changed = constants.derive({"channels": 16, "height": 7})
    assert changed == {"channels": 16, "height": 7, "groups": 2,
                       "input_shape": (16, 8, 7, 48)}
    with constants.applied({"width": 5}):
        assert module.input_shape == (64, 8, 32, 5) and module.width == 5
    assert module.input_shape == (64, 8, 32, 48) and module.width == 48
    assert constants.derive({"batch_size": 3}) == {"batch_size": 3}  # nothing derives from it


def test_names_read_leaves_out_what_a_function_binds():
    import ast

    tree = ast.parse("def f(dim, *rest, k=size):\n    x = dim + width\n"
                     "    return [x for width in rest] + [x * other]\n")
    assert names_read(tree.body[0]) == ["size", "other"]


@pytest.mark.parametrize("size, scale, granule, scaled", [
    (4096, 0.1, None, 408),  # a multiple of 8 stays one
    (393216, 0.1, None, 39320),
    (1000, 0.1, None, 96),
    (997, 0.1, None, 100),  # odd: any size
    (16, 0.1, None, 8),  # never below the power of two it kept
    (7, 0.1, None, 7),  # small sizes stay: kernel sizes, strides, reduced dimensions
    (3, 0.01, None, 3),
    (1024, 1.0, None, 1024),
    (2048, 0.1, 256, 256),  # a case's shared granule, kept whole
    (65536, 0.1, 256, 6656),
])
def test_scaled_sizes(size, scale, granule, scaled):
    assert scaled_size(size, scale, granule) == scaled
    assert scaled_size(size, scale, granule) <= size


def test_scaled_values_and_cases():
    assert scaled_value((4096, 3, 224), 0.1) == (408, 3, 24)
    assert scaled_value([1024] * 3, 0.1) == [104] * 3
    assert scaled_value(0.5, 0.1) == 0.5 and scaled_value(True, 0.1) is True
    cases = [{"size": 1023, "seed": 1}, {"size": 1024, "seed": 1}, {"size": 1025, "seed": 1},
             {"size": 262144, "seed": 1}]
    # 1023, 1024 and 1025 all become 102: one case
    assert scale_cases(cases, 0.1, {"size": 1}) == [{"size": 102, "seed": 1},
                                                     {"size": 26214, "seed": 1}]


def test_the_record_of_scaled_cases_names_only_what_changed():
    before = [{"n": 32, "cond": 0, "batch": 640}, {"n": 4096, "cond": 4, "batch": 1}]
    after = scale_cases(before, 0.1, {"n": 32, "batch": 1})
    assert after == [{"n": 32, "cond": 0, "batch": 64}, {"n": 416, "cond": 4, "batch": 1}]
    assert case_changes(before, after) == {"n": "32..4096 -> 32..416",
                                           "batch": "1..640 -> 1..64"}


CHAINED = """
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x)

    batch_size = 16
    height = width = SIDE
    shape = (height, width)

    def get_inputs():
        return [torch.randn(batch_size, 3, *shape)]

    def get_init_inputs():
        return []
"""


def test_a_chained_assignment_sets_sizes_that_move_apart(tmp_path):
    """`height = width = 256` (15 KernelBench level-2 files): both are sizes, each its own."""
    side = random.choice([128, 256, 512])
    path = write(tmp_path / "7_Chained.py", CHAINED.replace("SIDE", str(side)))
    constants = Constants(path, import_file(path, f"krung_test_chained_{random.randrange(1 << 30)}"))
    assert constants.base["height"] == constants.base["width"] == side
    assert constants.roots(["shape"]) == ["height", "width"]
    moved = side // 2 + 1
    assert constants.derive({"height": moved}) == {"height": moved, "shape": (moved, side)}
    assert constants.derive({"height": 9, "width": 11})["shape"] == (9, 11)
