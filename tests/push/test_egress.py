"""The egress rule: categories refused by default, the allow-list, metadata only
by an exact entry, and IPv6 spellings of an IPv4 address judged by that address."""

from __future__ import annotations

import pytest

from delayq.push.egress import Egress, EgressRefused, parse_allow


@pytest.mark.parametrize(
    ("address", "category"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("169.254.1.1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "unique-local"),
        ("224.0.0.1", "multicast"),
        ("100.64.0.1", "shared"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "metadata"),
        ("::127.0.0.1", "loopback"),  # IPv4-compatible
        ("::169.254.169.254", "metadata"),
        ("::10.0.0.1", "private"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("240.0.0.1", "reserved"),
        ("192.0.2.1", "reserved"),  # documentation
        ("2001:db8::1", "reserved"),
        ("not-an-ip", "invalid"),
    ],
)
def test_refused_by_default(address: str, category: str) -> None:
    assert Egress().refusal(address) == category


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1::1", "8.8.8.8"])
def test_global_addresses_pass(address: str) -> None:
    assert Egress().refusal(address) is None


def test_the_allow_list_opens_its_networks_only() -> None:
    e = Egress(["127.0.0.1/32", "10.231.0.0/16"])
    assert e.refusal("127.0.0.1") is None
    assert e.refusal("::ffff:127.0.0.1") is None  # the same address, mapped
    assert e.refusal("10.231.5.6") is None
    assert e.refusal("127.0.0.2") == "loopback"
    assert e.refusal("10.232.0.1") == "private"


def test_metadata_needs_an_exact_entry() -> None:
    assert Egress(["169.254.0.0/16"]).refusal("169.254.169.254") == "metadata"
    assert Egress(["169.254.0.0/16"]).refusal("169.254.1.1") is None
    assert Egress(["169.254.169.254/32"]).refusal("169.254.169.254") is None


def test_a_bad_allow_entry_is_named() -> None:
    assert parse_allow(["127.0.0.1", " ", "10.0.0.0/8"]) == ("127.0.0.1/32", "10.0.0.0/8")
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33'"):
        Egress(["10.0.0.0/33"])


def test_a_refusal_is_an_oserror_naming_host_and_category() -> None:
    e = EgressRefused("internal.example", "private")
    assert isinstance(e, OSError)
    assert "internal.example" in str(e) and "private" in str(e)
