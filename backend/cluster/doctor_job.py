"""The per-node job of `ultra-console doctor`: what this node has, as facts, one marked line per probe.

Self-contained (stdlib; ray only to read NVML through Ray's own GPU provider, as the reaper and the GPU probe
do), sent as `python3 -c <source> --doctor-job <json request>` through backend/cluster/node_job.py, so worker
nodes need no copy of the console. It judges nothing: backend/cluster/doctor.py turns the facts of every
node into the verdicts (a shared directory, a clock skew, are only seen across nodes).

The probes run in `PROBES`' order: the clock first (its reading is the one the console times), the marker in
the output directory next (so the other nodes may see it while this one does the rest), the shared directory
last (it waits up to `marker_wait_s` for every other node's marker). Lines: `ULTRA_CONSOLE_DOCTOR {"probe":
name, ...facts}`; a probe that raised says `error`. The marker (`<output_dir>/.ultra-console-doctor/<token>.
<node id>`) is left for the nodes that have not looked yet; markers older than STALE_MARKER_S are swept.

Two environment variables are for tests (the console puts them into one node's job: doctor.NODE_ENV):
ULTRA_CONSOLE_CLOCK_OFFSET_S (this node's clock reads that far ahead) and ULTRA_CONSOLE_DOCTOR_PATH (py-spy
is looked for on that PATH only).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Container
from dataclasses import dataclass, field

from backend.cluster.node_tools import classify, expand, find_py_spy  # inlined on the node

MARK = "ULTRA_CONSOLE_DOCTOR "
CLOCK_OFFSET_ENV = "ULTRA_CONSOLE_CLOCK_OFFSET_S"
TOOL_PATH_ENV = "ULTRA_CONSOLE_DOCTOR_PATH"
MARKER_DIR = ".ultra-console-doctor"
STALE_MARKER_S = 600.0
POLL_S = 0.2


@dataclass(frozen=True)
class DoctorRequest:
    """The `--doctor-job` argument, as backend.cluster.doctor writes it (paths may name the node)."""

    node_id: str
    node_ip: str
    token: str
    nodes: tuple[str, ...]
    paths: tuple[str, ...]  # whose existence the console asks (checkpoint, datasets, miles, train script)
    arguments_file: str  # miles' arguments.py, hashed to compare with the commit the argv was checked against
    output_dir: str
    marker_wait_s: float = 20.0
    py_spy_timeout_s: float = 10.0

    @classmethod
    def parse(cls, text: str) -> DoctorRequest:
        """Raises KeyError for a missing field, ValueError for text that is not a JSON object."""
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("the request is not a JSON object")
        known = {f.name: f for f in dataclasses.fields(cls)}
        missing = [n for n, f in known.items() if f.default is dataclasses.MISSING and n not in raw]
        if missing:
            raise KeyError(missing[0])
        return cls(**_known_values(raw, known))  # type: ignore[arg-type]


def _known_values(raw: dict[str, object], known: Container[str]) -> dict[str, object]:
    """The request's known fields (others ignored: a newer console's), JSON lists as tuples."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items() if k in known}


@dataclass
class NodeState:
    """What one probe leaves for a later one (the marker, py-spy's path)."""

    request: DoctorRequest
    fields: dict[str, str]
    marker_dir: str | None = None
    marked_at: float = 0.0
    py_spy: str | None = None
    facts: dict[str, object] = field(default_factory=dict)

    def path(self, template: str) -> str:
        return expand(template, self.fields)


def emit(**event: object) -> None:
    print(MARK + json.dumps(event, sort_keys=True), flush=True)


def _one_line(err: BaseException) -> str:
    text = getattr(err, "strerror", None) or str(err) or type(err).__name__
    return " ".join(str(text).split())[:300]


def probe_clock(state: NodeState) -> dict[str, object]:
    """This node's wall clock (the console brackets it between the submission and the line's arrival)."""
    offset = float(os.environ.get(CLOCK_OFFSET_ENV) or 0.0)
    return {"t": time.time() + offset}


def probe_paths(state: NodeState) -> dict[str, object]:
    """Which of the asked paths exist here (as the node names them), and miles' arguments.py's digest."""
    found = {p: os.path.exists(state.path(p)) for p in state.request.paths}
    expanded = {p: state.path(p) for p in state.request.paths if state.path(p) != p}
    digest = None
    args = state.path(state.request.arguments_file)
    if os.path.isfile(args):
        with open(args, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
    return {"found": found, "expanded": expanded, "arguments": args, "arguments_sha256": digest}


_MARKER_NAME = re.compile(r"[\w-]{1,64}\.[\w-]{1,64}")


def _open_marker_dir(out: str) -> int:
    """The marker directory in the (shared) output directory, held by a descriptor: a symlink there (any
    user of the shared storage may plant one) is refused, never followed into another directory."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(os.path.join(out, MARKER_DIR), 0o755)
    try:
        return os.open(os.path.join(out, MARKER_DIR), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OSError(err.errno, f"{MARKER_DIR} is a symlink or not a directory: refused") from None
        raise


def _sweep(dir_fd: int) -> None:
    """Markers of earlier doctors (older than STALE_MARKER_S) go; this run's stay. Only marker-named
    regular files of this user's own are removed: nothing else that lies there, whoever put it there."""
    now, uid = time.time(), os.geteuid()
    for name in os.listdir(dir_fd):
        if not _MARKER_NAME.fullmatch(name):
            continue
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == uid and now - st.st_mtime > STALE_MARKER_S:
                os.unlink(name, dir_fd=dir_fd)
        except OSError:
            continue


def _safe(name: str) -> str:
    return "".join(c for c in name if c.isalnum() or c in "-_")[:64] or "node"


def _write_marker(dir_fd: int, name: str, state: NodeState) -> None:
    """Sweep, then write this node's marker, all relative to the held directory (closed after)."""
    try:
        _sweep(dir_fd)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        try:
            os.write(fd, state.request.node_id.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def probe_output(state: NodeState) -> dict[str, object]:
    """The output directory exists and takes a file: this node's marker, written and synced."""
    out = state.path(state.request.output_dir)
    facts: dict[str, object] = {"path": out, "real": os.path.realpath(out), "exists": os.path.isdir(out)}
    if not facts["exists"]:
        return facts
    marker_dir = os.path.join(out, MARKER_DIR)
    try:
        _write_marker(
            _open_marker_dir(out), f"{_safe(state.request.token)}.{_safe(state.request.node_id)}", state
        )
    except OSError as err:
        return {**facts, "writable": False, "error": _one_line(err)}
    state.marker_dir, state.marked_at = marker_dir, time.monotonic()
    return {**facts, "writable": True}


def probe_disk(state: NodeState) -> dict[str, object]:
    """Free and total bytes where the output directory lives (its nearest existing parent)."""
    where = state.path(state.request.output_dir)
    while where and not os.path.exists(where):
        where = os.path.dirname(where.rstrip("/")) or "/"
    usage = shutil.disk_usage(where or "/")
    return {"path": where, "free": usage.free, "total": usage.total}


def probe_py_spy(state: NodeState) -> dict[str, object]:
    override = os.environ.get(TOOL_PATH_ENV)
    state.py_spy = find_py_spy(override)
    return {"path": state.py_spy, "looked": override if override is not None else f"{sys.executable}, PATH"}


def _ptrace_scope() -> str:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def probe_ptrace(state: NodeState) -> dict[str, object]:
    """py-spy dumps a sleeping Python child of this job: what `stacks` does to a rank, on this node."""
    facts: dict[str, object] = {"scope": _ptrace_scope()}
    if state.py_spy is None:
        return {**facts, "tried": False}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)  # let the interpreter come up: py-spy needs its thread state
        argv = [state.py_spy, "dump", "--pid", str(child.pid)]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=state.request.py_spy_timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            return {**facts, "tried": True, "ok": False, "kind": "timeout", "error": "py-spy did not finish"}
    finally:
        child.kill()
        child.wait()
    said = " ".join((done.stderr or done.stdout or "").split("Stack backtrace:")[0].split())[:300]
    ok = done.returncode == 0
    return {
        **facts,
        "tried": True,
        "ok": ok,
        "kind": "" if ok else classify(said),
        "error": "" if ok else said,
    }


def probe_nvml(state: NodeState) -> dict[str, object]:
    """How many GPUs NVML answers for, through Ray's own GPU provider (no CUDA context)."""
    try:
        # ray: a slow import, paid only by this probe
        from ray.dashboard.modules.reporter.gpu_providers import GpuMetricProvider

        provider = GpuMetricProvider()
        if not provider.initialize():
            return {"gpus": 0, "why": "no NVML (or AMD SMI) answers on this node"}
        return {"gpus": len(provider.get_gpu_usage())}
    except Exception as err:  # a broken driver or Ray build: said, never the end of the job
        return {"gpus": 0, "why": f"{type(err).__name__}: {_one_line(err)}"}


def probe_shared(state: NodeState) -> dict[str, object]:
    """Which nodes' markers this node sees in its output directory, waiting for all up to marker_wait_s."""
    if state.marker_dir is None:
        return {"seen": [], "tried": False}
    req = state.request
    names = {n: os.path.join(state.marker_dir, f"{_safe(req.token)}.{_safe(n)}") for n in req.nodes}
    deadline = state.marked_at + req.marker_wait_s
    while True:
        seen = sorted(n for n, p in names.items() if os.path.exists(p))
        if len(seen) == len(names) or time.monotonic() >= deadline:
            return {"seen": seen, "tried": True, "waited_s": round(time.monotonic() - state.marked_at, 1)}
        time.sleep(POLL_S)


PROBES: dict[str, Callable[[NodeState], dict[str, object]]] = {
    "clock": probe_clock,
    "output": probe_output,
    "paths": probe_paths,
    "disk": probe_disk,
    "py_spy": probe_py_spy,
    "ptrace": probe_ptrace,
    "nvml": probe_nvml,
    "shared": probe_shared,
}


def main(argv: list[str]) -> int:
    request = DoctorRequest.parse(argv[argv.index("--doctor-job") + 1])
    fields = {"node_id": request.node_id, "node_ip": request.node_ip, "hostname": socket.gethostname()}
    state = NodeState(request, fields)
    for name, probe in PROBES.items():
        try:
            emit(probe=name, **probe(state))
        except Exception as err:  # one probe's failure is its own line; the others still run
            emit(probe=name, error=f"{type(err).__name__}: {_one_line(err)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
