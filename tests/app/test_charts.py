"""Line charts: real axes from plotext, our own round ticks with short SI labels (34.6k, 1.2M), a zero
baseline where the metric is a count, a rate or a duration, a title and a legend at every width, a
placeholder without data."""

from __future__ import annotations

import re

import pytest

from console.widgets.chart_axes import ticks
from console.widgets.charts import ChartFrame, ChartSeries, build_chart

ANSI = re.compile(r"\x1b\[[0-9;]*m")
THROUGHPUT = ChartFrame("throughput", "rollout", "tok/s", "per GPU", zero=(True, True))


def _plain(lines: list[str]) -> list[str]:
    return [ANSI.sub("", line) for line in lines]


def _throughput(width: int, height: int, frame: ChartFrame = THROUGHPUT) -> list[str]:
    pts = tuple((float(i), 2_400_000.0 + 10_000 * i) for i in range(20))
    per_gpu = tuple((float(i), 17.0 + i % 3) for i in range(20))
    series = [ChartSeries("cluster tok/s", pts), ChartSeries("per GPU", per_gpu, "orange", right=True)]
    return _plain(build_chart(frame, series, width, height))


def test_chart_has_axes_legend_and_si_ticks_from_zero():
    lines = _throughput(60, 16)
    text = "\n".join(lines)
    assert len(lines) == 16 and all(len(line) <= 60 for line in lines)
    assert lines[0].strip() == "throughput" and "━ cluster tok/s" in lines[1] and "━ per GPU ▸" in lines[1]
    assert "rollout" in lines[-1] and "tok/s" in lines[-1]
    assert "┤" in text and "├" in text and "└" in text  # left and right y axes, x axis
    left = re.findall(r"^\s*(\S+)┤", text, re.M)
    assert left[-1] == "0" and "1.0M" in left and "2.0M" in left  # a rate starts at zero
    assert not re.search(r"\d{4,}|e\+", text)  # never 2400000 nor 2.4e+06
    x_ticks = lines[-2].split()
    assert x_ticks[:2] == ["0", "5"]  # whole rollouts, not 0.0 2.8 5.5


def test_a_value_axis_keeps_its_own_range():
    frame = ChartFrame("KL", "step")
    kl = tuple((float(i), 0.0011 + 0.0001 * (i % 3)) for i in range(12))
    text = "\n".join(_plain(build_chart(frame, [ChartSeries("ppo_kl", kl)], 50, 14)))
    left = re.findall(r"^\s*(\S+)┤", text, re.M)
    assert "0" not in left and all(label.endswith("m") for label in left), left  # 1.1m … 1.3m


@pytest.mark.parametrize("width", [16, 20, 26, 40, 64, 100])
def test_title_and_legend_at_every_width(width):
    lines = _throughput(width, 11, ChartFrame("rollout vs train time (s)", "rollout", zero=(True, True)))
    assert lines[0].strip().startswith("rollout vs"[: width - 1])  # the title is cut, never dropped
    legend = [line for line in lines[1:3] if "━" in line]
    assert sum(line.count("━") for line in legend) == 2  # both named (on two rows, cut, where needed)
    assert all(len(line) <= width for line in lines)


def test_ticks_are_round_and_labels_short():
    assert ticks([12.1, 12.3], 4, zero=True).labels == ("0", "5", "10")
    assert ticks([34400, 34680], 4).labels == ("34.4k", "34.5k", "34.6k")
    assert ticks([0, 11], 4, integer=True).labels == ("0", "5", "10")
    assert ticks([0.0, 0.0], 3, zero=True).limits == (0.0, 1.0)  # flat at zero: a band above it
    assert ticks([1.1e6, 1.3e6], 3).labels == ("1.1M", "1.2M", "1.3M")


def test_chart_without_data_says_so():
    lines = build_chart(ChartFrame("KL / reward"), [ChartSeries("ppo_kl", ())], 40, 8)
    assert any("waiting for metrics" in line for line in lines) and len(lines) <= 8


async def test_a_chart_added_in_the_toml_is_drawn(tmp_path):
    """Adding a chart is one [[chart]] table: the board mounts it and draws its series, its axis from zero
    where its kind is a rate (here a copy of the shipped file with one chart more)."""
    from run_fixtures import metrics_view
    from textual.app import App, ComposeResult

    from backend.signals.chart_specs import default_path, load_charts
    from console.widgets.chart_board import ChartBoard
    from console.widgets.charts import LineChart

    extra = "\n[[chart]]\nid = 'gen'\ntitle = 'generation'\nseries = [{ key = 'perf/tokens_per_gpu_per_sec', "
    extra += "label = 'tok/s/GPU', kind = 'rate' }]\n"
    path = tmp_path / "charts.toml"
    path.write_text(default_path().read_text() + extra)

    class BoardApp(App[None]):
        def compose(self) -> ComposeResult:
            yield ChartBoard(load_charts(path))

    app = BoardApp()
    async with app.run_test(size=(160, 30)) as pilot:
        board = app.query_one(ChartBoard)
        board.draw_run(metrics_view(), "waiting")
        await pilot.pause()
        assert [c.id for c in board.query(LineChart)] == [
            f"chart-{i}" for i in ("throughput", "time", "kl", "gen")
        ]
        gen = board.chart("gen")
        assert gen.frame.zero == (True, False) and gen.series[0].points
        drawn = [gen.render_line(y).text for y in range(gen.size.height)]
        assert drawn[0].strip() == "generation" and "tok/s/GPU" in drawn[1]
        assert any(re.match(r"^\s*0┤", line) for line in drawn)  # the rate's axis from zero
