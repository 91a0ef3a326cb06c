"""Async client for the Ray dashboard (Jobs API, state API logs, node telemetry) over httpx.

Why raw httpx and not `ray.job_submission`: the SDK is synchronous `requests` (it would block
Textual's loop), pulls all of `ray` into the console, and offers nothing the console needs
(see shared/reference/ray.md §6). Every call counts itself in `requests_made` so the
"<= 1 request/s while following" budget can be measured.

Logs are never read through `GET /api/jobs/{id}/logs` (it costs the head 3.5-4x the log size
in RAM): history comes streamed from `/api/v0/logs/file`, follow from the job's websocket
tail, which replays the file from byte 0 and closes after the job is terminal and drained.
Both split lines the way Ray's tail does (Python universal newlines), so a line count from
`read_log` is a valid `start_offset` for `follow_log`.
"""

from __future__ import annotations

import asyncio
import builtins
import codecs
import contextlib
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import quote

import httpx
from httpx_ws import (
    AsyncWebSocketSession,
    HTTPXWSException,
    WebSocketDisconnect,
    WebSocketUpgradeError,
    aconnect_ws,
)
from pydantic import BaseModel, ConfigDict, ValidationError

from backend.errors import ConsoleError
from backend.json_fields import Fields
from backend.redaction import check_token, public_line, remember, shown_url, url_password
from backend.sanitize import shown_name

TERMINAL_STATUSES = frozenset({"STOPPED", "SUCCEEDED", "FAILED"})
USER_AGENT = "ultra-console"  # never a browser UA: Ray refuses POSTs from "browser traffic" (405)
_WS_MAX_MESSAGE = 1 << 20  # a tail frame is <= ~20,000 chars; leave room for multi-byte text


# anyio wraps errors escaping a websocket session in a (Base)ExceptionGroup (builtin from 3.11).
_EXC_GROUP: type[builtins.BaseExceptionGroup[BaseException]] | tuple[()] = getattr(
    builtins, "BaseExceptionGroup", ()
)
# How one websocket tail ended, or a frame of it: ("text", frame), ("closed", code), ("error", why or None).
_READER_CLOSE_S = 2.0  # how long a cancelled tail may take to close its websocket
TailItem = tuple[Literal["text", "closed", "error", "stale"], "str | int | RayApiError | None"]


class RayApiError(ConsoleError):
    """The dashboard answered with an error; the message is Ray's reason in one sentence."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class DashboardUnreachable(RayApiError):
    """No HTTP answer at all (refused, timed out, reset) after the bounded retries."""


class AuthRequired(RayApiError):
    """401: the cluster has token auth on and no token was sent."""


class AuthFailed(RayApiError):
    """403: the token sent was refused."""


class JobNotFound(RayApiError):
    """404 on a job route: no job with that submission id or job id."""


class DuplicateSubmission(RayApiError):
    """Ray refused a submission id that already exists (it says so with a 500, not a 409)."""


class JobInfo(BaseModel):
    """One entry of `GET /api/jobs/` (Ray's JobDetails); unknown keys are kept."""

    model_config = ConfigDict(extra="allow")

    submission_id: str | None = None
    job_id: str | None = None
    type: str | None = None
    status: str = "PENDING"
    message: str | None = None
    entrypoint: str = ""
    metadata: dict[str, object] | None = None  # Ray enforces str values on submit; DRIVER jobs vary
    start_time: int | None = None  # ms since epoch
    end_time: int | None = None  # ms since epoch, None until terminal
    driver_node_id: str | None = None
    driver_exit_code: int | None = None
    error_type: str | None = None
    runtime_env: object = None

    @property
    def id(self) -> str:
        """The id Ray accepts on job routes: the submission id, else the Ray job id."""
        return self.submission_id or self.job_id or ""

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def meta(self) -> Fields:
        """`metadata` read by type (a DRIVER job's may hold anything, or be missing)."""
        return Fields.of(self.metadata)


_TRACE_NOISE = re.compile(r"^(Traceback|  File |    )")
_EXC_PREFIX = re.compile(r"^(?:[\w.]+(?:Error|Exception)|ValueError|TypeError|RuntimeError):\s*")


def job_path(job_id: str, tail: str = "") -> str:
    """A job route with the id as one escaped path segment: a job id is the network's (or the operator's)
    text, and a `/`, `?`, `#`, `%`, a space or a control character in it must neither change the route nor
    make an invalid URL."""
    return f"/api/jobs/{quote(job_id, safe='')}{tail}"


def job_what(job_id: str) -> str:
    """How a message names a job: its id shown (controls and bidi escaped, length bounded), never raw."""
    return f"job '{shown_name(job_id)}'"


def ray_error_sentence(body: str) -> str:
    """Ray's error bodies are text/plain tracebacks: keep the last meaningful line, minus the
    exception class, as one sentence (never a multi-line dump)."""
    lines = [
        ln.strip()
        for ln in body.strip().splitlines()
        if any(ch.isalnum() for ch in ln) and not _TRACE_NOISE.match(ln)
    ]
    if not lines:
        return "no reason given"
    last = _EXC_PREFIX.sub("", lines[-1]).strip()
    if len(last) > 300:
        last = last[:297] + "..."
    return last or "no reason given"


def split_log_text(text: str) -> list[str]:
    """Split complete log text into lines exactly as Ray's tail (a text-mode file) does:
    `\\r\\n`, `\\r` and `\\n` all end a line. The caller passes only text ending at a line end."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


class _LineSplitter:
    """Incremental universal-newline splitter that holds back an unterminated tail."""

    def __init__(self) -> None:
        self._partial = ""

    def feed(self, text: str) -> list[str]:
        data = self._partial + text
        if data.endswith("\r"):  # may be the first half of "\r\n"
            self._partial, data = "\r", data[:-1]
        else:
            self._partial = ""
        lines = split_log_text(data)
        self._partial = lines.pop() + self._partial
        return lines

    def flush(self) -> list[str]:
        rest, self._partial = self._partial, ""
        if not rest:
            return []
        lines = split_log_text(rest)
        if lines and lines[-1] == "":
            lines.pop()
        return lines


@dataclass(slots=True)
class _FollowState:
    """A log follow across connections: lines delivered, failures in a row, the last line."""

    delivered: int
    failures: int = 0
    last: str | None = None


@dataclass(slots=True)
class _Connection:
    """One websocket tail: lines seen (Ray resends from byte 0) and how it ended (None: still open)."""

    splitter: _LineSplitter = field(default_factory=_LineSplitter)
    seen: int = 0
    outcome: TailItem | None = None

    def fresh(self, state: _FollowState, line: str) -> bool:
        """Count `line`; True (and recorded as delivered) when the follow has not yielded it yet."""
        self.seen += 1
        if self.seen <= state.delivered:
            return False
        state.delivered, state.last = self.seen, line
        return True


class RayClient:
    """One connection pool to one Ray dashboard; use as `async with RayClient(addr) as ray:`."""

    def __init__(
        self,
        address: str,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.25,
    ) -> None:
        if "://" not in address:
            address = f"http://{address}"
        check_token(token)
        remember(token, url_password(address))
        self.url = address.rstrip("/")
        self.address = shown_url(self.url)  # what messages name: never the URL's password
        self.retries = max(1, retries)
        self.backoff_s = backoff_s
        self.requests_made = 0
        headers = {"User-Agent": USER_AGENT}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(timeout),
            trust_env=False,
        )

    async def __aenter__(self) -> RayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # ---------------------------------------------------------------- transport
    def _unreachable(self, err: BaseException) -> DashboardUnreachable:
        reason = public_line(
            str(err) or type(err).__name__
        )  # a library's words may quote the URL or a header
        return DashboardUnreachable(f"Ray dashboard unreachable at {self.address}: {reason}")

    def _raise_for(self, status: int, body: str, what: str) -> None:
        """Map an error response to a typed error; `what` names the object (e.g. "job 'x'")."""
        reason = public_line(
            ray_error_sentence(body)
        )  # the body is the network's text: no escape gets through
        if status == 401:
            raise AuthRequired(
                f"Ray dashboard at {self.address} requires a token (pass --token or set RAY_AUTH_TOKEN)",
                status,
            )
        if status == 403:
            raise AuthFailed(f"Ray dashboard at {self.address} refused the token: {reason}", status)
        if status == 404 and what.startswith("job "):
            raise JobNotFound(f"no {what} on the Ray cluster at {self.address}", status)
        if "already exists" in body:
            raise DuplicateSubmission(
                f"{what} already exists on the Ray cluster; use another submission id", status
            )
        raise RayApiError(f"Ray dashboard refused {what} (HTTP {status}): {reason}", status)

    async def _send(
        self,
        method: str,
        path: str,
        *,
        what: str,
        params: Mapping[str, str | int] | None = None,
        json: object = None,
        content: bytes | None = None,
    ) -> httpx.Response:
        """One request with bounded exponential backoff on connection failures only; a request
        that reached the server is never repeated (a repeated submit could start a 2nd run)."""
        delay = self.backoff_s
        for attempt in range(self.retries):
            self.requests_made += 1
            try:
                resp = await self._http.request(method, path, params=params, json=json, content=content)
            except (httpx.ConnectError, httpx.ConnectTimeout) as err:
                if attempt + 1 >= self.retries:
                    raise self._unreachable(err) from None
                await asyncio.sleep(delay)
                delay *= 2
                continue
            except httpx.TransportError as err:
                raise self._unreachable(err) from None
            if resp.status_code >= 400:
                self._raise_for(resp.status_code, resp.text, what)
            return resp
        raise AssertionError("unreachable")  # pragma: no cover

    async def get_json(
        self, path: str, params: Mapping[str, str | int] | None = None, *, what: str | None = None
    ) -> object:
        """GET any dashboard JSON route (telemetry callers use this for raw payloads)."""
        resp = await self._send("GET", path, params=params, what=what or f"GET {path}")
        try:
            return resp.json()
        except ValueError:
            raise RayApiError(f"Ray dashboard at {self.address} sent non-JSON for {path}") from None

    # ---------------------------------------------------------------- jobs
    async def version(self) -> Mapping[str, object]:
        """`{"version": "4", "ray_version": "2.60.0", "ray_commit": ..., "session_name": ...}`."""
        return Fields.of(await self.get_json("/api/version", what="the version request")).raw

    async def submit(self, payload: Mapping[str, object]) -> str:
        """POST /api/jobs/ (the trailing slash matters); returns the submission id."""
        sid = payload.get("submission_id")
        what = f"job submission '{shown_name(str(sid))}'" if sid else "the job submission"
        resp = await self._send("POST", "/api/jobs/", json=payload, what=what)
        data = Fields.of(resp.json())
        return data.text("submission_id") or str(data.value("job_id"))

    async def get_job(self, job_id: str) -> JobInfo:
        data = await self.get_json(job_path(job_id), what=job_what(job_id))
        return self._job(data)

    async def list_jobs(self) -> list[JobInfo]:
        data = await self.get_json("/api/jobs/", what="the job list")
        if not isinstance(data, list):
            raise RayApiError(f"Ray dashboard at {self.address} sent an unexpected job list")
        return [self._job(item) for item in data]

    def _job(self, data: object) -> JobInfo:
        try:
            return JobInfo.model_validate(data)
        except ValidationError as err:
            where = ".".join(str(p) for p in err.errors()[0]["loc"])
            raise RayApiError(
                f"Ray dashboard at {self.address} sent a job record with a bad {where!r}"
            ) from None

    async def stop_job(self, job_id: str) -> bool:
        """Ask Ray to stop the job; True if it was alive. Fire-and-forget on Ray's side: the
        caller must watch the status (a PENDING job is not cancelled by this)."""
        resp = await self._send("POST", job_path(job_id, "/stop"), what=job_what(job_id))
        return Fields.of(resp.json()).has("stopped")

    async def delete_job(self, job_id: str) -> bool:
        """Delete a terminal job's record (Ray refuses running ones; the log file stays)."""
        resp = await self._send("DELETE", job_path(job_id), what=job_what(job_id))
        return Fields.of(resp.json()).has("deleted")

    # ---------------------------------------------------------------- logs
    async def read_log(self, job_id: str, *, tail: int | None = None) -> AsyncIterator[str]:
        """The driver log, streamed from the state API (whole file, or the last `tail` lines).

        Yields nothing while the job has no driver node (PENDING). One job lookup plus one
        streamed request, whatever the size of the log.
        """
        job = await self.get_job(job_id)
        if tail is not None and tail <= 0:
            return
        async for line in self._stream_log(job, tail):
            yield line

    async def _stream_log(self, job: JobInfo, tail: int | None) -> AsyncIterator[str]:
        if not job.driver_node_id or not job.submission_id:
            return
        params: dict[str, str | int] = {
            "node_id": job.driver_node_id,
            "submission_id": job.submission_id,
            "lines": -1 if tail is None else tail,
        }
        splitter = _LineSplitter()
        decoder = _Utf8Decoder()
        self.requests_made += 1
        try:
            async with self._http.stream(
                "GET", "/api/v0/logs/file", params=params, timeout=httpx.Timeout(30.0, read=None)
            ) as resp:
                if resp.status_code >= 400:
                    body = (await resp.aread()).decode("utf-8", "replace")
                    self._raise_for(resp.status_code, body, f"the log of {job_what(job.id)}")
                async for chunk in resp.aiter_bytes(1 << 20):
                    for line in splitter.feed(decoder.decode(chunk)):
                        yield line
        except httpx.TransportError as err:
            raise self._unreachable(err) from None
        for line in splitter.feed(decoder.decode(b"", final=True)) + splitter.flush():
            yield line

    async def _log_moved_on(self, job_id: str, last: str | None, partial: str) -> bool:
        """Idle check of a silent follow: does the log end with something we have not seen?
        (Ray's tail server never reads, so websocket pings go unanswered and cannot tell a
        dead connection from a quiet job.) Costs 2 requests per idle period."""
        job = await self.get_job(job_id)
        tail = [line async for line in self._stream_log(job, 1)]
        if not tail:
            return last is not None or bool(partial)
        return tail[-1] not in (last, partial)

    async def follow_log(
        self,
        job_id: str,
        *,
        start_offset: int = 0,
        reconnect_delay_s: float = 1.0,
        max_reconnects: int = 30,
        idle_check_s: float = 30.0,
    ) -> AsyncIterator[str]:
        """Follow the driver log from line `start_offset` (0 = the whole log) until the job is
        terminal and its log drained.

        Uses Ray's websocket tail, which resends the file from byte 0 on every connection: the
        client counts complete lines and skips those already yielded, so a dropped connection is
        resumed without losing or repeating a line (a reconnect re-reads the log, so it costs
        time proportional to its size, not requests). While lines flow nothing is polled; after
        `idle_check_s` without a frame the last log line is compared with ours and a stale
        connection is replaced. `max_reconnects` consecutive failures raise
        DashboardUnreachable.
        """
        state = _FollowState(start_offset)
        while True:
            conn = _Connection()
            async with contextlib.aclosing(self._one_tail(job_id, state, conn, idle_check_s)) as lines:
                async for line in lines:
                    yield line
            kind, value = conn.outcome or ("error", None)
            if await self._ended_normally(job_id, kind, value):
                for line in conn.splitter.flush():
                    if conn.fresh(state, line):
                        yield line
                return
            if await self._give_up_or_wait(job_id, value, state, max_reconnects, reconnect_delay_s):
                return

    async def _ended_normally(self, job_id: str, kind: str, value: object) -> bool:
        """Ray closes normally only after the job is terminal and the file drained; a proxy can close
        too, so the job's state confirms it."""
        return kind == "closed" and value == 1000 and (await self.get_job(job_id)).is_terminal

    async def _give_up_or_wait(
        self, job_id: str, value: object, state: _FollowState, max_reconnects: int, delay_s: float
    ) -> bool:
        """After a failed connection: raise an API error, True when there is nothing more to read,
        else wait before the next connection."""
        if isinstance(value, RayApiError) and not isinstance(value, DashboardUnreachable):
            raise value
        state.failures += 1
        if state.failures >= 3 and await self._terminal_quietly(job_id):
            return True  # e.g. the driver's node died with its log file: nothing more to read
        if state.failures > max_reconnects:
            raise self._follow_gave_up(job_id, value, state.failures)
        await asyncio.sleep(min(delay_s * state.failures, 5.0))
        return False

    async def _one_tail(
        self, job_id: str, state: _FollowState, conn: _Connection, idle_check_s: float
    ) -> AsyncGenerator[str, None]:
        """One websocket connection's new lines, until `conn.outcome` says how it ended."""
        queue: asyncio.Queue[TailItem] = asyncio.Queue(maxsize=64)
        reader = asyncio.create_task(self._tail_into(job_id, queue))
        try:
            while conn.outcome is None:
                text = await self._next_text(job_id, queue, state, conn, idle_check_s)
                if text is None:
                    continue
                for line in conn.splitter.feed(text):
                    if conn.fresh(state, line):
                        state.failures = 0
                        yield line
        finally:
            # Bounded: closing the websocket waits for a close frame Ray's tail may never send, and an
            # unbounded wait here hangs whoever cancels the follow (an app quitting, a loop shutting down).
            reader.cancel()
            await asyncio.wait({reader}, timeout=_READER_CLOSE_S)
            if reader.done() and not reader.cancelled():
                reader.exception()  # retrieved: how the tail ended was already put on the queue

    async def _next_text(
        self,
        job_id: str,
        queue: asyncio.Queue[TailItem],
        state: _FollowState,
        conn: _Connection,
        idle_check_s: float,
    ) -> str | None:
        """The next frame's text; None (with `conn.outcome` set when the connection is done) otherwise."""
        try:
            kind, value = await asyncio.wait_for(queue.get(), idle_check_s)
        except asyncio.TimeoutError:
            conn.outcome = await self._idle_outcome(job_id, state, conn)
            return None
        if kind != "text" or not isinstance(value, str):
            conn.outcome = (kind, value)
            return None
        return value

    async def _idle_outcome(self, job_id: str, state: _FollowState, conn: _Connection) -> TailItem | None:
        """After a silent period: is the connection stale (None: keep waiting)?"""
        if conn.seen < state.delivered:
            return None  # still re-reading what was already delivered
        try:
            moved_on = await self._log_moved_on(job_id, state.last, conn.splitter._partial)
        except DashboardUnreachable as err:
            return ("error", err)
        return ("stale", None) if moved_on else None

    def _follow_gave_up(self, job_id: str, value: object, failures: int) -> RayApiError:
        """The error a follow raises after too many failed connections in a row."""
        if isinstance(value, RayApiError):
            return value
        return DashboardUnreachable(
            f"Ray dashboard unreachable at {self.address}: log follow of {job_what(job_id)} "
            f"dropped {failures} times in a row"
        )

    async def _terminal_quietly(self, job_id: str) -> bool:
        try:
            return (await self.get_job(job_id)).is_terminal
        except DashboardUnreachable:
            return False

    async def _tail_into(self, job_id: str, queue: asyncio.Queue[TailItem]) -> None:
        """Run one websocket tail in its own task (httpx-ws uses anyio task groups, which must
        not be suspended across a generator's `yield`) and report how it ended."""
        url = f"{self.url}{job_path(job_id, '/logs/tail')}".replace("http", "ws", 1)
        self.requests_made += 1
        ws: AsyncWebSocketSession
        try:
            async with aconnect_ws(
                url, self._http, max_message_size_bytes=_WS_MAX_MESSAGE, keepalive_ping_interval_seconds=None
            ) as ws:
                while True:
                    text = await ws.receive_text()
                    await queue.put(("text", text))
        except WebSocketDisconnect as err:
            await queue.put(("closed", err.code))
        except WebSocketUpgradeError as err:
            resp = err.response
            body = ""
            with contextlib.suppress(Exception):
                body = (await resp.aread()).decode("utf-8", "replace")
            try:
                self._raise_for(resp.status_code, body, job_what(job_id))
            except RayApiError as api_err:
                await queue.put(("error", api_err))
        except (httpx.TransportError, HTTPXWSException, OSError) as err:
            await queue.put(("error", self._unreachable(err)))
        except _EXC_GROUP as group:
            ws_close = group.subgroup(WebSocketDisconnect)
            leaf = _first_leaf(ws_close) if ws_close is not None else None
            if isinstance(leaf, WebSocketDisconnect):
                await queue.put(("closed", leaf.code))
            else:
                await queue.put(("error", self._unreachable(_first_leaf(group))))

    # ---------------------------------------------------------------- nodes / telemetry
    async def nodes(self) -> list[object]:
        """Every node Ray knows, alive or DEAD with Ray's reason (state API, keeps dead nodes):
        `node_id, node_name, state, state_message, is_head_node, resources_total, labels, ...`."""
        data = await self.get_json("/api/v0/nodes", {"detail": 1, "limit": 10000}, what="the node list")
        nodes = Fields.of(data).obj("data").obj("result").value("result")
        if not isinstance(nodes, list):
            raise RayApiError(f"Ray dashboard at {self.address} sent an unexpected node list")
        return nodes

    async def nodes_summary(self) -> Mapping[str, object]:
        """Raw `data` of `/nodes?view=summary`: `{"summary": [...alive nodes with gpus...],
        "nodeLogicalResources": {...}}` (cached 2 s by Ray)."""
        return self._data(await self.get_json("/nodes", {"view": "summary"}, what="the node summary"))

    def _data(self, payload: object, key: str | None = None) -> Mapping[str, object]:
        """`payload["data"]` (or `payload["data"][key]`, {} while Ray has none yet), checked."""
        data = Fields.of(payload).value("data")
        if not isinstance(data, dict):
            raise RayApiError(f"Ray dashboard at {self.address} sent an answer without its data")
        return data if key is None else Fields.of(data).obj(key).raw


class _Utf8Decoder:
    """Incremental UTF-8 decoder that never raises (a log may hold any bytes)."""

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")

    def decode(self, data: bytes, final: bool = False) -> str:
        return self._dec.decode(data, final)


def _first_leaf(group: BaseException) -> BaseException:
    exc = group
    while inner := getattr(exc, "exceptions", None):  # an exception group (a builtin from 3.11 only)
        exc = inner[0]
    return exc
