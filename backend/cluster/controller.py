"""The run controller: launch, attach, watch, abort, force-stop and clean up one training run.

The run lives in Ray, not here: the controller owns no process of the job, so killing the console
never touches the run, and a new controller rebuilds everything from Ray (`attach`). It is the
single source of a run's state for the app and the CLI:

    SUBMITTING -> PENDING -> RUNNING -> SUCCEEDED | FAILED | STOPPED
                                \\-> STOPPING (stop requested, Ray still says RUNNING) -> STOPPED

SUBMITTING and STOPPING are local: Ray has no such states. A stop asked by an earlier console
survives in the audit log, so an attaching console shows STOPPING too.

Abort is Ray's stop: the signal and grace period are the job's own (`RAY_JOB_STOP_SIGNAL=SIGINT`,
`RAY_JOB_STOP_WAIT_TIME_S`, set at launch by backend.plan.submission), then SIGKILL, then STOPPED. Ray's stop
does not cancel a PENDING job (ray.md §2.4): the controller says so and keeps watching. Force-stop
is a second, separate step: Ray offers nothing stronger than stop, so force SIGKILLs the driver's
process tree now (through a kill job pinned to the driver's node, which first checks that the PID
is that job's driver) instead of waiting out the grace period.

Cleanup kills exactly the PIDs telemetry lists as still holding GPU memory after the run ended,
one small Ray job pinned per node (backend/cluster/reaper_job.py), never by name and never `ray stop`.
Every launch, abort, force-stop and cleanup is appended to the audit log.

Consumers: register callbacks with `subscribe(cb)` or iterate `events()` (one queue per
consumer); `watch()` drives the polling (from a Textual worker or a CLI loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from backend.cluster.audit import AuditLog
from backend.cluster.dashboard import DashboardUnreachable, JobInfo, RayApiError, RayClient
from backend.cluster.job_identity import CLEANUP_KEY, active_runs, is_run, job_kind, latest_run, run_id_of
from backend.cluster.telemetry import ClusterSnapshot, snapshot
from backend.errors import ConsoleError, RefusedError
from backend.plan.spec import RunSpec

DEFAULT_POLL_S = 3.0  # job status; with telemetry and the log tail the console stays under 1 request/s
RAY_DEFAULT_STOP_SIGNAL = "SIGTERM"
RAY_DEFAULT_STOP_WAIT_S = 3
PENDING_STOP_NOTE = (
    "the job is still PENDING: Ray's stop does not cancel a pending job (it stays queued until "
    "resources free up, then starts and is stopped at once); still watching it")
REAP_MARK = "ULTRA_CONSOLE_REAP "


class RunState(str, Enum):
    SUBMITTING = "SUBMITTING"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"

    @property
    def terminal(self) -> bool:
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.STOPPED)


EventKind = Literal["state", "notice", "error", "recovered"]


@dataclass(frozen=True)
class RunEvent:
    """What the controller tells its consumers. `state` events carry the job as Ray reported it."""

    kind: EventKind
    state: RunState | None = None
    job: JobInfo | None = None
    text: str = ""
    time: float = field(default_factory=time.time)


class LaunchRefused(RefusedError):
    """A launch refused on purpose; `findings` says why (rule engine and preflight findings)."""

    exit_code = 2  # like `plan`: error findings

    def __init__(self, message: str, findings: list[Any] | None = None) -> None:
        super().__init__(message)
        self.findings = list(findings or [])


class NoRunFound(ConsoleError):
    """No job of ours or of miles' exists on the cluster (nothing to attach to)."""


@dataclass(frozen=True)
class Leftover:
    """A process still holding GPU memory on an alive node, per the latest telemetry."""

    node_id: str
    node_label: str
    gpu_index: int
    pid: int
    mem_mb: int


@dataclass(frozen=True)
class AbortOutcome:
    job: JobInfo
    stop_sent: bool
    message: str


def stop_settings(job: JobInfo) -> tuple[str, int]:
    """(signal, grace seconds) Ray's supervisor will use for this job (its runtime env, else Ray's defaults)."""
    env = ((job.runtime_env or {}).get("env_vars") or {}) if isinstance(job.runtime_env, dict) else {}
    signal = env.get("RAY_JOB_STOP_SIGNAL") or RAY_DEFAULT_STOP_SIGNAL
    try:
        wait = int(env.get("RAY_JOB_STOP_WAIT_TIME_S") or RAY_DEFAULT_STOP_WAIT_S)
    except ValueError:
        wait = RAY_DEFAULT_STOP_WAIT_S
    return signal, wait


def failure_reason(job: JobInfo, snap: ClusterSnapshot | None = None) -> str | None:
    """One readable reason for a FAILED job: Ray's error type and message head, plus the dead
    node it ran on when telemetry knows it."""
    if job.status != "FAILED":
        return None
    message = (job.message or "").strip()
    head = message.splitlines()[0] if message else "no message from Ray"
    if "last available logs" in head:
        tail = [ln for ln in message.splitlines()[1:] if ln.strip()]
        errors = [ln for ln in tail if "Error" in ln or "error" in ln]
        head = head.split(",")[0] + (f"; last error: {errors[-1].strip()[:300]}" if errors else "")
    reason = f"{job.error_type}: {head}" if job.error_type else head
    if snap is not None and job.driver_node_id:
        node = snap.node(job.driver_node_id)
        if node is not None and not node.alive:
            reason += f" (driver node {node.label} is {node.state}: {node.death_reason})"
    return reason


def _ms_to_s(ms: int | None) -> float | None:
    return ms / 1000.0 if ms else None


class RunController:
    """One run on one cluster. Create with a connected `RayClient`; call `attach()` or `launch()`."""

    def __init__(self, client: RayClient, *, state_dir: Path | str, readonly: bool = False,
                 poll_s: float = DEFAULT_POLL_S) -> None:
        self.client = client
        self.audit = AuditLog(state_dir)
        self.readonly = readonly
        self.poll_s = poll_s
        self.job: JobInfo | None = None
        self.state: RunState | None = None
        self._stop_requested = False
        self._callbacks: list[Callable[[RunEvent], Awaitable[None] | None]] = []
        self._queues: list[asyncio.Queue[RunEvent]] = []
        self._unreachable = False

    # ---------------------------------------------------------------- events
    def subscribe(self, callback: Callable[[RunEvent], Awaitable[None] | None]) -> Callable[[], None]:
        """Call `callback(event)` for every event; returns an unsubscribe function."""
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback) if callback in self._callbacks else None

    async def events(self) -> AsyncIterator[RunEvent]:
        """Every event from now on, for one consumer (ends when the consumer stops iterating)."""
        queue: asyncio.Queue[RunEvent] = asyncio.Queue()
        self._queues.append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._queues.remove(queue)

    async def _emit(self, event: RunEvent) -> None:
        for queue in list(self._queues):
            queue.put_nowait(event)
        for cb in list(self._callbacks):
            result = cb(event)
            if asyncio.iscoroutine(result):
                await result

    async def _notice(self, text: str) -> None:
        await self._emit(RunEvent("notice", self.state, self.job, text))

    async def _set(self, job: JobInfo, state: RunState | None = None) -> None:
        new = state or self._derive(job)
        changed = new != self.state or self.job is None or job.status != self.job.status
        self.job, self.state = job, new
        if changed:
            await self._emit(RunEvent("state", new, job, job.message or ""))

    def _derive(self, job: JobInfo) -> RunState:
        status = RunState(job.status) if job.status in RunState.__members__ else RunState.PENDING
        if status is RunState.RUNNING and self._stop_requested:
            return RunState.STOPPING
        return status

    def _require_writable(self, action: str) -> None:
        if self.readonly:
            raise RefusedError(f"{action} refused: the console is read-only (--readonly)")

    # ---------------------------------------------------------------- attach / refresh
    async def attach(self, job_id: str | None = None) -> JobInfo:
        """Attach to `job_id`, or to the latest run (ours or miles') when None."""
        if job_id:
            job = await self.client.get_job(job_id)
        else:
            job = latest_run(await self.client.list_jobs())
            if job is None:
                raise NoRunFound(f"no training run found on the Ray cluster at {self.client.address}")
        self._stop_requested = self._audited_stop(job)
        await self._set(job)
        return job

    def _audited_stop(self, job: JobInfo) -> bool:
        """A stop requested by an earlier console (still RUNNING) keeps showing as STOPPING."""
        if job.is_terminal:
            return False
        with contextlib.suppress(ConsoleError):
            return any(e.get("action") in ("abort", "force-stop") and e.get("job") == job.id
                       for e in self.audit.entries(limit=200))
        return False

    async def refresh(self) -> JobInfo:
        if self.job is None:
            raise NoRunFound("no run attached")
        job = await self.client.get_job(self.job.id)
        await self._set(job)
        return job

    async def watch(self, *, until_terminal: bool = True) -> RunState | None:
        """Poll the job every `poll_s` and emit state changes; a lost dashboard is reported once
        and retried until it answers again (then `recovered`). Returns the final state."""
        while True:
            try:
                await self.refresh()
                if self._unreachable:
                    self._unreachable = False
                    await self._emit(RunEvent("recovered", self.state, self.job, "Ray dashboard answers again"))
            except DashboardUnreachable as err:
                if not self._unreachable:
                    self._unreachable = True
                    await self._emit(RunEvent("error", self.state, self.job, str(err)))
            if until_terminal and self.state is not None and self.state.terminal:
                return self.state
            await asyncio.sleep(self.poll_s)

    async def wait_terminal(self, timeout_s: float | None = None) -> JobInfo:
        """Watch until the job is terminal; raises TimeoutError after `timeout_s`."""
        await asyncio.wait_for(self.watch(), timeout_s)
        assert self.job is not None
        return self.job

    # ---------------------------------------------------------------- launch
    async def check(self, spec: RunSpec, *, force: bool = False, check_cluster: bool = True,
                    record: bool = False) -> list[Any]:
        """Findings for launching `spec` now (rules, then preflight against the cluster). Raises
        LaunchRefused on an error finding; with `force`, another active run (P3) is allowed.
        `record`: this is a launch attempt, so a refusal goes to the audit log too."""
        try:
            return await self._check(spec, force=force, check_cluster=check_cluster)
        except LaunchRefused as err:
            if record:
                self.audit.record("launch", job=None, command=f"launch preset {spec.preset}", result=str(err),
                                  details={"findings": [f.to_json() for f in err.findings if f.severity == "error"],
                                           "forced": force})
            raise

    async def _check(self, spec: RunSpec, *, force: bool, check_cluster: bool) -> list[Any]:
        from backend.cluster.preflight import preflight
        from backend.plan import checks as constraints

        findings = list(constraints.check(spec))
        if constraints.has_errors(findings):
            raise LaunchRefused(f"launch refused: {_first_error(findings)}", findings)
        if check_cluster:
            cluster = await preflight(spec, self.client)
            if force:
                cluster = [f for f in cluster if f.rule != "P3"]
            findings += cluster
            if constraints.has_errors(cluster):
                raise LaunchRefused(f"launch refused: {_first_error(cluster)}", findings)
        elif not force:
            active = active_runs(await self.client.list_jobs())
            if active:
                raise LaunchRefused(f"launch refused: run {active[0].id} is still {active[0].status} "
                                    "(abort it first or use --force)")
        return findings

    async def launch(self, spec: RunSpec, *, force: bool = False, secrets: dict[str, str] | None = None,
                     run_id: str | None = None, check_cluster: bool = True, findings: list[Any] | None = None
                     ) -> JobInfo:
        """Submit `spec` as a new run. Refuses error findings (rules and preflight) and a second
        active run unless `force`; `findings` from an earlier `check()` skip a second check.
        Returns the job as Ray reports it right after submission."""
        from backend.plan.submission import build_submission

        self._require_writable("launch")
        if findings is None:
            findings = await self.check(spec, force=force, check_cluster=check_cluster, record=True)
        sub = build_submission(spec, run_id=run_id, secrets=secrets)
        self.job, self.state, self._stop_requested = None, RunState.SUBMITTING, False
        await self._emit(RunEvent("state", RunState.SUBMITTING, None, f"submitting {sub.submission_id}"))
        try:
            await self._upload_packages(sub.runtime_env)
            sid = await self.client.submit(sub.to_ray_payload())
        except ConsoleError as err:
            self.audit.record("launch", job=sub.submission_id, command=sub.shell(), result=f"refused by Ray: {err}",
                              secrets=secrets)
            self.state = None
            raise
        self.audit.record("launch", job=sid, command=sub.shell(), result="submitted", secrets=secrets,
                          details={"run_id": sub.metadata.get("run_id"), "forced": force,
                                   "warnings": [f.message for f in findings if f.severity == "warning"]})
        job = await self.client.get_job(sid)
        await self._set(job)
        return job

    async def _upload_packages(self, runtime_env: dict[str, Any]) -> None:
        """Upload the shim's `gcs://` py_modules package unless the cluster has it already (Ray's own
        client does this before a submit; over plain HTTP it is ours to do)."""
        import shim

        uri, data = shim.package()
        if uri not in (runtime_env.get("py_modules") or []):
            return
        path = shim.upload_path(uri)
        # RayClient has no package route (yet): its generic request keeps auth, retries and typed errors.
        try:
            await self.client._send("GET", path, what=f"package {uri}")
            return
        except RayApiError as err:
            if err.status != 404:
                raise
        await self.client._send("PUT", path, content=data, what=f"the upload of package {uri}")

    # ---------------------------------------------------------------- abort
    async def abort(self) -> AbortOutcome:
        """Ask Ray to stop the run (graceful: the job's stop signal and grace period). Does not
        wait: follow with `wait_terminal()` / `watch()` to confirm STOPPED."""
        self._require_writable("abort")
        job = await self.refresh()
        if job.is_terminal:
            return AbortOutcome(job, False, f"job {job.id} already ended {job.status}; nothing to stop")
        signal, wait = stop_settings(job)
        sent = await self.client.stop_job(job.id)
        self._stop_requested = True
        if job.status == "PENDING":
            message = PENDING_STOP_NOTE
        else:
            message = (f"stop requested: Ray sends {signal} to the driver's process tree, waits up to {wait} s "
                       "for a clean shutdown, then SIGKILLs what is left")
        self.audit.record("abort", job=job.id, command=f"POST /api/jobs/{job.id}/stop",
                          result=f"stop requested while {job.status}" if sent else "job was no longer alive",
                          details={"signal": signal, "grace_s": wait})
        await self._set(job)
        await self._notice(message)
        return AbortOutcome(job, sent, message)

    async def force_stop(self, *, timeout_s: float = 60.0) -> str:
        """The second step after abort: SIGKILL the driver's process tree now. Returns what was done."""
        self._require_writable("force-stop")
        job = await self.refresh()
        if job.is_terminal:
            return f"job {job.id} already ended {job.status}; nothing to force"
        if job.status == "PENDING":
            return ("Ray offers no way to remove a PENDING job (stop only queues, delete refuses non-terminal "
                    "jobs): force cannot do more; free resources so it starts and the queued stop applies")
        await self.client.stop_job(job.id)  # so the supervisor records STOPPED, not FAILED
        self._stop_requested = True
        pid = _driver_pid(job)
        if pid is None or not job.driver_node_id:
            return ("Ray reports no driver PID for this job (its entrypoint never called ray.init): force can only "
                    "repeat the stop; Ray SIGKILLs the entrypoint when the grace period ends")
        results = await self._run_reaper(job.driver_node_id, ["--tree", str(pid), "--job", job.id],
                                         timeout_s=timeout_s, purpose="force")
        killed = [r["pid"] for r in results if r.get("action") == "killed"]
        summary = (f"SIGKILLed the driver (pid {pid}) and {max(len(killed) - 1, 0)} descendant(s) on node "
                   f"{job.driver_node_id[:8]}; miles' own shutdown does not run; Ray marks the job STOPPED and "
                   "kills its actors" if killed else
                   f"killed nothing: {'; '.join(str(r.get('reason')) for r in results) or 'no result'}")
        self.audit.record("force-stop", job=job.id, command=f"kill job: SIGKILL process tree of pid {pid}",
                          result=summary, details={"results": results})
        await self._notice(summary)
        return summary

    # ---------------------------------------------------------------- cleanup
    async def leftovers(self, snap: ClusterSnapshot | None = None) -> list[Leftover]:
        """Processes still holding GPU memory on alive nodes (per telemetry), by node."""
        snap = snap or await snapshot(self.client)
        out = []
        for node_id, held in snap.gpu_holders().items():
            node = snap.node(node_id)
            label = node.label if node else node_id[:8]
            out += [Leftover(node_id, label, idx, p.pid, p.mem_mb) for idx, p in held]
        return out

    async def cleanup(self, leftovers: list[Leftover] | None = None, *, timeout_s: float = 90.0
                      ) -> list[dict[str, Any]]:
        """Kill exactly the leftover PIDs, one kill job pinned per node; refused while a run is active."""
        self._require_writable("cleanup")
        jobs = await self.client.list_jobs()
        busy = [j for j in jobs if not j.is_terminal and job_kind(j) != "cleanup" and j.type != "DRIVER"]
        if busy:
            raise RefusedError(f"cleanup refused: job {busy[0].id} is still {busy[0].status}; its processes "
                               "hold GPU memory legitimately (abort it first)")
        items = leftovers if leftovers is not None else await self.leftovers()
        by_node: dict[str, list[Leftover]] = {}
        for item in items:
            by_node.setdefault(item.node_id, []).append(item)
        tasks = [self._run_reaper(node, [a for it in group for a in ("--pid", str(it.pid))],
                                  timeout_s=timeout_s, purpose="cleanup")
                 for node, group in by_node.items()]
        results: list[dict[str, Any]] = []
        for node, outcome in zip(by_node, await asyncio.gather(*tasks, return_exceptions=True), strict=True):
            if isinstance(outcome, BaseException):
                results += [{"node_id": node, "pid": it.pid, "action": "failed", "reason": str(outcome)}
                            for it in by_node[node]]
            else:
                results += [dict(r, node_id=node) for r in outcome]
        killed = sum(1 for r in results if r.get("action") == "killed")
        self.audit.record("cleanup", job=self.job.id if self.job else None,
                          command="kill jobs pinned per node: " + ", ".join(
                              f"{n[:8]}: {' '.join(str(i.pid) for i in g)}" for n, g in by_node.items()),
                          result=f"killed {killed} of {len(items)} process(es)", details={"results": results})
        return results

    async def _run_reaper(self, node_id: str, args: list[str], *, timeout_s: float, purpose: str
                          ) -> list[dict[str, Any]]:
        """Submit backend/cluster/reaper_job.py as a job pinned to `node_id`, wait for it, parse its result lines."""
        source = Path(__file__).with_name("reaper_job.py").read_text(encoding="utf-8")
        argv = ["python3", "-c", source, "--gpu-reaper", f"--node-id={node_id}", *args]
        sid = f"ultra-console-{purpose}-{node_id[:8]}-{int(time.time() * 1000)}"
        payload = {
            "entrypoint": shlex.join(argv),
            "submission_id": sid,
            "metadata": {CLEANUP_KEY: purpose, "node_id": node_id},
            "entrypoint_label_selector": {"ray.io/node-id": node_id},
            "entrypoint_num_cpus": 0.01,
        }
        await self.client.submit(payload)
        deadline = time.monotonic() + timeout_s
        while True:
            job = await self.client.get_job(sid)
            if job.is_terminal:
                break
            if time.monotonic() > deadline:
                with contextlib.suppress(ConsoleError):
                    await self.client.stop_job(sid)
                raise ConsoleError(f"kill job {sid} on node {node_id[:8]} did not finish in {timeout_s:.0f} s "
                                   f"(still {job.status}); it was stopped")
            await asyncio.sleep(0.5)
        results = [json.loads(line[len(REAP_MARK):]) async for line in self.client.read_log(sid)
                   if line.startswith(REAP_MARK)]
        with contextlib.suppress(ConsoleError):
            await self.client.delete_job(sid)
        if job.status != "SUCCEEDED" and not results:
            raise ConsoleError(f"kill job {sid} on node {node_id[:8]} ended {job.status}: "
                               f"{(job.message or '').splitlines()[0] if job.message else 'no message'}")
        return [r for r in results if r.get("pid", 0) > 0 or r.get("action") == "error"]


def _driver_pid(job: JobInfo) -> int | None:
    info = getattr(job, "driver_info", None) or (job.model_extra or {}).get("driver_info")
    pid = (info or {}).get("pid") if isinstance(info, dict) else getattr(info, "pid", None)
    try:
        return int(pid) if pid is not None else None
    except (TypeError, ValueError):
        return None


def _first_error(findings: list[Any]) -> str:
    first = next(f for f in findings if f.severity == "error")
    extra = sum(1 for f in findings if f.severity == "error") - 1
    return f"[{first.rule}] {first.message}" + (f" (+{extra} more error finding(s))" if extra else "")


def describe(job: JobInfo, snap: ClusterSnapshot | None = None, state: RunState | None = None) -> dict[str, Any]:
    """The JSON the `status` command prints (and the app's run header reads)."""
    return {
        "job": job.id,
        "kind": job_kind(job),
        "run_id": run_id_of(job),
        "status": (state.value if state else job.status),
        "ray_status": job.status,
        "message": (job.message or "").splitlines()[0] if job.message else None,
        "error_type": job.error_type,
        "failure_reason": failure_reason(job, snap),
        "start_time": _ms_to_s(job.start_time),
        "end_time": _ms_to_s(job.end_time),
        "driver_node_id": job.driver_node_id,
        "stop": dict(zip(("signal", "grace_s"), stop_settings(job), strict=True)),
        "is_run": is_run(job),
    }
