"""A command's `--flag` groups, one rule for every reader of an argv (the comparison's flags, a resume's
plan): `--a v`, `--a=v`, `--a v1 v2` (nargs) and a bare `--a`; stray positionals and `--` are skipped."""

from __future__ import annotations


def flag_groups(tokens: list[str]) -> list[tuple[str, list[str]]]:
    """(name, values) per flag, in order; a bare flag has no values."""
    out: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("--") or tok == "--":
            continue
        name, eq, value = tok.partition("=")
        if eq:
            out.append((name, [value]))
            continue
        values = []
        while i < len(tokens) and not tokens[i].startswith("--"):
            values.append(tokens[i])
            i += 1
        out.append((name, values))
    return out
