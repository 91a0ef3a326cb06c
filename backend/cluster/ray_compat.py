"""Which dashboard features a Ray version lacks, from the table in configs/ray_compat.toml.

Why data: the versions come from reading Ray's changes and miles' images, and change with both; the console
names the missing feature and what it costs instead of failing on the first request Ray refuses."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from backend.toml_input import parse_toml

TABLE = Path(__file__).resolve().parents[2] / "configs" / "ray_compat.toml"


@dataclass(frozen=True)
class RayFeature:
    name: str
    min: tuple[int, ...]
    uses: str
    lost: str

    def text(self) -> str:
        """One line for an operator: the feature, the Ray it needs, what is lost without it."""
        return f"{self.uses} needs Ray >= {'.'.join(map(str, self.min))}: without it, {self.lost}"


def parse_version(text: str) -> tuple[int, ...]:
    """'2.53.0' -> (2, 53, 0); a suffix such as 'rc1' or '.dev0' is ignored; no digits -> ()."""
    return tuple(int(p) for p in re.findall(r"\d+", text.split("rc")[0].split(".dev")[0])[:3])


def features(path: Path = TABLE) -> list[RayFeature]:
    raw = parse_toml(path.read_text(encoding="utf-8"))
    return [RayFeature(f["name"], parse_version(f["min"]), f["uses"], f["lost"]) for f in raw["feature"]]


def missing(version: str, table: list[RayFeature] | None = None) -> list[RayFeature]:
    """The features `version` is too old for (none when the version cannot be read: nothing is claimed)."""
    have = parse_version(version)
    if not have:
        return []
    return [f for f in (features() if table is None else table) if have < f.min]
