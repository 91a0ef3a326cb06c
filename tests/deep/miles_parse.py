"""Run miles' own `parse_args` (train.py's: miles + its Megatron-LM fork + SGLang, all validation) on argvs.

Run in the oracle venv by tests/unit/test_miles_parser_oracle.py:

    .venv-deep/bin/python tests/deep/miles_parse.py IN.json OUT.json

IN.json: {"miles_git", "miles_commit", "megatron_git", "megatron_commit", "plans": [{"name", "argv"}]}.
OUT.json: one verdict per plan: {"name", "ok", "error", "values"} with the values miles really uses.

What is not real here, and why: the modules only a running trainer imports (scripts/miles_args.py's
stand-ins), torch.cuda's answers (an H200's, backend.plan.deep.patches.hopper_gpu) and the HF checkpoint's
config (the console's argv is made from the same facts; H11 is the shim preflight's), which would need the
550B model's files. Everything parse_args checks or changes runs as in miles.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path

from backend.plan.deep.patches import hopper_gpu

REPO = Path(__file__).resolve().parents[2]
VALUES = (
    "micro_batch_size",
    "global_batch_size",
    "moe_token_dispatcher_type",
    "moe_shared_expert_overlap",
    "num_gpus_per_node",
    "rollout_num_gpus",
    "rollout_num_gpus_per_engine",
    "actor_num_nodes",
    "actor_num_gpus_per_node",
    "use_distributed_optimizer",
    "sequence_parallel",
    "expert_tensor_parallel_size",
    "attention_backend",
    "sglang_attention_backend",
    "kl_loss_type",
    "advantage_estimator",
    "lr_decay_style",
)


def _generator():
    spec = importlib.util.spec_from_file_location("miles_args_script", REPO / "scripts" / "miles_args.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plain(value):
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return getattr(value, "name", str(value))


def _one(miles_arguments, argv: list[str]) -> dict:
    sys.argv = ["train.py", *argv]
    err = io.StringIO()
    try:
        with hopper_gpu({"CUDA_DEVICE_MAX_CONNECTIONS": "1"}), contextlib.redirect_stderr(err):
            args = miles_arguments.parse_args()
    except SystemExit as exc:  # argparse: unknown flag, bad choice, bad type
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        return {"ok": False, "error": lines[-1] if lines else f"exit {exc.code}", "values": {}}
    except Exception as exc:  # an assertion of miles', Megatron's or SGLang's validation
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400], "values": {}}
    return {"ok": True, "error": "", "values": {k: _plain(getattr(args, k, None)) for k in VALUES}}


def _cache_help_texts() -> None:
    """Megatron reads each config dataclass's source for its help texts on every parse (the slowest part
    of building its parser); the texts never change between parses, so read each class once."""
    from megatron.training.argument_utils import ArgumentGroupFactory

    original, seen = ArgumentGroupFactory._get_field_docstrings, {}

    def cached(self, cls):
        if cls not in seen:
            seen[cls] = original(self, cls)
        return seen[cls]

    ArgumentGroupFactory._get_field_docstrings = cached


def main() -> int:
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    source, target = Path(sys.argv[1]), Path(sys.argv[2])  # parse_args reads and sets sys.argv below
    job = json.loads(source.read_text())
    gen = _generator()
    with tempfile.TemporaryDirectory() as tmp:
        miles, megatron = Path(tmp, "miles"), Path(tmp, "megatron")
        gen.export(job["miles_git"], job["miles_commit"], miles)
        gen.export(job["megatron_git"], job["megatron_commit"], megatron)
        gen.import_trees(miles, megatron)  # stand-ins installed, both trees first on sys.path
        _cache_help_texts()
        from miles.utils import arguments as miles_arguments

        # the checkpoint's config.json: not here (see the module doc); is_dsa reads it too
        miles_arguments.load_hf_config = lambda *a, **k: types.SimpleNamespace(model_type="nemotron_h")
        miles_arguments.is_dsa = lambda *a, **k: False
        out = []
        for plan in job["plans"]:
            start = time.perf_counter()
            out.append({"name": plan["name"], **_one(miles_arguments, plan["argv"])})
            out[-1]["seconds"] = round(time.perf_counter() - start, 2)
    target.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
