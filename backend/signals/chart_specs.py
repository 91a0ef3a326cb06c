"""The charts as data: `configs/charts.toml` read once into frozen, typed models.

Why one file for both the single run's charts and a comparison's: they were two lists that disagreed (the
single run's "time" chart was not the comparison's). Here a chart names its series (key, label, colour, kind,
side) and the one metric a comparison overlays in it, with the thresholds that say when two runs diverged.
The console's chart board draws from these specs; backend.signals.compare reads its thresholds from them.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from backend.errors import ConsoleError
from backend.regular_files import read_config_text
from backend.signals.series import TRAIN_AXIS, axis_for
from backend.toml_input import TOMLDecodeError, parse_toml

Kind = Literal["count", "rate", "duration", "ratio", "value"]
ZERO_BASED: frozenset[str] = frozenset({"count", "rate", "duration"})  # quantities that start at zero
FROZEN = ConfigDict(frozen=True, extra="forbid")


class ChartConfigError(ConsoleError):
    """configs/charts.toml cannot be read (one line)."""


class SeriesSpec(BaseModel):
    """One line of a chart: the metric key, its legend label, its colour, what it is, which y axis."""

    model_config = FROZEN
    key: str = Field(min_length=1)
    label: str = Field(min_length=1)
    color: str = "cyan"
    kind: Kind = "value"
    side: Literal["left", "right"] = "left"

    @property
    def right(self) -> bool:
        return self.side == "right"


class CompareSpec(BaseModel):
    """The metric a comparison overlays in a chart and when two runs count as diverged on it."""

    model_config = FROZEN
    key: str = Field(min_length=1)
    title: str = Field(min_length=1)
    abs: float = Field(default=0.0, ge=0.0)
    rel: float = Field(default=0.0, ge=0.0)
    sustain: int = Field(default=1, ge=1)


class ChartSpec(BaseModel):
    """One chart: its id (`#chart-<id>`), title, y axis labels, series and what a comparison draws in it."""

    model_config = FROZEN
    id: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    title: str = Field(min_length=1)
    y: str = ""
    right: str = ""
    series: tuple[SeriesSpec, ...] = Field(min_length=1)
    compare: CompareSpec | None = None
    compared_only: bool = False

    @model_validator(mode="after")
    def _compare_key_is_a_series(self) -> ChartSpec:
        if self.compare is not None and self.compare.key not in self.keys:
            raise ValueError(f"chart {self.id!r}: compare key {self.compare.key!r} is none of its series")
        if self.compared_only and self.compare is None:
            raise ValueError(f"chart {self.id!r}: compared_only needs a compare table")
        return self

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(s.key for s in self.series)

    @property
    def x_label(self) -> str:
        return axis_word(axis_for(self.series[0].key))

    def zero_based(self, right: bool) -> bool:
        """Whether the axis on that side starts at zero: every series drawn on it is a count, rate or
        duration."""
        kinds = {s.kind for s in self.series if s.right == right}
        return bool(kinds) and kinds <= ZERO_BASED

    def kind_of(self, key: str) -> str:
        return next(s.kind for s in self.series if s.key == key)


class Headline(BaseModel):
    """The keys a comparison's header line per run reads."""

    model_config = FROZEN
    kl: str = "train/ppo_kl"
    reward: str = "rollout/raw_reward"
    throughput: str = "perf/tokens_per_gpu_per_sec"


class ChartsConfig(BaseModel):
    """Every chart, in the order the Run view draws them, and the comparison's header keys."""

    model_config = FROZEN
    headline: Headline = Headline()
    chart: tuple[ChartSpec, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _ids_unique(self) -> ChartsConfig:
        ids = [c.id for c in self.chart]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"chart ids used twice: {', '.join(twice)}")
        return self

    @property
    def run_charts(self) -> tuple[ChartSpec, ...]:
        """The charts of the single-run view."""
        return tuple(c for c in self.chart if not c.compared_only)

    @property
    def compared(self) -> tuple[ChartSpec, ...]:
        """The charts a comparison draws (one overlaid metric each)."""
        return tuple(c for c in self.chart if c.compare is not None)

    def spec(self, chart_id: str) -> ChartSpec:
        return next(c for c in self.chart if c.id == chart_id)


def axis_word(axis: str) -> str:
    """An x axis' label: "step" for the optimizer step, else the axis' own word ("rollout", "eval")."""
    return "step" if axis == TRAIN_AXIS else axis.split("/")[0]


def default_path() -> Path:
    return Path(str(resources.files("configs").joinpath("charts.toml")))


def load_charts(path: str | Path | None = None) -> ChartsConfig:
    """`path` (default: the shipped configs/charts.toml) read and checked; what is wrong is one line."""
    if path is None:
        return _shipped()
    return _read(Path(path))


@cache
def _shipped() -> ChartsConfig:
    return _read(default_path())


def _read(path: Path) -> ChartsConfig:
    try:
        return ChartsConfig.model_validate(parse_toml(read_config_text(path, "chart config")))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ChartConfigError(f"cannot read the chart settings {path}: {where}: {first['msg']}") from None
    except (OSError, UnicodeDecodeError, TOMLDecodeError, ConsoleError) as err:
        raise ChartConfigError(f"cannot read the chart settings {path}: {err}") from None
