"""The receipt key (``receipt.key``): readable and whole.

Damage to it is reported, never repaired (``receipt-key-corrupt``): nothing
derives it again. Deleting it lets the next start make a new one; receipts
handed out under the old key are then refused (INVALID_RECEIPT) and their
messages come back after their invisibility; a replica takes its master's key
again when it follows. A directory without the file (never started since
receipts had keys) is fine: the next start makes it.
"""

from __future__ import annotations

from ..errors import CorruptData
from ..formats import receiptkey
from ..store.receiptkey import RECEIPT_KEY_FILE
from .checker import Checker

__all__ = ["check"]


def check(c: Checker) -> None:
    path = c.root / RECEIPT_KEY_FILE
    try:
        receiptkey.decode(path.read_bytes(), RECEIPT_KEY_FILE)
    except FileNotFoundError:
        return
    except (CorruptData, OSError) as exc:
        c.add(RECEIPT_KEY_FILE, "receipt-key-corrupt", None, str(exc), fixable=False)
