"""`ultra-console metrics`: a run's metric series, derived signals and alerts, from a live job, a saved
Ray job log, or a miles `--dump-details` directory.

Everything is computed by backend.signals.monitor (which reads through backend.signals.store,
backend.signals.metrics, backend.signals.derived, backend.signals.alerts, backend.signals.failures); this
module only picks the input and prints. `--json` prints one object `{"series", "latest", "derived", "alerts",
"cause", "problems"}` with non-finite values as null; `cause` is why the run failed (the cause, its
consequences) or null. `--compare B` (a saved log or a dump dir, repeatable) adds `"compare"`: the same
comparison `replay A B` draws (backend.signals.compare), the run read first being the
one compared with; the exit status stays the first run's.

A failure is a diagnosis, never an error: the result is always printed, also for a run that died before its
first metric. Exit status: 0 healthy; 3 a blind spot (metric lines that cannot be read, a chart key that never
arrives, no metric at all: stderr says which, with a sample line); 4 the run failed, and stderr says why in
one line; 1 bad input (a file that is missing, empty or binary), one line, nothing else.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.sanitize import one_line, sanitize_text, shown_name
from backend.signals.compare import Comparison, RunSide, compare, load_config
from backend.signals.ingest import RunLog, text_chunks
from backend.signals.launch_flags import ArgumentDump, flags_from_command
from backend.signals.monitor import RunMonitor
from backend.signals.run_signals import RunSignals
from backend.signals.textlog import check_text_log
from console.commands._cause import cause_lines
from console.commands._cluster import job_of, run_with
from shim.package import carries_shim

if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.settings import Settings
    from backend.signals.failures import Diagnosis

SUMMARY_KEYS = (
    "train/loss",
    "train/grad_norm",
    "train/ppo_kl",
    "train/train_rollout_kl",
    "train/train_rollout_logprob_abs_diff",
    "train/pg_clipfrac",
    "rollout/raw_reward",
    "rollout/truncated_ratio",
    "derived/zero_std_frac",
    "perf/tokens_per_gpu_per_sec",
    "derived/cluster_tokens_per_sec",
    "perf/rollout_time",
    "perf/train_time",
    "perf/step_time",
    "perf/actor_train_mfu",
)
BLIND_EXIT = 3  # read, but some chart is blind: the output is printed, and the alert says why on stderr
FAILED_EXIT = 4  # the run failed: the output is printed, and stderr names the cause
_DUMP_FLAG = re.compile(r"--dump-details[ =](\S+)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("metrics", help="metric series, throughput, KL, progress and alerts of a run")
    src = p.add_mutually_exclusive_group()
    # dest differs from the global --job so the subparser
    # default never overwrites `ultra-console --job X metrics`.
    src.add_argument(
        "--job",
        dest="sub_job",
        default=None,
        metavar="ID",
        help="a job on the Ray cluster (default: the latest run)",
    )
    src.add_argument("--from-log", metavar="FILE", help="a saved Ray job driver log")
    src.add_argument(
        "--from-dump", metavar="DIR", help="a miles --dump-details directory (events/, dashboard/)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="PATH",
        help="a baseline run (saved log or dump dir) to compare with, step-aligned; repeatable",
    )
    p.add_argument(
        "--num-rollout", type=int, default=None, metavar="N", help="total rollouts, when the log does not say"
    )
    p.add_argument(
        "--rollout-gpus",
        type=int,
        default=None,
        metavar="N",
        help="rollout GPUs for cluster throughput, when the log does not say",
    )
    p.add_argument(
        "--expected-scaling",
        type=float,
        default=5.0,
        metavar="X",
        help="moe_router_topk_scaling_factor the shim must apply (default 5.0)",
    )
    p.set_defaults(func=run)


def _monitor(args: argparse.Namespace) -> RunMonitor:
    monitor = RunMonitor(expected_scaling=args.expected_scaling)
    if args.num_rollout is not None:
        monitor.facts.pin("num_rollout", args.num_rollout)
    if args.rollout_gpus is not None:
        monitor.facts.pin("rollout_num_gpus", args.rollout_gpus)
    return monitor


def _dump_progress(read: int, total: int) -> None:
    """A dump bigger than one poll is read whole; on a terminal, say how far (never on a pipe: JSON there)."""
    if sys.stderr.isatty():
        sys.stderr.write(f"reading the dump: {read >> 20} of {total >> 20} MiB\r")
        sys.stderr.flush()


def read_log_file(monitor: RunMonitor, path: Path, arguments: ArgumentDump | None = None) -> int:
    """Stream a saved log through a throw-away run log (the same sanitising path as a live run); `arguments`
    collects its Megatron argument dump on the way."""
    check_text_log(path)
    with RunLog.scratch(monitor, "from-log") as run_log:
        if arguments is not None:
            run_log.store.subscribe(arguments.on_lines)
        return run_log.add_file(path)


def _from_job(args: argparse.Namespace, monitor: RunMonitor) -> tuple[str, float | None]:

    async def body(ctl: RunController, settings: Settings) -> tuple[str, float | None]:
        job = await ctl.attach(job_of(args))
        args.primary_side = (job.id, job.status, job.entrypoint)
        monitor.facts.scan_text(" " + job.entrypoint)
        monitor.expect_shim(carries_shim(job.runtime_env))
        dump = _DUMP_FLAG.search(job.entrypoint)
        if dump and Path(dump.group(1)).is_dir():
            monitor.attach_dump(dump.group(1))
        with RunLog.scratch(monitor, job.id) as run_log:
            async for chunk in text_chunks(ctl.client.read_log(job.id)):
                run_log.add(chunk)
        monitor.poll_dump()
        from backend.cluster.leftovers import job_actors  # lazy: only `metrics --job` pays for it

        actors = await job_actors(ctl.client, await ctl.refresh())
        if actors:  # only a process Ray lists as a train actor reports the shim (else: said unverified)
            monitor.verify_train_actors([(a.pid, a.ip, a.class_name) for a in actors])
        monitor.on_job_status(job.status, job.message)
        now = None if not job.is_terminal else monitor.end_of_log()
        return f"job {shown_name(job.id)} ({job.status})", now

    return run_with(args, body)


def run(args: argparse.Namespace) -> int:
    monitor = _monitor(args)
    arguments = ArgumentDump()
    baselines = _baselines(args.compare)  # bad input is one line before any work
    what, now = _read_input(args, monitor, arguments)
    if now is not None:  # a saved log, a dump, a finished job: the whole input is in
        monitor.input_ended()
        monitor.tick(now=now, dashboard_now=monitor.telemetry.last_ts)
    else:
        monitor.tick()
    if (
        args.from_log or args.from_dump or now is not None
    ):  # read to its end (a running job may not have begun)
        _check_metrics_seen(monitor, what)
    snap = monitor.snapshot(now=now)
    comparison = _compare(args, monitor, arguments, snap, baselines) if baselines else None
    if comparison is not None:
        snap["compare"] = comparison.to_json()
    if args.json:
        json.dump(snap, sys.stdout, allow_nan=False, separators=(",", ":"))
        sys.stdout.write("\n")
    else:
        _print_summary(what, snap, monitor.metrics_snapshot(now).derived, monitor.diagnosis())
        if comparison is not None:
            _print_comparison(comparison)
    return _verdict(snap, monitor)


def _read_input(
    args: argparse.Namespace, monitor: RunMonitor, arguments: ArgumentDump
) -> tuple[str, float | None]:
    """Feed the log, the dump or the job to `monitor`: (what was read, the moment it ends at; None while
    the job runs)."""
    if args.from_log:
        read_log_file(monitor, Path(args.from_log), arguments)
        return f"log {args.from_log}", monitor.end_of_log()
    if not args.from_dump:
        return _from_job(args, monitor)
    monitor.attach_dump(args.from_dump)
    monitor.poll_dump(whole=True, progress=_dump_progress)
    now = monitor.telemetry.last_ts
    if not (now == now):  # nan: no telemetry stream; measure from the newest metric instead
        now = monitor.collector.last_ts
    return f"dump {args.from_dump}", now


def _check_metrics_seen(monitor: RunMonitor, what: str) -> None:
    """An input read to its end with lines but no metric record is a blind spot (said by the alerts)."""
    refused = monitor.dump.refused if monitor.dump is not None else []  # e.g. a FIFO in the dump dir
    monitor.alerts.check_log_without_metrics(
        f"the {what}",
        monitor.activity.lines,
        sum(monitor.collector.records.values()),
        monitor.activity.last_line or (refused[0] if refused else ""),
    )


def _verdict(snap: dict[str, Any], monitor: RunMonitor) -> int:
    """The exit status, its reason on one stderr line: the run's cause of death, a blind spot, or 0 (with
    the input's problems as a warning)."""
    cause = snap["cause"]
    if cause is not None:  # the one answer the operator came for, on one line
        where = f" (line: {cause['line']})" if cause["line"] else ""
        _err(one_line(f"ultra-console: the run failed: {cause['title']}: {cause['message']}{where}")[:600])
        return FAILED_EXIT
    blind = monitor.blind_spots()
    if blind:  # the same words as the alert the app shows, and its sample line
        first = blind[0]
        more = f" (+{len(blind) - 1} more blind spot(s))" if len(blind) > 1 else ""
        sample = f"; e.g. {first.sample}" if first.sample else ""
        _err(one_line(f"ultra-console: error: {first.message}{more}{sample}")[:600])
        return BLIND_EXIT
    if snap["problems"]:
        shown = "; ".join(snap["problems"][:3])
        _err(
            sanitize_text(f"ultra-console: warning: {len(snap['problems'])} input problem(s): {shown}")[:400]
        )
    return 0


def _err(line: str) -> None:
    sys.stderr.write(line + "\n")


def _baselines(paths: list[str]) -> list[RunSide]:
    """Each `--compare` run read to its end (a log or a dump dir, as `replay` reads them)."""
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.signals.replay import ReplaySession, detect_source

    sources = [detect_source(path) for path in paths]
    sides = []
    for source in sources:
        with tempfile.TemporaryDirectory(prefix="uc-compare-") as spool:
            session = ReplaySession(source, spool)
            try:
                session.read_all()
                sides.append(session.side())
            finally:
                session.close()
    return sides


def _compare(
    args: argparse.Namespace,
    monitor: RunMonitor,
    arguments: ArgumentDump,
    snap: dict[str, Any],
    baselines: list[RunSide],
) -> Comparison:
    """The first run (the one read above) against the baselines, as the app's charts show it."""
    job = getattr(args, "primary_side", None)
    if job is not None:
        label, status, entrypoint = job
        flags = flags_from_command(entrypoint)
    else:
        label = Path(args.from_log or args.from_dump).name
        status, flags = "SAVED", arguments.flags()
    state = "FAILED" if snap["cause"] is not None else status
    first = RunSide(label, state, monitor.metrics_snapshot().series, flags)
    return compare([first, *baselines], load_config())


def _print_comparison(comparison: Comparison) -> None:
    out = ["compared (step-aligned):"]
    out += [f"  {run.text()}" for run in comparison.runs]
    first = comparison.runs[0].label
    for label, diff in comparison.changes:
        if diff is None:
            out.append(f"  changed {label} → {first}: launch flags unknown for one of them")
            continue
        out.append(
            f"  changed {label} → {first} ({diff.before_source} vs {diff.after_source}): "
            + (", ".join(c.text() for c in diff.changes) or "no flag")
        )
    sys.stdout.write(sanitize_text("\n".join(out)) + "\n")


def _fmt(value: object, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):  # as JSON's null says it
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}{unit}"
    return f"{value}{unit}"


def _print_summary(what: str, snap: dict[str, Any], signals: RunSignals, found: Diagnosis | None) -> None:
    """`snap` is `RunMonitor.snapshot`'s JSON (series, latest, alerts); `signals` and `found` (why it failed)
    the same moment's derived signals and diagnosis, read by attribute."""
    out = [f"metrics of {what}", *_signal_lines(signals)]
    out.append("  latest:")
    out += _latest_lines(snap)
    if found is not None:
        out += cause_lines(found, "  ")
    out += _alert_lines(snap["alerts"])
    sys.stdout.write(sanitize_text("\n".join(out)) + "\n")


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _signal_lines(signals: RunSignals) -> list[str]:
    """Progress, throughput and time per rollout where known; the checkpoints always."""
    out: list[str] = []
    prog = signals.progress
    if prog is not None:
        of = f"(past num_rollout {prog.num_rollout})" if prog.past_end else f"of {_fmt(prog.num_rollout)}"
        eta = f", ETA {prog.eta_s / 60:.1f} min" if prog.eta_s is not None and _finite(prog.eta_s) else ""
        out.append(f"  progress: rollout {prog.rollouts_done} {of}, {prog.train_steps_done} train steps{eta}")
    tp = signals.throughput
    if tp is not None:
        out.append(
            f"  rollout throughput: {_fmt(tp.tokens_per_gpu_per_sec)} tok/s/GPU"
            f" x {_fmt(tp.rollout_gpus)} GPUs"
            f" = {_fmt(tp.cluster_tokens_per_sec)} tok/s"
        )
    tr = signals.time_per_rollout
    if tr is not None:
        out.append(
            f"  time per rollout: rollout {_fmt(tr.rollout_s, ' s')}, train {_fmt(tr.train_s, ' s')}, "
            f"step {_fmt(tr.step_s, ' s')}"
        )
    since = signals.checkpoint.since_s
    last = f", last {since / 60:.1f} min before the end" if since is not None and _finite(since) else ""
    return [*out, f"  checkpoints: {signals.checkpoint.count}{last}"]


def _latest_lines(snap: dict[str, Any]) -> list[str]:
    """The summary keys' latest values, each with the step it was logged at."""
    latest, out = snap["latest"], []
    for key in (k for k in SUMMARY_KEYS if k in latest):
        series = snap["series"].get(key) or [[None]]
        value = _fmt(latest[key]) if latest[key] is not None else "nan/inf"
        out.append(f"    {key:<42} {value}  (step {series[-1][0]})")
    return out


def _alert_lines(alerts: list[dict[str, Any]]) -> list[str]:
    """How many alerts, then each with its severity, id and step."""
    out = [f"  alerts: {len(alerts) or 'none'}"]
    for a in alerts:
        step = f" step {a['step']}" if a["step"] is not None else ""
        out.append(f"    {a['severity'].upper()} {a['id']}{step}: {a['message']}")
    return out
