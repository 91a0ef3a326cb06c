"""`ultra-console plan`: check a layout and show the exact job, without touching the cluster.

Exit status: 0 no error finding, 2 at least one error finding, 1 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backend.plan.spec import RunSpec

EXIT_FINDINGS = 2


def add_spec_args(parser: argparse.ArgumentParser) -> None:
    """--preset and --set, shared by every command that builds a spec."""
    parser.add_argument("--preset", default=None, metavar="NAME|PATH",
                        help="preset name (file stem in configs/) or path to a TOML file; default: the full model")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a spec value by dotted path, e.g. train.tp=4 (repeatable)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="check a layout against every rule and show the exact submission")
    add_spec_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--deep", action="store_true",
                   help="also run megatron-core / sglang's own checks where they are importable")
    p.set_defaults(func=run)


def plan_payload(spec: RunSpec, deep: bool = False) -> dict[str, Any]:
    """The JSON contract of `plan --json`."""
    from backend.plan import checks as constraints
    from backend.plan.submission import build_submission, secrets_from_env

    findings = constraints.check(spec)
    submission = build_submission(spec, secrets=secrets_from_env(os.environ))
    payload: dict[str, Any] = {
        "ok": not constraints.has_errors(findings),
        "findings": [f.to_json() for f in findings],
        "derived": constraints.derive(spec),
        "submission": submission.redacted_payload() | {"argv": submission.argv, "shell": submission.shell()},
    }
    if deep:
        payload["deep"] = _deep(spec)
        if payload["deep"].get("findings"):
            payload["ok"] = payload["ok"] and not any(
                f["severity"] == "error" for f in payload["deep"]["findings"])
    return payload


def _deep(spec: RunSpec) -> dict[str, Any]:
    try:
        from backend.plan import deep
    except ImportError:
        return {"available": False, "message": "deep validation is not installed in this build", "findings": []}
    return deep.run_deep_checks(spec).to_json()


def _fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, list):
        return "; ".join(_fmt_value(v) for v in value)
    if isinstance(value, dict):
        return " ".join(f"{k}={_fmt_value(v)}" for k, v in value.items())
    return str(value)


def render_text(spec: RunSpec, payload: dict[str, Any]) -> str:
    t, r, c = spec.train, spec.rollout, spec.cluster
    lines = [
        f"preset   {spec.preset}: {spec.model.name}",
        f"cluster  {c.nodes} node(s) x {c.gpus_per_node} GPUs = {c.total_gpus} GPUs",
        f"train    TP{t.tp} PP{t.pp} CP{t.cp} EP{t.ep} ETP{t.etp if t.etp is not None else '(unset)'}"
        f" SP {'on' if spec.sequence_parallel else 'off'}",
        f"rollout  engines of {r.gpus_per_engine} GPUs, ep {r.ep}, dp {r.dp}"
        f"{' (dp-attention)' if r.enable_dp_attention else ''}, mem {r.mem_fraction}",
        f"mode     {spec.run.mode}",
        "",
    ]
    findings = payload["findings"]
    if not findings:
        lines.append("findings none: every rule passes")
    for f in findings:
        lines.append(f"{f['severity'].upper():8} {f['rule']:4} [{', '.join(f['fields'])}] {f['message']}")
        if f["fix"]:
            lines.append(f"{'':14}fix: {f['fix']}")
    deep = payload.get("deep")
    if deep is not None:
        lines.append("")
        if not deep.get("available", True):
            lines.append(f"deep     {deep.get('message')}")
        for f in deep.get("findings", []):
            lines.append(f"DEEP {f['severity'].upper():8} {f['rule']:4} {f['message']}")
        for d in deep.get("disagreements", []):
            lines.append(f"DISAGREE {d}")
    lines += ["", "derived"]
    for key, value in payload["derived"].items():
        lines.append(f"  {key:34} {_fmt_value(value)}")
    sub = payload["submission"]
    lines += ["", f"submission id  {sub['submission_id']}", "command", "  " + sub["shell"]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from backend.plan.spec import build_spec

    spec = build_spec(args.preset, args.overrides)
    payload = plan_payload(spec, deep=args.deep)
    if args.json:
        json.dump(payload, sys.stdout, indent=None, separators=(",", ":"))
        sys.stdout.write("\n")
    else:
        print(render_text(spec, payload))
    return 0 if payload["ok"] else EXIT_FINDINGS
