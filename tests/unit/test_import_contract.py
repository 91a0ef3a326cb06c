"""The headless core never imports Textual, nor the console above it; the unit tests never import Ray.

Two checks over every file under backend/, found by walking the tree (so modules added later are covered):
- statically, no file names `textual` or `console` in an import statement;
- dynamically, every library module is imported in a fresh interpreter, and afterwards no `textual` and
  no `console` module is loaded (this catches the indirect routes, e.g. through a third-party package).
A program (a `__main__` module, or a script whose top level calls `sys.exit`) would run when imported,
so the dynamic check leaves it to the static one.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BACKEND = ROOT / "backend"
FORBIDDEN = ("textual", "console")

_PROBE = """
import importlib, json, sys
names = json.loads(sys.argv[1])
for name in names:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {forbidden!r})))
"""


def _sources() -> list[Path]:
    return sorted(p for p in BACKEND.rglob("*.py") if "__pycache__" not in p.parts)


def _imported_roots(tree: ast.Module) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def _is_program(path: Path, tree: ast.Module) -> bool:
    if path.stem == "__main__":
        return True
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if isinstance(call, ast.Call) and ast.unparse(call.func) == "sys.exit":
            return True
    return False


def _library_modules() -> list[str]:
    """Dotted names of the importable, non-program modules (in regular packages, as the walk sees them)."""
    names = []
    for path in _sources():
        if not (path.parent / "__init__.py").is_file():
            continue  # a plain directory (e.g. the fake NVML's sitecustomize dir) is not a package
        if _is_program(path, ast.parse(path.read_text(encoding="utf-8"))):
            continue
        names.append(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"))
    return names


def test_no_backend_file_imports_textual_or_console() -> None:
    sources = _sources()
    assert len(sources) > 20  # the walk found the tree
    bad = {
        str(p.relative_to(ROOT)): sorted(
            _imported_roots(ast.parse(p.read_text(encoding="utf-8"))) & set(FORBIDDEN)
        )
        for p in sources
    }
    assert {k: v for k, v in bad.items() if v} == {}


def test_importing_every_backend_module_loads_neither_textual_nor_console() -> None:
    names = _library_modules()
    assert {"backend.settings", "backend.plan", "backend.cluster", "backend.signals", "backend.demo"} <= set(
        names
    )
    probe = _PROBE.replace("{forbidden!r}", repr(set(FORBIDDEN)))
    out = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(names)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


_UNIT_PROBE = """
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])  # tests/support, as tests/conftest.py puts it
loaded = {}
for path in json.loads(sys.argv[2]):
    had = {m for m in sys.modules if m.split(".")[0] == "ray"}
    spec = importlib.util.spec_from_file_location("unit_" + path.rsplit("/", 1)[-1][:-3], path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    new = sorted(m for m in sys.modules if m.split(".")[0] == "ray" and m not in had)
    if new:
        loaded[path.rsplit("/", 1)[-1]] = new[:3]
print(json.dumps(loaded))
"""


def test_importing_every_unit_test_module_loads_no_ray() -> None:
    """The unit tier is the fast one (`scripts/test --fast`): Ray's import alone takes seconds, and a unit
    test that needs Ray belongs in tests/cluster."""
    units = sorted(str(p) for p in (ROOT / "tests" / "unit").glob("test_*.py"))
    assert len(units) > 20  # the walk found the tier
    out = subprocess.run(
        [sys.executable, "-c", _UNIT_PROBE, str(ROOT / "tests" / "support"), json.dumps(units)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}
