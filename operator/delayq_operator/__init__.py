"""The delayq Kubernetes operator (kopf).

``desired``, ``jobs``, ``status`` and ``changes`` are pure (what a DelayTopic
should own, its Spark Jobs; its status and master roles from what exists; the
decisions of a change of its shard count); ``kube`` is the only module that
talks to the Kubernetes API; ``keepers`` (replication) and ``resharder`` (a
change of the shard count) drive a topic through it and ask its pods over gRPC;
``handlers`` wires them to kopf; ``main`` is ``delayq-operator``.
"""

from .desired import desired_objects
from .spec import DelayTopicSpec, SpecError, parse_spec

__all__ = ["DelayTopicSpec", "SpecError", "desired_objects", "parse_spec"]
