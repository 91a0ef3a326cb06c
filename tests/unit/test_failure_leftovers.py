"""Issue 26's leftovers, each read the way the libraries print it: the actor that died with its owner is named
(the owner apart), a killed process's role is its own (unknown when nothing says), every entry of torch
elastic's table is read (the earliest the root), and a capitalised sentence after a finished one is never
taken for a wrapped tail."""

from __future__ import annotations

from failure_shapes import SCENARIOS, render

from backend.sanitize import sanitize_text
from backend.signals.failures import Diagnosis, FailureScanner, diagnose
from backend.signals.failures.owner import Wraps


def _cause(name: str, shape: str = "ray") -> Diagnosis:
    scanner = FailureScanner()
    scanner.feed(sanitize_text(render(next(s for s in SCENARIOS if s.name == name), shape)))
    found = diagnose(scanner.events)
    assert found is not None
    return found


def test_an_actor_that_died_with_its_owner_is_named_and_the_owner_said_apart() -> None:
    found = _cause("26: ActorDiedError block: its owner's worker process crashed")
    cause = found.cause
    assert (cause.actor, cause.pid, cause.node, cause.role) == ("WorkerDict", "5678", "10.0.3.9", "train")
    assert cause.owner == "worker 05000000ffff on 10.0.3.7"
    assert cause.to_json()["owner"] == cause.owner


def test_a_killed_process_has_the_role_of_its_own_pid_else_none() -> None:
    named = _cause("26: a pasted dmesg line kills a pid whose own lines say it was a train actor").cause
    assert (named.role, named.actor, named.node) == ("train", "MegatronTrainRayActor", "10.0.3.9")
    torchrun = _cause("26: torchrun child killed by SIGKILL, no error of its own (host OOM)").cause
    assert torchrun.id == "killed-by-signal" and torchrun.role is None  # torchrun runs engines too


def test_every_entry_of_torch_elastics_table_is_read_the_earliest_is_the_root() -> None:
    found = _cause(
        "26: torch elastic's table with three failures: the root entry (earliest) is the cause, the rest "
        "listed"
    )
    cause = found.cause
    assert (cause.rank, cause.pid, cause.node, cause.time) == (
        "27",
        "41017",
        "node-07",
        "2026-12-01 10:00:05",
    )
    assert "rank 25 (local rank 1, pid 41015) on node-07 exit code 1" in cause.message
    other = next(c for c in found.consequences if c.id == "killed-by-signal")
    assert (other.rank, other.pid) == ("26", "41016")  # listed, never the cause


def test_a_capitalised_sentence_after_a_finished_one_is_a_line_of_its_own() -> None:
    ended = (
        "[rank3]:[E1201 10:10:05.303 ProcessGroupNCCL.cpp:630] [Rank 3] To avoid data inconsistency: down."
    )
    wraps = Wraps(frozenset({len(ended)}))
    for line in (
        "NCCL WARN Cuda failure 'an illegal memory access'",
        "GCS may have been killed.",
        "The Ray job x",
    ):
        assert not wraps.continues(ended, line), line
    # a wrap at a word boundary keeps its space on one piece: still one line
    assert wraps.continues(ended[:-1] + " ", "Process 4101 has 138.77 GiB memory in use.")
    assert wraps.continues(ended[:-4] + "mem", "ory. Tried to allocate")
