"""Which source (miles' event log, its dashboard streams, or the log text) each chart's points came from.

Why a module of its own: the monitor names each series' source in its snapshot, and the structured feed
polls into a monitor; keeping the naming here lets both use it without importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from backend.signals.metrics import SOURCE_PRIORITY
from backend.signals.series import SeriesSet

SOURCE_NAMES = {rank: name for name, rank in SOURCE_PRIORITY.items()}


def sources_by_key(series: SeriesSet) -> dict[str, str]:
    """Each series' source ("events", "dashboard", "log"): that of its newest point."""
    return {key: SOURCE_NAMES.get(s.rank[-1], "log") for key, s in series.by_key.items() if len(s)}


def chart_source(sources: Mapping[str, str], keys: Iterable[str]) -> str:
    """What a chart of `keys` draws from: one name, or several joined by "+" (best first); "" with no data."""
    found = {sources[k] for k in keys if k in sources}
    return "+".join(sorted(found, key=lambda name: -SOURCE_PRIORITY.get(name, 0)))
