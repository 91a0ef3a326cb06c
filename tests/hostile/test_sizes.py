"""Hostile input, round 2 (issue 36): sizes. A one-shot reader of the dump (`metrics --from-dump`, a replay)
reads every events file whole, however many polls that takes (before: one poll, 64 MiB, silently), an
oversize line is skipped and counted and the events after it are read; a huge config is refused by its size
before it is read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.signals import dump_reader
from backend.signals.series import TRAIN_AXIS
from console.cli import main


def _event(step: int) -> str:
    return json.dumps(
        {
            "type": "metric",
            "timestamp": "2026-03-02T10:00:00.000000",
            "source": {"component": "train", "rank_within_cell": 0},
            "metrics": {TRAIN_AXIS: step, "train/loss": 0.5},
        }
    )


def _dump(tmp_path: Path, steps: int, oversize_at: int) -> Path:
    events = tmp_path / "dump" / "events"
    events.mkdir(parents=True)
    lines = [_event(i) for i in range(steps)]
    lines.insert(oversize_at, json.dumps({"type": "metric", "pad": "x" * 5000}))
    (events / "events_0.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path / "dump"


def test_a_dump_bigger_than_one_poll_is_read_whole_and_an_oversize_line_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(dump_reader, "MAX_READ", 4096)  # one poll reads 4 KiB: the file is ~40 polls
    dump = _dump(tmp_path, steps=800, oversize_at=10)
    reader = dump_reader.DumpReader(dump)
    got = reader.poll_whole().records
    assert sorted({int(r.values[TRAIN_AXIS]) for r in got}) == list(
        range(800)
    )  # every event, those after the long line too
    assert reader.bad_lines == 1 and "over" in reader.bad_sample
    main(["metrics", "--from-dump", str(dump), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert len(out["series"]["train/loss"]) == 800


def test_a_huge_config_is_refused_by_its_size_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from backend import regular_files

    config = tmp_path / "config.toml"
    with config.open("wb") as fh:  # a sparse 1 GiB file: no disk, and any read of it would take seconds
        fh.truncate(1 << 30)
    reads: list[int] = []
    real_open = regular_files.open_regular

    def counted(path: object, what: str = "file") -> object:
        fh = real_open(path, what)  # type: ignore[arg-type]
        real_read = fh.read

        def read(n: int = -1) -> bytes:
            reads.append(n)
            return real_read(n)

        fh.read = read  # type: ignore[method-assign]
        return fh

    monkeypatch.setattr(regular_files, "open_regular", counted)
    monkeypatch.setenv("ULTRA_CONSOLE_CONFIG", str(config))
    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert "1024 MiB" in err and "refused before reading" in err and len(err.strip().splitlines()) == 1
    assert reads == []  # not one byte was read
