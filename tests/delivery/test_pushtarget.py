"""A push group's target (``delivery.pushtarget``): its checks naming the field,
its normalised form, its canonical bytes, its forms fit to show, and the egress
category of a literal address with the allow-list."""

from __future__ import annotations

import ipaddress
from dataclasses import replace

import pytest

from delayq.delivery import pushtarget
from delayq.delivery.pushtarget import PushTarget, category, check, literal_refusal, refusal
from delayq.errors import CorruptData, InvalidArgument

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
TARGET = PushTarget(
    url="https://user:pw@hooks.example.com:8443/in/x?token=abc",
    method="put",
    headers=(("X-B", "2"), ("x-a", "1")),
    timeout_ms=0,
    ca_bundle=PEM,
    secret_ref="hooks/current",
)


def test_a_target_is_normalised() -> None:
    got = check(TARGET)
    assert got.method == "PUT"
    assert got.headers == (("x-a", "1"), ("X-B", "2")), "sorted by lower-cased name"
    assert got.timeout_ms == pushtarget.DEFAULT_TIMEOUT_MS
    assert check(got) == got, "a normalised target is its own normal form"
    assert check(PushTarget(url="http://h/")).method == "POST"
    assert check(PushTarget(url="http://h/", method="")).method == "POST"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"url": "ftp://h/x"}, "url"),
        ({"url": "https:///nohost"}, "url"),
        ({"url": "https://h:99999/"}, "url"),
        ({"url": "https://h/a b"}, "url"),
        ({"url": "https://h/#frag"}, "url"),
        ({"url": "https://h/" + "a" * 2048}, "url"),
        ({"method": "GET"}, "method"),
        ({"headers": (("Host", "x"),)}, "headers"),
        ({"headers": (("webhook-id", "x"),)}, "headers"),
        ({"headers": (("Delayq-Topic", "x"),)}, "headers"),
        ({"headers": (("bad name", "x"),)}, "headers"),
        ({"headers": (("a", "1"), ("A", "2"))}, "headers"),
        ({"headers": (("a", "x\r\nInjected: 1"),)}, "headers.a"),
        ({"headers": tuple((f"h{i}", "v") for i in range(33))}, "headers"),
        ({"timeout_ms": 99}, "timeout_ms"),
        ({"timeout_ms": 60_001}, "timeout_ms"),
        ({"ca_bundle": "not a pem"}, "ca_bundle"),
        ({"ca_bundle": PEM + "x" * 65_536}, "ca_bundle"),
        ({"secret_ref": "../etc/passwd"}, "secret_ref"),
        ({"secret_ref": "/etc/passwd"}, "secret_ref"),
        ({"secret_ref": "a/b/c"}, "secret_ref"),
        ({"secret_ref": "a/.."}, "secret_ref"),
        (
            {"url": "https://u:p@h/x", "headers": (("authorization", "Bearer t"),)},
            "headers.Authorization",
        ),
    ],
)
def test_a_bad_field_is_refused_by_its_name(change: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as got:
        check(replace(TARGET, **change), "policy.push")  # type: ignore[arg-type]
    assert got.value.field == f"policy.push.{field}"


def test_its_shown_forms_hold_no_credentials_and_no_query() -> None:
    url = "https://user:secret@Hooks.Example.com:8443/in/x?token=abc"
    assert pushtarget.safe_url(url) == "https://hooks.example.com:8443/in/x"
    assert pushtarget.origin(url) == "https://hooks.example.com:8443"
    assert pushtarget.origin("http://h/x") == "http://h:80"
    assert pushtarget.safe_url("http://[::1]:81") == "http://[::1]:81/"
    assert pushtarget.origin("https://[2001:db8::1]/") == "https://[2001:db8::1]:443"


def test_its_bytes_are_canonical_and_read_back() -> None:
    t = check(TARGET)
    data = pushtarget.encode(t)
    assert pushtarget.decode(data) == t
    assert data == pushtarget.encode(pushtarget.decode(data))
    assert pushtarget.encode(PushTarget(url="http://h/", headers=(("a", "1"),))) == (
        b'{"ca_bundle":"","headers":[["a","1"]],"method":"POST","secret_ref":"",'
        b'"timeout_ms":10000,"url":"http://h/"}'
    ), "sorted keys, no spaces"
    with pytest.raises(CorruptData):
        pushtarget.decode(b'{"url": 1}')
    with pytest.raises(CorruptData):
        pushtarget.decode(b"\xff")


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("93.184.216.34", None),
        ("2606:2800:220:1:248:1893:25c8:1946", None),
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12::1", "unique-local"),
        ("224.0.0.1", "multicast"),
        ("100.64.0.1", "shared"),
        ("192.0.2.1", "reserved"),  # TEST-NET
        ("240.0.0.1", "reserved"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "metadata"),
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("2002:a00:1::", "private"),  # 6to4 of 10.0.0.1
        ("::ffff:93.184.216.34", None),
    ],
)
def test_the_category_of_an_address(address: str, expected: str | None) -> None:
    assert category(ipaddress.ip_address(address)) == expected


def test_the_allow_list_unlocks_a_category_but_metadata_only_by_its_exact_address() -> None:
    loop = ipaddress.ip_address("127.0.0.1")
    assert refusal(loop, ()) == "loopback"
    assert refusal(loop, ("127.0.0.1/32",)) is None
    assert refusal(ipaddress.ip_address("::ffff:127.0.0.1"), ("127.0.0.0/8",)) is None
    meta = ipaddress.ip_address("169.254.169.254")
    assert refusal(meta, ("169.254.0.0/16",)) == "metadata", "a network never unlocks it"
    assert refusal(meta, ("169.254.169.254/32",)) is None
    assert refusal(ipaddress.ip_address("10.0.0.1"), ("192.168.0.0/16",)) == "private"


def test_a_literal_host_is_judged_a_name_is_left_to_the_connect() -> None:
    assert literal_refusal("http://127.0.0.1:8080/x", ()) == "loopback"
    assert literal_refusal("http://127.0.0.1:8080/x", ("127.0.0.1/32",)) is None
    assert literal_refusal("http://169.254.169.254/latest/meta-data", ()) == "metadata"
    assert literal_refusal("http://[::1]/", ()) == "loopback"
    assert literal_refusal("http://localhost/", ()) is None, "a name: judged when connecting"
    assert literal_refusal("https://93.184.216.34/", ()) is None
