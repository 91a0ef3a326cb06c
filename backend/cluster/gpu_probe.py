"""The console's side of its GPU probe (backend/cluster/gpu_probe_job.py): find it or start it, keep it alive
with a lease, follow its log into the freshest GPU readings the console has.

One probe per cluster, shared: a console adopts the probe it finds in the job list (marked `PROBE_KEY`, named
`ultra-console-gpu-probe-*`), else starts one unless it is read-only (a `--readonly` console reads a probe
that runs and starts none). Each console renews its own lease file in the probe's lease directory (named on
the probe's entrypoint, on the head) every `LEASE_RENEW_S`; the probe ends once none is fresher than its lease
timeout, so a console killed with SIGKILL or cut off with its SSH session keeps nothing running for more than
a minute. When the probe ends (lease gap, lifetime, crash) a writable console starts the next one.

The readings are NVML's of one second ago (util, memory, power, temperature, and the PIDs holding each GPU),
for the pane and for the abort flow's first look; anything that signals a process still reads the node itself
after the end (the reaper), never these.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import socket
import tempfile
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.cluster.dashboard import JobInfo, RayClient
from backend.cluster.job_identity import PROBE_KEY, job_kind
from backend.errors import ConsoleError
from backend.json_fields import Fields
from backend.sanitize import sanitize_text

SCRIPT = Path(__file__).with_name("gpu_probe_job.py")
MARK = "ULTRA_CONSOLE_GPU "
SUBMISSION_PREFIX = "ultra-console-gpu-probe-"
LEASE_SUFFIX = ".lease"
LEASE_TIMEOUT_S = 45.0  # the probe ends this long after the last renewal of the last lease
LEASE_RENEW_S = 10.0
SAMPLE_INTERVAL_S = 1.0
MAX_AGE_S = 3600.0  # its log grows ~0.4 KB per node and second: a fresh probe every hour keeps a replay short
STALE_AFTER_S = 5.0  # a reading a few missed samples old
RETRY_S = 2.0
LEASE_UNSEEN_S = (
    15.0  # our lease missing from the probe's list this long after writing it: it cannot see our file
)
START_CLAIM = "starting"
START_CLAIM_S = (
    20.0  # two consoles starting at once: the one holding this file submits, the other waits for it
)


@dataclass(frozen=True)
class ProbeProcess:
    pid: int
    mem_mb: int


@dataclass(frozen=True)
class ProbeGpu:
    """One GPU as NVML read it on its node."""

    index: int
    util: float | None
    mem_used_mb: int
    mem_total_mb: int
    power_w: int | None
    temp_c: int | None
    processes: tuple[ProbeProcess, ...] = ()


@dataclass(frozen=True)
class ProbeReading:
    """One node's sample: `gpus` None with `nvml` saying why, where the node has no NVML."""

    node_id: str
    ts: float  # epoch seconds, the node's clock
    gpus: tuple[ProbeGpu, ...] | None
    nvml: str = ""
    cpu_s: float | None = None  # the sampling process's CPU seconds so far


def _opt(value: object) -> int | None:
    return None if not isinstance(value, int) or value < 0 else value


def parse_reading(obj: Mapping[str, Any]) -> ProbeReading | None:
    """A sample line's object as a reading, or None when it is not one (any field of the wrong shape)."""
    try:
        node, ts = str(obj["n"]), float(obj["t"])
        cpu = float(obj["c"]) if isinstance(obj.get("c"), (int, float)) else None
        if "g" not in obj:
            return ProbeReading(
                node, ts, None, sanitize_text(str(obj.get("nvml") or "no GPU reading"))[:200], cpu
            )
        gpus = tuple(
            ProbeGpu(
                int(g[0]),
                None if g[1] is None or g[1] < 0 else float(g[1]),
                int(g[2]),
                int(g[3]),
                _opt(g[4]),
                _opt(g[5]),
                tuple(ProbeProcess(int(p), int(m)) for p, m in g[6]),
            )
            for g in obj["g"]
        )
        return ProbeReading(node, ts, gpus, cpu_s=cpu)
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def parse_line(line: str) -> dict[str, object] | None:
    """The JSON object of a probe line (anywhere in the line: Ray may prefix it), or None."""
    pos = line.find(MARK)
    if pos < 0:
        return None
    try:
        obj = json.loads(line[pos + len(MARK) :])
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def is_probe(job: JobInfo) -> bool:
    return job_kind(job) == "probe"


def lease_dir_of(job: JobInfo) -> Path | None:
    """The lease directory named on a probe's entrypoint."""
    try:
        tokens = shlex.split(job.entrypoint or "")
    except ValueError:
        return None
    for i, tok in enumerate(tokens):
        if tok.startswith("--lease-dir="):
            return Path(tok.split("=", 1)[1])
        if tok == "--lease-dir" and i + 1 < len(tokens):
            return Path(tokens[i + 1])
    return None


def default_lease_dir(session_name: str) -> Path:
    safe = "".join(ch for ch in session_name if ch.isalnum() or ch in "-_") or "ray"
    return Path(tempfile.gettempdir()) / f"ultra-console-gpu-probe-{safe}"


def probe_submission(
    head_node_id: str, lease_dir: Path, *, lease_timeout_s: float, interval_s: float, max_age_s: float
) -> dict[str, object]:
    """The Ray job of a probe: pinned to the head (where the leases are), no entrypoint resources."""
    source = SCRIPT.read_text(encoding="utf-8")
    args = [
        "--gpu-probe",
        f"--node-id={head_node_id}",
        f"--lease-dir={lease_dir}",
        f"--lease-timeout={lease_timeout_s:g}",
        f"--interval={interval_s:g}",
        f"--max-age={max_age_s:g}",
    ]
    return {
        "entrypoint": shlex.join(["python3", "-c", source, *args]),
        "submission_id": f"{SUBMISSION_PREFIX}{int(time.time() * 1000)}",
        "metadata": {PROBE_KEY: "gpu-probe", "node_id": head_node_id},
        "entrypoint_label_selector": {"ray.io/node-id": head_node_id},
    }


async def _bounded_on_cancel(coro: Coroutine[Any, Any, None], grace_s: float = 2.0) -> None:
    """Await `coro` in a task of its own; once cancelled, give it `grace_s` to wind down and no more (closing
    a log follow's websocket waits for a close frame Ray's
    tail may never send: quitting must not hang on it)."""
    task = asyncio.create_task(coro)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task}, timeout=grace_s)
        raise


def _claim(path: Path) -> bool:
    """Create `path` exclusively; a claim older than START_CLAIM_S was abandoned and is taken over."""
    for _ in range(2):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return True
        except FileExistsError:
            with contextlib.suppress(OSError):
                if time.time() - path.stat().st_mtime > START_CLAIM_S:
                    path.unlink()
                    continue
            return False
        except OSError:
            return True  # no claim possible here: the probe's own lock still keeps one running
    return False


class GpuProbe:
    """Keeps a probe running (unless read-only) and its newest
    reading per node; `run()` does it until cancelled."""

    def __init__(
        self,
        client: RayClient,
        *,
        readonly: bool = False,
        lease_timeout_s: float = LEASE_TIMEOUT_S,
        lease_renew_s: float = LEASE_RENEW_S,
        interval_s: float = SAMPLE_INTERVAL_S,
        max_age_s: float = MAX_AGE_S,
        on_status: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.readonly = readonly
        self.lease_timeout_s = lease_timeout_s
        self.lease_renew_s = min(lease_renew_s, lease_timeout_s / 3)
        self.interval_s = interval_s
        self.max_age_s = max_age_s
        self.on_status = on_status
        self.lease_id = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"
        self.readings: dict[str, ProbeReading] = {}
        self.job_id: str | None = None
        self.started: list[str] = []  # the probes this console submitted
        self.status = "GPU probe: looking for one"
        self.lease_seen = False
        self.updated = asyncio.Event()  # set on every new reading (the telemetry worker waits on it)
        self._lease_path: Path | None = None
        self._lease_written_at = 0.0

    # ------------------------------------------------------------------ state
    def _say(self, text: str) -> None:
        if text != self.status:
            self.status = text
            if self.on_status is not None:
                self.on_status(text)

    def fresh(self, now: float, stale_after_s: float = STALE_AFTER_S) -> dict[str, ProbeReading]:
        """The readings at most `stale_after_s` old at `now`, by node id."""
        return {n: r for n, r in self.readings.items() if now - r.ts <= stale_after_s}

    # ------------------------------------------------------------------ lease
    def _renew(self) -> None:
        path = self._lease_path
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{time.time():.3f}\n", encoding="utf-8")
            self._lease_written_at = self._lease_written_at or time.monotonic()
        except OSError as err:
            self._say(f"GPU probe: cannot renew this console's lease in {path.parent}: {err.strerror or err}")

    def _take_lease(self, lease_dir: Path) -> None:
        path = lease_dir / f"{self.lease_id}{LEASE_SUFFIX}"
        if path != self._lease_path:
            self.drop_lease()
            self._lease_path, self._lease_written_at, self.lease_seen = path, 0.0, False
        self._renew()

    def drop_lease(self) -> None:
        """Give this console's lease back (a clean exit); a killed console's lease simply expires."""
        if self._lease_path is not None:
            with contextlib.suppress(OSError):
                self._lease_path.unlink()
        self._lease_path = None

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.lease_renew_s)
            self._renew()

    # ------------------------------------------------------------------ find / start
    async def _find(self) -> JobInfo | None:
        probes = [j for j in await self.client.list_jobs() if is_probe(j) and not j.is_terminal]
        return min(probes, key=lambda j: j.submission_id or "") if probes else None

    async def _start(self) -> JobInfo | None:
        """Submit a probe, unless another console on this host is submitting one right now (then None)."""
        nodes = map(Fields.of, await self.client.nodes())
        head = next(
            (n.text("node_id") for n in nodes if n.has("is_head_node") and n.value("state") == "ALIVE"), None
        )
        if head is None:
            raise ConsoleError("no alive head node to run the GPU probe on")
        session = Fields(await self.client.version()).text("session_name", "ray")
        lease_dir = default_lease_dir(session)
        self._take_lease(lease_dir)  # before it starts: it never sees a moment without a lease
        if not _claim(lease_dir / START_CLAIM) or await self._find() is not None:
            return None  # the other console's probe is found at the next look
        payload = probe_submission(
            head,
            lease_dir,
            lease_timeout_s=self.lease_timeout_s,
            interval_s=self.interval_s,
            max_age_s=self.max_age_s,
        )
        sid = await self.client.submit(payload)
        self.started.append(sid)
        self._say(f"GPU probe: started {sid}")
        return await self.client.get_job(sid)

    async def _acquire(self) -> JobInfo | None:
        """The probe to follow: one that runs, else (writable) a new one; None while there is none to read."""
        job = await self._find()
        if job is not None:
            lease_dir = lease_dir_of(job)
            if lease_dir is not None:
                self._take_lease(lease_dir)
            return job
        if self.readonly:
            self._say(
                "GPU probe: none running (a --readonly console starts none); GPUs from miles' streams or "
                "Ray's reporter"
            )
            return None
        return await self._start()

    # ------------------------------------------------------------------ follow
    def _take(self, obj: dict[str, object], job_id: str) -> str | None:
        """Use one line of the probe; returns why it ended, when it says so."""
        line = Fields(obj)
        kind = line.value("k")
        if kind == "s":
            reading = parse_reading(obj)
            if reading is not None:
                self.readings[reading.node_id] = reading
                self.updated.set()
        elif kind == "leases":
            self.lease_seen = self.lease_id in line.items("ids")
            if (
                not self.lease_seen
                and self._lease_path is not None
                and self._lease_written_at
                and (time.monotonic() - self._lease_written_at > LEASE_UNSEEN_S)
            ):
                self._say(
                    f"GPU probe {job_id}: it does not see this console's lease in {self._lease_path.parent} "
                    "(is this console on the Ray head?)"
                )
        elif kind == "hello":
            self._say(f"GPU probe {job_id}: NVML every {self.interval_s:g} s on every node")
        elif kind in ("bye", "duplicate"):
            return sanitize_text(line.text("why", str(kind)))[:200]
        return None

    async def _follow(self, job: JobInfo) -> None:
        self.job_id = job.id
        async for line in self.client.follow_log(job.id):
            obj = parse_line(line)
            if obj is not None:
                why = self._take(obj, job.id)
                if why is not None and obj["k"] == "duplicate":
                    return  # another console's probe won the lock: follow that one
                if why is not None:
                    self._say(f"GPU probe {job.id} ended: {why}")

    async def run(self) -> None:
        """Find or start the probe and follow it, forever (cancel to stop); a probe that ends is replaced."""
        renewer = asyncio.create_task(self._renew_forever())
        try:
            while True:
                try:
                    job = await self._acquire()
                    if job is not None:
                        await _bounded_on_cancel(self._follow(job))
                except ConsoleError as err:
                    self._say(f"GPU probe unavailable: {err}")
                await asyncio.sleep(RETRY_S)
        finally:
            renewer.cancel()
            self.drop_lease()
