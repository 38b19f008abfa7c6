"""Ending every call whose handler raised with a status, on both ports (public
and admin): ``failure(method)`` is what the one handler wrapper of each port
(``handlers.guarded``) does with an exception, so a call costs one wrapper,
not one per concern.

A servicer turns the delayq errors it expects into their status itself
(``status.abort_with``). Anything that still escapes a handler ended the call
UNKNOWN with the exception's own text ("Unexpected <class 'ValueError'>: ...").
With it, an escaped ``DelayqError`` ends the
call with its status (``statuscodes``), any other exception INTERNAL with a short
text naming the method and the exception's type (``internal_message``, at most
``MAX_MESSAGE_CHARS``; never the exception's text), and its traceback is logged.

Invariants: a call that raises nothing runs as without it (a ``try`` more); a
call a handler ended itself (``context.abort``) keeps its status; a
cancellation is not an ``Exception`` and passes through; the server goes on
serving. Handlers that are not coroutine or async-generator functions (none of
delayq's) are passed through untouched.
"""

from __future__ import annotations

import logging

import grpc

from ..errors import DelayqError
from .gate import Failed
from .statuscodes import abort_with

__all__ = ["MAX_MESSAGE_CHARS", "failure", "internal_message"]

log = logging.getLogger("delayq.server")

MAX_MESSAGE_CHARS = 200


def internal_message(method: str, exc: BaseException) -> str:
    """The INTERNAL text for ``exc`` escaping ``method`` (its full name)."""
    name = method.rpartition("/")[2] or method
    text = f"{name}: internal error ({type(exc).__name__}); see the server log"
    return text[:MAX_MESSAGE_CHARS]


def failure(method: str) -> Failed:
    """What a call of ``method`` does with an exception its handler raised."""

    async def failed(exc: Exception, context: grpc.aio.ServicerContext) -> None:
        if isinstance(exc, grpc.aio.AbortError):
            return  # ended by the handler: its status stands
        if isinstance(exc, DelayqError):
            await abort_with(context, exc)
        log.error("unexpected error in an RPC", extra={"method": method}, exc_info=exc)
        await context.abort(grpc.StatusCode.INTERNAL, internal_message(method, exc))

    return failed
