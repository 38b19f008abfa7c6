"""``delayq serve`` whose RocketMQ port loses the answer to its first SendMessage,
for the test of a client's retry (``test_java_client``): the send is stored, then
the call fails UNAVAILABLE as if the answer had been lost on its way back, and
``LOST`` is written to stderr (the server's log). Test-only: the product has no
such switch; this wraps the servicer's class before the server builds it.

Run as a ``ServerProcess`` prefix: ``python -m tests.rocketmq.lossyserve`` followed
by the command it prefixes (``python -m delayq.cli.main serve ...``), whose
arguments after ``delayq.cli.main`` it serves in this process.
"""

from __future__ import annotations

import sys
from typing import Any

import grpc

from delayq.cli.main import main
from delayq.rocketmq.servicer import MessagingServicer

LOST = "lossyserve: the answer to the first SendMessage was dropped"


def _losing_first() -> None:
    send = MessagingServicer.SendMessage
    lost = False

    async def send_losing_first(self: Any, request: Any, context: Any) -> Any:
        nonlocal lost
        answer = await send(self, request, context)
        if lost:
            return answer
        lost = True
        print(LOST, file=sys.stderr, flush=True)
        await context.abort(grpc.StatusCode.UNAVAILABLE, "the answer was lost (lossyserve)")

    MessagingServicer.SendMessage = send_losing_first  # type: ignore[method-assign]


if __name__ == "__main__":
    argv = sys.argv[1:]
    _losing_first()
    sys.exit(main(argv[argv.index("delayq.cli.main") + 1 :]))
