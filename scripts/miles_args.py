"""Regenerate configs/miles/{args,choices}.toml: every flag miles' `train.py` parser knows, as data.

Why a script and not a hand-kept list: miles' parser is Megatron-LM's (its own groups plus dataclass-built
ones), miles' groups and SGLang's `ServerArgs` re-registered under `--sglang-`; only building that parser
gives the real set. The script exports miles and its Megatron-LM fork at the given commits from their git
directories (or takes checkouts), builds the parser in the oracle venv (tests/deep/build_env.sh: torch,
megatron-core deps and sglang on CPU, with the CPU stubs), and writes one line per option string: where it
comes from, its dest, how many values it takes, its type, its choices, its default and the file:line that
added it.

    .venv-deep/bin/python scripts/miles_args.py \\
        --miles-git /work/.mirror/radixark+miles/repo --miles-commit <sha> \\
        --megatron-git /work/.mirror/radixark+Megatron-LM/repo --megatron-commit <sha>

The parser is built, never run on an argv: nothing here starts a process group or touches a GPU. Modules
that only a running trainer needs (ray, polars, openai, sglang_router and two chat-template modules whose
sglang-miles imports the PyPI sglang lacks) are answered by inert stand-ins while the parser is built; the
`--router-*` flags (sglang_router's own) are therefore not listed and stay unchecked by prefix.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import hashlib
import importlib.abc
import importlib.machinery
import inspect
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import traceback
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STUB_ROOTS = ("six", "polars", "ray", "openai")
STUB_EXACT = (
    "sglang.srt.entrypoints.openai.protocol",
    "miles.utils.chat_template_utils.deepseek",
    "miles.utils.chat_template_utils.template",
)
UNCHECKED_PREFIXES = ("--router-",)
SKIP_FRAMES = ("argparse.py", "argument_utils.py", "miles_args.py")
SKIP_FUNCTIONS = ("new_add_argument_wrapper", "_add_prefixed_server_args")  # miles' --sglang- re-registration
ARGUMENTS_FILE = "miles/utils/arguments.py"
SPEC_FLAGS = {  # the spec fields that take a string miles' parser checks against a fixed set
    "train.attention_backend": "--attention-backend",
    "train.moe_token_dispatcher": "--moe-token-dispatcher-type",
    "train.recompute_granularity": "--recompute-granularity",
    "train.recompute_method": "--recompute-method",
    "rollout.sglang_attention_backend": "--sglang-attention-backend",
    "grpo.advantage_estimator": "--advantage-estimator",
    "grpo.kl_loss_type": "--kl-loss-type",
    "optimizer.name": "--optimizer",
    "optimizer.lr_decay_style": "--lr-decay-style",
    "model.normalization": "--normalization",
    "model.position_embedding_type": "--position-embedding-type",
}


class _AnyMeta(type):
    """Any attribute, call or item of a stand-in is a stand-in; a decorator returns what it decorates."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _AnyMeta(name, (_Any,), {})

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return cls

    def __iter__(cls) -> Iterator[Any]:
        return iter(())

    def __getitem__(cls, key: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__


class _Any(metaclass=_AnyMeta):
    pass


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _AnyMeta(name, (_Any,), {})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.split(".")[0] in STUB_ROOTS or fullname in STUB_EXACT:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _router_stub() -> None:
    """sglang_router's RouterArgs adds `--router-*` flags; its stand-in adds none."""

    class RouterArgs:
        @staticmethod
        def add_cli_args(parser: argparse.ArgumentParser, **_: Any) -> argparse.ArgumentParser:
            return parser

    root = types.ModuleType("sglang_router")
    root.__path__ = []
    launch = types.ModuleType("sglang_router.launch_router")
    launch.RouterArgs = RouterArgs  # type: ignore[attr-defined]
    sys.modules.update({"sglang_router": root, "sglang_router.launch_router": launch})


def export(git_dir: str, commit: str, dest: Path) -> None:
    """`git archive` of one commit into dest (no work tree needed; the mirrors are bare)."""
    data = subprocess.run(
        ["git", f"--git-dir={git_dir}", "archive", "--format=tar", commit],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")


SOURCES: dict[int, str] = {}


def _where(roots: tuple[Path, ...]) -> str:
    """file:line of the innermost frame that is not argparse or a wrapper, relative to its tree."""
    for frame in reversed(traceback.extract_stack()):
        name = frame.filename
        if any(name.endswith(s) for s in SKIP_FRAMES) or frame.name in SKIP_FUNCTIONS:
            continue
        for root in roots:
            if name.startswith(str(root)):
                return f"{Path(name).relative_to(root)}:{frame.lineno}"
        if "site-packages/" in name:
            return f"{name.split('site-packages/', 1)[1]}:{frame.lineno}"
        return f"{Path(name).name}:{frame.lineno}"
    return ""


def _config_class() -> type | None:
    """The dataclass a Megatron ArgumentGroupFactory builds flags from, when one is on the stack."""
    frame = sys._getframe(2)
    while frame is not None:
        cls = getattr(frame.f_locals.get("self"), "src_cfg_class", None)
        if isinstance(cls, type):
            return cls
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _field_line(cls: type, dest: str, roots: tuple[Path, ...]) -> str | None:
    """file:line of the dataclass field a factory-built flag comes from (the class or a base)."""
    for klass in cls.__mro__:
        try:
            lines, start = inspect.getsourcelines(klass)
            name = inspect.getsourcefile(klass) or ""
        except (OSError, TypeError):
            continue
        for offset, line in enumerate(lines):
            if re.match(rf"\s+{re.escape(dest)}\s*:", line):
                rel = next((str(Path(name).relative_to(r)) for r in roots if name.startswith(str(r))), name)
                return f"{rel}:{start + offset}"
    return None


@contextlib.contextmanager
def _recording_sources(roots: tuple[Path, ...]) -> Iterator[None]:
    """Every add_argument notes its file:line while the parser is built (slow: it reads sources)."""
    original = argparse._ActionsContainer.add_argument

    def add_argument(self: Any, *names: Any, **kwargs: Any) -> Any:
        action = original(self, *names, **kwargs)
        cls = _config_class()
        field = _field_line(cls, action.dest, roots) if cls is not None else None
        SOURCES[id(action)] = field or _where(roots)
        return action

    argparse._ActionsContainer.add_argument = add_argument  # type: ignore[method-assign]
    try:
        yield
    finally:
        argparse._ActionsContainer.add_argument = original  # type: ignore[method-assign]


def import_trees(miles: Path, megatron: Path) -> None:
    """The stand-ins installed and both exported trees first on sys.path (miles' and Megatron's imports)."""
    sys.meta_path.insert(0, _StubFinder())
    _router_stub()
    sys.path[:0] = [str(miles), str(megatron)]


def build_parser(miles: Path, megatron: Path) -> tuple[argparse.ArgumentParser, set[str], set[str]]:
    """miles' train.py parser; also the option strings Megatron alone and SGLang's ServerArgs define."""
    import_trees(miles, megatron)
    with _recording_sources((miles, megatron)):
        return _parsers()


def _parsers() -> tuple[argparse.ArgumentParser, set[str], set[str]]:
    from megatron.training import arguments as megatron_arguments  # type: ignore[import-not-found]

    meg = argparse.ArgumentParser(allow_abbrev=False)
    megatron_arguments.add_megatron_arguments(meg)
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]

    sgl = argparse.ArgumentParser(allow_abbrev=False)
    ServerArgs.add_cli_args(sgl)
    from miles.utils import arguments as miles_arguments  # type: ignore[import-not-found]

    parser = argparse.ArgumentParser(allow_abbrev=False)
    megatron_arguments.add_megatron_arguments(parser)
    sys.argv = ["train.py"]
    with contextlib.redirect_stderr(io.StringIO()):  # its partial parse complains of required flags
        miles_arguments.get_miles_extra_args_provider()(parser)
    meg_flags = {o for a in meg._actions for o in a.option_strings}
    sgl_flags = {
        f"--{prefix}-{o.lstrip('-')}"
        for a in sgl._actions
        for o in a.option_strings
        for prefix in ("sglang", "eval-sglang")  # miles registers ServerArgs twice (rollout, eval)
    }
    return parser, meg_flags, sgl_flags


def _origin(flag: str, source: str, meg: set[str], sgl: set[str]) -> str:
    if flag in sgl and source.startswith("sglang/"):
        return "sglang"
    if flag in meg and source.startswith("megatron/"):
        return "megatron"
    return "miles"


def _scalar(value: Any) -> Any:
    """A value as the command line spells it: an enum member by name (Megatron's enum_type_handler)."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (bool, int, float, str)):
        return value
    return None


def _nargs(action: argparse.Action) -> int | str:
    """Values the flag takes: 0 for a switch, 1 for one value, else argparse's nargs ('+', '*', '?')."""
    return action.nargs if isinstance(action.nargs, (int, str)) else 1


def describe(action: argparse.Action, flag: str, meg: set[str], sgl: set[str]) -> dict[str, Any]:
    source = SOURCES.get(id(action), "")
    switch = isinstance(
        action,
        (
            argparse._StoreTrueAction,
            argparse._StoreFalseAction,
            argparse._StoreConstAction,
            argparse._CountAction,
            argparse.BooleanOptionalAction,
        ),
    )
    entry: dict[str, Any] = {"origin": _origin(flag, source, meg, sgl), "dest": action.dest}
    entry["nargs"] = 0 if switch else _nargs(action)
    if not switch and action.type is not None:
        entry["type"] = getattr(action.type, "__name__", type(action.type).__name__)
    if action.choices is not None:
        choices = [c for c in (_scalar(c) for c in action.choices) if c is not None]
        unordered = isinstance(action.choices, (set, frozenset))  # a set's order changes between runs
        entry["choices"] = sorted(choices, key=str) if unordered else choices
    default = _scalar(action.default)
    if default is not None and default != argparse.SUPPRESS:
        entry["default"] = default
    entry["source"] = source
    return entry


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else json.dumps(str(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=True)


def render(flags: dict[str, dict[str, Any]], header: dict[str, str]) -> str:
    lines = [
        "# Every flag miles' train.py parser knows (miles, its Megatron-LM fork, SGLang ServerArgs), one per",
        "# option string. GENERATED by scripts/miles_args.py from the commits below: do not edit by hand.",
        "",
        "[source]",
        *(f"{k} = {_toml_value(v)}" for k, v in header.items()),
        f"unchecked_prefixes = {_toml_value(list(UNCHECKED_PREFIXES))}",
        "",
        "[flags]",
    ]
    for flag in sorted(flags):
        body = ", ".join(f"{k} = {_toml_value(v)}" for k, v in flags[flag].items())
        lines.append(f"{json.dumps(flag)} = {{ {body} }}")
    return "\n".join(lines) + "\n"


def render_choices(flags: dict[str, dict[str, Any]], header: dict[str, str]) -> str:
    """The spec fields' fixed sets: flag, allowed values, where the parser defines them, at which commit."""
    lines = [
        "# The fixed value sets of the spec fields whose flag miles' parser checks against choices.",
        "# GENERATED by scripts/miles_args.py (with configs/miles/args.toml): do not edit by hand.",
        "",
    ]
    for field, flag in SPEC_FLAGS.items():
        entry = flags[flag]
        at = header[entry["origin"]]
        lines += [
            f"[fields.{json.dumps(field)}]",
            f"flag = {json.dumps(flag)}",
            f"choices = {_toml_value(entry['choices'])}",
            f"source = {json.dumps(entry['source'])}",
            f"commit = {json.dumps(at)}",
            "",
        ]
    return "\n".join(lines)


def _sglang_version() -> str:
    from importlib.metadata import version

    return version("sglang")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--miles-git", required=True)
    ap.add_argument("--miles-commit", required=True)
    ap.add_argument("--megatron-git", required=True)
    ap.add_argument("--megatron-commit", required=True)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "configs" / "miles"))
    opts = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        miles, megatron = Path(tmp, "miles"), Path(tmp, "megatron")
        export(opts.miles_git, opts.miles_commit, miles)
        export(opts.megatron_git, opts.megatron_commit, megatron)
        arguments_sha = hashlib.sha256((miles / ARGUMENTS_FILE).read_bytes()).hexdigest()
        parser, meg, sgl = build_parser(miles, megatron)
        flags = {
            flag: describe(action, flag, meg, sgl)
            for action in parser._actions
            for flag in action.option_strings
            if flag.startswith("--") and flag != "--help"
        }
    header = {
        "miles": f"radixark/miles@{opts.miles_commit}",
        "megatron": f"radixark/Megatron-LM@{opts.megatron_commit}",
        "sglang": f"sglang {_sglang_version()} (PyPI; miles' sglang-miles branch builds on 0.5.16)",
        "arguments_sha256": arguments_sha,
        "arguments_file": ARGUMENTS_FILE,
    }
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "args.toml").write_text(render(flags, header), encoding="utf-8")
    (out / "choices.toml").write_text(render_choices(flags, header), encoding="utf-8")
    print(f"{len(flags)} flags, {len(SPEC_FLAGS)} spec fields -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
