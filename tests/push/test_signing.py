"""Signatures by the Standard Webhooks specification, checked by its own library
(``standardwebhooks``), with two secrets at once (rotation)."""

from __future__ import annotations

import base64
import json

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from delayq.push.signing import Key, parse_key, signature

SECRET_A = "whsec_" + base64.b64encode(b"a" * 32).decode()
SECRET_B = "whsec_" + base64.b64encode(b"b" * 24).decode()


def _headers(msg_id: str, ts: int, sig: str) -> dict[str, str]:
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": sig}


def test_the_specifications_library_verifies_our_signature() -> None:
    import time

    body = json.dumps({"hello": "world"}).encode()
    ts = int(time.time())
    sig = signature([parse_key(SECRET_A)], "msg_1", ts, body)
    assert sig.startswith("v1,") and " " not in sig
    Webhook(SECRET_A).verify(body, _headers("msg_1", ts, sig))
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET_B).verify(body, _headers("msg_1", ts, sig))
    with pytest.raises(WebhookVerificationError):  # another body
        Webhook(SECRET_A).verify(body + b" ", _headers("msg_1", ts, sig))


def test_two_keys_sign_twice_and_either_verifies() -> None:
    import time

    body = b"\x00\x01binary"
    ts = int(time.time())
    sig = signature([parse_key(SECRET_A), parse_key(SECRET_B)], "m", ts, body)
    assert len(sig.split(" ")) == 2
    for secret in (SECRET_A, SECRET_B):
        Webhook(secret).verify(body, _headers("m", ts, sig), json_parse=False)


def test_keys_parse_with_or_without_prefix_and_hide_their_material() -> None:
    plain = SECRET_A.removeprefix("whsec_")
    assert parse_key(SECRET_A) == parse_key(plain + "\n")
    assert "YWFh" not in repr(parse_key(SECRET_A)) and repr(parse_key(SECRET_A)) == "Key(<hidden>)"
    with pytest.raises(ValueError) as bad:
        parse_key("whsec_not*base64")
    assert "not*base64" not in str(bad.value)
    with pytest.raises(ValueError, match="under 16 bytes"):
        parse_key("whsec_" + base64.b64encode(b"short").decode())


def test_a_key_is_its_material() -> None:
    assert isinstance(parse_key(SECRET_A), Key)
    assert parse_key(SECRET_A) != parse_key(SECRET_B)
    assert len({parse_key(SECRET_A), parse_key(SECRET_A)}) == 1
