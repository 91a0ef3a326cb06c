"""Read the Python reprs miles prints (`{'train/loss': nan, 'passrate/pass@1': np.float64(0.5)}`) as data.

`eval` would run whatever a log line says, and `ast.literal_eval` rejects exactly the reprs miles produces:
bare `nan`/`inf` (names), `np.float64(0.5)` / `np.int64(3)` (calls), and the odd `tensor(0.1000)`. So this
is a tiny tokenizer and recursive-descent parser for dict/list/tuple/str/number/bool/None, those names, and
calls of an allow-listed set of scalar constructors with one literal argument. Nothing is ever executed.
"""

from __future__ import annotations

import ast
import math
import re

from backend.errors import ConsoleError

MAX_DEPTH = 32

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>[0-9][0-9_]*(?:\.[0-9_]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?)
    | (?P<str>[rRbBuU]{0,2}(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"))
    | (?P<name>[A-Za-z_][A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)*)
    | (?P<op>[{}\[\]():,=+-])
    )""",
    re.VERBOSE,
)
_NAMES: dict[str, float | bool | None] = {
    "nan": math.nan,
    "NaN": math.nan,
    "inf": math.inf,
    "Infinity": math.inf,
    "infinity": math.inf,
    "True": True,
    "False": False,
    "None": None,
    "np.True_": True,
    "np.False_": False,
}
# Scalar constructors whose repr miles can print, mapped to how to coerce their one argument.
_CALLS: dict[str, type[float] | type[int] | type[bool] | type[str]] = {
    f"{mod}.{name}": kind
    for mod in ("np", "numpy")
    for name, kind in (
        ("float64", float),
        ("float32", float),
        ("float16", float),
        ("longdouble", float),
        ("int64", int),
        ("int32", int),
        ("int16", int),
        ("int8", int),
        ("uint64", int),
        ("uint32", int),
        ("uint8", int),
        ("bool_", bool),
        ("str_", str),
    )
} | {"tensor": float, "torch.tensor": float, "float": float, "int": int}


class LiteralError(ConsoleError):
    """The text is not a repr this parser understands."""


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str]] = []
        pos, end = 0, len(text)
        while pos < end:
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise LiteralError(f"unexpected character {text[pos]!r} at offset {pos}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok[0] == "end" or (value is not None and tok[1] != value):
            raise LiteralError(f"expected {value or 'a value'}, found {tok[1] or 'end of text'!r}")
        self.i += 1
        return tok

    def value(self, depth: int = 0) -> object:
        if depth > MAX_DEPTH:
            raise LiteralError("nested too deeply")
        kind, text = self.take()
        if kind == "num":
            return _number(text)
        if kind == "str":
            return _string(text)
        if kind == "name":
            return self._name(text, depth)
        if text in "+-":
            return self._signed(text, depth)
        return self._opened(text, depth)

    def _name(self, text: str, depth: int) -> object:
        """A constant (`True`, `nan`, ...) or a known call (`np.float64(...)`, `tensor(...)`)."""
        if text in _NAMES:
            return _NAMES[text]
        if text in _CALLS and self.peek() == ("op", "("):
            return self.call(_CALLS[text], depth)
        raise LiteralError(f"unknown name {text!r}")

    def _signed(self, sign: str, depth: int) -> object:
        """A number after its sign (nothing else takes one)."""
        inner = self.value(depth + 1)
        if isinstance(inner, bool) or not isinstance(inner, int | float):
            raise LiteralError(f"sign before a non-number {inner!r}")
        return -inner if sign == "-" else inner

    def _opened(self, text: str, depth: int) -> object:
        """A dict, list or tuple its opening bracket starts."""
        if text == "{":
            return self.container("}", depth, is_dict=True)
        if text == "[":
            return self.container("]", depth)
        if text == "(":
            return tuple(self.container(")", depth))
        raise LiteralError(f"unexpected {text!r}")

    def container(self, close: str, depth: int, is_dict: bool = False) -> dict[object, object] | list[object]:
        mapping: dict[object, object] = {}
        items: list[object] = []
        while self.peek()[1] != close:
            item = self.value(depth + 1)
            if is_dict:
                self.take(":")
                try:
                    mapping[item] = self.value(depth + 1)
                except TypeError:
                    raise LiteralError(f"unhashable dict key {item!r}") from None
            else:
                items.append(item)
            if self.peek()[1] != close:
                self.take(",")
        self.take(close)
        return mapping if is_dict else items

    def call(self, kind: type, depth: int) -> object:
        self.take("(")
        arg = self.value(depth + 1)
        while self.peek()[1] == ",":  # keyword arguments like tensor(0.1, device='cuda:0') are ignored
            self.take(",")
            if self.peek()[1] == ")":
                break
            self.take()
            self.take("=")
            self._skip_value(depth + 1)
        self.take(")")
        try:
            return kind(arg)
        except (TypeError, ValueError, OverflowError):
            raise LiteralError(f"bad argument {arg!r} for a scalar constructor") from None

    def _skip_value(self, depth: int) -> None:
        kind, text = self.peek()
        if kind == "name" and text not in _NAMES and text not in _CALLS:
            self.take()  # e.g. dtype=torch.float64
            return
        self.value(depth)


def _number(text: str) -> int | float:
    text = text.replace("_", "")
    if re.fullmatch(r"[0-9]+", text):
        if len(text) > 400:
            raise LiteralError("integer too long")
        return int(text)
    return float(text)


def _string(text: str) -> str:
    body = text.lstrip("rRbBuU")
    if "\\" not in body:
        return body[1:-1]
    try:
        value = ast.literal_eval(text)  # a single string-literal token, already validated by the tokenizer
    except (ValueError, SyntaxError) as err:
        raise LiteralError(f"bad string literal: {err}") from None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def parse_literal(text: str) -> object:
    """Parse one repr; raise `LiteralError` (one line) when the text is anything else."""
    parser = _Parser(text)
    value = parser.value()
    if parser.peek()[0] != "end":
        raise LiteralError(f"trailing text after the value: {parser.peek()[1]!r}")
    return value
