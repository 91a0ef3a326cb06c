"""The grammar of one log line, for every shape real miles, slime and Ray runs print.

A line is layers, each optional, and each layer has a few known shapes (kept below as tables of patterns,
so a new shape is a row, not a new regex somewhere else), on one line (wrapped here):

    [colour](Actor pid=N[, ip=A])[colour] [TIMESTAMP[ PROC | RANK TAGS]] [LEVEL]
        [FILE:LINE - |FILE:LINE: ]MESSAGE[ [repeated Kx across cluster] …]

Colour codes come as real ESC bytes or, in pasted text, as the literal characters `^[[36m`. The bracket
holds seconds or milliseconds, and a miles process name (newest), SGLang's rank tags (`TP4 EP4`) or nothing
(miles up to mid 2026). Megatron's own logger writes `INFO file.py:69: message`. A line of no known shape is
still a line: its message is the whole text and its fields are unknown, never guessed. The rank comes from the
bracket only (`actor_cell0_rank3`); older formats leave it unknown.

The metric message (`step|rollout|perf|eval|multi_turn|passrate N: {…}`, `eval N skipped: …`) is matched on
the message, so it reads the same behind any prefix or none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEAD_NODE = "head"  # the node of lines without an `ip=` (Ray leaves it out on the driver's node)

# ---------------------------------------------------------------- the layers, as data

# Colour codes around Ray's prefix: real SGR sequences, or their caret notation in pasted text.
COLOUR = re.compile(r"(?:\x1b|\^\[)\[[0-9;]*m")
LITERAL_COLOUR_BYTES = re.compile(rb"\^\[\[[0-9;]*m")
LITERAL_COLOUR_HINT = b"^[["

# Text inside Ray's parentheses: an actor (any class, or none for worker setup hooks), a pid, an ip on
# multi-node clusters; or one of Ray's own system processes.
PREFIX_INNER = (
    r"(?:(?P<actor>[A-Za-z_][\w.]*) )?pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^()\s]+))?"
    r"|(?P<sys>raylet|autoscaler|gcs_server|monitor|dashboard)(?:, ip=(?P<sip>[^()\s]+))?(?: [^()\n]*)?"
)
# The store cuts a line at its first ") " and asks whether the head is a Ray prefix (bytes, for speed).
PREFIX_KEY = re.compile(
    rb"\(((?:[^()\n]* )?pid=\d+(?:, ip=[^()\s]+)?|(?:raylet|autoscaler|gcs_server|monitor|dashboard)"
    rb"(?:, ip=[^()\s]+)?(?: [^()\n]*)?)"
)
_PREFIX_KEY_TEXT = re.compile(PREFIX_KEY.pattern.decode())  # the same, for text
_PREFIX = re.compile(r"\((?P<inner>[^()\n]*)\) ")
_INNER = re.compile(PREFIX_INNER)

_TS = r"(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{3,6})?)"
# A bracket's timestamp anywhere in a chunk (the newest stamp of a chunk is found with findall on its tail).
STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{3,6})?)[\] ]")


@dataclass(frozen=True, slots=True)
class Shape:
    """One known shape of a layer: a name (for tests and docs) and its pattern (anchored at the
    layer's start)."""

    name: str
    pattern: re.Pattern[str]


BRACKETS: tuple[Shape, ...] = (
    # SGLang scheduler: `[2026-03-02 10:00:05 TP4 EP4] `
    Shape(
        "timestamp+rank tags", re.compile(r"\[" + _TS + r" (?P<tags>(?:[A-Z_]*(?:TP|PP|EP|DP|CP)\d+ ?)+)\] ")
    ),
    # newest miles: `[2026-10-02 10:00:05.120 actor_cell0_rank0] `
    Shape("timestamp+process", re.compile(r"\[" + _TS + r" (?P<proc>[^\]\s]+)\] ")),
    # miles up to mid 2026, Megatron: `[2026-03-02 10:00:05] `
    Shape("timestamp", re.compile(r"\[" + _TS + r"\] ")),
)

LOCATIONS: tuple[Shape, ...] = (
    # miles: `log_utils.py:443 - `
    Shape("file:line -", re.compile(r"(?P<file>[\w./-]+\.\w+):(?P<lineno>\d+) - ")),
    # Megatron's logger: `INFO file.py:69: `
    Shape(
        "LEVEL file:line:",
        re.compile(
            r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) "
            r"(?P<file>[\w./-]+\.\w+):(?P<lineno>\d+): "
        ),
    ),
    # a bare level word: `WARNING: `
    Shape("LEVEL:", re.compile(r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL):? ")),
)

_RANK_PROC = re.compile(r"_rank(\d+)$")

# Ray's dedup suffix, with or without its one-time note (colour codes already removed).
REPEATED = re.compile(
    r" \[repeated (\d+)x across cluster\](?: \(Ray deduplicates logs by default\.[^\n]*\))?$"
)

# ---------------------------------------------------------------- the metric message

METRIC_MESSAGE = re.compile(
    r"(?P<kind>(?:critic-)?step|rollout|perf|eval|multi_turn|passrate) (?P<n>\d+)"
    r"(?:: (?P<payload>\{.*\})| skipped: (?P<reason>.*))"
)
# What a metric line looks like, even when its dict or its prefix cannot be read: the kind at the start of
# the line or right after a separator (` - `, `] `, `) `, `: `), so prose such as
# "Finish rollout 3: {" is not one.
METRIC_LOOKING = re.compile(
    r"(?:^|[-\]):>] )(?:critic-)?(?:step|rollout|perf|eval|multi_turn|passrate) \d+(?:: \{| skipped:)"
)
# The common shape of a metric line whole, in one match: `(Actor pid=N[, ip=A]) [TS[ proc]] file:N - kind N:
# {...}` with no colour code, CR or repeat suffix (the caller checks). Every line it matches, parse_line and
# METRIC_MESSAGE read to the same fields: each part is its layer's first shape (a proc starting in lower case
# is no SGLang rank tag); any other line goes through them (tests/unit/test_metrics_parse.py compares).
_METRIC_HEAD = (
    r"(?:\((?:(?P<actor>[A-Za-z_][\w.]*) )?pid=\d+(?:, ip=[^()\s]+)?\) )?"
    r"\[" + _TS + r"(?: (?P<proc>[a-z][^\]\s]*))?\] "
    r"[\w./-]+\.\w+:\d+ - "
)
METRIC_LINE = re.compile(
    _METRIC_HEAD
    + r"(?P<kind>(?:critic-)?step|rollout|perf|eval|multi_turn|passrate) (?P<n>\d+): (?P<payload>\{.*\})"
)
# METRIC_LINE's head alone (actor, ts, proc): a line that is this head and then the message of the metric
# line before it (miles' second printing of a dict) is read from the head only: the head's spaces stand at
# fixed places and its location ends at the first ` - `, so where it ends METRIC_LINE's kind starts.
METRIC_HEAD = re.compile(_METRIC_HEAD)
# Literal pieces every metric line holds: found with str.find before any regex runs.
METRIC_NEEDLES = (": {", " skipped: ")


@dataclass(frozen=True, slots=True)
class ParsedLine:
    """The fields of one line; any field a shape does not carry is None."""

    actor: str | None  # Ray's actor class (or raylet/autoscaler); None without a prefix (the driver)
    pid: int | None
    ip: str | None
    ts: str | None  # the bracket's timestamp, as printed (node-local wall clock, no zone)
    proc: str | None  # miles' process name (newest format only)
    tags: str | None  # SGLang's rank tags (`DP0 TP0 EP3`)
    rank: int | None  # from the bracket only
    file: str | None
    lineno: int | None
    level: str | None  # a level word the line itself printed (Megatron's logger)
    message: str
    repeat: int  # 1, or K from Ray's "[repeated Kx across cluster]"
    shape: str  # the bracket shape's name, or "" (for tests and the unknown-shape count)

    @property
    def node(self) -> str:
        return self.ip or HEAD_NODE


def strip_repeat(text: str) -> tuple[str, int]:
    """Ray's repeat suffix cut from a line, and its count (1 without one)."""
    if text.endswith(")") or text.endswith("]"):
        m = REPEATED.search(text)
        if m is not None:
            return text[: m.start()], int(m.group(1))
    return text, 1


def parse_prefix_inner(inner: str) -> tuple[str | None, int | None, str | None]:
    """(actor, pid, ip) from the text inside Ray's parentheses."""
    m = _INNER.fullmatch(inner)
    if m is None:
        return inner or None, None, None
    if m["sys"]:
        return m["sys"], None, m["sip"]
    return m["actor"], int(m["pid"]), m["ip"]


def rank_of(proc: str | None) -> int | None:
    """The training rank a miles bracket name carries (`actor_cell0_rank3` -> 3), else None. SGLang's tags
    (`TP4 EP4`) number ranks inside one engine, not training ranks: they stay in `tags`."""
    if not proc:
        return None
    m = _RANK_PROC.search(proc)
    return int(m.group(1)) if m else None


def match_bracket(text: str, pos: int = 0) -> tuple[re.Match[str], Shape] | None:
    """The first bracket shape that matches at `pos`."""
    if not text.startswith("[", pos):
        return None
    for shape in BRACKETS:
        m = shape.pattern.match(text, pos)
        if m is not None:
            return m, shape
    return None


def bracket_proc(m: re.Match[str]) -> str | None:
    """miles' process name in a bracket (SGLang's rank tags are not one: they change from line to line)."""
    return m.groupdict().get("proc")


def bracket_tags(m: re.Match[str]) -> str | None:
    tags = m.groupdict().get("tags")
    return tags.strip() if tags else None


def parse_line(text: str) -> ParsedLine:
    """Every field of one line of any known shape (colour codes, CR and the repeat suffix allowed)."""
    text = text.rstrip("\r\n")
    if "\x1b" in text or "^[" in text:
        text = COLOUR.sub("", text)
    text, repeat = strip_repeat(text)
    pos, actor, pid, ip = 0, None, None, None
    if text.startswith("("):
        m = _PREFIX.match(text)
        if m is not None and _PREFIX_KEY_TEXT.fullmatch("(" + m["inner"]):
            actor, pid, ip = parse_prefix_inner(m["inner"])
            pos = m.end()
    ts = proc = tags = file = level = None
    lineno: int | None = None
    shape = ""
    found = match_bracket(text, pos)
    if found is not None:
        b, bshape = found
        ts, proc, tags, shape, pos = b["ts"], bracket_proc(b), bracket_tags(b), bshape.name, b.end()
    for loc in LOCATIONS:
        m = loc.pattern.match(text, pos)
        if m is not None:
            groups = m.groupdict()
            file, level = groups.get("file"), groups.get("level")
            lineno = int(groups["lineno"]) if groups.get("lineno") else None
            pos = m.end()
            break
    return ParsedLine(
        actor, pid, ip, ts, proc, tags, rank_of(proc), file, lineno, level, text[pos:], repeat, shape
    )


# ---------------------------------------------------------------- levels

# Level is a heuristic: miles prints no level name, so look for the words that errors and warnings carry.
_LEVELS = re.compile(
    r"(?P<error>\b(?:ERROR|CRITICAL|FATAL)\b|Traceback \(most recent call last\)|\b\w*(?:Error|Exception): )"
    r"|(?P<warning>\b(?:WARNING|WARN)\b|\b\w*Warning: )"
)
LEVEL_NAMES = ("info", "warning", "error")
# Literal pieces of every _LEVELS match: found with bytes.find (fast) before the regex confirms a line.
LEVEL_HINTS = (
    b"ERROR",
    b"CRITICAL",
    b"FATAL",
    b"Traceback (most recent call last)",
    b"Error: ",
    b"Exception: ",
    b"WARN",
    b"Warning: ",
)
LEVEL_CODES = {name: code for code, name in enumerate(LEVEL_NAMES)}


def level_of(text: str) -> int:
    """0 info, 1 warning, 2 error: a heuristic, since miles prints no level name."""
    code = 0
    for m in _LEVELS.finditer(text):
        if m.lastgroup == "error":
            return 2
        code = 1
    return code
