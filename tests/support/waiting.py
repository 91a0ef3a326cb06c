"""The one way a test waits: poll a condition until it holds, or fail naming what never happened
(`until`); or, where staying put is the point, check it keeps holding for a while (`holds`).

With a Pilot, each poll lets the app run (messages, timers, a refresh) before looking again; without
one (a Ray job, a subprocess, a tmux pane) it sleeps `interval`. The condition may be a plain or an
async function; its first truthy value is returned, so a test can wait for a thing and use it.
Sync tests call it through `asyncio.run`.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


async def until(
    pilot: Any,
    predicate: Callable[[], Any],
    what: str | Callable[[], str],
    timeout: float = 60.0,
    interval: float = 0.1,
) -> Any:
    """Poll `predicate()` until it is truthy and return that value; `what` names it in the timeout error
    (a callable is asked only then, e.g. for the screen as it was). Typed loosely on purpose: mypy can
    type neither a lambda nor a coroutine function against "T or an awaitable of T"."""
    deadline = time.monotonic() + timeout
    while True:
        value = await _value(predicate)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {_named(what)}")
        await _pause(pilot, interval)


async def holds(
    pilot: Any,
    predicate: Callable[[], Any],
    what: str | Callable[[], str],
    duration: float,
    interval: float = 0.5,
) -> None:
    """Poll `predicate()` for `duration` seconds and fail at its first falsy value: for a test whose point
    is that nothing happens (a job that stays PENDING), where no event can end the wait."""
    deadline = time.monotonic() + duration
    while True:
        if not await _value(predicate):
            raise AssertionError(f"stopped holding: {_named(what)}")
        if time.monotonic() > deadline:
            return  # it held until (and at) the end
        await _pause(pilot, interval)


async def _value(predicate: Callable[[], Any]) -> Any:
    value = predicate()
    return await value if inspect.isawaitable(value) else value


def _named(what: str | Callable[[], str]) -> str:
    return what() if callable(what) else what


async def _pause(pilot: Any, interval: float) -> None:
    if pilot is not None:
        await pilot.pause(interval)  # the app runs while the test waits
    else:
        await asyncio.sleep(interval)
