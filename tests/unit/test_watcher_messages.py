"""What the watcher says about a run (backend.cluster.watcher_job.Watcher over the simulator's metric lines,
no Ray): a KL spike is one fire and one clear; a NaN grad norm the run outlives is one warning (the
catalog's incident; the nonfinite alert rule that saw the same line goes to the ledger only); the run's
death is one cause message with what to try; a restarted watcher re-reading the same log sends nothing twice
and writes nothing twice."""

from __future__ import annotations

from pathlib import Path

from backend.cluster.dashboard import JobInfo
from backend.cluster.notify import Message
from backend.cluster.watcher_job import WatchConfig, Watcher
from backend.demo.simtrainer import metrics
from backend.notify_settings import NotifySettings
from backend.severity import Severity

DEATH = Path(__file__).resolve().parents[1] / "data" / "sim_fail" / "train-oom.log"
STEPS_PER_ROLLOUT = 2


class Sink:
    def __init__(self) -> None:
        self.msgs: list[Message] = []

    def send(self, msg: Message) -> None:
        self.msgs.append(msg)

    def close(self, timeout_s: float = 0.0) -> None:
        pass


def _log(rollouts: int, kl_spike_at: int, nan_grad_at: int) -> str:
    lines = []
    for rollout in range(rollouts):
        lines.append(f"rollout {rollout}: {metrics.rollout_batch(rollout)}")
        for s in range(STEPS_PER_ROLLOUT):
            n = rollout * STEPS_PER_ROLLOUT + s
            step = metrics.train_step(n, s == 0, 1e-6, False, rollout == kl_spike_at, n == nan_grad_at)
            lines.append(f"step {n}: {step}")
    return "\n".join(lines) + "\n"


def _watcher(tmp: Path, incident_hold_s: float = 0.0) -> tuple[Watcher, Sink]:
    sink = Sink()
    notify = NotifySettings(clear_hold_s=0, incident_hold_s=incident_hold_s)
    cfg = WatchConfig(job="run-1", address="http://127.0.0.1:9", ledger_dir=tmp, notify=notify)
    return Watcher(cfg, notifier=sink), sink  # type: ignore[arg-type]


def _said(sink: Sink) -> list[tuple[str, str | None, Severity]]:
    return [(m.kind, m.alert, m.severity) for m in sink.msgs]


def test_a_spike_and_an_outlived_nan_are_told_once_each_and_a_restart_repeats_nothing(tmp_path: Path) -> None:
    text = _log(6, kl_spike_at=2, nan_grad_at=7)
    watcher, sink = _watcher(tmp_path)
    watcher.feed(text)
    watcher.pacer.tick(float("inf"))
    said = _said(sink)
    assert said.count(("fire", "kl-spike", Severity.WARNING)) == 1
    assert said.count(("clear", "kl-spike", Severity.WARNING)) == 1
    assert [s for s in said if s[0] == "incident"] == [("incident", "nan", Severity.WARNING)]
    assert not [s for s in said if s[1] == "loss-nonfinite"] and len(said) == 3, said
    ledger = [(e.kind, e.alert) for e in watcher.ledger.entries()]
    assert ("fire", "loss-nonfinite") in ledger and ("incident", "nan") in ledger
    watcher.monitor.input_ended()
    end = watcher.finish(JobInfo(submission_id="run-1", status="SUCCEEDED"))
    assert end.kind == "end" and _said(sink)[-1] == ("end", None, Severity.INFO)
    kept = [e.key for e in watcher.ledger.entries()]
    again, sink2 = _watcher(tmp_path)  # killed and started again: it re-reads the whole log
    again.feed(text)
    again.pacer.tick(float("inf"))
    again.monitor.input_ended()
    again.finish(JobInfo(submission_id="run-1", status="SUCCEEDED"))
    assert sink2.msgs == [] and [e.key for e in again.ledger.entries()] == kept


def test_a_death_is_one_cause_message_with_what_to_try(tmp_path: Path) -> None:
    watcher, sink = _watcher(tmp_path, incident_hold_s=10.0)  # the run dies within the hold
    watcher.feed(_log(3, kl_spike_at=-1, nan_grad_at=-1))
    watcher.feed(DEATH.read_text(encoding="utf-8"))
    watcher.monitor.on_job_status("FAILED", "Job entrypoint command failed with exit code 1")
    watcher.monitor.input_ended()
    last = watcher.finish(JobInfo(submission_id="run-1", status="FAILED"))
    causes = [m for m in sink.msgs if m.kind == "cause"]
    assert causes == [last] and last.severity is Severity.CRITICAL
    assert "out of memory" in last.text.lower() and last.try_ and last.line
    assert not [m for m in sink.msgs if m.kind == "incident"]  # its failures are the cause's, no warning
    assert [e.kind for e in watcher.ledger.entries()].count("cause") == 1


def _printed_twice(n: int, grad: str) -> list[str]:
    """miles logs each train step's dict twice (log_utils.py and model.py), as the simulator does."""
    body = f"step {n}: {{'train/loss': 0.012, 'train/grad_norm': {grad}}}"
    return [
        f"(MegatronTrainRayActor pid=4101) [2026-03-02 10:00:{n:02d}] {where} - {body}"
        for where in ("log_utils.py:542", "model.py:854")
    ]


def test_one_nan_step_printed_twice_is_one_skipped_step_and_two_steps_are_divergence() -> None:
    from backend.signals.failures import FailureScanner, incidents

    def scan(nan_steps: tuple[int, ...]) -> FailureScanner:
        scanner = FailureScanner()
        for n in range(1, 8):
            scanner.feed("\n".join(_printed_twice(n, "nan" if n in nan_steps else "0.2")) + "\n")
        return scanner

    once = scan((4,))
    assert [i.finding.id for i in incidents(once.events, progress=once.progress)] == ["nan"]
    twice = scan((4, 5))
    assert incidents(twice.events, progress=twice.progress) == ()


def test_each_channel_kind_gets_its_shape_and_no_escape_from_the_line() -> None:
    from backend.cluster.notify import payload
    from backend.notify_settings import WebhookChannel

    msg = Message(
        "cause",
        "cause",
        "run-1",
        Severity.CRITICAL,
        "run FAILED: CUDA out of memory",
        "CUDA OOM in train rank 3",
        None,
        "torch.OutOfMemoryError\x1b]52;c;ZXZpbA==\x07 CUDA out of memory",
        "lower batch.max_tokens_per_gpu",
    )
    url = "http://127.0.0.1:9/h/x"
    _, _, slack = payload(WebhookChannel(kind="slack", url=url), msg)  # type: ignore[arg-type]
    assert isinstance(slack, dict) and slack["text"].startswith(
        "🔴 run FAILED: CUDA out of memory — run run-1"
    )
    assert [b["type"] for b in slack["blocks"]] == ["header", "section", "context"]
    headers, raw, body = payload(WebhookChannel(kind="ntfy", url=url), msg)  # type: ignore[arg-type]
    assert body is None and raw is not None and headers["Priority"] == "urgent"
    assert b"try: lower batch.max_tokens_per_gpu" in raw and b"\x1b" not in raw and b"\x07" not in raw
    _, _, plain_json = payload(WebhookChannel(url=url), msg)  # type: ignore[arg-type]
    assert isinstance(plain_json, dict) and plain_json["kind"] == "cause" and "\x1b" not in plain_json["line"]
