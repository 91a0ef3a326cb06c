"""One name for a node wherever the console shows it: the dashboard's node name, the IP beside it.

Why one place: a log names a node by its IP (Ray's `ip=` prefix, `Worker IP address`, an actor's block) or
by its node id (`Node Id: …`, the node-dead alert), while the GPU pane, `nodes` and preflight name it by the
dashboard's node name. An operator reading "OOM on 10.0.0.3" next to a pane listing `gpu-07` cannot tell
they are the same machine. `NodeNames` maps both an IP and a node id (or a prefix of it) to the node's name,
from the cluster's own node list, and rewrites a message's IPs and ids in those words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

MIN_ID_PREFIX = 8  # the shortest hex run read as a node id (the console's own short form)
_IP = r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?!\w|\.\d)(?::\d+)?"
_ID = rf"(?<![0-9A-Za-z])[0-9a-fA-F]{{{MIN_ID_PREFIX},64}}(?![0-9A-Za-z])"
# a node named twice in a row ("10.0.0.3 (3f2a…)", "3f2a… (10.0.0.3)") is one mention
_MENTION = re.compile(rf"(?P<a>{_IP}|{_ID})(?: \((?P<b>{_IP}|{_ID})\))?")


class NodeLike(Protocol):
    """What a name is made of: `backend.cluster.telemetry.NodeSnapshot` has these."""

    @property
    def node_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def hostname(self) -> str: ...
    @property
    def ip(self) -> str: ...
    @property
    def shares_host(self) -> bool: ...


def display_name(node: NodeLike) -> str:
    """The node's name as every view shows it: the dashboard's node name, else its hostname (with its id's
    first characters where other nodes have that hostname too: nodes on one machine, a test cluster), its
    IP, or its id's first characters."""
    short = node.node_id[:MIN_ID_PREFIX]
    if not node.name and node.hostname and node.shares_host and short:
        return f"{node.hostname} {short}"
    return node.name or node.hostname or node.ip or short or "node"


def beside(name: str, extra: str) -> str:
    """`name (extra)`, said once: the one place a node's name gets its address (or id) beside it. A name
    that already holds `extra` stays as it is; where `extra` already holds the name (a label), `extra`."""
    if not extra or extra == name or extra in _words(name):
        return name
    if name in _words(extra):
        return extra
    return f"{name} ({extra})"


def _words(text: str) -> set[str]:
    """The names and addresses `text` is made of: `sim-node-3 (127.0.0.1)` -> {sim-node-3, 127.0.0.1}."""
    return {w for w in re.split(r"[ (),]+", text) if w}


def with_ip(name: str, ip: str) -> str:
    """`node-3 (10.0.0.3)`; the name alone where it is the IP (Ray's default node name) or no IP is known."""
    return beside(name, ip)


def label(node: NodeLike) -> str:
    """The name with what tells the node apart beside it: its IP, or (where the name is the IP, Ray's default,
    or no IP is known) its id's first characters, since nodes on one host share an IP."""
    name = display_name(node)
    if node.ip and node.ip != name:
        return beside(name, node.ip)
    return beside(name, node.node_id[:MIN_ID_PREFIX])


@dataclass(frozen=True, slots=True)
class NodeNames:
    """IP -> name and node id -> (name, IP), from one cluster's node list. An IP that several nodes share
    (nodes on one host, a loopback test cluster) names none of them: it is left as the log wrote it."""

    by_ip: dict[str, str] = field(default_factory=dict)
    by_id: dict[str, str] = field(default_factory=dict)  # node id -> its label

    @classmethod
    def of(cls, nodes: Iterable[NodeLike]) -> NodeNames:
        by_ip: dict[str, str] = {}
        shared: set[str] = set()
        by_id: dict[str, str] = {}
        for node in nodes:
            name = display_name(node)
            if node.node_id:
                by_id[node.node_id.lower()] = label(node)
            if node.ip in by_ip:
                shared.add(node.ip)
            elif node.ip:
                by_ip[node.ip] = name
        return cls({ip: name for ip, name in by_ip.items() if ip not in shared}, by_id)

    def _id(self, text: str) -> str | None:
        """The label of the one node whose id is or starts with `text`."""
        key = text.lower()
        if key.isdigit():  # a number (a time, a count) is not an id, even where an id starts with it
            return None
        found = self.by_id.get(key)
        if found is not None:
            return found
        hits = [v for k, v in self.by_id.items() if k.startswith(key)]
        return hits[0] if len(hits) == 1 else None

    def _resolve(self, token: str) -> tuple[str, str] | None:
        """(the name alone, as the node is shown) for an IP (with or without its port) or a node id; None
        where no single node has it."""
        host = token.rsplit(":", 1)[0] if token.count(".") == 3 else None
        if host is not None:
            name = self.by_ip.get(host)
            if name is None:
                return None
            if ":" in token:  # a port belongs to the address: keep it whole, the name after it
                return name, token if name == host else beside(token, name)
            return name, with_ip(name, host)
        shown = self._id(token)
        return None if shown is None else (shown.split(" (", 1)[0], shown)

    def shown(self, token: str) -> str:
        """`token` (an IP, IP:port or node id) as the console names that node: `node-3 (10.0.0.3)`."""
        found = self._resolve(token)
        return token if found is None else found[1]

    def in_text(self, text: str) -> str:
        """`text` with every IP and node id of a known node in the console's words. Idempotent: a mention
        already written as `name (IP)` is left alone."""
        if not (self.by_ip or self.by_id) or not text:
            return text
        return _MENTION.sub(lambda m: self._mention(m, text), text)

    def _mention(self, match: re.Match[str], text: str) -> str:
        """One mention (an IP, IP:port or id, and maybe a second one of the same node in parentheses)."""
        first, second = match.group("a"), match.group("b")
        found = self._resolve(first)
        other = self._resolve(second) if second is not None else None
        if found is None:
            return _by_second(match, other)
        if _named(text, match, found):
            return match.group(0)
        if other is not None and other[0] == found[0]:  # "10.0.0.3 (3f2a…)": one node, named once
            return found[1] if "." in first else other[1]
        return found[1] if second is None else beside(found[1], self.shown(second))


def _by_second(match: re.Match[str], other: tuple[str, str] | None) -> str:
    """A mention whose first token names no single node (an IP several nodes share): the second one's node,
    its address said once (`127.0.0.1 (3f2a…)` -> `sim-node-3 (127.0.0.1)`); else as the log wrote it."""
    first = match.group("a")
    if other is None or other[0] == first:  # unknown, or already "127.0.0.1 (3f2a…)"
        return match.group(0)
    return beside(first, other[1])


def _named(text: str, match: re.Match[str], found: tuple[str, str]) -> bool:
    """The mention is already in the console's words: right after `name (`, before ` (name)`, or inside its
    node's label as shown (`vm 3f2a1b2c (127.0.0.1)`)."""
    name, shown = found
    if text[: match.start()].endswith(f"{name} (") or text[match.end() :].startswith(f" ({name})"):
        return True
    at = text.find(shown, max(0, match.start() - len(shown)), match.end() + len(shown))
    while 0 <= at < match.end():
        if at + len(shown) > match.start():
            return True
        at = text.find(shown, at + 1, match.end() + len(shown))
    return False
