"""Nested inputs: tensors inside tuples, lists and dicts, found and rebuilt in one order."""

from __future__ import annotations

import torch

from krung.protocol import tree


def _random(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(torch.seed()))


def test_leaves_are_found_depth_first_with_where_they_are():
    a, b, c = _random(3), _random(2, 2), _random(4)
    data = (a, {"w": b, "scale": 0.5, "name": "x"}, [c, 7])
    assert [t is x for t, x in zip(tree.leaves(data), (a, b, c), strict=True)] == [True] * 3
    assert [label for label, _ in tree.labelled_leaves(data)] == ["[0]", "[1]['w']", "[2][0]"]
    assert tree.nbytes(data) == (3 + 4 + 4) * 4


def test_map_keeps_the_structure_and_the_other_values():
    data = (_random(3), {"w": _random(2), "scale": 0.5}, [_random(5), "keep"])
    doubled = tree.map_tensors(lambda t: t * 2, data)
    assert isinstance(doubled, tuple) and isinstance(doubled[2], list)
    assert doubled[1]["scale"] == 0.5 and doubled[2][1] == "keep"
    for new, old in zip(tree.leaves(doubled), tree.leaves(data), strict=True):
        assert torch.equal(new, old * 2)
    indexed = tree.map_leaves(lambda i, t: i, data)
    assert indexed == (0, {"w": 1, "scale": 0.5}, [2, "keep"])


def test_clone_owns_its_storage_and_keeps_strides():
    column_major = _random(5, 3).t()
    data = (column_major, [_random(4)])
    copy = tree.clone(data)
    assert copy[0].stride() == column_major.stride()
    copy[0].add_(1)
    assert not torch.equal(copy[0], column_major)


def test_unravel_is_torchs_unravel_index():
    """krung's own (torch's imports sympy on its first call); the worker's input changes use it
    on a GPU too, so it must give torch's indices for any shape and position."""
    import torch

    from krung.protocol.tree import unravel

    generator = torch.Generator().manual_seed(torch.seed() % (1 << 31))
    for shape in [(7,), (3, 5), (2, 1, 9), (4, 3, 2, 5), (1, 1)]:
        count = int(torch.tensor(shape).prod())
        flat = torch.randint(count, (40,), generator=generator)
        ours = unravel(flat, shape)
        theirs = torch.unravel_index(flat, shape)
        assert len(ours) == len(theirs) == len(shape)
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True)), shape
