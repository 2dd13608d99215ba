"""The channel between processes: JSON plus raw tensor bytes, never pickle."""

from __future__ import annotations

import socket
from multiprocessing.connection import Connection

import pytest
import torch

from krung.protocol.channel import Channel, ChannelClosed


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    left, right = Channel(Connection(a.detach())), Channel(Connection(b.detach()))
    yield left, right
    left.close()
    right.close()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64,
                                   torch.bool, torch.float64, torch.uint8])
def test_tensors_round_trip_bit_for_bit(pair, dtype):
    left, right = pair
    g = torch.Generator().manual_seed(torch.seed())
    data = torch.randn(3, 17, generator=g) * 100
    tensor = data > 0 if dtype is torch.bool else data.to(dtype)
    left.send({"op": "call", "inputs": [tensor, tensor[:, 1:5].t()], "n": 3})
    got = right.recv()
    assert got["op"] == "call" and got["n"] == 3
    assert torch.equal(got["inputs"][0], tensor)
    assert torch.equal(got["inputs"][1], tensor[:, 1:5].t())
    assert got["inputs"][0].dtype == dtype


def test_scalars_empty_and_nested(pair):
    left, right = pair
    left.send({"x": {"a": [torch.tensor(2.5), torch.empty(0, 4)]}, "nan": float("nan")})
    got = right.recv()
    assert got["x"]["a"][0].item() == 2.5 and got["x"]["a"][0].dim() == 0
    assert got["x"]["a"][1].shape == (0, 4)
    assert got["nan"] is None  # strict JSON: NaN travels as null


def test_closed_peer_is_reported(pair):
    left, right = pair
    left.close()
    with pytest.raises(ChannelClosed):
        right.recv()


def test_a_pickle_is_not_executed(pair, tmp_path):
    """A hostile worker can only send bytes; the receiver parses JSON, never unpickles."""
    import os
    import pickle

    left, right = pair
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    left._conn.send_bytes(pickle.dumps(Evil()))
    with pytest.raises(ValueError):  # not JSON
        right.recv()
    assert not marker.exists()


def test_tuples_stay_tuples_and_nested_data_round_trips(pair):
    left, right = pair
    g = torch.Generator().manual_seed(torch.seed())
    a, b = torch.randn(4, 5, generator=g), torch.randn(3, generator=g)
    left.send({"inputs": [(a, {"b": b, "t": 0.5}, [7, "x"], {0: b, (1, 2): "k"})],
               "defects": [("what", "fix")]})
    got = right.recv()
    data = got["inputs"][0]
    assert isinstance(data, tuple) and isinstance(data[2], list)
    assert torch.equal(data[3][0], b) and data[3][(1, 2)] == "k"  # keys that are not strings
    assert torch.equal(data[0], a) and torch.equal(data[1]["b"], b)
    assert data[1]["t"] == 0.5 and data[2] == [7, "x"]
    assert got["defects"] == [("what", "fix")]  # a message without tensors keeps them too


def test_dense_strided_tensors_keep_their_layout(pair):
    """A column-major input arrives column-major: a kernel reading raw memory relies on it."""
    left, right = pair
    g = torch.Generator().manual_seed(torch.seed())
    column_major = torch.randn(6, 4, generator=g).t()  # (4, 6), strides (1, 4)
    permuted = torch.randn(2, 3, 5, generator=g).permute(2, 0, 1)
    sliced = torch.randn(6, 8, generator=g)[:, 1:5]  # not dense: arrives row-major
    left.send({"t": [column_major, permuted, sliced]})
    got = right.recv()["t"]
    assert got[0].stride() == column_major.stride() and torch.equal(got[0], column_major)
    assert got[1].stride() == permuted.stride() and torch.equal(got[1], permuted)
    assert got[2].is_contiguous() and torch.equal(got[2], sliced)


class _Buffer:
    """Stands for an IPC buffer this side exported (none can be made without a GPU)."""

    def __init__(self, freed: list[str], name: str):
        self.freed, self.name = freed, name

    def free(self) -> None:
        self.freed.append(self.name)


def test_the_peers_acknowledgement_frees_our_copies_and_is_no_message(pair):
    """A worker says it has copied what came by IPC before it runs the request: the judge's
    `poll` frees its private copies on that word (a benchmark's input sets are not held
    twice while they are timed) and goes on waiting for the reply itself."""
    from krung.protocol.channel import COPIED

    judge, worker = pair
    freed: list[str] = []
    judge._exported = [_Buffer(freed, "a"), _Buffer(freed, "b")]
    worker._conn.send_bytes(COPIED)
    assert not judge.poll(0.2)  # an acknowledgement alone is no message
    assert freed == ["a", "b"] and judge._exported == []
    judge._exported = [_Buffer(freed, "c")]
    values = torch.randn(5, generator=torch.Generator().manual_seed(torch.seed()))
    worker._conn.send_bytes(COPIED)
    worker.send({"ok": True, "y": values})
    assert judge.poll(5)
    assert freed == ["a", "b", "c"]
    got = judge.recv()
    assert got["ok"] and torch.equal(got["y"], values)
    worker._conn.send_bytes(COPIED)  # read by `recv` without a `poll` first, too
    worker.send({"ok": False})
    assert judge.recv() == {"ok": False}


def test_new_values_are_received_into_the_tensors_held(pair):
    """A `time` request's refill lands in the input sets the worker holds, no second copy
    beside them; a tensor that cannot take its values as they come (another shape or dtype,
    another layout, grad), and a field whose count differs, get new tensors as before."""
    left, right = pair
    g = torch.Generator().manual_seed(torch.seed())
    held = [[torch.randn(7, 5, generator=g), torch.randint(1, 9, (3,), generator=g)],
            [torch.randn(4, 6, generator=g), torch.randn(2, generator=g)]]
    fresh = [[torch.randn(7, 5, generator=g), torch.randint(1, 9, (3,), generator=g)],
             [torch.randn(6, 4, generator=g).t(), torch.randn(2, generator=g)]]
    addresses = [t.data_ptr() for s in held for t in s]
    held[1][1].requires_grad_(True)  # a leaf the bytes may not be written into
    left.send({"tag": "time", "refill": fresh, "plan": {"n": 1}})
    got = right.recv(into=lambda header: {"refill": held})
    assert got["plan"] == {"n": 1}
    assert got["refill"][0][0] is held[0][0] and got["refill"][0][1] is held[0][1]
    assert [held[0][0].data_ptr(), held[0][1].data_ptr()] == addresses[:2]
    assert torch.equal(held[0][0], fresh[0][0]) and torch.equal(held[0][1], fresh[0][1])
    # column-major values for a row-major tensor, and a tensor with grad: new ones
    assert got["refill"][1][0] is not held[1][0] and torch.equal(got["refill"][1][0], fresh[1][0])
    assert got["refill"][1][0].stride() == fresh[1][0].stride()
    assert got["refill"][1][1] is not held[1][1] and torch.equal(got["refill"][1][1], fresh[1][1])
    # a field whose tensors do not pair one for one with ours: nothing of ours is written
    before = held[0][0].clone()
    left.send({"tag": "time", "refill": [[fresh[0][0]]]})
    got = right.recv(into=lambda header: {"refill": held})
    assert got["refill"][0][0] is not held[0][0] and torch.equal(held[0][0], before)
    left.send({"tag": "time", "inputs": fresh})  # no refill: new sets
    got = right.recv(into=lambda header: {"refill": held})
    got_leaves = [t for s in got["inputs"] for t in s]
    assert not {id(t) for t in got_leaves} & {id(t) for s in held for t in s}
