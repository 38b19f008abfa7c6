"""The delayq Kubernetes operator (kopf).

Pure (no Kubernetes client, no kopf, no I/O; an import-linter contract): the
CRD's names and labels (``crd``) and its spec as typed values, parsed and
checked (``spec``); what a DelayTopic should own, one object a module
(``statefulset``, ``services``, ``budget``, ``shardmaps``, ``podtls``,
``security``, ``jobs``, ``netpolicy``), composed by ``desired``; its status and
master roles from what exists (``status``, ``statusupdate``, ``records``); the
decisions of the reconcile handler (``reconciling``), of a change of its shard
count (``changes``) and of its certificates (``certificates``, ``leafcerts``);
the consumer groups' policies (``groups``, ``groupplan``); a DelaySchedule as
the schedule API's spec (``schedules``) and what its round calls
(``scheduleplan``); kopf's bodies as plain values (``plain``).
I/O: ``kube`` is the only module that talks to the Kubernetes API;
``statuswriter`` writes every topic's status; ``memo`` is the typed memo the
startup handler fills once; ``keepers`` (replication), ``resharder`` (a change
of the shard count), ``issuer`` and ``topiccerts`` (certificates) drive a topic
through ``kube`` and ask its pods over gRPC; ``groupkeeper`` and
``schedulekeeper`` call a topic's public port with the typed client (where
``topicaddress`` says); ``handlers`` and ``schedulehandlers`` wire them to
kopf; ``main`` is ``delayq-operator``.
"""

from .desired import desired_objects
from .spec import DelayTopicSpec, SpecError, parse_spec

__all__ = ["DelayTopicSpec", "SpecError", "desired_objects", "parse_spec"]
