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

Text alone proves nothing, though: the driver can print a train actor's prefix around a shim line. So where
Ray can be asked (a live run, `metrics --job`), the job's actors from Ray's state API are the train actors
(`verify_with`): a report counts only from a (pid, ip) Ray lists as a train actor class of this job, an actor
Ray lists that never reported is missing whether or not it logged, and a prefix Ray does not list is nobody.
Where it cannot (a saved log, a replay), reports are judged by their prefixes as above and said unverified.
(A line forged with the exact pid and ip of a real train actor still reads as that actor's: only its own
worker log file could tell.)

Ray may fold identical lines into `[repeated Nx across cluster]` under one process's prefix when its dedup is
on (the console's runs allow-list the shim line, older ones may not): N reports then name no process, and an
actor is only called missing when more actors lack a report than such folded lines could account for.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from backend.signals.actors import TRAIN, names_for
from shim.logline import LINE_PREFIX, ShimLine

MAX_PROCESSES = 4096  # train processes tracked per run (a cluster of 512 nodes x 8 GPUs)

ProcessKey = tuple[int, str]  # (pid, ip or "")
TRAIN_NEEDLE = "TrainRayActor"  # every train actor class's name holds it

# A train actor's ordinary line: Ray's prefix at the start of a line, any message but the shim's. Searched for
# as "\n(" (a literal the regex engine finds fast; `^` in MULTILINE mode is tried at every position, 8x
# slower), and the chunk's first line on its own. `{known}`: a lookahead that refuses the processes already
# learnt (`_NewTrainLines`).
_TRAIN_PREFIX = (
    r"\((?P<actor>"
    # only the classes the needle finds (miles' own): the prefilter hands on just the lines that hold it
    + "|".join(re.escape(n) for n in sorted(names_for(TRAIN), key=len, reverse=True) if TRAIN_NEEDLE in n)
    + r") pid={known}(?P<pid>\d{{1,10}})(?:, ip=(?P<ip>[^()\s]+))?\) (?!"
    + re.escape(LINE_PREFIX)
    + ")"
)
KNOWN_IN_PATTERN = 256  # processes the lookahead refuses (past them, a known one's lines are matched again)


def alternation(words: list[str]) -> str:
    """A regex matching exactly `words` (distinct, none a prefix of another), as a trie: the engine tries one
    branch per character, where a flat alternation of a cluster's processes is tried word by word."""
    groups: dict[str, list[str]] = {}
    for word in words:
        groups.setdefault(word[0], []).append(word[1:])
    branches = [re.escape(c) + (alternation(rest) if rest != [""] else "") for c, rest in groups.items()]
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


def _known_text(key: ProcessKey) -> str:
    """What follows `pid=` in a prefix of this process, to the space after its parenthesis."""
    return f"{key[0]}" + (f", ip={key[1]}" if key[1] else "") + ") "


class _NewTrainLines:
    """The train prefixes of a chunk whose process is not known yet: a train actor's name is on nearly every
    line of a training log, and a match (a tuple) per line cost more than the search. The known processes'
    `pid=...) ` texts are refused by a lookahead, so a chunk of known processes yields nothing; the pattern
    is made again when the known set changes (a process or two in a run's first chunks)."""

    def __init__(self) -> None:
        self.refused: tuple[ProcessKey, ...] = ()
        self._line, self._first = self._compile(())

    @staticmethod
    def _compile(refused: tuple[ProcessKey, ...]) -> tuple[re.Pattern[str], re.Pattern[str]]:
        known = "(?!" + alternation([_known_text(k) for k in refused]) + ")" if refused else ""
        prefix = _TRAIN_PREFIX.format(known=known)
        return re.compile("\n" + prefix), re.compile(prefix)

    def found(self, text: str, train: dict[ProcessKey, str]) -> set[tuple[str, str, str]]:
        """(actor, pid, ip or "") of every train prefix at a line start whose process `train` lacks (and of
        some it holds, past KNOWN_IN_PATTERN)."""
        if len(self.refused) != min(len(train), KNOWN_IN_PATTERN) or not all(
            k in train for k in self.refused
        ):
            self.refused = tuple(itertools.islice(train, KNOWN_IN_PATTERN))
            self._line, self._first = self._compile(self.refused)
        found = set(self._line.findall(text))
        first = self._first.match(text)
        if first is not None:
            found.add((first["actor"], first["pid"], first["ip"] or ""))
        return found


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
        self.folded: dict[ProcessKey, int] = {}  # reports Ray folded into a "[repeated Nx]" line, by the
        # process whose prefix the fold carries: processes it does not name
        self.alerted: set[ProcessKey] = set()
        self.expected = False  # the job's runtime env runs the shim's setup hook (the run carries the shim)
        self.version = 0  # bumped when a train actor or a report arrives
        # pid -> ips of the job's train actors as Ray's state API lists them; None: Ray was not asked
        self.ray_train: dict[int, set[str]] | None = None
        self.ray_labels: dict[ProcessKey, str] = {}
        self._new_lines = _NewTrainLines()

    @property
    def verified(self) -> bool:
        """Whether reports are checked against Ray's own list of the job's train actors."""
        return self.ray_train is not None

    def verify_with(self, actors: list[tuple[int, str, str]]) -> None:
        """The job's actors as Ray lists them, (pid, ip, class name): from now on only its train actors
        report, and each of them that never did is missing."""
        train = [(pid, ip, name) for pid, ip, name in actors if TRAIN_NEEDLE in name][:MAX_PROCESSES]
        ray_train: dict[int, set[str]] = {}
        self.ray_labels = {}
        for pid, ip, name in train:
            ray_train.setdefault(pid, set()).add(ip)
            self.ray_labels[(pid, ip)] = f"{name[:60]} pid={pid}" + (f", ip={ip}" if ip else "")
        self.ray_train = ray_train
        self.version += 1

    def _is_train(self, key: ProcessKey) -> bool:
        """A prefix's process is one Ray lists as a train actor (a prefix without an ip: Ray omits it on the
        driver's node). True when Ray was not asked: then the prefixes are all there is."""
        if self.ray_train is None:
            return True
        ips = self.ray_train.get(key[0])
        return ips is not None and (not key[1] or key[1] in ips)

    def note_lines(self, text: str) -> None:
        """Learn the train actors from a chunk of sanitised lines (their ordinary, non-shim lines): the
        whole chunk, one regex pass at C speed (the monitor's TextReader: cheaper than cutting a third of
        its lines out first)."""
        if TRAIN_NEEDLE not in text:  # most chunks stop here
            return
        for actor, pid, ip in self._new_lines.found(text, self.train):
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
        if repeats > 1:  # a fold under a prefix Ray does not list counts for nobody once Ray is asked
            self.folded[key] = self.folded.get(key, 0) + repeats - 1
        self.version += 1

    def trusted(self) -> dict[str, dict[str, object]]:
        """Train actor -> the provider fields it reported (only reports a train actor's process made)."""
        found = ((label, self._report_of(key)) for key, label in self._train().items())
        return {label: dict(report.fields) for label, report in found if report is not None}

    def _train(self) -> dict[ProcessKey, str]:
        """The train actors: those Ray lists when it was asked, else the prefixes' processes."""
        return self.train if self.ray_train is None else self.ray_labels

    def _report_of(self, key: ProcessKey) -> ShimReport | None:
        """The report of a train actor: under its own prefix, or under its pid with no ip (Ray omits the ip
        of a process on the driver's node)."""
        found = self.reports.get(key)
        if found is not None or self.ray_train is None:
            return found
        return next(
            (r for (pid, ip), r in self.reports.items() if pid == key[0] and not (ip and key[1])), None
        )

    def _folded(self) -> int:
        """Reports Ray folded; once Ray is asked, only those under a train actor's prefix Ray lists."""
        return sum(n for key, n in self.folded.items() if self._is_train(key))

    def missing(self, *, ended: bool = False) -> list[str]:
        """Train actors that never reported and were not named before; each is named once. Of those Ray
        lists, only the ones the log has reached (it holds their ordinary lines), until the input `ended`: the
        structured outputs can count train steps before the log's first lines are read."""
        if not (self.expected or self.reports):
            return []  # a run without the console's shim: nothing was meant to report
        train = self._train() if ended else self._reached()
        lacking = [key for key in train if self._report_of(key) is None]
        if len(lacking) <= self._folded():
            return []  # Ray's fold may hold their lines
        return self._name_once(lacking, train)

    def _name_once(self, lacking: list[ProcessKey], train: dict[ProcessKey, str]) -> list[str]:
        """The labels of the lacking actors not named before, remembered as named now."""
        named = {pid for pid, _ in self.alerted}  # by pid: the log's key and Ray's may differ in the ip
        new = [key for key in lacking if key[0] not in named]
        self.alerted.update(new)
        return [train[key] for key in new]

    def _reached(self) -> dict[ProcessKey, str]:
        """The train actors the log has reached: of those Ray lists, the ones with ordinary lines."""
        train = self._train()
        if self.ray_train is None:
            return train
        logged = {pid for pid, _ in self.train}
        return {key: label for key, label in train.items() if key[0] in logged}
