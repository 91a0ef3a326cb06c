"""Hostile input, round 3 (issue 36), doctor's marker in the shared output directory: anyone with the shared
storage can put a symlink at `<output>/.ultra-console-doctor`; the sweep of stale markers went through it
and deleted every file older than ten minutes in the directory it named (a checkpoint directory, say)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from backend.cluster.doctor_job import MARKER_DIR, DoctorRequest, NodeState, probe_output


def _state(out: Path) -> NodeState:
    request = DoctorRequest("node-a", "127.0.0.1", "tok", ("node-a",), (), "/nonexistent", str(out))
    return NodeState(request, {})


def _old(path: Path) -> Path:
    path.write_text("precious")
    stale = time.time() - 3600
    os.utime(path, (stale, stale))
    return path


def test_a_symlinked_marker_dir_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    out, victim = tmp_path / "out", tmp_path / "checkpoints"
    out.mkdir()
    victim.mkdir()
    kept = _old(victim / "iter_0000100.pt")
    (out / MARKER_DIR).symlink_to(victim)
    facts = probe_output(_state(out))
    assert kept.exists() and not (victim / "tok.node-a").exists()
    assert facts["writable"] is False and "symlink" in str(facts["error"])


def test_the_sweep_removes_only_stale_markers_of_this_user(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / MARKER_DIR).mkdir(parents=True)
    stale_marker = _old(out / MARKER_DIR / "old.node-b")
    other = _old(out / MARKER_DIR / "notes about the run.txt")
    facts = probe_output(_state(out))
    assert facts["writable"] is True and (out / MARKER_DIR / "tok.node-a").read_text() == "node-a"
    assert not stale_marker.exists() and other.exists()
