"""The contract of one call (krung.judge.contract), checked on real tensors described as the
worker describes them (krung.protocol.channel.tensor_spec)."""

from __future__ import annotations

import pytest
import torch

from krung.judge.contract import (
    check_conduct,
    check_inputs_unchanged,
    check_outputs,
    forbidden_op_names,
)
from krung.protocol.channel import tensor_spec
from krung.protocol.errors import RungFailed


def reply(*outputs: torch.Tensor, as_tuple: bool = False) -> dict:
    return {"specs": [tensor_spec(o) for o in outputs], "tuple": as_tuple}


def broken(check, *args, **kwargs) -> RungFailed:
    with pytest.raises(RungFailed) as failed:
        check(*args, **kwargs)
    return failed.value


def test_outputs_like_the_reference_pass():
    expected = [torch.randn(7, 3), torch.randint(0, 9, (4,))]
    got = [torch.randn(7, 3), torch.randint(0, 9, (4,))]
    check_outputs(reply(*got, as_tuple=True), expected, "cpu", "case n=7")
    check_outputs(reply(got[0]), expected[:1], "cpu", "case n=7")


@pytest.mark.parametrize("made, words", [
    (lambda e: reply(e, e, as_tuple=True), "returned a tuple of 2, the reference 1 tensor"),
    (lambda e: reply(e, as_tuple=True), "returned a tuple of 1, the reference 1 tensor"),
    (lambda e: reply(e.half()), "has dtype float16, the reference's is float32"),
    (lambda e: reply(e.reshape(-1)), "has shape (21,), the reference's is (7, 3)"),
    (lambda e: reply(torch.nn.Parameter(e)),
     "is a torch.nn.parameter.Parameter, not a plain torch.Tensor"),
])
def test_outputs_unlike_the_reference_fail_with_what_differs(made, words):
    expected = torch.randn(7, 3)
    failed = broken(check_outputs, made(expected.clone()), [expected], "cpu", "case n=7")
    assert failed.error_type == "OutputContract"
    assert words in failed.message and failed.message.endswith("(in case n=7)")
    assert failed.hint


def test_outputs_on_another_device_than_the_inputs_fail():
    expected = torch.randn(5)
    failed = broken(check_outputs, reply(expected), [expected], "cuda", "case n=5")
    assert "the output is on cpu, the inputs were on cuda" in failed.message


def test_where_the_problems_check_decides_dtype_and_shape_are_its_to_judge():
    expected = torch.randn(6, 2)
    check_outputs(reply(expected.double().reshape(-1)), [expected], "cpu", "c", exact=False)
    failed = broken(check_outputs, reply(torch.nn.Parameter(expected)), [expected], "cpu", "c",
                    exact=False)
    assert "not a plain torch.Tensor" in failed.message


def test_inputs_unchanged_bit_for_bit_pass_even_with_nan_and_negative_zero():
    x = torch.randn(64)
    x[3], x[9] = float("nan"), -0.0
    before = (x, [torch.randn(2, 5), torch.randint(-5, 5, (3,))])
    after = [before[0].clone(), [t.clone() for t in before[1]]]
    check_inputs_unchanged(after, before, "case n=64")


def test_a_changed_input_is_named_by_where_it_is():
    before = (torch.randn(16), torch.randn(16))
    after = [before[0].clone(), before[1].clone()]
    after[1][11] += 1.0
    failed = broken(check_inputs_unchanged, after, before, "case n=16")
    assert failed.error_type == "InputMutated"
    assert failed.message == "input 1 was changed by the call (in case n=16)"
    # one bit: 0.0 made -0.0 compares equal as a number, not as bits
    zeros = (torch.zeros(4),)
    flipped = [zeros[0].clone()]
    flipped[0][2] = -0.0
    assert "input 0 was changed" in broken(check_inputs_unchanged, flipped, zeros, "c").message
    nested = ({"w": torch.randn(3), "b": [torch.randn(2), torch.randn(2)]},)
    moved = [{"w": nested[0]["w"].clone(), "b": [t.clone() for t in nested[0]["b"]]}]
    moved[0]["b"][1][0] = moved[0]["b"][1][0] * 3 + 1
    assert "input [0]['b'][1] was changed" in broken(check_inputs_unchanged, moved, nested,
                                                     "c").message


def test_output_buffers_among_the_inputs_are_the_versions_to_write():
    before = (torch.randn(8), torch.empty(8).fill_(float("nan")))
    after = [before[0].clone(), torch.randn(8)]
    check_inputs_unchanged(after, before, "c", writable={1})
    after[0][0] += 2
    failed = broken(check_inputs_unchanged, after, before, "c", writable={1})
    assert "other than the output buffers it is given" in failed.hint


def test_a_changed_structure_of_the_inputs_fails():
    before = (torch.randn(3), torch.randn(3))
    failed = broken(check_inputs_unchanged, [before[0].clone()], before, "c")
    assert "changed the structure of its inputs" in failed.message
    reshaped = broken(check_inputs_unchanged, [before[0].clone(), before[1].reshape(3, 1)],
                      before, "c")
    assert "input 1 was changed" in reshaped.message


def test_conduct_catches_tampering_and_forbidden_operators():
    check_conduct({"tampered": [], "ops": ["aten::add.Tensor", "aten::mul"]}, "c", {"mm"})
    tampered = broken(check_conduct, {"tampered": ["torch.cuda.synchronize"]}, "c", set())
    assert tampered.error_type == "Tampering" and "torch.cuda.synchronize" in tampered.message
    banned = forbidden_op_names(["mm", "aten::bmm.default", "addmm.out"])
    assert banned == {"mm", "bmm", "addmm"}
    used = broken(check_conduct, {"ops": ["aten::add.Tensor", "aten::mm.default",
                                          "aten::addmm"]}, "case n=4", banned)
    assert used.error_type == "ForbiddenOp"
    assert used.message == ("the call ran aten::addmm, aten::mm, which the problem forbids "
                            "(in case n=4)")
