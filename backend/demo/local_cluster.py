"""A real multi-node Ray cluster on this machine, bound to loopback only: for `ultra-console demo`,
tests and benches (tests/raycluster.py re-exports it).

Why a subprocess: `ray.cluster_utils.Cluster` (several raylets, 8 logical GPUs each) runs in a
small server process of its own (`python -m backend.demo.local_cluster serve ...`) that the caller
drives through a line-based pipe. The calling process never imports `ray`, so a second cluster
with token auth (whose env must be set before `import ray`) is just another server; every Ray
process is a descendant of the server, so teardown stops exactly what was started (the server
shuts its Cluster down on EOF of its stdin, which also happens if pytest dies).

Loopback: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 and node ip 127.0.0.1 (ray.md §0), every port we
care about pinned, and `LocalRayCluster.assert_loopback_only()` checks every listening socket of
every descendant with psutil. GPUs: faked inside Ray's own dashboard agent by
`backend/demo/simtrainer/fakegpu/sitecustomize.py` on the nodes' PYTHONPATH (ray.md §4.4).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from backend.json_fields import Fields

REPO = Path(__file__).resolve().parents[2]  # the directory holding the `backend` package
FAKEGPU_DIR = REPO / "backend" / "demo" / "simtrainer" / "fakegpu"
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_env(tmp: Path, token: str | None = None, *, fake_gpus: bool = True) -> dict[str, str]:
    """Environment of the server and thereby of every Ray process it starts (`fake_gpus=False`: the host's
    real NVML, for a bench on a GPU machine)."""
    env = dict(os.environ)
    for key in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(key, None)
    bindir = str(Path(sys.executable).parent)
    env.update(
        {
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # else Ray rewrites 127.0.0.1 to the eth0 address
            "RAY_TMPDIR": str(tmp),
            "RAY_USAGE_STATS_ENABLED": "0",
            # dead node reported in ~5 s instead of ~14 s; 5 misses, not 3, so a raylet starved of CPU
            # on a busy 2-core machine is not declared dead by mistake
            "RAY_health_check_period_ms": "1000",
            "RAY_health_check_failure_threshold": "5",
            "RAY_DEDUP_LOGS": env.get("RAY_DEDUP_LOGS", "1"),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(FAKEGPU_DIR) if fake_gpus else "", str(REPO), env.get("PYTHONPATH")) if p
            ),
            "PATH": bindir + os.pathsep + env.get("PATH", ""),  # `python3` in entrypoints = this venv
            "FAKE_GPU_DIR": str(tmp / "fakegpu"),
            "FAKE_GPU_COUNT": env.get("FAKE_GPU_COUNT", "8"),
        }
    )
    if token:
        env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token})
    return env


@dataclass
class LocalRayCluster:
    """Handle on a running loopback cluster (client side of the server pipe)."""

    proc: subprocess.Popen[str]
    tmp: Path
    address: str  # dashboard URL, e.g. http://127.0.0.1:40123
    gcs_address: str
    node_ids: list[str]
    start_seconds: float
    token: str | None = None
    dead: set[int] = field(default_factory=set)

    @classmethod
    def start(
        cls,
        *,
        workers: int = 2,
        gpus: int = 8,
        token: str | None = None,
        timeout: float = 180.0,
        fake_gpus: bool = True,
    ) -> LocalRayCluster:
        """Start head + `workers` nodes with `gpus` logical (fake, unless `fake_gpus=False`) GPUs each."""
        t0 = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))  # short: unix socket paths <= 107 chars
        (tmp / "fakegpu").mkdir()
        cmd = [
            sys.executable,
            "-m",
            "backend.demo.local_cluster",
            "serve",
            "--workers",
            str(workers),
            "--gpus",
            str(gpus),
            "--tmp",
            str(tmp),
        ]
        log = open(tmp / "server.log", "w")
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=cluster_env(tmp, token, fake_gpus=fake_gpus),
            start_new_session=True,
        )
        log.close()
        try:
            info = _read_reply(proc, timeout, tmp)
        except BaseException:
            _terminate(proc)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return cls(
            proc=proc,
            tmp=tmp,
            address=info.text("address"),
            gcs_address=info.text("gcs_address"),
            node_ids=[str(n) for n in info.items("node_ids")],
            start_seconds=time.monotonic() - t0,
            token=token,
        )

    # --------------------------------------------------------------- control
    def _ask(self, request: dict[str, object], timeout: float = 120.0) -> Fields:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return _read_reply(self.proc, timeout, self.tmp)

    def kill_node(self, i: int) -> str:
        """SIGKILL the raylet of node `i` (0 = head): a simulated crash. Returns its node id once
        Ray reports the node DEAD (~5 s), so later work is never scheduled onto it."""
        self._ask({"cmd": "kill", "i": i})
        self.dead.add(i)
        return self.node_ids[i]

    def add_node(self, gpus: int = 8) -> int:
        """Add one more worker node (e.g. a throwaway node to kill); returns its index."""
        reply = self._ask({"cmd": "add", "gpus": gpus})
        self.node_ids.append(reply.text("node_id"))
        return len(self.node_ids) - 1

    @property
    def fake_gpu_dir(self) -> Path:
        """Where processes "hold" fake GPUs and tests set overrides (see fakegpu/sitecustomize.py)."""
        return self.tmp / "fakegpu"

    @property
    def session_dir(self) -> Path:
        return self.tmp / "ray" / "session_latest"

    def processes(self) -> list[psutil.Process]:
        """The server and every process it started (raylets, agents, workers, job drivers)."""
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def listeners(self) -> list[tuple[str, str, int]]:
        """(process name, ip, port) of every listening TCP socket of the cluster's processes."""
        found = []
        for p in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                for c in p.net_connections(kind="inet"):
                    if c.status == psutil.CONN_LISTEN:
                        found.append((p.name(), c.laddr.ip, c.laddr.port))
        return found

    def assert_loopback_only(self) -> int:
        """Fail if any Ray process listens on anything but loopback; returns the listener count."""
        found = self.listeners()
        bad = [x for x in found if x[1] not in LOOPBACK]
        assert not bad, f"Ray listens beyond loopback: {bad}"
        assert found, "no listener found: cannot check the cluster's sockets"
        return len(found)

    def shutdown(self) -> None:
        """Stop exactly this cluster: the server shuts its Cluster down on EOF, then by PID."""
        procs = self.processes()
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _terminate(self.proc)
        # Anything left behind (e.g. an entrypoint leaked by a killed raylet, ray.md §4.3): by PID.
        for p in procs[1:]:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                p.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> LocalRayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _read_reply(proc: subprocess.Popen[str], timeout: float, tmp: Path) -> Fields:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=0.5):
                if proc.poll() is not None:
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("{"):
                reply = Fields.of(json.loads(line))
                if "error" in reply.raw:
                    raise RuntimeError(f"ray test cluster: {reply.value('error')}")
                return reply
    finally:
        sel.close()
    tail = ""
    with contextlib.suppress(OSError):
        tail = (tmp / "server.log").read_text()[-3000:]
    raise RuntimeError(f"ray test cluster did not answer (exit {proc.poll()}); server log tail:\n{tail}")


def _terminate(proc: subprocess.Popen[str]) -> None:
    for p in [*psutil.Process(proc.pid).children(recursive=True)] if proc.poll() is None else []:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    proc.kill()
    proc.wait(timeout=10)


# ------------------------------------------------------------------- server side
def default_interrupts() -> None:
    """SIGINT and SIGQUIT as an operator's terminal leaves them, for this process and all it starts (the
    raylets, Ray's job supervisor, every job's driver). Started as a background job of a non-interactive
    shell (a CI script's `&`), a process inherits them ignored; Ray resets neither, Python keeps an inherited
    SIGINT ignored, and a job stopped with RAY_JOB_STOP_SIGNAL=SIGINT then never sees its signal until Ray's
    SIGKILL (the SIGINT-stop tests failed so, now and then, depending on which process Ray forked from)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def _serve(workers: int, gpus: int, tmp: Path) -> None:
    """Run the Cluster; answer one JSON line per command read from stdin; shut down on EOF."""
    default_interrupts()
    # ray: only when a local cluster starts (the demo command's parser and tests stay Ray-free)
    from ray.cluster_utils import Cluster

    def node_args(i: int) -> dict[str, Any]:
        return dict(
            num_cpus=4 if i == 0 else 2,
            num_gpus=gpus,
            node_ip_address="127.0.0.1",
            object_store_memory=80 * 1024 * 1024,
            labels={"fake-node": f"n{i}"},
            node_name=f"sim-node-{i}",
            metrics_export_port=free_port(),
            dashboard_agent_listen_port=free_port(),
            runtime_env_agent_port=free_port(),
        )

    dash_port = free_port()
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(
            node_args(0),
            include_dashboard=True,
            dashboard_host="127.0.0.1",
            dashboard_port=dash_port,
            gcs_server_port=free_port(),
            temp_dir=str(tmp / "ray"),
        ),
    )
    nodes: list[Any] = [cluster.head_node]
    for i in range(1, workers + 1):
        nodes.append(cluster.add_node(**node_args(i)))
    cluster.wait_for_nodes()
    _wait_dashboard(dash_port, len(nodes))

    def reply(obj: dict[str, object]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    reply(
        {
            "address": f"http://127.0.0.1:{dash_port}",
            "gcs_address": cluster.gcs_address,
            "node_ids": [n.node_id for n in nodes],
        }
    )
    try:
        for line in sys.stdin:
            req = Fields.of(json.loads(line))
            try:
                cmd, i = req.value("cmd"), req.integer("i")
                if cmd == "kill":
                    nodes[i].kill_raylet()
                    if i > 0:  # (the head takes the dashboard with it)
                        _wait_node_dead(dash_port, nodes[i].node_id)
                    reply({"ok": True})
                elif cmd == "add":
                    node = cluster.add_node(**dict(node_args(len(nodes)), num_gpus=req.integer("gpus", gpus)))
                    nodes.append(node)
                    reply({"node_id": node.node_id})
                else:
                    reply({"error": f"unknown command {cmd!r}"})
            except Exception as err:
                reply({"error": repr(err)})
    finally:
        cluster.shutdown()


def _wait_dashboard(port: int, n_nodes: int, timeout: float = 60.0) -> None:
    """Return once the Jobs API answers and the node summary lists every node."""
    _wait_until(
        port,
        lambda d: len(d.obj("data").items("summary")) >= n_nodes,
        "/nodes?view=summary",
        f"dashboard listing {n_nodes} nodes",
        timeout,
    )


def _wait_node_dead(port: int, node_id: str) -> None:
    """Return once GCS reports the node DEAD, so nothing scheduled afterwards lands on it."""

    def dead(payload: Fields) -> bool:
        rows = payload.obj("data").obj("result").objs("result")
        return any(n.value("node_id") == node_id and n.value("state") == "DEAD" for n in rows)

    _wait_until(port, dead, "/api/v0/nodes?detail=1&limit=10000", f"DEAD report of node {node_id}")


def _wait_until(
    port: int, done: Callable[[Fields], bool], path: str, what: str, timeout: float = 60.0
) -> None:
    """Poll a dashboard JSON route (with the cluster's token, if any) until `done(json)`."""
    headers = {}
    if os.environ.get("RAY_AUTH_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['RAY_AUTH_TOKEN']}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
            with urllib.request.urlopen(req, timeout=5) as resp:
                if done(Fields.of(json.load(resp))):
                    return
        except (OSError, ValueError, KeyError, TypeError):
            pass
        time.sleep(0.3)
    raise RuntimeError(f"no {what} on port {port} within {timeout:.0f} s")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="mode", required=True)
    srv = sub.add_parser("serve", help="internal: run a cluster driven through stdin")
    srv.add_argument("--workers", type=int, default=2)
    srv.add_argument("--gpus", type=int, default=8)
    srv.add_argument("--tmp", type=Path, required=True)
    up = sub.add_parser("up", help="start a cluster, print its address, stop on Enter")
    up.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.mode == "serve":
        try:
            _serve(args.workers, args.gpus, args.tmp)
        except Exception as err:
            sys.stdout.write(json.dumps({"error": repr(err)}) + "\n")
            sys.stdout.flush()
            raise
    else:
        with LocalRayCluster.start(workers=args.workers) as rc:
            print(f"{rc.address} nodes={len(rc.node_ids)} started in {rc.start_seconds:.1f}s", flush=True)
            input()
