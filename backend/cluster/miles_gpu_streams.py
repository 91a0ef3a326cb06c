"""miles' own GPU samples: the `gpu_util` stream its dashboard writes under `{dump_details}/dashboard/`.

With `--use-miles-dashboard` one sampler per node reads NVML every second and the collector appends the
samples to hour partitions `gpu_util/YYYYMMDD_HH.jsonl` (UTC), one JSON object per line:
`{"ts": 1755771600.0, "node": "10.0.0.1", "gpu": 0, "util": 95, "mem_mb": 61440, "power_w": 612}`
(a legacy flat `gpu_util.jsonl` is read too). Only complete (newline-terminated) lines count: a line being
written waits for its newline. A malformed line is skipped and counted, never fatal. Python's JSON reader
takes miles' `NaN` token as it is.

Whoever launched the run, the dump directory is on its entrypoint (`--dump-details DIR`); when it holds
these streams the GPU pane reads them first and Ray's reporter second (backend.cluster.telemetry).
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from pathlib import Path

from backend.cluster.dashboard import JobInfo

STREAM = "gpu_util"
PARTITIONS_READ = 2  # the current hour and the one before: a sample near the hour's turn is in either


@dataclass(frozen=True)
class MilesGpuSample:
    """One NVML sample of one GPU, taken by miles' sampler at `ts` (epoch seconds, the node's clock)."""

    ts: float
    node: str  # the node's IP, as miles names it
    gpu: int
    util: float | None
    mem_mb: int


def dump_details_dir(job: JobInfo | None) -> Path | None:
    """The absolute `--dump-details` directory on the job's entrypoint, or None."""
    if job is None or not job.entrypoint:
        return None
    try:
        tokens = shlex.split(job.entrypoint)
    except ValueError:
        tokens = job.entrypoint.split()
    for i, tok in enumerate(tokens):
        value = (
            tok.split("=", 1)[1]
            if tok.startswith("--dump-details=")
            else (tokens[i + 1] if tok == "--dump-details" and i + 1 < len(tokens) else None)
        )
        if value and value.startswith("/"):
            return Path(value)
    return None


def parse_sample(line: str) -> MilesGpuSample | None:
    """One stream line as a sample, or None when it is not one (malformed, or fields missing)."""
    try:
        raw = json.loads(line)
        util = raw.get("util")
        util_pct = (
            float(util) if isinstance(util, (int, float)) and math.isfinite(util) and util >= 0 else None
        )
        return MilesGpuSample(
            float(raw["ts"]), str(raw["node"]), int(raw["gpu"]), util_pct, int(raw.get("mem_mb") or 0)
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


class MilesGpuStreams:
    """Tails the `gpu_util` stream of one dump directory by byte offset; keeps the newest sample per GPU."""

    def __init__(self, dump_dir: Path) -> None:
        self.root = dump_dir / "dashboard"
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, str] = {}
        self.latest: dict[tuple[str, int], MilesGpuSample] = {}
        self.malformed = 0
        self.bytes_read = 0

    @property
    def present(self) -> bool:
        return (self.root / STREAM).is_dir() or (self.root / f"{STREAM}.jsonl").is_file()

    def _files(self) -> list[Path]:
        flat = self.root / f"{STREAM}.jsonl"
        hours = sorted((self.root / STREAM).glob("*.jsonl")) if (self.root / STREAM).is_dir() else []
        return ([flat] if flat.is_file() else []) + hours[-PARTITIONS_READ:]

    def poll(self) -> dict[str, dict[int, MilesGpuSample]]:
        """Read what was appended since the last poll; the newest sample per GPU, by node IP."""
        for path in self._files():
            offset = self._offsets.get(path, 0)
            try:
                with path.open("rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read()
            except OSError:
                continue
            self._offsets[path] = offset + len(chunk)
            self.bytes_read += len(chunk)
            text = self._partial.pop(path, "") + chunk.decode("utf-8", "replace")
            *complete, rest = text.split("\n")
            if rest:
                self._partial[path] = rest
            for line in complete:
                if not line.strip():
                    continue
                sample = parse_sample(line)
                if sample is None:
                    self.malformed += 1
                    continue
                key = (sample.node, sample.gpu)
                known = self.latest.get(key)
                if known is None or sample.ts >= known.ts:
                    self.latest[key] = sample
        by_node: dict[str, dict[int, MilesGpuSample]] = {}
        for (node, gpu), sample in self.latest.items():
            by_node.setdefault(node, {})[gpu] = sample
        return by_node
