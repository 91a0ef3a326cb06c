"""Which process is which training rank, from the log: Ray's prefix names the process (`(Class pid=N, ip=X)`),
miles' newest bracket its rank (`actor_cell0_rank3`).

Why: a stack dump knows a process by node and pid; the operator thinks in ranks. Keyed by (node IP, pid),
because containers give processes on different nodes the same PIDs; a line from the driver's own node has no
`ip=` in its prefix, so its IP is "" (the caller knows which node that is). The monitor hands on only the
lines holding `_cell` (its prefilter's), and the regex runs over them at once: a match never spans lines and
always holds `_cell`, so over a whole chunk it finds the same matches.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_PREFIX_RANK = re.compile(
    r"\((?:\x1b\[[0-9;]*m)*[\w.]+ pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)\s]+))?\)(?:\x1b\[[0-9;]*m)* "
    r"\[[^\]\n]* (?:actor|critic)_cell\d+_rank(?P<rank>\d+)\]"
)

ProcessRanks = dict[tuple[str, int], int]
RANK_NEEDLE = "_cell"  # every line _PREFIX_RANK matches holds it


def add_ranks(into: ProcessRanks, text: str) -> None:
    """Learn (ip or "", pid) -> rank from every prefixed, ranked line of `text` (not split again: the
    lines the monitor hands on are its prefilter's, and one regex pass over them is C speed)."""
    for m in _PREFIX_RANK.finditer(text):
        into[(m["ip"] or "", int(m["pid"]))] = int(m["rank"])


def process_ranks(lines: Iterable[str]) -> ProcessRanks:
    found: ProcessRanks = {}
    add_ranks(found, "\n".join(lines))
    return found
