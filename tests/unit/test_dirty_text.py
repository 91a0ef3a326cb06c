"""Text that is mostly text is text (issue 26 point 7, issue 36's CR-only logs), and pasted metric dicts cut
at the paste's width still give their complete pairs (point 9).

Fixtures are the shapes of ../shared/reference/miles-log-formats.md §1-§3 (invented values): a crashed node
leaves a NUL-padded tail in an appended log, a torn write invalid UTF-8, an old tool CR-only line ends.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.signals import dump_reader
from backend.signals.dump_reader import JsonlTail
from backend.signals.metrics import MetricRecord, MetricsCollector, complete_pairs, parse_metric_line
from backend.signals.monitor import RunMonitor
from backend.signals.store import LogStore
from backend.signals.textlog import NotALogError, check_text_log
from console.cli import main

TRAIN = "(MegatronTrainRayActor pid=4101, ip=10.0.0.3) [2026-03-02 10:00:{s:02d}] log_utils.py:443 - "
STEP = "step {n}: {{'train/loss': 0.012, 'train/ppo_kl': -3.1e-05, 'train/grad_norm': 0.21}}"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.10 GiB. GPU 3 has a total capacity of "
    "139.80 GiB of which 1.02 GiB is free. Process 4101 has 138.70 GiB memory in use."
)


def _steps(count: int, start: int = 0) -> str:
    return "".join(TRAIN.format(s=n) + STEP.format(n=n) + "\n" for n in range(start, start + count))


def _metrics(capsys: pytest.CaptureFixture[str], log: Path) -> tuple[int, dict, str]:
    code = main(["metrics", "--from-log", str(log), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out else {}, err


# ------------------------------------------------------------------ NUL bytes, invalid UTF-8, binary


def test_a_log_with_one_nul_inside_a_line_is_read_and_the_byte_counted(tmp_path, capsys):
    """The 9.6 KB miles log with one NUL in a line that was refused whole ("is binary, not a text log")."""
    log = tmp_path / "job.log"
    text = _steps(40)
    log.write_bytes(text[:4000].encode() + b"\x00" + text[4000:].encode())
    code, snap, err = _metrics(capsys, log)
    assert code == 0, err
    assert snap["series"]["train/loss"][-1][0] == 39 and len(snap["series"]["train/loss"]) == 40
    assert snap["unreadable"] == {"bytes": 1, "nul": 1, "invalid_utf8": 0, "controls": 0, "long_lines": 0}
    assert any("1 unreadable byte(s) dropped (1 NUL)" in p for p in snap["problems"])
    assert "1 unreadable byte(s) dropped" in err  # the warning line on stderr says it too


def test_a_nul_padded_tail_of_a_crashed_node_is_read_and_its_cause_named(tmp_path, capsys):
    """An appended log of a node that crashed: its last block padded with NULs (no newline among them),
    then the restarted writer's lines, the OOM among them: all read, the NULs counted, the cause named."""
    log = tmp_path / "job.log"
    tail = (
        "(MegatronTrainRayActor pid=4101, ip=10.0.0.3) Traceback (most recent call last):\n"
        f"(MegatronTrainRayActor pid=4101, ip=10.0.0.3) {OOM}\n"
    )
    log.write_bytes(_steps(3).encode() + b"\x00" * 300_000 + tail.encode())
    code, snap, err = _metrics(capsys, log)
    assert code == 4, err  # a failed run, named: not "is binary"
    assert "binary" not in err and snap["cause"]["id"] == "cuda-oom" and snap["cause"]["gpu"] == "3"
    assert snap["unreadable"]["nul"] == 300_000
    bytes_alert = next(a for a in snap["alerts"] if a["id"] == "log-bytes-unreadable")
    assert bytes_alert["count"] == 300_000 and "300,000 NUL" in bytes_alert["message"]


def test_a_sparse_head_of_nuls_is_read(tmp_path):
    """A log truncated under its writer (copytruncate) starts with a run of NULs longer than the sniff."""
    log = tmp_path / "job.log"
    log.write_bytes(b"\x00" * (2 << 20) + _steps(2).encode())
    check_text_log(log)  # no NotALogError
    only_nul = tmp_path / "nul.log"
    only_nul.write_bytes(b"\x00" * 1000)
    with pytest.raises(NotALogError, match="holds only NUL bytes"):
        check_text_log(only_nul)


def test_invalid_utf8_and_stray_controls_are_counted_and_the_text_around_them_kept(tmp_path):
    with LogStore(tmp_path, "utf8") as store:
        store.append(
            TRAIN.format(s=1).encode() + b"step 1: {'train/loss': 0.5}\n"
            b"torn \xe2\x82 write \xff\xfe\xfd end\n"
            b"stray \x01\x02\x7f controls, a tab\there and a BEL\x07\n"
        )
        assert [store.text(i) for i in (1, 2)] == [
            "torn \ufffd\ufffd write \ufffd\ufffd\ufffd end",
            "stray  controls, a tab\there and a BEL",
        ]
        u = store.unreadable
        assert (u.nul, u.invalid_utf8, u.controls) == (0, 5, 3) and u.bytes == 8
        assert u.text() == "8 unreadable byte(s) dropped (5 invalid UTF-8, 3 control)"


def test_utf8_text_and_colour_codes_are_not_unreadable(tmp_path):
    with LogStore(tmp_path, "clean") as store:
        store.append("\x1b[36m(SGLangEngine pid=5300)\x1b[0m 生成 ✓ 45%|████▍ \r 50%|█████\n".encode())
        assert not store.unreadable and store.unreadable.text() == ""


@pytest.mark.parametrize(
    "content",
    [bytes(range(256)) * 400, b"\x00\x01\x02ELF" * 100, b"\x1f\x8b\x08\x00" + bytes(range(128, 256)) * 500],
    ids=["every-byte", "elf-ish", "gzip-ish"],
)
def test_a_mostly_binary_file_is_still_refused(tmp_path, content):
    path = tmp_path / "blob.log"
    path.write_bytes(content)
    with pytest.raises(NotALogError, match="is binary, not a text log"):
        check_text_log(path)


def test_a_text_log_with_some_binary_bytes_is_not_refused(tmp_path):
    path = tmp_path / "job.log"
    path.write_bytes(_steps(50).encode() + bytes(range(256)) * 4 + _steps(5, 50).encode())
    check_text_log(path)


# ------------------------------------------------------------------ line ends and long lines


def test_a_cr_only_log_is_split_on_cr(tmp_path, capsys):
    """CR-only line ends read as one line rewritten 40 times ("0 steps", no alert): split on CR."""
    log = tmp_path / "job.log"
    log.write_bytes(_steps(40).replace("\n", "\r").encode())
    code, snap, err = _metrics(capsys, log)
    assert code == 0, err
    assert [p[0] for p in snap["series"]["train/loss"]] == list(range(40))


def test_a_short_cr_only_log_is_split_at_its_end(tmp_path):
    with LogStore(tmp_path, "short") as store:
        store.append(b"first\rsecond\rthird")
        store.flush()
        assert [store.text(i) for i in range(len(store))] == ["first", "second", "third"]


def test_lf_and_crlf_logs_keep_a_progress_bar_s_last_state(tmp_path):
    with LogStore(tmp_path, "lf") as store:
        store.append(b"a\r\nCapturing batches 10%\r 45%\r 99%\nb\n" + b"x" * (16 << 10) + b"\rdone\n")
        assert [store.text(i) for i in range(3)] == ["a", " 99%", "b"]
        assert store.text(3) == "done"


def test_an_oversize_line_is_cut_counted_and_the_lines_after_it_read(tmp_path):
    with LogStore(tmp_path, "long", line_cap=1000) as store:
        store.append(b"before\n" + b"y" * 50_000 + b"\nafter\n")
        store.flush()
        assert store.text(0) == "before" and store.text(2) == "after"
        assert store.text(1).startswith("y" * 1000) and "truncated" in store.text(1)
        assert store.unreadable.long_lines == 1
        assert "1 line(s) over the line cap cut" in store.unreadable.text()


def test_an_events_line_over_one_read_is_skipped_and_what_follows_is_read(tmp_path, monkeypatch):
    """An events file whose one line is longer than a poll reads (64 MiB; 4 KiB here) blocked every event
    after it for good: now it is skipped, counted as a bad line, and the next events are read."""
    monkeypatch.setattr(dump_reader, "MAX_READ", 4096)
    path = tmp_path / "events.jsonl"
    first = json.dumps({"type": "metric", "metrics": {"train/step": 0}})
    huge = json.dumps({"type": "metric", "blob": "z" * 20_000})
    after = [json.dumps({"type": "metric", "metrics": {"train/step": n}}) for n in (1, 2)]
    path.write_text("\n".join([first, huge, *after]) + "\n")
    tail = JsonlTail(path)
    got = []
    for _ in range(10):
        got.extend(tail.read_new())
    assert [e["metrics"]["train/step"] for e in got] == [0, 1, 2]
    assert tail.bad == 1 and "over" in tail.bad_sample


# ------------------------------------------------------------------ pasted metric dicts cut at a width


def test_a_cut_eval_dict_gives_its_complete_pairs():
    line = "[EVAL RESULT] eval 3: {'eval/gsm8k': 0.712, 'eval/math500': 0.401, 'eval/aime24': 0.1"
    rec = parse_metric_line(line)
    assert isinstance(rec, MetricRecord)
    assert (rec.kind, rec.n, rec.values) == ("eval", 3, {"eval/gsm8k": 0.712, "eval/math500": 0.401})
    assert rec.cut == line  # marked cut: the last pair ("0.1" may be "0.125") is not taken


def test_a_whole_labelled_eval_dict_is_read():
    rec = parse_metric_line("[EVAL RESULT] eval 3: {'eval/gsm8k': 0.712, 'eval/math500': 0.401}")
    assert isinstance(rec, MetricRecord) and not rec.cut
    assert rec.values == {"eval/gsm8k": 0.712, "eval/math500": 0.401}


@pytest.mark.parametrize(
    ("payload", "pairs"),
    [
        (
            "{'train/loss': 0.012, 'train/ppo_kl': -3.1e-05, 'train/gr",
            {"train/loss": 0.012, "train/ppo_kl": -3.1e-05},
        ),
        ("{'a': 1, 'b': [1, 2, 3", {"a": 1.0}),
        ("{'a': 'x, y', 'b': np.float64(0.5), 'c': 0.", {"b": 0.5}),
        ("{'a': 0.5", None),
    ],
)
def test_complete_pairs(payload, pairs):
    assert complete_pairs(payload) == pairs


def test_cut_dicts_are_charted_and_counted_as_a_blind_spot():
    """A paste of a run's log cut at 120 columns: every step's complete pairs charted; the cut is a
    blind spot with its count (the charts lack the keys after each cut)."""
    lines = [(TRAIN.format(s=n) + STEP.format(n=n))[:120] for n in range(6)]
    monitor = RunMonitor()
    monitor.feed_text("\n".join(lines) + "\n")
    loss = monitor.collector.series.get("train/loss")
    assert loss is not None and loss.steps == list(range(6))
    assert monitor.collector.series.get("train/grad_norm") is None
    assert monitor.collector.cut_count == 6 and monitor.collector.problem_count == 0
    cut = next(a for a in monitor.blind_spots() if a.id == "metrics-cut")
    assert cut.count == 6 and cut.message.startswith("6 metric line(s) were cut off mid-dict")
    assert any("cut off mid-dict" in p for p in monitor.snapshot()["problems"])


def test_a_cut_line_without_one_whole_pair_is_still_unreadable():
    collector = MetricsCollector()
    collector.feed_text("step 2: {'train/loss': 0.4\n")
    assert collector.problem_count == 1 and collector.cut_count == 0
