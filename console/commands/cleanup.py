"""`ultra-console cleanup`: kill exactly the job's processes still holding GPU memory after a run ended.

The same path as the app's abort modal (backend.cluster.leftovers): a reaper job pinned to each node the
run ran on reads NVML there and then and says, for every holder, whether it is provably the run's (its
environment carries the job's id). Only those are offered; the kill job checks both again before it
signals (SIGTERM, then SIGKILL). A holder the node cannot identify is reported and never signalled; a
node that does not answer is named. Never by process name, never `ray stop`. Refused while the run is
active. Exit status: 0 nothing left (or all killed), 1 a kill failed, a node did not answer or a holder
is unidentified.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from console.commands._cluster import (
    add_job_arg,
    confirm,
    job_of,
    refuse_if_readonly,
    run_with,
    say,
    settings_of,
)

if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.cluster.leftovers import LeftoverReport, ReapResult
    from backend.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cleanup", help="kill leftover processes of a run that still hold GPU memory")
    add_job_arg(p)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    refuse_if_readonly(settings_of(args), "cleanup")

    async def body(ctl: RunController, settings: Settings) -> int:
        report = await _read_leftovers(ctl, args)
        doc = _doc(report)
        if not args.json:
            for line in report.lines():
                say(line)
        problems = bool(report.unidentified or report.silent)
        if not report.killable:
            return _nothing_to_kill(report, doc, problems, as_json=args.json)
        if not confirm(f"Kill these {len(report.killable)} process(es) of the job?", args.yes, "cleanup"):
            say("cleanup cancelled", err=True)
            return 1
        results = await ctl.cleanup(list(report.killable))
        doc["results"] = [dataclasses.asdict(r) for r in results]
        _print_results(doc, results, as_json=args.json)
        return 1 if problems or any(r.action in ("failed", "error") for r in results) else 0

    return run_with(args, body)


async def _read_leftovers(ctl: RunController, args: argparse.Namespace) -> LeftoverReport:
    """The run's GPU holders on every node it ran on (without a run, none can be shown to be its)."""
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.cluster.controller import NoRunFound

    try:
        await ctl.attach(job_of(args))
    except NoRunFound:
        say("no run found: no GPU holder can be identified as a run's, so none will be signalled")
    nodes = await ctl.leftover_nodes()
    if not args.json:
        say(f"checking {len(nodes)} node(s) for GPU processes left behind…")
    return await ctl.leftovers()


def _doc(report: LeftoverReport) -> dict[str, object]:
    """The `--json` object before any kill (its `results` filled after)."""
    return {
        "job": report.job,
        "leftovers": [dataclasses.asdict(i) for i in report.killable],
        "unidentified": [dataclasses.asdict(i) for i in report.unidentified],
        "silent_nodes": [n.node_label for n in report.silent],
        "results": [],
    }


def _nothing_to_kill(report: LeftoverReport, doc: dict[str, object], problems: bool, *, as_json: bool) -> int:
    """Nothing of the job's holds a GPU: said (or the JSON printed); 1 when a holder or node is unknown."""
    if as_json:
        print(json.dumps(doc))
    else:
        say(report.summary() + ("" if report.clean else "; nothing of the job's to clean up"))
    return 1 if problems else 0


def _print_results(doc: dict[str, object], results: Sequence[ReapResult], *, as_json: bool) -> None:
    """What each kill did: the JSON object, or a line per process."""
    if as_json:
        print(json.dumps(doc))
        return
    for r in results:
        why = f" ({r.signal})" if r.signal else (f": {r.reason}" if r.reason else "")
        say(f"  pid {r.pid} on {r.node_id[:8]}: {r.action}{why}")
