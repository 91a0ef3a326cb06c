"""`ultra-console cleanup`: kill exactly the processes still holding GPU memory after a run ended.

The PIDs come from Ray's GPU telemetry; each node gets one small kill job pinned to it, which
re-checks that every PID still holds GPU memory before signalling it (SIGTERM, then SIGKILL).
Never by process name, never `ray stop`. Refused while any job is still active.
"""

from __future__ import annotations

import argparse
import json
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
    from backend.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cleanup", help="kill leftover processes that still hold GPU memory after a run")
    add_job_arg(p)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from backend.cluster.telemetry import snapshot

    refuse_if_readonly(settings_of(args), "cleanup")

    async def body(ctl: RunController, settings: Settings) -> int:
        wanted = job_of(args)
        if wanted:
            await ctl.attach(wanted)
        snap = await snapshot(ctl.client)
        items = await ctl.leftovers(snap)
        if not items:
            unlisted = len(snap.unlisted_memory())
            say("no process is listed as holding GPU memory; nothing to clean up"
                + (f" ({unlisted} GPU(s) show memory in use but Ray lists no process for them)" if unlisted else ""))
            if args.json:
                print(json.dumps({"leftovers": [], "results": []}))
            return 0
        if not args.json:
            say("processes still holding GPU memory:")
            for it in items:
                say(f"  {it.node_label}  GPU {it.gpu_index}  pid {it.pid}  {it.mem_mb} MiB")
        if not confirm(f"Kill these {len(items)} process(es)?", args.yes, "cleanup"):
            say("cleanup cancelled", err=True)
            return 1
        results = await ctl.cleanup(items)
        if args.json:
            print(json.dumps({"leftovers": [it.__dict__ for it in items], "results": results}))
        else:
            for r in results:
                what = r.get("action")
                why = f" ({r['signal']})" if r.get("signal") else (f": {r['reason']}" if r.get("reason") else "")
                say(f"  pid {r.get('pid')} on {str(r.get('node_id', ''))[:8]}: {what}{why}")
        failed = [r for r in results if r.get("action") in ("failed", "error")]
        return 1 if failed else 0

    return run_with(args, body)
