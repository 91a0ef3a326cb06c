"""The app as its parts see it: what the views, the workers and the palette may use of the app they run in.

Why a class of its own: the app imports its views and workers, so were they to name the app's class (to type
`self.app`), the whole console would sit in one import cycle. They name this instead; UltraConsoleApp
(console/app.py) is its one subclass, and sets every attribute below in its constructor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from textual.app import App

if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.settings import Settings
    from backend.signals.monitor import RunMonitor
    from backend.signals.replay import ReplaySession, RolloutIndex
    from backend.signals.store import LogStore


class SessionState(Protocol):
    """What the app and its views read of the workers' session (console.workers.ConsoleSession)."""

    store: LogStore | None
    monitor: RunMonitor | None
    rollouts: RolloutIndex | None


class ConsoleHost(App[int]):
    """The app's state and routing that its parts read; the one subclass defines the methods."""

    readonly: bool  # every action that changes the cluster is refused
    job: str | None  # `--job`: the run to attach, else the latest active
    controller: RunController | None
    replay: ReplaySession | None  # a replay's session: the app is read-only and talks to no cluster
    session: SessionState | None  # the workers' session, once they start after the first frame
    compare_targets: tuple[str, ...]  # runs a replay overlays on its charts (`replay A B`)
    model_dir: str | None  # where the variant picker looks for checkpoints; None: the preset's
    preview_run_id: str
    keymap_overrides: dict[str, str]
    fleet_wanted: bool  # the Run view's fleet shows: the telemetry worker polls only then

    @property
    def settings(self) -> Settings:
        """The operator's settings."""
        raise NotImplementedError

    async def run_binding(self, binding_id: str) -> None:
        """Run a keymap action by id (the palette's entry point)."""
        raise NotImplementedError

    def action_show_view(self, name: str) -> None:
        raise NotImplementedError
