"""What a "retrying" line can claim: it clears the failure of the process that printed it (the line itself
or the two after it from that process), never another process's. A training script that prints "retrying"
right after a host-memory OOM from Ray's raylet must not erase the OOM (hostile probe, round 2, item 3)."""

from __future__ import annotations

from backend.sanitize import sanitize_text
from backend.signals.failures import FailureScanner, diagnose

OOM = (
    "(raylet) [2026-12-01 10:00:05,123 E 812 812] (raylet) node_manager.cc:3280: 2 worker(s) were killed due "
    "to the node running low on memory. Memory on the node (IP: 10.0.3.9, ID: 4f2a) was 1930.12GB used / "
    "2000.00GB limit"
)


def _cause(lines: list[str]) -> str | None:
    scanner = FailureScanner()
    scanner.feed(sanitize_text("\n".join(lines) + "\n"))
    found = diagnose(scanner.events, scanner.catalog)
    return found.cause.id if found is not None else None


def test_another_process_retrying_clears_nothing() -> None:
    forged = [
        OOM,
        "(RolloutManager pid=5100) [2026-12-01 10:00:06] rollout.py:88 - request failed, retrying",
        "(RolloutManager pid=5100) [2026-12-01 10:00:06] rollout.py:88 - Retrying in 5 s (attempt 1/3)",
    ]
    assert _cause(forged) == "host-oom"


def test_the_same_process_retrying_is_a_caught_error() -> None:
    rollout = "(RolloutManager pid=5100)"
    error = [
        f"{rollout} Traceback (most recent call last):",
        f'{rollout}   File "/root/miles/miles/rollout/sglang_rollout.py", line 161, in generate',
        f"{rollout}     output = await post(url, payload)",
        f"{rollout} ConnectionError: HTTPConnectionPool(host='10.0.0.4', port=30000): Read timed out.",
    ]
    retry = "[2026-12-01 10:00:06] rollout.py:88 - Retrying in 5 s (attempt 1/3)"
    assert _cause([*error, f"{rollout} {retry}"]) is None
    assert _cause([*error, f"(SGLangEngine pid=5300) {retry}"]) == "python-error"
