"""Which train actors reported the NemotronH shim, counting only reports a train actor can have made.

Why: "every train actor logs one shim line" is only a check if a line counts for the right process. The
setup hook prints its line as the worker process starts, before Ray knows the process as an actor, so Ray's
prefix on it is often only `(pid=N, ip=X)`; and anyone can print text that looks like a prefix (the driver
echoing a line, a line with a forged `(MegatronTrainRayActor pid=N)`). So a report is trusted by the process
it came from, never by its text alone:

- a report is keyed by its Ray process, (pid, ip) from the prefix; a line with no Ray prefix (the driver) or
  one from another role's actor (rollout, SGLang, helpers: the hook runs in every worker) never counts;
- it counts only for a process that has logged *ordinary* (non-shim) lines under a train actor class's
  prefix, i.e. one seen as a train actor beyond the shim line itself. A forged prefix with a pid no train
  actor ever logged from reports for nobody;
- the train actors are exactly those processes, so one that never reported is named (`missing`), once --
  in a run that carries the shim: one whose job's runtime env runs its setup hook (`expected`, set by who
  knows the job), or whose log holds any shim line (the hook ran somewhere, so it runs in every worker). A
  miles run launched without the console has no shim line at all and is not called missing.

Ray may fold identical lines into `[repeated Nx across cluster]` under one process's prefix when its dedup is
on (the console's runs allow-list the shim line, older ones may not): N reports then name no process, and an
actor is only called missing when more actors lack a report than such folded lines could account for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from backend.signals.actors import TRAIN, names_for
from shim.logline import LINE_PREFIX, ShimLine

MAX_PROCESSES = 4096  # train processes tracked per run (a cluster of 512 nodes x 8 GPUs)

ProcessKey = tuple[int, str]  # (pid, ip or "")
TRAIN_NEEDLE = "TrainRayActor"  # every train actor class's name holds it

# A train actor's ordinary line: Ray's prefix at the start of a line, any message but the shim's. Searched for
# as "\n(" (a literal the regex engine finds fast; `^` in MULTILINE mode is tried at every position, 8x
# slower), and the chunk's first line on its own.
_TRAIN_PREFIX = (
    r"\((?P<actor>"
    + "|".join(re.escape(n) for n in sorted(names_for(TRAIN), key=len, reverse=True))
    + r") pid=(?P<pid>\d{1,10})(?:, ip=(?P<ip>[^()\s]+))?\) (?!"
    + re.escape(LINE_PREFIX)
    + ")"
)
_TRAIN_LINE = re.compile("\n" + _TRAIN_PREFIX)
_TRAIN_FIRST_LINE = re.compile(_TRAIN_PREFIX)


@dataclass(frozen=True, slots=True)
class ShimReport:
    """What one process's shim line said."""

    status: str  # applied | mapping_only | not_applied
    fields: dict[str, object]


class ShimLedger:
    """The train actors of a run (from their ordinary lines) and the shim reports of processes."""

    def __init__(self) -> None:
        self.train: dict[
            ProcessKey, str
        ] = {}  # process -> its prefix text, e.g. "MegatronTrainRayActor pid=1"
        self.reports: dict[ProcessKey, ShimReport] = {}
        self.folded = 0  # reports Ray folded into a "[repeated Nx]" line: processes it does not name
        self.alerted: set[ProcessKey] = set()
        self.expected = False  # the job's runtime env runs the shim's setup hook (the run carries the shim)
        self.version = 0  # bumped when a train actor or a report arrives

    def note_lines(self, text: str) -> None:
        """Learn the train actors from a chunk of sanitised lines (their ordinary, non-shim lines)."""
        if TRAIN_NEEDLE not in text:  # most chunks stop here
            return
        found = set(_TRAIN_LINE.findall(text))
        first = _TRAIN_FIRST_LINE.match(text)
        if first is not None:
            found.add((first["actor"], first["pid"], first["ip"] or ""))
        for actor, pid, ip in found:
            key = (int(pid), ip)
            if key in self.train:
                continue
            if len(self.train) >= MAX_PROCESSES:  # past the cap: neither tracked nor judged
                continue
            self.train[key] = f"{actor} pid={pid}" + (f", ip={ip}" if ip else "")
            self.version += 1

    def report(self, key: ProcessKey, line: ShimLine, repeats: int = 1) -> None:
        """A shim line from process `key` (already known to be no other role's); `repeats` from Ray's fold."""
        if key not in self.reports and len(self.reports) >= MAX_PROCESSES:
            return
        self.reports.setdefault(key, ShimReport(line.status, dict(line.fields)))
        self.folded += max(0, repeats - 1)
        self.version += 1

    def trusted(self) -> dict[str, dict[str, object]]:
        """Train actor -> the provider fields it reported (only reports a train actor's process made)."""
        return {
            label: dict(self.reports[key].fields) for key, label in self.train.items() if key in self.reports
        }

    def missing(self) -> list[str]:
        """Train actors that never reported and were not named before; each is named once."""
        if not (self.expected or self.reports):
            return []  # a run without the console's shim: nothing was meant to report
        lacking = [key for key in self.train if key not in self.reports]
        if len(lacking) <= self.folded:
            return []  # Ray's fold may hold their lines
        new = [key for key in lacking if key not in self.alerted]
        self.alerted.update(new)
        return [self.train[key] for key in new]
