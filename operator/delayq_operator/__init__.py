"""The delayq Kubernetes operator (kopf).

``desired`` and ``status`` are pure (what a DelayTopic should own; its status
and master roles from what exists); ``kube`` is the only module that talks to
the cluster; ``handlers`` wires them to kopf; ``main`` is ``delayq-operator``.
"""

from .desired import DelayTopicSpec, SpecError, desired_objects, parse_spec

__all__ = ["DelayTopicSpec", "SpecError", "desired_objects", "parse_spec"]
