"""From a failed (or stopped) run to its next attempt: the run's own plan, the fix the diagnosis proposes, the
checkpoint to load, the advice, and the metadata that keeps the attempts of one run together.

The plan comes from the job's metadata when the console launched it (the whole spec travels there), else it is
read back from the entrypoint's `train.py` argv (backend/plan/argv_spec.py, unmapped flags listed). The chain
is in Ray's job list: every attempt's metadata names its chain (the first attempt's run id), its number, the
job before it and what that one died of, so nothing outside Ray is needed to show it or to advise.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from backend.cluster.audit import AuditLog
from backend.cluster.checkpoints import CheckpointChoice, find_checkpoint
from backend.cluster.dashboard import JobInfo, RayClient
from backend.cluster.telemetry import snapshot
from backend.errors import ConsoleError, SpecError
from backend.plan.argv_spec import ParsedArgv, spec_from_argv, split_entrypoint
from backend.plan.fixes import Advice, FieldEdit, FixedPlan, advise, apply_edits, default_fixes, propose
from backend.plan.spec import RunSpec, spec_from_dict
from backend.plan.submission import LINK_KEYS, SPEC_KEY
from backend.sanitize import sanitize_text
from backend.signals.failures import Diagnosis
from backend.signals.ingest import text_chunks
from backend.signals.monitor import RunMonitor

CAUSE_TAIL_LINES = 5000  # of a failed run's log, read for what said why it failed
CHAIN, ATTEMPT, RESUME_OF, RESUMED_CAUSE, RESUMED_FROM, LOST_S = LINK_KEYS
SpecSource = Literal["metadata", "argv"]
RESUMABLE = ("FAILED", "STOPPED", "SUCCEEDED")


class NotResumable(ConsoleError):
    """The run cannot be resumed (still running, or nothing tells its plan)."""


async def diagnose_job(client: RayClient, job: JobInfo) -> Diagnosis | None:
    """What the run's log says killed it; None if the log says nothing or cannot be read."""
    text: list[str] = []
    try:
        async for chunk in text_chunks(client.read_log(job.id, tail=CAUSE_TAIL_LINES)):
            text.append(chunk.text)
    except ConsoleError:
        return None
    monitor = RunMonitor()
    monitor.facts.scan_text(
        " " + (job.entrypoint or "")
    )  # the run's shape (train ranks: who did not time out)
    monitor.on_job_status(job.status)
    monitor.feed_text(sanitize_text("".join(text)))
    monitor.input_ended()  # the finished job's log is in: a phase it ends in standing still is a cause
    return monitor.diagnosis()


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a chain, as Ray's job list tells it."""

    job: str
    run_id: str
    number: int
    status: str
    cause_before: str | None  # what the attempt before this one died of (its resume said so)
    start_ms: int | None
    end_ms: int | None
    lost_before_s: float | None = (
        None  # the work the attempt before lost: from its last checkpoint to its end
    )

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "run_id": self.run_id,
            "attempt": self.number,
            "status": self.status,
            "previous_cause": self.cause_before,
            "start_time": self.start_ms,
            "end_time": self.end_ms,
            "previous_lost_s": self.lost_before_s,
        }


def chain_of(job: JobInfo) -> str:
    """The chain a job belongs to: its metadata's, else its own run id (an attempt 1), else its id."""
    meta = job.meta
    return meta.text(CHAIN) or meta.text("run_id") or job.id


def attempt_number(job: JobInfo) -> int:
    return max(1, job.meta.integer(ATTEMPT, 1))


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value < 1e9 else None


def attempts(jobs: Iterable[JobInfo], chain: str) -> tuple[Attempt, ...]:
    """The chain's attempts, oldest first."""
    out = [
        Attempt(
            j.id,
            j.meta.text("run_id"),
            attempt_number(j),
            j.status,
            j.meta.optional_text(RESUMED_CAUSE),
            j.start_time,
            j.end_time,
            _seconds(j.meta.text(LOST_S)),
        )
        for j in jobs
        if j.meta.has("ultra_console") and chain_of(j) == chain
    ]
    return tuple(sorted(out, key=lambda a: (a.number, a.start_ms or 0)))


@dataclass(frozen=True, slots=True)
class RunPlanSource:
    """The failed run's own plan and where it came from."""

    spec: RunSpec
    source: SpecSource
    save_dir: str | None
    parsed: ParsedArgv | None = None  # when read back from the argv


def _save_dir(entrypoint: str) -> str | None:
    _, flags = split_entrypoint(entrypoint)
    save = next((f for f in reversed(flags) if f.name == "--save" and f.values), None)
    return save.values[0] if save else None


def run_plan(job: JobInfo) -> RunPlanSource:
    """The plan `job` ran: its metadata's spec, else its argv read back (on its preset when it names one)."""
    raw = job.meta.text(SPEC_KEY)
    if raw:
        try:
            return RunPlanSource(
                spec_from_dict(json.loads(raw), "the run's metadata"), "metadata", _save_dir(job.entrypoint)
            )
        except (ValueError, SpecError, RecursionError):
            pass  # a hand-made or older metadata: the argv says the rest
    if not job.entrypoint.strip():
        raise NotResumable(f"{job.id} has no entrypoint to read its plan from")
    preset = job.meta.text("preset") or None
    try:
        parsed = spec_from_argv(job.entrypoint, preset)
    except SpecError as err:
        raise NotResumable(f"{job.id}: {err}") from None
    return RunPlanSource(parsed.spec, "argv", parsed.save_dir, parsed)


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """Everything `resume` shows before it launches: the diff, the checkpoint, the advice, the chain."""

    job: JobInfo
    plan: RunPlanSource
    diagnosis: Diagnosis | None
    edits: tuple[FieldEdit, ...]
    fixed: FixedPlan
    checkpoint: CheckpointChoice
    advice: Advice
    chain: str
    history: tuple[Attempt, ...]

    @property
    def next_attempt(self) -> int:
        return max([attempt_number(self.job), *(a.number for a in self.history)]) + 1

    @property
    def cause_kind(self) -> str | None:
        return self.diagnosis.cause.id if self.diagnosis is not None else None

    def links(self) -> dict[str, str]:
        """The next attempt's metadata: its chain, its number, the job before it, what that died of."""
        cp = self.checkpoint
        return {
            CHAIN: self.chain,
            ATTEMPT: str(self.next_attempt),
            RESUME_OF: self.job.id,
            RESUMED_CAUSE: self.cause_kind or self.job.status.lower(),
            RESUMED_FROM: "fresh" if cp.fresh else f"iteration {cp.iteration}",
            **({LOST_S: f"{lost:.0f}"} if (lost := self.lost_s()) is not None else {}),
        }

    def lost_s(self) -> float | None:
        """What the failure cost: from the checkpoint resumed to the run's end (a fresh start: all of it)."""
        end, start = self.job.end_time, self.job.start_time
        if end is None:
            return None
        since = self.checkpoint.saved_at * 1000 if self.checkpoint.saved_at is not None else start
        return None if since is None else max(0.0, (end - since) / 1000)

    def spec(self, accepted: Collection[str] | None = None) -> tuple[RunSpec | None, FixedPlan]:
        """The next attempt's spec: the accepted edits (None: each edit's default), `--load` of the
        checkpoint; every rule ran on it."""
        fixed = apply_edits(self.plan.spec, self.edits, accepted) if accepted is not None else self.fixed
        if fixed.spec is None:
            return None, fixed
        cp = self.checkpoint
        load = (
            {"load": cp.save_dir, "load_step": cp.iteration}
            if not cp.fresh
            else {"load": None, "load_step": None}
        )
        spec = fixed.spec.model_copy(update={"checkpoint": fixed.spec.checkpoint.model_copy(update=load)})
        run = spec.run.model_copy(update={"id": None})
        return spec.model_copy(update={"run": run}), fixed

    def to_json(self) -> dict[str, Any]:
        parsed = self.plan.parsed
        return {
            "job": self.job.id,
            "status": self.job.status,
            "chain": self.chain,
            "attempt": self.next_attempt,
            "attempts": [a.to_json() for a in self.history],
            "spec_source": self.plan.source,
            "argv": parsed.to_json() if parsed is not None else None,
            "cause": self.diagnosis.cause.to_json() if self.diagnosis is not None else None,
            "diff": [e.to_json() for e in self.edits],
            "findings": [f.to_json() for f in self.fixed.findings if f.severity != "info"],
            "field_errors": self.fixed.field_errors,
            "launchable": self.fixed.launchable,
            "checkpoint": self.checkpoint.to_json(),
            "advice": self.advice.to_json(),
            "links": self.links(),
        }


async def _nodes(client: RayClient, job: JobInfo) -> list[str]:
    """Where to read the save dir: the run's driver node first, then every alive node."""
    try:
        alive = [n.node_id for n in (await snapshot(client, include_dead=False)).alive_nodes]
    except ConsoleError:
        alive = []
    return [n for n in [job.driver_node_id or "", *alive] if n]


async def plan_resume(client: RayClient, job: JobInfo, jobs: Iterable[JobInfo]) -> ResumePlan:
    """The resume of `job` (a run that ended), read from Ray: its plan, diagnosis, fix, checkpoint, advice."""
    if job.status not in RESUMABLE:
        raise NotResumable(f"{job.id} is {job.status}: only a run that ended can be resumed")
    plan = run_plan(job)
    found = await diagnose_job(client, job) if job.status != "STOPPED" else None
    chain = chain_of(job)
    history = attempts(jobs, chain)
    book = default_fixes()
    kind = found.cause.id if found is not None else None
    edits = propose(book, kind, found.cause.role, plan.spec) if found is not None and kind else ()
    earlier = [a.cause_before for a in history if a.cause_before and a.number <= attempt_number(job)]
    if kind is None:
        advice = Advice("restart", f"no failure in its log ({job.status.lower()}): restart as is")
    else:
        advice = advise(book, kind, earlier, edits)
    checkpoint = await find_checkpoint(client, plan.save_dir, await _nodes(client, job), advice.rollback)
    fixed = apply_edits(plan.spec, edits)
    return ResumePlan(job, plan, found, edits, fixed, checkpoint, advice, chain, history)


def record_resume(audit: AuditLog, plan: ResumePlan, new_job: str, accepted: Collection[str]) -> None:
    """The audit entry that links attempt N+1 to attempt N (beside the launch entry the controller writes)."""
    audit.record(
        "resume",
        job=new_job,
        command=f"resume --job {plan.job.id}",
        result=f"attempt {plan.next_attempt} of {plan.chain}",
        details={
            **plan.links(),
            "accepted": sorted(accepted),
            "dropped": sorted(e.field for e in plan.edits if e.field not in accepted),
            "advice": plan.advice.to_json(),
            "checkpoint": plan.checkpoint.to_json(),
        },
    )
