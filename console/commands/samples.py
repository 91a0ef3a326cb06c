"""`ultra-console samples`: the GRPO groups of one rollout and their samples, from miles'
`dump_details/rollout_data/<N>.pt` (backend.signals.rollout_data, read without torch; groups and advantages
by backend.signals.grpo_groups).

`--job ID` finds the dump directory in the job's entrypoint (`--dump-details DIR`; it must be storage this
machine reads, as the recipe's /root/shared_data is meant to be); `--from-dump DIR` reads a copied one.
Without `--rollout` the newest train rollout is shown; `--group G` lists that group's samples; `--json`
prints one object. Exit status: 0 shown; 3 the rollout cannot be read now (still being written, or it holds
objects that need torch/miles: stderr says which); 1 bad input (no dump directory, no such rollout or group).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.sanitize import one_line, shown_name
from console.commands._cluster import add_job_arg, job_of, run_with, say

if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.settings import Settings
    from backend.signals.grpo_groups import RolloutGroups
    from backend.signals.rollout_data import RolloutFile

UNREADABLE_EXIT = 3
RESPONSE_HEAD = 100  # characters of a response in the text listing of a group

# The command's options, as data: (flags, argparse keywords).
OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (
        ("--rollout",),
        {"metavar": "N", "help": "the rollout: 3, or eval_3 (default: the newest train rollout)"},
    ),
    (("--group",), {"type": int, "metavar": "G", "help": "list the samples of group G (its group_index)"}),
    (
        ("--reward-key",),
        {"metavar": "KEY", "help": "the reward to use when rewards are dicts (--reward-key)"},
    ),
    (("--json",), {"action": "store_true", "help": "print one JSON object"}),
    (
        ("--disable-rewards-normalization",),
        {"action": "store_true", "help": "as the run was launched: advantages are the raw rewards"},
    ),
    (
        ("--disable-grpo-std-normalization",),
        {"action": "store_true", "help": "as the run was launched: advantages not divided by the group std"},
    ),
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("samples", help="the GRPO groups of a rollout and their samples (rollout_data/<N>.pt)")
    src = p.add_mutually_exclusive_group()
    add_job_arg(src)
    src.add_argument("--from-dump", metavar="DIR", help="a miles --dump-details directory (rollout_data/)")
    for flags, kwargs in OPTIONS:
        p.add_argument(*flags, **kwargs)
    p.set_defaults(func=run)


def _dump_of_job(args: argparse.Namespace) -> str:
    from backend.errors import ConsoleError
    from backend.signals.structured import dump_dir_of

    async def body(ctl: RunController, settings: Settings) -> str:
        job = await ctl.attach(job_of(args))
        found = dump_dir_of(job.entrypoint)
        if found is None:
            raise ConsoleError(
                f"job {shown_name(job.id)} was not started with --dump-details: it saved no samples"
            )
        return found

    return run_with(args, body)


def _newest(files: list[RolloutFile]) -> str | None:
    """The newest training rollout, else the newest file (an evaluation); None when there is none."""
    train = [f.name for f in files if not f.evaluation]
    return train[-1] if train else (files[-1].name if files else None)


def run(args: argparse.Namespace) -> int:
    from backend.signals.rollout_data import RolloutShelf, rollout_dir

    dump = args.from_dump or _dump_of_job(args)
    if not rollout_dir(dump).is_dir():
        print(one_line(f"no rollout_data/ in {dump}: miles writes it with --dump-details"), file=sys.stderr)
        return 1
    shelf = RolloutShelf(Path(dump), reward_key=args.reward_key)
    files = shelf.files()
    names = [f.name for f in files]
    name = args.rollout or _newest(files)
    if name is None or name not in names:
        have = ", ".join(names) or "none"
        print(one_line(f"no rollout {name} in {rollout_dir(dump)} (rollouts there: {have})"), file=sys.stderr)
        return 1
    rollout = shelf.open(name)
    if rollout is None:
        say(f"rollout {name} cannot be read now: {shelf.note(name)}", err=True)
        return UNREADABLE_EXIT
    return _show(args, rollout, [f.name for f in files])


def _show(args: argparse.Namespace, rollout: Any, names: list[str]) -> int:
    from backend.signals.grpo_groups import Normalization, grouped, rollout_groups, rollout_json, sample_json

    norm = Normalization(not args.disable_rewards_normalization, not args.disable_grpo_std_normalization)
    groups = rollout_groups(rollout, norm)
    out: dict[str, Any] = {"rollouts": names, "rollout": rollout_json(groups)}
    if args.group is not None:
        members = grouped(rollout).get(args.group)
        if members is None:
            print(f"no group {args.group} in rollout {rollout.name}", file=sys.stderr)
            return 1
        stats = next(g for g in groups.groups if g.group_index == args.group)
        out["group"] = {
            "group": args.group,
            "prompt": rollout.prompts.get(args.group, ""),
            "samples": [sample_json(s, a) for s, a in zip(members, stats.advantages, strict=True)],
        }
    if args.json:
        json.dump(out, sys.stdout, allow_nan=False, separators=(",", ":"))
        sys.stdout.write("\n")
        return 0
    _print_text(groups, out.get("group"))
    return 0


def _print_text(groups: RolloutGroups, group: dict[str, Any] | None) -> None:
    from backend.signals.grpo_groups import GROUP_COLUMNS, group_row, rollout_line

    say(rollout_line(groups))
    if group is None:
        rows = [GROUP_COLUMNS, *(group_row(g) for g in groups.groups)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(GROUP_COLUMNS) - 1)]
        for row in rows:
            say("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1][:80])
        return
    say(f"group {group['group']}: {one_line(group['prompt'])[-200:]}")
    for s in group["samples"]:
        adv = "—" if s["advantage"] is None else f"{s['advantage']:+.3f}"
        reward = "—" if s["reward"] is None else f"{s['reward']:g}"
        say(
            f"  #{s['index']:<6} {s['status']:<9} reward {reward:<4} adv {adv:<7} "
            f"len {s['response_length']:<6} {one_line(s['response'])[-RESPONSE_HEAD:]}"
        )
