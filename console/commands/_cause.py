"""A failed run's diagnosis in lines of text, as `status` and `metrics` print it: the cause, where and when,
the line that said it, the frame, what to try, and what followed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from backend.node_names import NodeNames

if TYPE_CHECKING:
    from backend.signals.failures import Diagnosis


def cause_lines(found: Diagnosis, indent: str = "", names: NodeNames | None = None) -> list[str]:
    """The diagnosis in the words `status` and `metrics` print (its JSON is `Diagnosis.to_json`); a node the
    log names by IP or id by the cluster's name for it where `names` (the cluster's node list) knows it."""
    names = names or NodeNames()
    cause = found.cause
    place = (
        ("role", cause.role),
        ("actor", cause.actor),
        ("pid", cause.pid),
        ("node", names.shown(cause.node) if cause.node else None),
        ("rank", cause.rank),
        ("GPU", cause.gpu),
        ("at", cause.time),
    )
    where = ", ".join(f"{name} {value}" for name, value in place if value)
    out = [
        f"cause    {names.in_text(cause.message)}",
        f"  kind   {cause.title}",
        *_given((("  where  ", where),)),
        f"  line   {cause.line}",
        *_given((("  frame  ", cause.frame), ("  try    ", cause.try_), ("  note   ", found.doubt))),
        *(
            f"  then   {names.in_text(c.headline)}" + (f" (x{c.count})" if c.count > 1 else "")
            for c in found.consequences
        ),
    ]
    return [indent + line for line in out]


def _given(rows: tuple[tuple[str, str | None], ...]) -> list[str]:
    """Each labelled line whose value is there (an empty or missing one is left out)."""
    return [label + value for label, value in rows if value]
