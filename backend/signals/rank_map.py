"""Which process is which training rank, from the log: Ray's prefix names the process (`(Class pid=N, ip=X)`),
miles' newest bracket its rank (`actor_cell0_rank3`).

Why: a stack dump knows a process by node and pid; the operator thinks in ranks. Keyed by (node IP, pid),
because containers give processes on different nodes the same PIDs; a line from the driver's own node has no
`ip=` in its prefix, so its IP is "" (the caller knows which node that is). The regex runs only on the lines
holding `_cell` (found with str.find): a match never spans lines, so that finds the same matches.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from backend.signals.metrics import lines_containing

_PREFIX_RANK = re.compile(
    r"\((?:\x1b\[[0-9;]*m)*[\w.]+ pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)\s]+))?\)(?:\x1b\[[0-9;]*m)* "
    r"\[[^\]\n]* (?:actor|critic)_cell\d+_rank(?P<rank>\d+)\]"
)

ProcessRanks = dict[tuple[str, int], int]
RANK_NEEDLE = "_cell"  # every line _PREFIX_RANK matches holds it


def add_ranks(into: ProcessRanks, text: str) -> None:
    """Learn (ip or "", pid) -> rank from every prefixed, ranked line of `text`."""
    for line in lines_containing(text, RANK_NEEDLE):
        for m in _PREFIX_RANK.finditer(line):
            into[(m["ip"] or "", int(m["pid"]))] = int(m["rank"])


def process_ranks(lines: Iterable[str]) -> ProcessRanks:
    found: ProcessRanks = {}
    add_ranks(found, "\n".join(lines))
    return found
