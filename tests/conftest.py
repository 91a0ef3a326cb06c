"""Shared fixtures: one real loopback-only Ray cluster per session (see tests/raycluster.py).

`ray_cluster` (session): head + 2 workers, 8 fake GPUs each, started on first use (~10-20 s on
2 cores), every listener asserted to be on loopback at start and at the end. Tests that use it
are marked `@pytest.mark.ray`. `ray_auth_cluster` (module): a one-node head with token auth,
started only by the tests that ask for it; its token is `.token`.

Killing a node is for good: a test that needs a node to die should `add_node()` a throwaway
node and kill that one, so later tests still see 3 alive nodes. Jobs a test leaves running on
the shared cluster are stopped after it (and named in a warning): they would hold GPUs that the
next test's run waits for.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

from raycluster import LocalRayCluster
from tiers import mark_and_group
from waiting import until

from backend.cluster.dashboard import RayClient

RAY_RERUNS = 1  # a Ray-tier test that fails runs once more; pytest's summary counts each ("1 rerun")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects and before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `ray` mark where a Ray fixture is used, and the xdist groups (tests/support/tiers.py). A Ray-tier
    test runs once more when it fails: three real clusters share a 2-core runner, and a bound that holds at
    load 5 (a job's start, a stop's grace) can miss at load 20. A test that fails twice fails the run, and
    every rerun is listed in the summary: a flake is seen, never hidden."""
    mark_and_group(items)
    if not config.pluginmanager.hasplugin("rerunfailures"):
        return
    for item in items:
        if item.get_closest_marker("ray") is not None and item.get_closest_marker("flaky") is None:
            item.add_marker(pytest.mark.flaky(reruns=RAY_RERUNS, reruns_delay=2))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The serial pass (`-m "serial..."`, scripts/test's first) reads only the test files that mark a test
    `serial`: importing every other module to deselect all its tests was most of that pass."""
    markexpr = config.getoption("markexpr", "") or ""
    if not markexpr.startswith("serial") or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    return "mark.serial" not in collection_path.read_text(encoding="utf-8")


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under `--dist loadgroup`: a scheduler safe for a worker that dies (support/crash_safe_sched.py)."""
    if config.getoption("dist", None) != "loadgroup":
        return None
    from crash_safe_sched import CrashSafeGroupScheduling

    return CrashSafeGroupScheduling(config, log)


@pytest.fixture(autouse=True)
def _isolated_operator_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads the operator's config or writes their audit log; tests may override these."""
    home = tmp_path_factory.getbasetemp() / "operator"
    monkeypatch.setenv("ULTRA_CONSOLE_STATE_DIR", str(home / "state"))
    monkeypatch.setenv("ULTRA_CONSOLE_CONFIG", str(home / "config.toml"))
    # The console's GPU probe is a Ray job of its own: only the
    # tests about it start one (tests/cluster/test_gpu_probe)
    monkeypatch.setenv("ULTRA_CONSOLE_GPU_PROBE", "0")
    # Nor a run's watcher (a Ray job beside every launch): only the tests about it start one
    monkeypatch.setenv("ULTRA_CONSOLE_WATCHER", "0")


def _started_cluster(**kwargs: object) -> LocalRayCluster:
    """A test cluster, started again once when Ray's own start-up gives up: on a loaded 2-core runner a raylet
    of the second or third cluster can miss Ray's registration deadline ("the current node timed out during
    startup"), which says nothing about the console."""
    try:
        return LocalRayCluster.start(**kwargs)  # type: ignore[arg-type]
    except RuntimeError as err:
        sys.stderr.write(f"\n[ray_cluster] start failed, once more: {err}\n")
        return LocalRayCluster.start(**kwargs)  # type: ignore[arg-type]


def _engines() -> list[str]:
    from backend.signals import scan_engine

    return [scan_engine.PURE, scan_engine.HYPERSCAN]


@pytest.fixture(params=_engines())
def scan_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The log scan engine of every monitor the test makes: each test using it runs once per engine
    (pure, hyperscan; hyperscan skipped only where the `fast` extra is not installed: CI has it)."""
    from backend.signals import scan_engine as engines

    if request.param == engines.HYPERSCAN:
        pytest.importorskip("hyperscan")
    monkeypatch.setenv(engines.ENGINE_ENV, request.param)
    engines.default_engine.cache_clear()
    yield request.param
    engines.default_engine.cache_clear()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[LocalRayCluster]:
    rc = _started_cluster(workers=2, gpus=8)
    try:
        rc.assert_loopback_only()
        sys.stderr.write(
            f"\n[ray_cluster] {len(rc.node_ids)} nodes up in {rc.start_seconds:.1f} s at {rc.address}\n"
        )
        yield rc
        rc.assert_loopback_only()  # again, now that workers and job drivers have run
    finally:
        rc.shutdown()


@pytest.fixture(scope="module")
def ray_auth_cluster() -> Iterator[LocalRayCluster]:
    rc = _started_cluster(workers=0, gpus=8, token=secrets.token_hex(16))
    try:
        rc.assert_loopback_only()
        yield rc
    finally:
        rc.shutdown()


@pytest_asyncio.fixture(loop_scope="function")  # same loop as the (function-scoped) test
async def ray_client(ray_cluster: LocalRayCluster) -> AsyncIterator[RayClient]:
    async with RayClient(ray_cluster.address, timeout=30.0) as client:
        yield client


def _active_jobs(http: httpx.Client) -> set[str]:
    jobs = http.get("/api/jobs/").json()
    return {
        j["submission_id"]
        for j in jobs
        if j.get("submission_id") and j.get("status") not in ("STOPPED", "SUCCEEDED", "FAILED")
    }


@pytest.fixture(autouse=True)
def _stop_leftover_jobs(request: pytest.FixtureRequest) -> Iterator[None]:
    """Isolation on the shared cluster: stop the jobs a test started and left active."""
    if "ray_cluster" not in request.fixturenames:
        yield
        return
    rc: LocalRayCluster = request.getfixturevalue("ray_cluster")
    with httpx.Client(base_url=rc.address, timeout=30.0, trust_env=False) as http:
        before = _active_jobs(http)
        yield
        leftover = _active_jobs(http) - before
        for sid in leftover:
            http.post(f"/api/jobs/{quote(sid, safe='')}/stop")  # a test's hostile id is one path segment

        def stopped() -> bool:
            return not _active_jobs(http) & leftover

        if leftover:
            asyncio.run(until(None, stopped, f"the jobs left active {sorted(leftover)} to stop", 30, 0.5))
    if leftover:
        warnings.warn(f"{request.node.name} left Ray jobs active, stopped: {sorted(leftover)}", stacklevel=1)
