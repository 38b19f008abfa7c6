"""RocketMQ's resource names as delayq's (pure). A topic is the same name, but a
consumer group's dead-letter topic, which RocketMQ names ``%DLQ%<group>``, is
delayq's ``dlq.<group>`` (``deadletters``)."""

from __future__ import annotations

from ..deadletters import dead_letter_topic

__all__ = ["DLQ_PREFIX", "delayq_topic"]

DLQ_PREFIX = "%DLQ%"


def delayq_topic(name: str) -> str:
    """delayq's name of a RocketMQ topic (checked by the caller, as delayq's)."""
    if name.startswith(DLQ_PREFIX):
        return dead_letter_topic(name[len(DLQ_PREFIX) :])
    return name
