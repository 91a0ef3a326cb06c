"""A failed run's diagnosis in lines of text, as `status` and `metrics` print it: the cause, where and when,
the line that said it, the frame, what to try, and what followed."""

from __future__ import annotations

from typing import Any

_WHERE = (
    ("role", "role"),
    ("actor", "actor"),
    ("pid", "pid"),
    ("node", "node"),
    ("rank", "rank"),
    ("GPU", "gpu"),
    ("at", "time"),
)


def cause_lines(cause: dict[str, Any], indent: str = "") -> list[str]:
    """`cause` is the diagnosis' JSON (`Diagnosis.to_json`)."""
    where = ", ".join(f"{name} {cause[key]}" for name, key in _WHERE if cause.get(key))
    out = [f"cause    {cause['message']}", f"  kind   {cause['title']}"]
    if where:
        out.append(f"  where  {where}")
    out.append(f"  line   {cause['line']}")
    if cause.get("frame"):
        out.append(f"  frame  {cause['frame']}")
    if cause.get("try"):
        out.append(f"  try    {cause['try']}")
    if cause.get("doubt"):
        out.append(f"  note   {cause['doubt']}")
    for c in cause.get("consequences") or []:
        out.append(f"  then   {c['title']}: {c['message']}" + (f" (x{c['count']})" if c["count"] > 1 else ""))
    return [indent + line for line in out]
