"""The delayq Kubernetes operator (kopf). ``desired`` holds the pure builders of
the objects a DelayTopic owns; the kopf handlers (I/O) come on top of them."""

from .desired import DelayTopicSpec, SpecError, desired_objects, parse_spec

__all__ = ["DelayTopicSpec", "SpecError", "desired_objects", "parse_spec"]
