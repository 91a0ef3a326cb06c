"""A replayed log cut in a second process (backend.signals.front_process) ends up as the same store and
monitor as one cut in the replay's own thread: on dirty text, pieces ending anywhere, a child killed
half-way, and a log the hand-over must leave alone."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from backend.signals.front_process import FrontLost, FrontProcess
from backend.signals.replay import ReplaySession, detect_source

RAY = "\x1b[2m\x1b[36m(MegatronTrainRayActor pid=52001)\x1b[0m "


def _dirty_log(path: Path, lines: int = 6000, seed: int = 7) -> None:
    """A log of every kind of dirt the front handles, spread over many pieces."""
    rng = random.Random(seed)
    out = bytearray()
    for i in range(lines):
        roll = rng.random()
        stamp = f"[2026-08-21 10:{i // 60 % 60:02d}:{i % 60:02d}.000 actor_cell0_rank0]"
        if roll < 0.05:
            loss = f"{{'train/loss': {rng.random():.4f}}}"
            out += f"{RAY}{stamp} log_utils.py:542 - step {i}: {loss}\n".encode()
        elif roll < 0.08:
            out += b"bar 10%|#   |\r bar 50%|##  |\r bar 100%|####|\r\n"
        elif roll < 0.10:
            out += b"torn \xff\xfe write \x00\x00 and a \x07bell \x01ctl\n"
        elif roll < 0.11:
            out += b"x" * rng.randrange(20_000, 90_000) + b"\n"  # over the line cap
        elif roll < 0.12 and i > lines // 2:
            out += b"^[[2m^[[36m(RolloutManager pid=1)^[[0m caret colour codes spelt out\n"
        else:
            out += f"{RAY}{stamp} model.py:{i} - ordinary line {i} {'é' * (i % 3)}\n".encode()
    out += b"a last line without its newline"
    path.write_bytes(bytes(out))


def _replay(path: Path, spool: Path, *, front: bool, piece: int = 4096, kill_after: int | None = None):
    session = ReplaySession(detect_source(path), spool, front_from=0 if front else 1 << 62, front_piece=piece)
    started = session._front is not None  # started with the session, before the app would draw
    steps = 0
    while session.load_step(piece):  # the same pieces either way (a chunk's head tells of caret codes)
        steps += 1
        if kill_after is not None and steps == kill_after and session._front is not None:
            session._front._proc.kill()
    session.finish()
    store = session.store
    assert session.monitor is not None
    out = (
        len(store),
        store.unreadable,
        store.spool_bytes(0, len(store)),
        [store.line(i).text for i in range(0, len(store), 97)],
        dict(session.monitor.collector.records),
        session.rollouts.rollouts,
    )
    used = (started, session.front_lost)
    session.close()
    return out, used


def test_the_front_process_gives_the_same_store_and_metrics(tmp_path: Path) -> None:
    log = tmp_path / "dirty.log"
    _dirty_log(log)
    here, _ = _replay(log, tmp_path / "a", front=False)
    there, used = _replay(log, tmp_path / "b", front=True)
    assert used == (True, None)
    assert here[1].nul and here[1].invalid_utf8 and here[1].controls and here[1].long_lines
    assert there == here


@pytest.mark.parametrize("piece", [61, 777, 1 << 20])
def test_pieces_of_any_size_give_the_same_lines(tmp_path: Path, piece: int) -> None:
    log = tmp_path / "dirty.log"
    _dirty_log(log, lines=400 if piece < 100 else 3000, seed=piece)
    here, _ = _replay(log, tmp_path / "a", front=False, piece=piece)
    assert _replay(log, tmp_path / "b", front=True, piece=piece)[0] == here


def test_a_killed_front_process_leaves_the_rest_to_the_replay(tmp_path: Path) -> None:
    log = tmp_path / "dirty.log"
    _dirty_log(log, lines=9000, seed=3)
    here, _ = _replay(log, tmp_path / "a", front=False, piece=8192)
    there, used = _replay(log, tmp_path / "b", front=True, piece=8192, kill_after=3)
    assert used[0] and used[1] is not None and "stopped" in used[1]
    assert there == here


def test_a_first_piece_without_a_line_end_is_never_handed_over(tmp_path: Path) -> None:
    log = tmp_path / "cr.log"
    log.write_bytes(b"progress\r" * 20_000 + b"\n" + b"then a line\n" * 10)
    session = ReplaySession(detect_source(log), tmp_path / "s", front_from=0)
    while session.load_step():
        pass
    session.finish()
    assert session._front is None and not session.store.front.holds
    assert len(session.store) > 1
    session.close()


def test_a_stream_that_stops_short_is_a_lost_front_never_the_log_s_end(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"line\n" * 200_000)
    proc = FrontProcess(log, 0, 16384, piece=1024)
    first = proc.next()
    assert first is not None and first.cut.lens == [4] * 204
    proc._proc.kill()
    with pytest.raises(FrontLost):
        while proc.next() is not None:
            pass
    assert 0 < proc.consumed < log.stat().st_size and proc.consumed % 5 == 0  # at a line end
    proc.close()
