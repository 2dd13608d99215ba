"""The typed messages between krung's processes (krung.protocol.messages): every one travels
the real channel and comes back equal; what krung does not declare is refused with a
ProtocolError that names it; the JSON Schema is generated from the types and holds them all."""

from __future__ import annotations

import dataclasses
import json
import random
import socket
import string
import typing
from multiprocessing.connection import Connection
from typing import Annotated, Any, Literal, Union

import pytest
import torch

from krung.protocol import messages
from krung.protocol.channel import Channel

ALL = [c for c in vars(messages).values() if isinstance(c, type)
       and issubclass(c, messages.Message) and dataclasses.is_dataclass(c)]
REQUESTS = [c for c in ALL if issubclass(c, messages.Ask)]
rng = random.Random()


def sample(hint: Any) -> Any:
    """A random value of the declared type, every optional field given."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        if messages.TENSOR in args[1:]:
            return torch.randn(rng.randint(1, 5), 3)
        if messages.TENSORS in args[1:]:
            return (torch.randn(2, rng.randint(1, 4)), [rng.random(), {"k": torch.randn(3)}])
        return sample(args[0])
    if origin in (Union, typing.types.UnionType):
        return sample(next(a for a in args if a is not type(None)))
    if origin is Literal:
        return rng.choice(args)
    if typing.is_typeddict(hint):
        return {k: sample(v) for k, v in messages._hints(hint).items()}
    if origin is list:
        return [sample(args[0]) for _ in range(rng.randint(1, 3))]
    if origin is dict:
        return {rng.choice(string.ascii_letters): sample(args[1])}
    if hint is Any:
        return {"x": [rng.random(), None, "y"]}
    return {str: lambda: "".join(rng.choices(string.printable, k=8)),
            int: lambda: rng.randint(-(1 << 40), 1 << 40), float: rng.random,
            bool: lambda: rng.random() < 0.5}[hint]()


def instance(cls: type) -> Any:
    return cls(**{name: sample(hint) for name, hint in messages._hints(cls).items()})


def decoder(message: messages.Message) -> Any:
    if isinstance(message, messages.Tagged):
        return next(u for u in messages.UNIONS.values() if type(message) in
                    u.classes.values())
    request = next((r for r in REQUESTS if type(message) in (r.REPLY, r.FAILURE)), None)
    return messages.HELLO if request is None else messages.replies(instance(request))


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


@pytest.fixture
def channel_pair():
    left, right = socket.socketpair()
    ends = Channel(Connection(left.detach())), Channel(Connection(right.detach()))
    yield ends
    for end in ends:
        end.close()


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_message_crosses_the_channel_and_comes_back_equal(channel_pair, cls):
    sender, receiver = channel_pair
    message = instance(cls)
    sender.send(message)
    got = receiver.recv(expect=decoder(message))
    assert type(got) is cls
    for f in dataclasses.fields(cls):
        assert same(getattr(message, f.name), getattr(got, f.name)), f.name
    assert dict(got).keys() == messages.encode(message).keys() - {"type", "op"}


def test_every_message_is_in_a_conversation():
    """Each message decodes somewhere: as a tagged request or reply, or as a reply to one."""
    tagged = {c for u in messages.UNIONS.values() for c in u.classes.values()}
    replies = {r.REPLY for r in REQUESTS} | {r.FAILURE for r in REQUESTS} | {messages.Hello}
    assert set(ALL) == tagged | replies


def test_a_message_reads_as_the_dict_it_travels_as():
    reply = messages.Loaded(load_s=0.25, builds=[{"name": "ext"}])
    assert reply["load_s"] == 0.25 and reply.get("ok") is True
    assert "triton" not in reply and reply.get("triton", "none") == "none"
    with pytest.raises(KeyError):
        reply["triton"]
    assert dict(reply) == {"ok": True, "load_s": 0.25, "builds": [{"name": "ext"}]}


CALLED = {"ok": True, "outputs": [], "specs": [], "tuple": False, "call_s": 0.5,
          "tampered": [], "threads_started": 0}


@pytest.mark.parametrize(("data", "words"), [
    ({"op": "launch", "inputs": []}, "unknown worker request message op='launch'"),
    ({"inputs": []}, "op=None"),
    ({"op": "call", "inputs": [], "return_inputs": "yes"}, "return_inputs is str 'yes', not true"),
    ({"op": "call", "inputs": [], "argv": ["-c"]}, "does not declare: argv"),
    ({"op": "call"}, "lacks inputs"),
    ({"op": "time", "plan": {}, "inputs": [], "refill": None, "extra": 1}, "extra"),
    ({"op": "call", "inputs": [], "poison": {"byte": 255, "specs": [{"shape": [2],
                                                                    "dtype": 7}]}},
     "poison ['specs'] [0] ['dtype'] is int 7, not a string"),
    (["op", "call"], "a worker request message is a JSON object, not list"),
])
def test_a_request_krung_does_not_declare_is_refused(data, words):
    with pytest.raises(messages.ProtocolError) as caught:
        messages.TO_WORKER.decode(data)
    assert words in str(caught.value)


@pytest.mark.parametrize(("change", "words"), [
    ({"ok": "true"}, "neither ok: true nor ok: false"),
    ({"threads_started": True}, "threads_started is bool True, not an integer"),
    ({"outputs": ["not a tensor"]}, "outputs [0] is str 'not a tensor', not a tensor"),
    ({"specs": [{"dtype": "float32"}]}, "specs [0] lacks"),
    ({"passed": True}, "does not declare: passed"),
    ({"ok": False}, "lacks error"),
    ({"ok": False, "error": {"type": "X", "message": "m", "why": 1}}, "does not declare: why"),
])
def test_a_reply_the_worker_forges_is_refused(change, words):
    with pytest.raises(messages.ProtocolError) as caught:
        base = {} if change.get("ok") is False else CALLED  # a failure has its own fields
        messages.replies(messages.Call(inputs=[])).decode({**base, **change})
    assert words in str(caught.value)
    assert "the reply to `call`" in str(caught.value)


@pytest.mark.parametrize("ipc", [{"handle": "AAAA", "nbytes": 8, "offset": -64},
                                 {"handle": "AAAA", "nbytes": 8, "offset": "0"},
                                 {"nbytes": 8}, "handle"],
                         ids=["negative_offset", "offset_as_text", "no_handle", "not_a_dict"])
def test_a_tensor_by_ipc_the_worker_describes_wrongly_is_refused_before_any_is_opened(
        channel_pair, ipc):
    """The worker shares its outputs in place (the allocation's handle and an offset into
    it): an offset or handle it makes up is refused before any IPC handle is opened."""
    sender, receiver = channel_pair
    spec = {"__tensor__": 0, "dtype": "float32", "shape": [rng.randint(1, 9)], "stride": [1],
            "layout": "strided", "device": "cuda:0", "type": "torch.Tensor", "ipc": ipc}
    sender._conn.send_bytes(json.dumps({**CALLED, "outputs": [spec], "__frames__": 0}).encode())
    with pytest.raises(messages.ProtocolError, match="IPC description"):
        receiver.recv(expect=messages.replies(messages.Call(inputs=[])))


def test_a_failure_is_decoded_as_one():
    error = {"type": "ZeroDivisionError", "message": "division by zero", "kind": "runtime",
             "hint": None, "location": "v.py:3"}
    failed = messages.replies(messages.Call(inputs=[])).decode({"ok": False, "error": error})
    assert isinstance(failed, messages.Failed) and failed.error == error


def test_the_schema_is_generated_from_the_types():
    jsonschema = pytest.importorskip("jsonschema", reason="a test dependency (the dev extra)")
    schema = messages.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    text = json.dumps(schema)
    for union in messages.UNIONS.values():
        for tag in union.classes:
            assert json.dumps({"const": tag}) in text, tag
    for cls in ALL:
        assert cls.__name__ in schema["$defs"], cls.__name__
    # What travels (messages without tensors here) validates; a forged field does not.
    for cls in ALL:
        if "tensor" not in json.dumps(schema["$defs"][cls.__name__]):
            validator = jsonschema.Draft202012Validator(
                {"$ref": f"#/$defs/{cls.__name__}", "$defs": schema["$defs"]})
            data = json.loads(json.dumps(messages.encode(instance(cls))))
            validator.validate(data)
            assert not validator.is_valid({**data, "forged": 1})
