"""A run's plan read back from its entrypoint (`python3 .../train.py --flag value ...`): how `resume` starts
from a run the console did not launch (a `ray job submit` by hand, another tool's launcher).

The flag → field table is data (`configs/argv_fields.toml`). What it cannot say is found by rebuilding the
argv from the parsed plan and comparing flag by flag: a flag the rebuilt argv does not say the same way is
*unmapped*, listed, and carried in `run.extra_args` (so the next attempt still gets it); a flag that is never
carried (a secret on a command line, the old run's own paths) is listed as dropped with why. Nothing vanishes
silently.
"""

from __future__ import annotations

import math
import posixpath
import shlex
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from backend.argv_tokens import flag_groups
from backend.errors import SpecError
from backend.json_fields import Fields
from backend.plan.fixes import as_text
from backend.plan.spec import RunSpec, list_presets, load_preset_dict
from backend.plan.spec_edit import edit_spec
from backend.plan.submission import train_argv

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CHECKPOINTS = "checkpoints"
MAX_TOKENS = 20000  # an entrypoint is a few hundred tokens; a hostile one stays bounded


@dataclass(frozen=True, slots=True)
class ArgvMap:
    value: dict[str, str]
    switch: dict[str, str]  # flag -> field ("!field": the flag turns it off)
    path: dict[str, str]  # role -> flag
    drop: tuple[str, ...]


@lru_cache(maxsize=1)
def argv_map() -> ArgvMap:
    path = Path(str(resources.files("configs").joinpath("argv_fields.toml")))
    data = Fields(tomllib.loads(path.read_text(encoding="utf-8")))
    return ArgvMap(
        {str(k): str(v) for k, v in data.obj("value").raw.items()},
        {str(k): str(v) for k, v in data.obj("switch").raw.items()},
        {str(k): str(v) for k, v in data.obj("path").raw.items()},
        tuple(str(f) for f in data.obj("drop").items("flags")),
    )


@dataclass(frozen=True, slots=True)
class Flag:
    name: str
    values: tuple[str, ...]

    @property
    def tokens(self) -> list[str]:
        return [self.name, *self.values]


@dataclass(frozen=True, slots=True)
class ParsedArgv:
    """The plan an argv says, and what of the argv it does not hold."""

    spec: RunSpec
    save_dir: str | None  # the old run's --save (where its checkpoints are)
    run_id: str | None  # the old run's id, when its --save is `<output>/<id>/checkpoints`
    unmapped: tuple[str, ...]  # flags carried in run.extra_args as they were
    dropped: tuple[tuple[str, str], ...]  # (flag, why) never carried
    added: tuple[str, ...] = ()  # flags the console's argv says that the old one did not
    problems: tuple[str, ...] = field(default_factory=tuple)  # values no field took (why)

    def to_json(self) -> dict[str, Any]:
        return {
            "save_dir": self.save_dir,
            "run_id": self.run_id,
            "unmapped": list(self.unmapped),
            "dropped": [{"flag": f, "why": w} for f, w in self.dropped],
            "added": list(self.added),
            "problems": list(self.problems),
        }


def split_entrypoint(entrypoint: str) -> tuple[str | None, list[Flag]]:
    """The script and its flags (`--a v`, `--a=v`, `--a v1 v2`, a bare `--a`); tokens before the script (the
    interpreter, `NAME=value` assignments) are not the run's flags."""
    try:
        tokens = shlex.split(entrypoint)[:MAX_TOKENS]
    except ValueError:
        tokens = entrypoint.split()[:MAX_TOKENS]
    at = next((i for i, t in enumerate(tokens) if t.endswith(".py")), None)
    rest = tokens[at + 1 :] if at is not None else tokens
    flags = [Flag(name, tuple(values)) for name, values in flag_groups(rest)]
    return (tokens[at] if at is not None else None), flags


def _last(flags: list[Flag]) -> dict[str, Flag]:
    """argparse's rule: a flag given twice takes its last value."""
    return {f.name: f for f in flags}


def _paths(by_name: dict[str, Flag], base: dict[str, Any], m: ArgvMap) -> dict[str, object]:
    """Fields from the path flags: the checkpoint's dir and name, the dataset under its data dir, the output
    dir above `<id>/checkpoints` (no --save: saving off), a --load to keep."""
    out: dict[str, object] = {}
    hf = _first(by_name, m.path["hf_checkpoint"])
    if hf is not None:
        out["paths.model_dir"], out["model.name"] = posixpath.split(hf.rstrip("/"))
    data = _first(by_name, m.path["prompt_data"])
    if data is not None:
        out.update(_data_paths(data, base))
    save = _first(by_name, m.path["save"])
    if save is not None:
        out["paths.output_dir"] = posixpath.dirname(posixpath.dirname(save.rstrip("/")))
    else:
        out["checkpoint.skip_saving"] = True
    load = _first(by_name, m.path["load"])
    if load is not None:
        out["checkpoint.load"] = load
    return out


def _first(by_name: dict[str, Flag], name: str) -> str | None:
    """The flag's first value; None when the argv does not give it one."""
    flag = by_name.get(name)
    return flag.values[0] if flag and flag.values else None


def _data_paths(value: str, base: dict[str, Any]) -> dict[str, object]:
    """The data dir (and the dataset's name under it, where it is not the preset's) of --prompt-data."""
    rel = Fields.of(base.get("data")).text("prompt_data", "") or "?"
    if value.endswith("/" + rel):
        return {"paths.data_dir": value[: -len(rel) - 1]}
    data_dir, name = posixpath.split(value)
    return {"paths.data_dir": data_dir, "data.prompt_data": name}


def _eval(by_name: dict[str, Flag], out: dict[str, object], m: ArgvMap) -> None:
    ev = by_name.get(m.path["eval_prompt_data"])
    out["eval.enabled"] = ev is not None and len(ev.values) >= 2
    if ev is None or len(ev.values) < 2:
        return
    data_dir = str(out.get("paths.data_dir", ""))
    out["eval.prompt_name"], path = ev.values[0], ev.values[1]
    out["eval.prompt_data"] = (
        path[len(data_dir) + 1 :] if data_dir and path.startswith(data_dir + "/") else path
    )


def _fields(by_name: dict[str, Flag], m: ArgvMap) -> dict[str, object]:
    """Fields from the value flags (their text; the field's type converts it) and the switches."""
    out: dict[str, object] = {}
    for flag, target in m.switch.items():
        out[target.lstrip("!")] = (flag in by_name) != target.startswith("!")
    for flag, target in m.value.items():
        got = by_name.get(flag)
        if got is not None and got.values:
            out[target] = " ".join(got.values)
    return out


def _defaults(raw: dict[str, object], base: dict[str, Any]) -> None:
    """Values that say what the plan's default says: left unset (sequence parallel iff TP > 1, the rollout
    on every GPU), so the plan reads as the preset does."""
    tp = int(str(raw.get("train.tp", Fields.of(base.get("train")).integer("tp", 1))))
    if raw.get("train.sequence_parallel") == (tp > 1):
        raw.pop("train.sequence_parallel")
    cluster = Fields.of(base.get("cluster"))
    nodes = int(str(raw.get("cluster.nodes", cluster.integer("nodes", 1))))
    per_node = int(str(raw.get("cluster.gpus_per_node", cluster.integer("gpus_per_node", 8))))
    if str(raw.get("rollout.num_gpus")) == str(nodes * per_node):
        raw.pop("rollout.num_gpus")


def _same(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    def norm(v: str) -> str:
        try:
            x = float(v)
        except ValueError:
            return v
        return repr(x) if math.isfinite(x) else v

    return len(a) == len(b) and all(norm(x) == norm(y) for x, y in zip(a, b, strict=True))


def _compare(
    flags: list[Flag], rebuilt: list[Flag], m: ArgvMap
) -> tuple[list[Flag], list[tuple[str, str]], list[str]]:
    """(unmapped, dropped, added): the old argv's flags the rebuilt one does not say the same way."""
    mine, theirs = _last(rebuilt), _last(flags)
    ignored = {*m.path.values(), *m.drop}  # the path flags are read into fields; the dropped are named
    dropped = [(f, _DROP_WHY.get(f, "the new attempt sets its own")) for f in theirs if f in m.drop]
    unmapped = [f for f in theirs.values() if f.name not in ignored and not _same_flag(f, mine)]
    added = [name for name in mine if name not in theirs and name not in ignored]
    return unmapped, dropped, added


def _same_flag(flag: Flag, mine: dict[str, Flag]) -> bool:
    other = mine.get(flag.name)
    return other is not None and _same(flag.values, other.values)


_DROP_WHY = {
    "--wandb-key": "a secret on the command line: the console passes WANDB_API_KEY in the runtime env",
    "--use-wandb": "W&B is on when WANDB_API_KEY is set",
    "--wandb-group": "the new attempt's run id",
    "--disable-wandb-random-suffix": "W&B is on when WANDB_API_KEY is set",
    "--ref-load": "the console sets it to --hf-checkpoint",
    "--dump-details": "the new attempt writes its own under the output dir",
}


def preset_for(flags: list[Flag]) -> str | None:
    """The preset whose model the argv's --hf-checkpoint names (its architecture facts fill what no flag
    says); None: the default preset."""
    hf = _last(flags).get("--hf-checkpoint")
    name = posixpath.basename(hf.values[0].rstrip("/")) if hf and hf.values else ""
    for preset in list_presets():
        if name and Fields.of(load_preset_dict(preset).get("model")).text("name") == name:
            return preset
    return None


def _raw_fields(
    script: str | None, by_name: dict[str, Flag], base: dict[str, Any], m: ArgvMap
) -> dict[str, object]:
    """Every field the argv says, as text or value, those that say the preset's default left out."""
    raw = _paths(by_name, base, m)
    _eval(by_name, raw, m)
    raw.update(_fields(by_name, m))
    default_script = Fields.of(base.get("paths")).text("miles_root", "/root/miles").rstrip("/") + "/train.py"
    if script and script != default_script:
        raw["paths.train_script"] = script
    _defaults(raw, base)
    return raw


def _with_extra_args(spec: RunSpec, extra: list[str]) -> RunSpec:
    """`spec` carrying the argv's flags no field says, as its extra args."""
    if not extra:
        return spec
    return spec.model_copy(update={"run": spec.run.model_copy(update={"extra_args": shlex.join(extra)})})


def spec_from_argv(entrypoint: str, preset: str | None = None) -> ParsedArgv:
    """The plan `entrypoint` runs, on top of `preset` (None: the one whose model it names; the fields no
    flag names keep the preset's values)."""
    m = argv_map()
    script, flags = split_entrypoint(entrypoint)
    by_name = _last(flags)
    base = load_preset_dict(preset or preset_for(flags))
    result = edit_spec(base, {k: as_text(v) for k, v in _raw_fields(script, by_name, base, m).items()})
    if result.spec is None:
        raise SpecError(f"the run's argv does not form a plan: {result.error}")
    save_dir = _first(by_name, "--save")
    run_id = _run_id(save_dir)
    _, rebuilt = split_entrypoint("x.py " + shlex.join(train_argv(result.spec, run_id or "resume")))
    unmapped, dropped, added = _compare(flags, rebuilt, m)
    spec = _with_extra_args(result.spec, [tok for f in unmapped for tok in f.tokens])
    problems = tuple(f"{k}: {v}" for k, v in result.field_errors.items())
    return ParsedArgv(
        spec,
        save_dir,
        run_id,
        tuple(shlex.join(f.tokens) for f in unmapped),
        tuple(dropped),
        tuple(added),
        problems,
    )


def _run_id(save_dir: str | None) -> str | None:
    if not save_dir:
        return None
    head, tail = posixpath.split(save_dir.rstrip("/"))
    return posixpath.basename(head) or None if tail == CHECKPOINTS else None
