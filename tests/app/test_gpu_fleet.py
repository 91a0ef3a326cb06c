"""The GPU fleet widget: 16 x 8 fits 80 columns, 1024 GPUs compact, dead / no-telemetry marked,
and an unchanged snapshot repaints nothing."""

from __future__ import annotations

from collections.abc import Iterable

from counted_nodes import COUNTED, counted_nodes_summary
from rich.segment import Segment
from run_fixtures import snapshot
from textual.app import App, ComposeResult

from backend.cluster.telemetry import parse_nodes_summary
from console.widgets.gpu_fleet import (
    FULL,
    GLYPH,
    MEDIUM,
    NODE,
    GpuFleet,
    build_lines,
    fleet_header,
    fleet_rows,
)


def line_text(segments: Iterable[Segment]) -> str:
    return "".join(s.text for s in segments)


def _lines(snap, width: int, height: int):
    mode, lines = build_lines(fleet_rows(snap), width, height, fleet_header(snap))
    return mode, [line_text(segs) for segs in lines]


def test_16x8_fits_80_columns_one_row_per_node():
    mode, lines = _lines(snapshot(16, 8), 80, 20)
    assert mode is FULL
    assert len(lines) == 17  # summary + one row per node
    assert all(len(line) <= 80 for line in lines), max(map(len, lines))
    row = lines[1]
    assert row.startswith("node-00") and row.count("%") == 8  # a cell per GPU with its utilisation
    assert "128 GPUs 15/16 nodes up" in lines[0]


def test_dead_node_and_no_telemetry_are_distinct_from_idle():
    snap = snapshot(16, 8, dead=(5,), no_telemetry=(9,))
    _, lines = _lines(snap, 80, 20)
    assert lines[6].startswith("✗node-05") and "dead: health check failed" in lines[6]
    assert "no telemetry" in lines[10] and "%" not in lines[10]
    assert "0%" in lines[1]  # node-00 GPU 0 is idle: drawn as 0%, not as "no telemetry"
    _, compact = _lines(snap, 80, 10)
    assert "×" * 8 in "".join(compact) and "?" * 8 in "".join(compact)


def test_1024_gpus_compact_in_80_columns():
    snap = snapshot(128, 8, dead=(3,), no_telemetry=(70,))
    mode, lines = _lines(snap, 80, 24)
    assert mode is GLYPH
    assert all(len(line) <= 80 for line in lines)
    assert len(lines) <= 17  # summary + 16 rows of 8 nodes
    assert "1024 GPUs 127/128 nodes up" in lines[0]
    body = "".join(lines[1:])
    assert body.count("×") == 8 and body.count("?") >= 8


def test_medium_mode_when_full_rows_do_not_fit():
    mode, lines = _lines(snapshot(16, 8), 80, 10)
    assert mode is MEDIUM and len(lines) <= 10
    assert all(len(line) <= 80 for line in lines)


def test_wide_terminal_packs_more_nodes_per_row():
    narrow_mode, narrow = _lines(snapshot(128, 8), 80, 20)
    wide_mode, wide = _lines(snapshot(128, 8), 200, 20)
    assert narrow_mode is wide_mode is GLYPH
    assert len(wide) == 8 and len(narrow) == 17  # 21 nodes per row at 200 columns, 8 at 80


class _FleetApp(App[None]):
    def compose(self) -> ComposeResult:
        yield GpuFleet()


async def test_widget_repaints_only_on_change():
    app = _FleetApp()
    async with app.run_test(size=(80, 20)) as pilot:
        fleet = app.query_one(GpuFleet)
        assert fleet.update_snapshot(snapshot(16, 8)) is True
        await pilot.pause()
        first = [fleet.render_line(y) for y in range(17)]
        assert fleet.update_snapshot(snapshot(16, 8)) is False  # same values: nothing to send
        assert fleet.update_snapshot(snapshot(16, 8, phase=1)) is True
        await pilot.pause()
        assert [fleet.render_line(y) for y in range(17)] != first
        assert "node-00" in fleet.render_line(1).text


async def test_the_pane_lists_nodes_in_counting_order():
    """node-2 before node-10, as the dashboard's summary comes (Ray lists them in its own order)."""
    app = _FleetApp()
    async with app.run_test(size=(100, 20)) as pilot:
        fleet = app.query_one(GpuFleet)
        fleet.update_snapshot(parse_nodes_summary(counted_nodes_summary(), taken_at=1796013861.0))
        await pilot.pause()
        drawn = [fleet.render_line(y).text.split()[0] for y in range(1, len(COUNTED) + 1)]
        assert drawn == COUNTED


def test_1024_gpus_in_a_short_pane_aggregate_to_a_char_per_node():
    mode, lines = _lines(snapshot(128, 8, dead=(3,), no_telemetry=(70,)), 80, 10)
    assert mode is NODE
    assert len(lines) <= 3 and all(len(line) <= 80 for line in lines)
    cells = "".join(line[4:].replace(" ", "") for line in lines[1:])
    assert len(cells) == 128  # every node is on screen
    assert cells[3] == "×" and cells[70] == "?"


def test_a_stale_node_is_drawn_stale_not_as_its_last_values():
    snap = snapshot(4, 8, dead=(), no_telemetry=())
    nodes = [
        n.model_copy(update={"telemetry_age_s": 14.0 if i == 2 else 2.0}) for i, n in enumerate(snap.nodes)
    ]
    snap = snap.model_copy(update={"nodes": nodes})
    _, lines = _lines(snap, 80, 20)
    assert "stale: last reading 14s ago" in lines[3] and "%" not in lines[3]
    assert lines[1].count("%") == 8  # the fresh ones keep their values
    assert "1 stale" in lines[0] and "Ray reporter, oldest 14s" in lines[0]
    # readings age as time passes: 9 s later every node is past two reporter periods
    later = [
        line_text(s)
        for s in build_lines(
            fleet_rows(snap, snap.taken_at + 9), 80, 20, fleet_header(snap, snap.taken_at + 9)
        )[1]
    ]
    assert "4 stale" in later[0] and "oldest 23s" in later[0]
    assert all("stale: last reading" in row for row in later[1:])
    _, compact = _lines(snap, 80, 4)  # one character per node: a stale node is "~"
    assert "~" in "".join(compact[1:])


def test_the_probe_names_the_processes_holding_gpus_and_a_node_without_nvml():
    """Where the console's probe reads a node, the pane lists which PIDs hold its GPUs (biggest first, named
    by the run's role for them), in the room left below the
    rows; a node where the probe found no NVML says so."""
    from backend.cluster.gpu_probe import parse_reading
    from backend.cluster.telemetry import with_probe_readings

    snap = snapshot(4, 8, dead=(), no_telemetry=())
    head, other = snap.nodes[0], snap.nodes[1]
    now = snap.taken_at
    readings = {
        head.node_id: parse_reading(
            {
                "k": "s",
                "n": head.node_id,
                "t": now,
                "g": [
                    [0, 97, 61440, 143771, 612, 45, [[52001, 60825]]],
                    [1, 90, 41440, 143771, 600, 44, [[52002, 40960]]],
                ],
            }
        ),
        other.node_id: parse_reading(
            {"k": "s", "n": other.node_id, "t": now, "nvml": "no NVML (or AMD SMI) answers"}
        ),
    }
    assert all(readings.values())
    merged = with_probe_readings(snap, {k: r for k, r in readings.items() if r}, now).model_copy(
        update={"roles": {f"{head.node_id}:52001": "MegatronTrainRayActor"}}
    )
    _, lines = build_lines(fleet_rows(merged), 80, 10, fleet_header(merged))
    text = [line_text(segs) for segs in lines]
    assert "GPU probe" in text[0] and "Ray reporter" in text[0]
    assert "no NVML" in text[2] and "%" not in text[2]
    assert text[-1] == "GPU holders (probe): node-00 g0 pid 52001 MegatronTrainRayActor 59G +1 more"
    _, wide = build_lines(fleet_rows(merged), 120, 10, fleet_header(merged))
    assert line_text(wide[-1]).endswith(
        "MegatronTrainRayActor 59G, node-00 g1 pid 52002 40G"
    )  # biggest first
    longer = merged.model_copy(  # the name miles' train actor has in Ray with concurrency groups
        update={"roles": {f"{head.node_id}:52001": "MegatronTrainRayActorWithConcurrencyGroups"}}
    )
    _, narrow = build_lines(fleet_rows(longer), 80, 10, fleet_header(longer))  # the first cut short, not gone
    assert line_text(narrow[-1]) == (
        "GPU holders (probe): node-00 g0 pid 52001 MegatronTrainRayActorWithConc… +1 more"
    )
    _, tight = build_lines(fleet_rows(merged), 80, 5, fleet_header(merged))
    assert not any("GPU holders" in line_text(segs) for segs in tight)  # never at the cost of a node's row
