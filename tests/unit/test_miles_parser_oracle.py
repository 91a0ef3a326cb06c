"""miles' own parse_args (its Megatron-LM fork and SGLang included) on the console's plans: same verdict,
same final values (issue 27).

The plans: both presets in each run mode, the issue's cases and seeded random layouts. miles' parser runs
in the oracle venv on miles and Megatron-LM exported at the commits configs/miles/args.toml records
(tests/deep/miles_parse.py). Skipped, with the reason, without that venv or the two git mirrors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from backend.plan import miles_flags
from backend.plan.checks import check
from backend.plan.derived import layout_figures
from backend.plan.spec import RunSpec, build_spec
from backend.plan.submission import build_submission
from backend.severity import Severity

REPO = Path(__file__).resolve().parents[2]
DEEP_PYTHON = REPO / ".venv-deep" / "bin" / "python"
MARKER = REPO / ".venv-deep" / ".ultra-console-deep-ok"
MIRRORS = Path(os.environ.get("MIRRORS", "/work/.mirror"))
MILES_GIT, MEGATRON_GIT = MIRRORS / "radixark+miles" / "repo", MIRRORS / "radixark+Megatron-LM" / "repo"
FULL, SLICE = "nemotron-3-ultra-550b-a55b", "nemotron-3-ultra-550b-a55b-4layer"
N_RANDOM = 60
# rules whose error miles' parse_args itself raises (Megatron's validate_args, miles' and SGLang's checks);
# the others fail later: C8 in the micro-batch calculator at actor init (miles megatron_utils/initialize.py:
# 105-112), the grid and model rules at actor init, the G rules at engine start
PARSE_TIME = {"A1", "C2", "C3", "C4", "C11", "H2", "H6", "H7", "H8", "H10", "H13"}

CASES: list[tuple[str | None, list[str]]] = [
    (FULL, []),
    (SLICE, []),
    (SLICE, ["run.mode=debug_minimal"]),
    (FULL, ["train.micro_batch_size=2", "batch.global_batch_size=132"]),
    (FULL, ["train.moe_token_dispatcher=flex"]),
    (SLICE, ["train.moe_shared_expert_overlap=true"]),
    (SLICE, ["cluster.gpus_per_node=4", "cluster.nodes=2", "rollout.gpus_per_engine=8", "rollout.ep=8"]),
    (SLICE, ["optimizer.name=sgd"]),
    (SLICE, ["run.extra_args=--rollout-batchsize 8"]),
    (SLICE, ["run.extra_args=--kl-loss-type k4"]),
    (SLICE, ["run.extra_args=--use-kl-loss --kl-loss-type k3"]),
    (SLICE, ["batch.num_steps_per_rollout=3", "batch.global_batch_size=85"]),
    (SLICE, ["batch.over_sampling_batch_size=8"]),
    (SLICE, ["train.use_dynamic_batch_size=false", "train.micro_batch_size=2"]),
]
FORCED = [  # a value the spec now refuses, forced past it: miles' parser must refuse it too
    ("rollout", "sglang_attention_backend", "flash_attn"),
    ("train", "attention_backend", "flash_attn"),
    ("grpo", "advantage_estimator", "dapo"),
    ("grpo", "kl_loss_type", "kl"),
    ("optimizer", "lr_decay_style", "cos"),
]


def _random_layouts() -> list[tuple[str | None, list[str]]]:
    sys.path.insert(0, str(REPO / "bench"))
    from deep_layouts import layouts

    return list(layouts()[:N_RANDOM])


def _forced(section: str, name: str, value: str, sets: list[str]) -> RunSpec:
    spec = build_spec(SLICE, sets)
    part = getattr(spec, section).model_copy(update={name: value})  # model_copy does not validate
    return spec.model_copy(update={section: part})


def _plans(models: Path) -> list[tuple[str, RunSpec]]:
    """Every plan with its checkpoint directory present (miles checks --ref-load exists, as preflight P4)."""
    for preset in (FULL, SLICE):
        (models / build_spec(preset).model.name).mkdir(parents=True, exist_ok=True)
    at = [f"paths.model_dir={models}"]
    out = [(f"{p or FULL} {' '.join(s)}", build_spec(p, [*s, *at])) for p, s in [*CASES, *_random_layouts()]]
    out += [(f"forced {s}.{n}={v}", _forced(s, n, v, at)) for s, n, v in FORCED]
    return out


def _argv(spec: RunSpec) -> list[str]:
    return build_submission(spec, run_id="000000-000000-000", nvlink=False, with_shim=False).argv[2:]


def _miles_verdicts(plans: list[tuple[str, RunSpec]], tmp_path: Path) -> dict[str, dict[str, Any]]:
    source = miles_flags.recorded_source()
    job = {
        "miles_git": str(MILES_GIT),
        "miles_commit": source["miles"].rsplit("@", 1)[1],
        "megatron_git": str(MEGATRON_GIT),
        "megatron_commit": source["megatron"].rsplit("@", 1)[1],
        "plans": [{"name": name, "argv": _argv(spec)} for name, spec in plans],
    }
    (tmp_path / "in.json").write_text(json.dumps(job))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [
            str(DEEP_PYTHON),
            "tests/deep/miles_parse.py",
            str(tmp_path / "in.json"),
            str(tmp_path / "out.json"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return {v["name"]: v for v in json.loads((tmp_path / "out.json").read_text())}


def _expected_values(spec: RunSpec) -> dict[str, Any]:
    """What the plan shows miles will use."""
    t, b = spec.train, spec.batch
    samples = b.rollout_batch_size * b.n_samples_per_prompt
    return {
        "micro_batch_size": 1 if t.use_dynamic_batch_size else t.micro_batch_size,
        "global_batch_size": samples // b.num_steps_per_rollout
        if b.num_steps_per_rollout
        else b.global_batch_size,
        "moe_token_dispatcher_type": "alltoall"
        if t.moe_token_dispatcher == "allgather"
        else t.moe_token_dispatcher,
        "moe_shared_expert_overlap": t.moe_shared_expert_overlap,
        "num_gpus_per_node": spec.cluster.gpus_per_node,
        "use_distributed_optimizer": spec.optimizer.name == "adam",
        "sequence_parallel": layout_figures(spec).training.sequence_parallel,
        "attention_backend": t.attention_backend,
        "kl_loss_type": spec.grpo.kl_loss_type,
        "advantage_estimator": spec.grpo.advantage_estimator,
        "lr_decay_style": spec.optimizer.lr_decay_style,
    }


@pytest.mark.deep
def test_miles_parser_agrees_with_the_plan(tmp_path: Path) -> None:
    if not (DEEP_PYTHON.exists() and MARKER.exists()):
        pytest.skip("oracle venv .venv-deep is absent: run tests/deep/build_env.sh .venv-deep")
    if not (MILES_GIT.is_dir() and MEGATRON_GIT.is_dir()):
        pytest.skip(f"no miles / Megatron-LM git mirrors under {MIRRORS} (set MIRRORS)")
    plans = _plans(tmp_path / "models")
    verdicts = _miles_verdicts(plans, tmp_path)
    missed, refused_wrongly, differ = [], [], []
    both_ok = 0
    for name, spec in plans:
        miles = verdicts[name]
        errors = {f.rule for f in check(spec) if f.severity == Severity.ERROR}
        if not miles["ok"] and not errors and not name.startswith("forced"):
            missed.append(f"{name}: miles refuses ({miles['error']}), the plan accepts")
        if miles["ok"] and errors & PARSE_TIME:
            refused_wrongly.append(
                f"{name}: the plan's {sorted(errors & PARSE_TIME)} but miles' parser accepts"
            )
        if name.startswith("forced"):
            assert not miles["ok"], f"{name}: miles accepts what the spec refuses"
        if miles["ok"]:
            both_ok += not errors
            # a flag run.extra_args repeats is the H14 warning's: miles uses the extra value, as it says
            extra = {miles_flags.dest_of(t) for t in spec.run.extra_args.split() if t.startswith("--")}
            want = {k: v for k, v in _expected_values(spec).items() if k not in extra}
            got = {k: miles["values"][k] for k in want}
            if got != want:
                differ.append(f"{name}: miles {got} vs plan {want}")
    print(f"{len(plans)} plans, {sum(v['ok'] for v in verdicts.values())} pass miles' parser, {both_ok} both")
    assert missed == [], "\n".join(missed)
    assert refused_wrongly == [], "\n".join(refused_wrongly)
    assert differ == [], "\n".join(differ)
    assert both_ok >= 8  # the comparison of final values ran on real accepted plans
