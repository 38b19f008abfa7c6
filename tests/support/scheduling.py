"""A pytest plugin: how a run is spread over xdist workers (``make test`` runs
``pytest -n N --dist loadgroup --no-loadscope-reorder``).

Groups (a group runs whole in one worker, which sets its fixtures up once):

- an item that uses one of the ``SHARED`` session fixtures joins that fixture's
  group: one worker starts the Kubernetes control plane (or the Spark session,
  or the Spark standalone cluster) and runs every test that needs it;
- else an item that uses a module- or class-scoped fixture joins its module's
  group (the fixture is made once);
- every other item is a unit of its own, handed to whichever worker is free.

Order: xdist hands units out in collection order, so the items are sorted by
``WEIGHT`` of their suite (the long chains first, so that none starts last), and
the Kubernetes suite goes last while its binaries are still being built
(``BUILDING_ENV``, set by ``make test`` when it starts the build in the
background). The order is a function of the collection and the environment
only: every worker must collect the same list.
"""

from __future__ import annotations

import os

import pytest

from tests.support.timing import suite_of

SHARED = {"control_plane": "k8s", "spark": "spark", "standalone_spark": "spark-standalone"}
"""Session fixture -> the group of the tests that use it."""

WEIGHT = [
    "k8s",
    "spark",
    "cluster",
    "ops",
    "integration",
    "examples",
    "cli",
    "replication",
    "engine",
]
"""Suites in the order they are handed out; the rest follow, as collected."""

BUILDING_ENV = "DELAYQ_K8S_BUILD_STATUS"


def group_of(item: pytest.Item) -> str | None:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name, group in SHARED.items():
        if name in info.name2fixturedefs:
            return group
    for defs in info.name2fixturedefs.values():
        if any(d.scope in ("module", "class") for d in defs):
            return item.nodeid.split("::", 1)[0]
    return None


def rank(item: pytest.Item, k8s_last: bool) -> int:
    suite = suite_of(item.nodeid)
    if suite == "k8s" and k8s_last:
        return len(WEIGHT) + 1
    return WEIGHT.index(suite) if suite in WEIGHT else len(WEIGHT)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # without xdist (``-p no:xdist``) there are no groups, and no xdist_group marker
    # to add under --strict-markers
    grouped = config.pluginmanager.hasplugin("xdist")
    for item in items if grouped else ():
        group = group_of(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    k8s_last = bool(os.environ.get(BUILDING_ENV))
    items.sort(key=lambda item: rank(item, k8s_last))  # (stable: modules stay whole)
