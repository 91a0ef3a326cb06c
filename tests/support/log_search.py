"""A search's hits as one list, for tests that compare them with a list comprehension over the texts."""

from __future__ import annotations

from typing import Any

from backend.signals.search import search_batches
from backend.signals.store import LogStore


def hits(store: LogStore, pattern: str, **kwargs: Any) -> list[int]:
    """Every matching line index, in order (the batches flattened)."""
    return [i for batch in search_batches(store, pattern, **kwargs) for i in batch.hits]
