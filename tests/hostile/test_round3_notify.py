"""Hostile input, round 3 (issue 36), what a log line can forge in a notification: the watcher quotes the
line that said it and names the run, both from the run. In a Slack-compatible message `<!channel>` would
ping everyone and `<https://x|fix here>` would be a link the console never wrote; a job id's escape
sequence would reach a JSON receiver raw."""

from __future__ import annotations

import json

from backend.cluster.notify import Message, payload
from backend.notify_settings import WebhookChannel
from backend.severity import Severity

URL = "http://127.0.0.1:9/h/x"
FORGED = "<!channel> OOM, see <https://evil.example/fix|the fix> & <@U024BE7LH>"


def _msg(run: str = "run-1", line: str = FORGED) -> Message:
    return Message("cause", "cause", run, Severity.CRITICAL, "run FAILED: <!here>", line, None, line, line)


def test_a_log_line_pings_no_one_and_links_nowhere_in_slack() -> None:
    _, _, body = payload(WebhookChannel(kind="slack", url=URL), _msg())  # type: ignore[arg-type]
    assert isinstance(body, dict)
    mrkdwn = [b for b in body["blocks"] if b["type"] != "header"]  # a plain_text header parses no mention
    sent = json.dumps([body["text"], mrkdwn], ensure_ascii=False)
    for forged in ("<!channel>", "<!here>", "<https://", "<@U024"):
        assert forged not in sent
    assert "&lt;!channel&gt;" in sent and "&amp;" in sent  # still shown, as text


def test_a_job_id_with_an_escape_sequence_reaches_no_json_receiver_raw() -> None:
    run = "run\x1b]52;c;ZXZpbA==\x07-\u202e1"
    _, _, body = payload(WebhookChannel(url=URL), _msg(run=run, line="x"))  # type: ignore[arg-type]
    assert isinstance(body, dict)
    assert "\x1b" not in body["run"] and "\u202e" not in body["run"] and body["run"].startswith("run")
