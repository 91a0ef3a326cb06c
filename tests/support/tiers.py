"""Which tier a test is in, and which xdist group runs
it (`scripts/test` runs pytest `-n N --dist loadgroup`).

- A test that uses the shared Ray cluster (`ray_cluster`, directly or through `ray_client`) or the token-auth
  one is marked `ray` even where its file forgot to, so `-m "not ray"` (`scripts/test --fast`) never starts
  a cluster.
- Under xdist, the tests on the shared cluster are split into `ray_groups()` groups by file; each group runs
  on one worker, which starts one cluster of its own (the session fixture is per worker process) and runs
  its files in collection order, as a serial run would. The split is balanced by each file's measured
  seconds (ray_tier_seconds.toml), a file not listed there counting as the median.
- Every other test that uses a fixture built once per module (or class, or package) joins its module's
  group, so that fixture is built once; the rest are spread one by one (a long module of independent tests
  is no longer one unit that keeps a worker busy after the others are done).
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SHARED_CLUSTER = "ray_cluster"
RAY_FIXTURES = frozenset({SHARED_CLUSTER, "ray_auth_cluster"})
SECONDS = Path(__file__).with_name("ray_tier_seconds.toml")
GROUPS_ENV = "ULTRA_CONSOLE_TEST_RAY_GROUPS"


def ray_groups() -> int:
    """How many clusters the Ray tier is spread over: three by default, for scripts/test's four workers (the
    tier mostly waits; the fourth worker takes the CPU-bound
    unit and app modules, which then fill the gaps)."""
    return max(1, int(os.environ.get(GROUPS_ENV, "3")))


def file_seconds() -> dict[str, float]:
    return {str(k): float(v) for k, v in tomllib.loads(SECONDS.read_text())["seconds"].items()}


def split(files: Iterable[str], seconds: dict[str, float], groups: int) -> dict[str, int]:
    """Greedy balance: the longest file first, each onto the group with the least so far."""
    files = list(dict.fromkeys(files))
    default = statistics.median(seconds.values()) if seconds else 1.0
    load = [0.0] * groups
    out: dict[str, int] = {}
    for f in sorted(files, key=lambda f: (-seconds.get(f, default), f)):
        g = load.index(min(load))
        out[f] = g
        load[g] += seconds.get(f, default)
    return out


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


SHARED_SCOPES = frozenset({"module", "class", "package"})


def _shares_a_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture that is built once for its module, class or package."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d.scope in SHARED_SCOPES for chain in defs for d in chain)


def mark_and_group(items: list[pytest.Item]) -> None:
    """pytest_collection_modifyitems: the `ray` mark where a Ray fixture is used, and the xdist groups."""
    shared = [i for i in items if SHARED_CLUSTER in getattr(i, "fixturenames", ())]
    group_of = split((_file(i) for i in shared), file_seconds(), ray_groups())
    shared_ids = {id(i) for i in shared}
    for item in items:
        if RAY_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("ray") is None:
            item.add_marker(pytest.mark.ray)
        if id(item) in shared_ids:
            item.add_marker(pytest.mark.xdist_group(f"ray-cluster-{group_of[_file(item)]}"))
        elif _shares_a_fixture(item):
            item.add_marker(pytest.mark.xdist_group(_file(item)))
