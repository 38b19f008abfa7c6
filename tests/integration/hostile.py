"""A hostile client's tools: every gRPC method of a ``delayq serve`` process called
with raw bytes (``Method``, ``call_raw``), and hypothesis strategies of requests
built from the methods' descriptors, well-formed or broken on purpose
(``payloads``): garbage, truncated messages, invalid UTF-8, extreme numbers,
oversized fields, forged ids and receipts.

Methods that change a node's role or move its messages (``Method.destructive``:
Promote, Follow, Fence, Replicate, Release, Import, Prepare, AddBlock) get only
requests that cannot decode: a well-formed one would legitimately fence the
node or move its messages, which is not what a fuzz test is after (who may call
them at all is the admin API's access control, not input validation).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from hypothesis import strategies as st

from delayq.admin.v1 import admin_pb2
from delayq.idcodec import pack_token
from delayq.rocketmq.v2 import service_pb2 as rocketmq_pb2
from delayq.v1 import delayq_pb2

INT64 = (-(2**63), 2**63 - 1)
BAD_UTF8 = (b"\xc3\x28", b"\xff", b"\xed\xa0\x80", b"abc\xe2\x82")  # lone, invalid, surrogate, cut
PROTECTED_GROUP = "canary-group"
"""A group no generated request names (the fuzz test's canary is received by it)."""

_DESTRUCTIVE = {
    "Promote",
    "Follow",
    "Fence",
    "Replicate",
    "Release",
    "Import",
    "Prepare",
    "AddBlock",
}
_LONG_POLL = {"Receive", "Subscribe", "ReceiveMessage"}
_ID_FIELDS = {"id", "ids", "source_id"}
_NAME_FIELDS = {"topic", "group"}


@dataclass(frozen=True)
class Method:
    path: str  # /package.Service/Name
    name: str
    request_streaming: bool
    response_streaming: bool
    input: Any  # the request's protobuf Descriptor

    @property
    def destructive(self) -> bool:
        return self.name in _DESTRUCTIVE

    @property
    def port(self) -> str:
        """The port that serves it: "admin" (``--admin-listen``), "rocketmq"
        (``--rocketmq-listen``) or "public"."""
        if self.path.startswith("/delayq.admin."):
            return "admin"
        return "rocketmq" if self.path.startswith("/apache.rocketmq.") else "public"

    @property
    def admin(self) -> bool:
        return self.port == "admin"

    @property
    def package(self) -> str:
        """Its protobuf package (``delayq.v1``, ``apache.rocketmq.v2``, ...)."""
        return self.path[1:].rpartition(".")[0]

    @property
    def long_poll(self) -> bool:
        """May wait for messages until its deadline (DEADLINE_EXCEEDED is an answer)."""
        return self.name in _LONG_POLL


def methods() -> list[Method]:
    """Every method of ``delayq.v1.DelayQueue``, ``delayq.admin.v1.ShardAdmin`` and
    ``apache.rocketmq.v2.MessagingService``."""
    out = []
    services = (
        (delayq_pb2, "DelayQueue"),
        (admin_pb2, "ShardAdmin"),
        (rocketmq_pb2, "MessagingService"),
    )
    for module, service in services:
        desc = module.DESCRIPTOR.services_by_name[service]
        for m in desc.methods:
            out.append(
                Method(
                    f"/{desc.full_name}/{m.name}",
                    m.name,
                    m.client_streaming,
                    m.server_streaming,
                    m.input_type,
                )
            )
    return out


def call_raw(
    channel: grpc.Channel, method: Method, payload: bytes, timeout_s: float
) -> tuple[grpc.StatusCode, str, float]:
    """Send ``payload`` as the request (raw bytes, no serializer); (status, details,
    seconds taken). A streamed answer is read to its end."""
    started = time.monotonic()
    try:
        if method.request_streaming:
            stream = channel.stream_stream(method.path)(iter([payload]), timeout=timeout_s)
            for _ in stream:
                pass
        elif method.response_streaming:
            for _ in channel.unary_stream(method.path)(payload, timeout=timeout_s):
                pass
        else:
            channel.unary_unary(method.path)(payload, timeout=timeout_s)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or "", time.monotonic() - started
    return grpc.StatusCode.OK, "", time.monotonic() - started


# -------------------------------------------------------------------- wire bytes
def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field_bytes(number: int, value: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(value)) + value


def has_string(desc: Any, depth: int = 0) -> bool:
    """Whether a message of ``desc`` can carry a string field (maybe nested)."""
    return depth < 4 and any(
        f.type == f.TYPE_STRING
        or (f.type == f.TYPE_MESSAGE and has_string(f.message_type, depth + 1))
        for f in desc.fields
    )


def first_string_spoiled(desc: Any) -> bytes:
    """A message of ``desc`` whose first string field (maybe nested) is b"\\xff"."""
    for f in desc.fields:
        if f.type == f.TYPE_STRING:
            return field_bytes(f.number, b"\xff")
        if f.type == f.TYPE_MESSAGE and has_string(f.message_type):
            return field_bytes(f.number, first_string_spoiled(f.message_type))
    raise ValueError(f"{desc.full_name} has no string field")


@st.composite
def bad_utf8(draw: st.DrawFn, desc: Any, depth: int = 0) -> bytes:
    """A message of ``desc`` with one string field (maybe nested) that is not UTF-8."""
    fields = [
        f
        for f in desc.fields
        if f.type == f.TYPE_STRING or (f.type == f.TYPE_MESSAGE and has_string(f.message_type))
    ]
    f = draw(st.sampled_from(fields))
    if f.type == f.TYPE_STRING:
        text = draw(st.text(max_size=8)).encode() + draw(st.sampled_from(BAD_UTF8))
        return field_bytes(f.number, text)
    return field_bytes(f.number, draw(bad_utf8(f.message_type, depth + 1)))


# -------------------------------------------------------------------- values
def forged_ids() -> st.SearchStrategy[str]:
    """Well-formed ids (valid check byte) of any shard, epoch and position."""
    return st.builds(
        lambda shard, epoch, position: pack_token(0x4D, shard, epoch, position),
        st.sampled_from([0, 1, 7, 255, 2**20]),
        st.sampled_from([0, 1, 2, 2**31, 2**63 - 1]),
        st.one_of(st.integers(0, 1 << 20), st.sampled_from([2**31, 2**63 - 1, 2**64 - 1])),
    )


def forged_receipts() -> st.SearchStrategy[str]:
    """Well-formed receipts (valid check byte) of any shard, topic, attempt, offset."""
    return st.builds(
        lambda shard, topic, attempt, offset: pack_token(0x52, shard, topic, attempt, offset),
        st.sampled_from([0, 1, 255]),
        st.integers(0, 8),
        st.sampled_from([0, 1, 2, 2**31]),
        st.one_of(st.integers(0, 1 << 12), st.sampled_from([2**32, 2**63 - 1])),
    )


def junk_text(limit: int = 64) -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=limit),
        st.integers(129, 20_000).map(lambda n: "x" * n),  # over every name's bound
        st.sampled_from(["", " ", "../etc", "a" * 128, "a" * 129, "\x00", "\U0010ffff"]),
    )


def strings(name: str) -> st.SearchStrategy[str]:
    if name in _ID_FIELDS:
        return st.one_of(forged_ids(), junk_text(80))
    if name == "receipts":
        return st.one_of(forged_receipts(), junk_text(80))
    if name in _NAME_FIELDS:
        valid = st.sampled_from(["t", "fuzz", "canary", "g"])
        return st.one_of(valid, valid, junk_text()).filter(lambda s: s != PROTECTED_GROUP)
    return junk_text()


def numbers(f: Any) -> st.SearchStrategy[int]:
    if f.type in (f.TYPE_INT64, f.TYPE_SINT64, f.TYPE_SFIXED64):
        lo, hi = INT64
    elif f.type in (f.TYPE_UINT64, f.TYPE_FIXED64):
        lo, hi = 0, 2**64 - 1
    elif f.type in (f.TYPE_UINT32, f.TYPE_FIXED32):
        lo, hi = 0, 2**32 - 1
    else:
        lo, hi = -(2**31), 2**31 - 1
    edges = [e for e in (lo, hi, -1, 0, 1, 10_000, 10_001, 60_000, 60_001) if lo <= e <= hi]
    small = st.integers(max(lo, -10), min(hi, 70_000))  # mostly within the bounds checked
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi), small, small)


def scalar(f: Any) -> st.SearchStrategy[Any]:
    if f.type == f.TYPE_STRING:
        return strings(f.name)
    if f.type == f.TYPE_BYTES:
        return st.one_of(
            st.binary(max_size=64), st.integers(256 << 10, 300 << 10).map(lambda n: b"b" * n)
        )
    if f.type == f.TYPE_BOOL:
        return st.booleans()
    if f.type == f.TYPE_ENUM:
        return st.one_of(
            st.sampled_from([v.number for v in f.enum_type.values]), st.integers(-5, 1000)
        )
    if f.type in (f.TYPE_DOUBLE, f.TYPE_FLOAT):  # a rate, a multiplier: NaN, inf, huge, tiny
        edges = st.sampled_from([0.0, -0.0, -1.0, 0.5, 1e-300, 1e300, 2.5, 100.0, 100.01])
        return st.one_of(edges, st.floats(width=32 if f.type == f.TYPE_FLOAT else 64))
    return numbers(f)


@st.composite
def messages(draw: st.DrawFn, desc: Any, depth: int = 0) -> Any:
    """A well-formed message of ``desc`` whose values are anything the wire allows."""
    msg = message_factory.GetMessageClass(desc)()
    for f in desc.fields:
        if draw(st.integers(0, 3)) == 0:  # a field left unset: its default
            continue
        is_map = f.type == f.TYPE_MESSAGE and f.message_type.GetOptions().map_entry
        if is_map:
            key_f, value_f = (
                f.message_type.fields_by_name["key"],
                f.message_type.fields_by_name["value"],
            )
            n = draw(st.one_of(st.integers(0, 3), st.just(65)))
            for _ in range(n):
                getattr(msg, f.name)[draw(scalar(key_f))] = draw(scalar(value_f))
        elif f.type == f.TYPE_MESSAGE:
            if depth >= 3:
                continue
            if f.is_repeated:
                for sub in draw(st.lists(messages(f.message_type, depth + 1), max_size=3)):
                    getattr(msg, f.name).add().CopyFrom(sub)
            else:
                getattr(msg, f.name).CopyFrom(draw(messages(f.message_type, depth + 1)))
        elif f.is_repeated:
            getattr(msg, f.name).extend(draw(st.lists(scalar(f), max_size=4)))
        else:
            setattr(msg, f.name, draw(scalar(f)))
    return msg


# -------------------------------------------------------------------- payloads
@dataclass(frozen=True)
class Payload:
    kind: str  # valid, truncated, garbage, bad-utf8, broken
    data: bytes

    @property
    def undecodable(self) -> bool:
        """Sure to fail decoding (so: INVALID_ARGUMENT)."""
        return self.kind in ("bad-utf8", "broken")


def _valid(method: Method) -> st.SearchStrategy[bytes]:
    def wire(msg: Any) -> bytes:
        if method.name == "Status":  # a probe with an epoch and a lease renews a lease
            msg.epoch = 0
        data: bytes = msg.SerializeToString()
        return data

    return messages(method.input).map(wire)


@st.composite
def payloads(draw: st.DrawFn, method: Method) -> Payload:
    """A request for ``method``: well-formed with hostile values, or broken."""
    kinds = ["broken"]
    if has_string(method.input):
        kinds.append("bad-utf8")
    if not method.destructive:
        kinds += ["valid", "valid", "truncated", "garbage"]
    kind = draw(st.sampled_from(kinds))
    if kind == "bad-utf8":
        return Payload(kind, draw(_valid(method)) + draw(bad_utf8(method.input)))
    if kind == "broken":  # a length-delimited field that runs past the end
        number = draw(st.integers(1, 20))
        cut = varint(number << 3 | 2) + varint(draw(st.integers(1, 1 << 30)))
        return Payload(kind, draw(_valid(method)) + cut)
    if kind == "garbage":
        return Payload(kind, draw(st.binary(max_size=64)))
    data = draw(_valid(method))
    if kind == "truncated" and data:
        return Payload(kind, data[: draw(st.integers(0, len(data) - 1))])
    return Payload("valid", data)


def fixed_cases(method: Method) -> Iterator[Payload]:
    """The same few hostile requests for every method, beside the random ones."""
    yield Payload("broken", b"\x0a\xff\xff\xff\xff\x0f")  # a field of 4 GiB, in 6 bytes
    yield Payload("broken", b"\x0a\x05ab")  # truncated
    if has_string(method.input):
        yield Payload("bad-utf8", first_string_spoiled(method.input))
    if not method.destructive:
        yield Payload("garbage", b"")
        yield Payload("garbage", bytes(range(256)))
