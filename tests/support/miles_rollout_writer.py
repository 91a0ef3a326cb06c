"""Make rollout fixtures with miles' own writer: `save_debug_rollout_data` and `Sample` at 31f1ca9, run on
real torch (the test extra's torch 2.13), from the miles mirror.

Why: the reader must hold what miles really writes, not what we think it writes. Two files of the stored
snapshot are put in a scratch package (`miles/utils/types.py`, `miles/ray/rollout/debug_data.py`); numpy,
which `types.py` only names in annotations, is a stub module (it is not in this venv). Run:

    .venv/bin/python -m tests.support.miles_rollout_writer tests/data/rollout_data

It writes `miles_4x4/rollout_data/0.pt` (the reference's invented example, §7),
`miles_int_rewards/rollout_data/1.pt` (an all-0, an all-1, a mixed and a short group, a gap in the group ids)
and `miles_eval/rollout_data/eval_3.pt` (an eval round: loss masks, dict rewards, two weight versions).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

MIRROR = Path("/work/.mirror/radixark+miles/repo")
COMMIT = "31f1ca961a94cb860cec3b2dea34ec332bfa8f76"
FILES = ("miles/utils/types.py", "miles/ray/rollout/debug_data.py")
PROMPT = "<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"


def _stage(root: Path) -> None:
    for rel in FILES:
        text = subprocess.run(
            ["git", f"--git-dir={MIRROR}", "show", f"{COMMIT}:{rel}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        out = root / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        for parent in out.relative_to(root).parents:
            if str(parent) != ".":
                (root / parent / "__init__.py").touch()
    import torch  # noqa: F401  (first: torch must find no numpy stub, only the types module does)

    sys.modules.setdefault("numpy", types.ModuleType("numpy")).ndarray = object  # type: ignore[attr-defined]
    sys.path.insert(0, str(root))


def _sample(sample_cls: Any, group: int, index: int, answer: str, reward: int, **kw: Any) -> Any:
    response = kw.pop("response", f"Let me add. </think>\nThe answer is \\boxed{{{answer}}}.")
    length = kw.pop("response_length", 20 + index)
    prompt_tokens = [1000 + i for i in range(12)]
    s = sample_cls(
        group_index=group,
        index=index,
        prompt=PROMPT.format(q=kw.pop("question", f"What is {group}+{group + 3}?")),
        tokens=prompt_tokens + [7 + i for i in range(length)],
        response=response,
        response_length=length,
        label=kw.pop("label", str(2 * group + 3)),
        reward=reward,
        weight_versions=kw.pop("weight_versions", ["1"]),
        rollout_log_probs=[-0.01 * (i + 1) for i in range(length)],
    )
    s.status = sample_cls.Status(kw.pop("status", "completed"))
    s.prefix_cache_info.total_prompt_tokens = len(prompt_tokens)
    return s


def write(out: Path) -> list[Path]:
    with tempfile.TemporaryDirectory() as scratch:
        _stage(Path(scratch))
        from miles.ray.rollout.debug_data import save_debug_rollout_data
        from miles.utils.types import Sample

        written = []
        for name, rollout_id, samples in _cases(Sample):
            template = str(out / name / "rollout_data" / "{rollout_id}.pt")
            args = types.SimpleNamespace(save_debug_rollout_data=template, save_debug_trajectory_data=None)
            save_debug_rollout_data(args, samples, rollout_id=rollout_id, evaluation=False)
            written.append(Path(template.format(rollout_id=rollout_id)))
        # An eval round (`eval_<N>.pt`: miles passes a dict of datasets) of multi-turn samples: a loss mask
        # (0 on tool tokens), a dict reward, and a mixed-version sample.
        template = str(out / "miles_eval" / "rollout_data" / "{rollout_id}.pt")
        args = types.SimpleNamespace(save_debug_rollout_data=template, save_debug_trajectory_data=None)
        evals = [_sample(Sample, 0, i, "4", i % 2, question="What is 2+2?") for i in range(3)]
        for s in evals:
            s.reward = {"acc": s.reward, "format": 0.5}
            s.loss_mask = [1] * (s.response_length - 4) + [0] * 4
        evals[2].weight_versions = ["3", "4"]
        save_debug_rollout_data(args, {"aime": {"samples": evals}}, rollout_id=3, evaluation=True)
        written.append(Path(template.format(rollout_id="eval_3")))
        return written


def _cases(S: Any) -> list[tuple[str, int, list[Any]]]:
    example = [
        _sample(S, 0, 0, "5", 1, question="What is 2+3?", label="5", response_length=61),
        _sample(S, 0, 1, "5", 1, question="What is 2+3?", label="5"),
        _sample(S, 0, 2, "7", 0, question="What is 2+3?", label="5"),
        _sample(S, 0, 3, "5", 1, question="What is 2+3?", label="5"),
        _sample(S, 1, 4, "6", 1, question="What is 1+5?", label="6"),
        _sample(S, 1, 5, "8", 0, question="What is 1+5?", label="6"),
        _sample(
            S,
            1,
            6,
            "",
            0,
            question="What is 1+5?",
            label="6",
            status="truncated",
            response_length=96,
            response="Let me think step by step about",
        ),
        _sample(S, 1, 7, "6", 1, question="What is 1+5?", label="6"),
    ]
    ints = [_sample(S, 8, 32 + i, "0", 0) for i in range(4)]  # all wrong
    ints += [_sample(S, 9, 36 + i, "21", 1) for i in range(4)]  # all right
    ints += [_sample(S, 11, 44 + i, "25", i % 2, weight_versions=["2"]) for i in range(4)]  # after a gap (10)
    ints += [_sample(S, 12, 48 + i, "27", 1) for i in range(2)]  # the last group, cut short
    return [("miles_4x4", 0, example), ("miles_int_rewards", 1, ints)]


if __name__ == "__main__":
    for path in write(Path(sys.argv[1])):
        print(path, path.stat().st_size)
