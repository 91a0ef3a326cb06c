"""Line charts: real axes from plotext, short tick labels via units, a placeholder without data."""

from __future__ import annotations

import re

from console.widgets.charts import ChartSeries, build_chart

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _plain(lines: list[str]) -> list[str]:
    return [ANSI.sub("", line) for line in lines]


def test_chart_has_axes_legend_and_scaled_ticks():
    pts = tuple((float(i), 2_400_000.0 + 10_000 * i) for i in range(20))
    per_gpu = tuple((float(i), 17.0 + i % 3) for i in range(20))
    lines = _plain(
        build_chart(
            "throughput",
            [ChartSeries("cluster tok/s", pts), ChartSeries("per GPU", per_gpu, right=True)],
            60,
            14,
            x_label="rollout",
            y_label="tok/s",
            right_label="per GPU",
        )
    )
    text = "\n".join(lines)
    assert len(lines) == 14 and all(len(line) <= 60 for line in lines)
    assert "cluster tok/s" in text and "per GPU" in text and "rollout" in text
    assert "tok/s (M)" in text  # 2.4M shown as 2.4 with the unit on the axis label
    assert "┤" in text and "├" in text and "└" in text  # left and right y axes, x axis
    ticks = [float(t) for t in re.findall(r"(\d+\.\d+)┤", text)]
    assert ticks and 2.3 < min(ticks) and max(ticks) < 2.7


def test_chart_without_data_says_so():
    lines = build_chart("KL / reward", [ChartSeries("ppo_kl", ())], 40, 8)
    assert any("waiting for metrics" in line for line in lines) and len(lines) <= 8
