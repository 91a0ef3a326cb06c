"""The order an operator expects for names with numbers in them: `node-2` before `node-10`, `10.0.0.9` before
`10.0.0.12`, `rank 3` before `rank 12`.

Why one key: nodes are listed by the fleet pane, `nodes`, `status`, preflight, the phase timeline and the
stacks screen; each sorting by its own rule would list the same cluster in different orders.
"""

from __future__ import annotations

import re

_DIGITS = re.compile(r"(\d+)")

NaturalKey = tuple[tuple[tuple[int, int, str], ...], str]


def natural_key(text: str) -> NaturalKey:
    """A sort key comparing runs of digits as numbers and the rest case-insensitively; the text itself breaks
    ties (`node-01` and `node-1` stay apart, always in the same order)."""
    parts = tuple(  # split() puts the runs of digits at the odd places
        (0, int(part), "") if i % 2 else (1, 0, part.casefold())
        for i, part in enumerate(_DIGITS.split(text))
        if part
    )
    return parts, text
