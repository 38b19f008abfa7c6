"""A client's loop on a thread of its own while a test runs (a producer or a
consumer making load): ``with`` starts it; the exit stops it, joins it and closes
the client; an exception it raised is kept in ``failure`` for the test to report."""

from __future__ import annotations

import threading
from typing import Self

from delayq import Client


class ClientLoop:
    """Subclasses give ``step`` (one round of the loop, called until stopped)."""

    def __init__(self, address: str, name: str) -> None:
        self.client = Client(address, timeout_s=30)
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name)

    def step(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.step()
        except BaseException as exc:  # reported by the test
            self.failure = exc

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.client.close()
