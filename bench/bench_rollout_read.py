"""Read the worst-case rollout file: 32 groups x 8 samples, every response 8192 tokens (256-token prompts),
with token ids and log-probs, as miles writes it (~38 MB, reference/miles-rollout-data.md §6).

Measured in the same run: the console's reader (backend.signals.rollout_data.read_rollout: restricted
unpickle, keep lengths and sanitised text, drop tokens and log-probs) plus the groups
(backend.signals.grpo_groups.rollout_groups), against a plain `pickle.loads` of the same data.pkl (which
would run code: the baseline, not an option). Budget: <= 1 s for the file.

Usage: .venv/bin/python bench/bench_rollout_read.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import pickle
import random
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.demo.rollout_dump import sample_record, write_rollout  # noqa: E402
from backend.signals.grpo_groups import rollout_groups  # noqa: E402
from backend.signals.rollout_data import read_rollout  # noqa: E402

WORDS = ("the", "so", "we", "get", "x", "=", "3", "then", "check", "answer")


def worst_case(dump: Path) -> Path:
    rng = random.Random(0)
    samples = []
    for g in range(32):
        prompt = "<|im_start|>user\n" + " ".join(rng.choice(WORDS) for _ in range(200)) + "<|im_end|>\n"
        for j in range(8):
            samples.append(
                sample_record(
                    g,
                    8 * g + j,
                    prompt=prompt,
                    tokens=[rng.randrange(150_000) for _ in range(256 + 8192)],
                    response=" ".join(rng.choice(WORDS) for _ in range(8192)),
                    response_length=8192,
                    rollout_log_probs=[-rng.random() for _ in range(8192)],
                    reward=rng.randint(0, 1),
                    status="truncated",
                    weight_versions=["1"],
                )
            )
    return write_rollout(dump, 0, samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = worst_case(Path(tmp))
        size = path.stat().st_size
        ours, plain = [], []
        for _ in range(args.repeat):
            t = time.perf_counter()
            groups = rollout_groups(read_rollout(path, now=time.time() + 3600))
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as zf:
                pickle.loads(zf.read("0/data.pkl"))
            plain.append(time.perf_counter() - t)
    best, base = min(ours), min(plain)
    print(f"file {size / 1e6:.1f} MB, {groups.samples} samples in {len(groups.groups)} groups")
    print(f"console read + groups: best {best:.3f} s, median {statistics.median(ours):.3f} s (budget 1.0 s)")
    print(f"plain pickle.loads: best {base:.3f} s; ratio console / plain {best / base:.2f}")


if __name__ == "__main__":
    main()
