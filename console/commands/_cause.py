"""A failed run's diagnosis in lines of text, as `status` and `metrics` print it: the cause, where and when,
the line that said it, the frame, what to try, and what followed."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backend.signals.failures import Diagnosis


def cause_lines(found: Diagnosis, indent: str = "") -> list[str]:
    """The diagnosis in the words `status` and `metrics` print (its JSON is `Diagnosis.to_json`)."""
    cause = found.cause
    place = (
        ("role", cause.role),
        ("actor", cause.actor),
        ("pid", cause.pid),
        ("node", cause.node),
        ("rank", cause.rank),
        ("GPU", cause.gpu),
        ("at", cause.time),
    )
    where = ", ".join(f"{name} {value}" for name, value in place if value)
    out = [f"cause    {cause.message}", f"  kind   {cause.title}"]
    if where:
        out.append(f"  where  {where}")
    out.append(f"  line   {cause.line}")
    if cause.frame:
        out.append(f"  frame  {cause.frame}")
    if cause.try_:
        out.append(f"  try    {cause.try_}")
    if found.doubt:
        out.append(f"  note   {found.doubt}")
    for c in found.consequences:
        out.append(f"  then   {c.title}: {c.message}" + (f" (x{c.count})" if c.count > 1 else ""))
    return [indent + line for line in out]
