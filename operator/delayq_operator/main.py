"""``delayq-operator``: run the kopf operator for DelayTopics.

Equivalent to ``kopf run -m delayq_operator.handlers`` with delayq's settings:
namespaces to watch (default all), peering (one active operator among
replicas, via kopf's KopfPeering/ClusterKopfPeering objects), log format,
liveness endpoint, the default delayq server image, the shard keepers'
lease and probe interval, the private networks every topic's pods may push to
(``--push-allow``, added to each topic's ``spec.pushEgress.allow``), the
certificates its CA issues (lifetimes, where
the control certificate's files go), the client certificate the keepers call
the admin API of topics with ``spec.tls.secretName`` with, and the operator's
own pods' namespace and labels (what the topics' NetworkPolicies admit to the
admin port). Every flag has a
``DELAYQ_OPERATOR_<NAME>`` environment twin (the chart sets those). Without
Kubernetes credentials (in-cluster or a kubeconfig) it exits with code 2 at once.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import re
import sys
from pathlib import Path

import kopf

from delayq.control.keeper import KeeperSettings
from delayq.role import DEFAULT_LEASE_MS
from delayq.tls import TlsConfig

from . import handlers  # noqa: F401 - importing registers the kopf handlers
from .certificates import CertSettings
from .kube import ConfigException, load_client
from .memo import API, SETTINGS, Settings
from .netpolicy import (
    OPERATOR_LABELS_DEFAULT,
    OPERATOR_NAMESPACE_DEFAULT,
    OperatorPods,
    parse_labels,
)
from .spec import IMAGE_DEFAULT, SpecError, cidrs

__all__ = ["main", "parse_args"]

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
"""In a pod: the namespace it runs in."""


def _own_namespace() -> str:
    """The pod's namespace when in one, else manifests/operator.yaml's."""
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or OPERATOR_NAMESPACE_DEFAULT
    except OSError:
        return OPERATOR_NAMESPACE_DEFAULT


def _env(name: str, default: str = "") -> str:
    return os.environ.get(f"DELAYQ_OPERATOR_{name}", default)


_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _span(text: str) -> datetime.timedelta:
    """A duration flag: a positive number and a unit (``90d``, ``5m``, ``1500ms``)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", text.strip())
    if m is None or float(m[1]) <= 0:
        raise ValueError(
            f"a positive duration with a unit ms, s, m, h or d, e.g. 90d; got {text!r}"
        )
    return datetime.timedelta(seconds=float(m[1]) * _UNITS[m[2]])


def _cert_settings(args: argparse.Namespace) -> CertSettings:
    """The CA's settings from the flags; ValueError names the flag."""
    spans = {}
    for flag in ("leaf_lifetime", "ca_lifetime", "cert_settle"):
        try:
            spans[flag] = _span(getattr(args, flag))
        except ValueError as exc:
            raise ValueError(f"--{flag.replace('_', '-')}: {exc}") from None
    return CertSettings(
        leaf_lifetime=spans["leaf_lifetime"],
        ca_lifetime=spans["ca_lifetime"],
        settle=spans["cert_settle"],
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="delayq-operator",
        description="Reconcile DelayTopic resources (delayq.io/v1alpha1) into delayq shards.",
    )
    p.add_argument(
        "--namespace",
        action="append",
        default=[n for n in _env("NAMESPACES").split(",") if n],
        help="namespace to watch (repeatable; default: all namespaces)",
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--peering",
        default=_env("PEERING") or None,
        help="kopf peering object name: only the highest-priority operator is active",
    )
    group.add_argument(
        "--standalone",
        action="store_true",
        help="no peering: this operator is the only one (default when --peering is unset)",
    )
    p.add_argument(
        "--priority",
        type=int,
        default=int(_env("PRIORITY", "0")),
        help="peering priority: the highest among running operators is active (default 0)",
    )
    p.add_argument(
        "--log-format",
        choices=["plain", "full", "json"],
        default=_env("LOG_FORMAT", "plain"),
        help="log line format (default plain; the chart uses json)",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        default=_env("VERBOSE") == "1",
        help="debug logs, including every API call kopf makes",
    )
    p.add_argument(
        "--liveness",
        default=_env("LIVENESS") or None,
        help="serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz",
    )
    p.add_argument(
        "--default-image",
        default=_env("DEFAULT_IMAGE", IMAGE_DEFAULT),
        help=f"delayq server image for DelayTopics without spec.image (default {IMAGE_DEFAULT})",
    )
    p.add_argument(
        "--push-allow",
        default=_env("PUSH_ALLOW"),
        help="CIDRs every topic's push groups may send to though loopback, private or "
        "link-local, comma-separated (added to each topic's spec.pushEgress.allow; "
        "default none)",
    )
    p.add_argument(
        "--lease-ms",
        type=int,
        default=int(_env("LEASE_MS", str(DEFAULT_LEASE_MS))),
        help="a shard master's lease: an unreachable master is failed over after it "
        f"(default {DEFAULT_LEASE_MS})",
    )
    p.add_argument(
        "--probe-interval-ms",
        type=int,
        default=int(_env("PROBE_INTERVAL_MS", "250")),
        help="how often each shard's pods are probed through the admin Status RPC (default 250)",
    )
    p.add_argument(
        "--tls-cert",
        default=_env("TLS_CERT"),
        help="client certificate (PEM) for the admin API of topics with spec.tls.secretName, "
        "signed by the CA in their Secret's ca.crt (the chart mounts operator.tls.secretName; "
        "topics without it use the operator's own CA)",
    )
    p.add_argument("--tls-key", default=_env("TLS_KEY"), help="its private key (PEM)")
    p.add_argument(
        "--tls-ca",
        default=_env("TLS_CA"),
        help="the CA to verify the shard pods' certificates with (PEM)",
    )
    defaults = CertSettings()
    for flag, default, what in (
        (
            "leaf-lifetime",
            f"{defaults.leaf_lifetime.days}d",
            "lifetime of the certificates the operator's CA issues (pods, control plane); "
            "renewed at 2/3 of it",
        ),
        (
            "ca-lifetime",
            f"{defaults.ca_lifetime.days}d",
            "lifetime of each namespace's CA; rotated at 2/3 of it, the old one trusted "
            "until every certificate is reissued",
        ),
        (
            "cert-settle",
            f"{int(defaults.settle.total_seconds())}s",
            "how long a Secret's change takes to reach every pod (the kubelet's sync): a "
            "new CA is trusted that long before it signs",
        ),
    ):
        env = flag.upper().replace("-", "_")
        p.add_argument(f"--{flag}", default=_env(env, default), help=f"{what} (default {default})")
    p.add_argument(
        "--certs-dir",
        default=_env("CERTS_DIR") or str(Settings().certs_dir),
        help="where the keepers' client certificates are written (the chart: an in-memory "
        "emptyDir)",
    )
    default_labels = ",".join(f"{k}={v}" for k, v in OPERATOR_LABELS_DEFAULT.items())
    p.add_argument(
        "--pod-namespace",
        default=_env("POD_NAMESPACE"),
        help="the namespace of the operator's pods, which the topics' NetworkPolicies admit "
        "to the admin port (default: the pod's own, else "
        f"{OPERATOR_NAMESPACE_DEFAULT})",
    )
    p.add_argument(
        "--pod-labels",
        default=_env("POD_LABELS", default_labels),
        help="labels selecting the operator's pods, k=v,k2=v2 (the chart passes its "
        f"release's; default {default_labels})",
    )
    args = p.parse_args(argv)
    try:
        args.operator_pods = OperatorPods(
            namespace=args.pod_namespace or _own_namespace(),
            labels=parse_labels(args.pod_labels),
        )
    except ValueError as exc:
        p.error(f"--pod-labels: {exc}")
    if not args.operator_pods.labels:
        p.error("--pod-labels: at least one label (else every pod of the namespace is admitted)")
    try:
        args.admin_tls = TlsConfig.of(args.tls_ca, args.tls_cert, args.tls_key)
    except ValueError as exc:
        p.error(f"--tls-cert / --tls-key: {exc}")
    if args.admin_tls is not None and (args.admin_tls.cert is None or args.admin_tls.ca is None):
        p.error("--tls-cert, --tls-key and --tls-ca go together")
    try:
        entries = [c.strip() for c in args.push_allow.split(",") if c.strip()]
        args.push_allow = cidrs(entries, "--push-allow")
    except SpecError as exc:
        p.error(str(exc))
    try:
        args.cert_settings = _cert_settings(args)
    except ValueError as exc:
        p.error(str(exc))
    try:
        args.keeper_settings = KeeperSettings(
            lease_ms=args.lease_ms, probe_interval_ms=args.probe_interval_ms
        )
    except ValueError as exc:
        p.error(f"--lease-ms / --probe-interval-ms: {exc}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat[args.log_format.upper()])
    settings = Settings(
        default_image=args.default_image,
        push_allow=args.push_allow,
        keeper_settings=args.keeper_settings,
        admin_tls=args.admin_tls,
        operator_pods=args.operator_pods,
        cert_settings=args.cert_settings,
        certs_dir=Path(args.certs_dir),
    )
    try:  # no credentials is not worth kopf's retry every minute: say so and stop
        api = load_client()
    except ConfigException as exc:
        print(f"delayq-operator: no Kubernetes credentials: {exc}", file=sys.stderr)
        return 2
    # the startup handler (handlers.configure) makes the typed memo of these
    memo = kopf.Memo({SETTINGS: settings, API: api})
    asyncio.run(
        kopf.operator(
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            standalone=args.peering is None,
            peering_name=args.peering,
            priority=args.priority,
            liveness_endpoint=args.liveness,
            memo=memo,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
