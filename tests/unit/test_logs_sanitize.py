"""The sanitiser: nothing a training process prints may drive the operator's terminal."""

from __future__ import annotations

import functools
import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.sanitize import (
    _SGR_BYTES,
    DEFAULT_LINE_CAP,
    TRUNCATION_MARK,
    cap_line,
    clean_chunk,
    sanitize_text,
    strip_sgr,
)
from backend.signals.store import LogStore

UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
UNSAFE_LINE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

# Every kind of escape sequence a process can print, with what must survive of it.
HOSTILE = [
    ("\x1b[2m\x1b[36m(Actor pid=1)\x1b[0m hi", "(Actor pid=1) hi"),  # SGR (Ray's prefix colours)
    ("a\x1b[2Jb\x1b[1;31Hc\x1b[?25ld", "abcd"),  # CSI: clear screen, cursor move, private mode
    ("x\x1b]52;c;c2VjcmV0\x07y", "xy"),  # OSC 52 clipboard write, BEL-terminated
    ("x\x1b]52;c;c2VjcmV0\x1b\\y", "xy"),  # OSC 52, ST-terminated
    (
        "see \x1b]8;;http://evil.example/\x1b\\docs\x1b]8;;\x1b\\ now",
        "see docs now",
    ),  # OSC 8 link: text stays
    ("t\x1b]0;pwned title\x07t", "tt"),  # OSC 0 window title
    ("d\x1bPq#0;2;0;0;0\x1b\\d", "dd"),  # DCS (sixel)
    ("a\x1b_apc payload\x1b\\b\x1b^pm\x1b\\c\x1bXsos\x1b\\d", "abcd"),  # APC, PM, SOS
    ("r\x1bcr", "rr"),  # RIS (full reset)
    ("g\x1b(0q\x1b(Bg", "gqg"),  # charset switch (DEC graphics)
    ("k\x1b=\x1b>k", "kk"),  # keypad modes
    ("c1\x9b31mred\x9d0;title\x9c end", "c1red end"),  # 8-bit CSI and OSC
    ("unterminated \x1b]52;c;AAAA", "unterminated "),  # OSC with no terminator: payload dropped
    ("nul\x00bel\x07bs\x08del\x7f", "nulbelbsdel"),  # C0 controls and DEL
    ("tab\tkept", "tab\tkept"),
    ("bidi \u202eevil\u202c ok", "bidi evil ok"),  # Trojan-Source override
    ("10%\r50%\r100%", "100%"),  # tqdm-style progress bar: last state
    ("line\r", "line"),  # CR-LF remnant
]


def test_every_escape_kind_is_removed_and_its_payload_with_it() -> None:
    for raw, want in HOSTILE:
        assert sanitize_text(raw) == want, raw
        assert clean_chunk((raw + "\n").encode()) == (want + "\n").encode(), raw
    assert "c2VjcmV0" not in sanitize_text("x\x1b]52;c;c2VjcmV0\x07y")


def test_line_breaks_are_kept_and_counted() -> None:
    text = "a\x1b[31m\nb\r\nc\x1b]0;x\nd\n"
    assert sanitize_text(text).count("\n") == 4


def test_long_lines_are_cut_with_a_marker() -> None:
    line = "x" * (DEFAULT_LINE_CAP + 500)
    out = cap_line(line)
    assert out.startswith("x" * DEFAULT_LINE_CAP) and out.endswith("[truncated 500 chars]")
    assert cap_line("short") == "short"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x2070), max_size=300))
def test_sanitize_text_never_leaves_a_control(text: str) -> None:
    out = sanitize_text(text)
    assert "\x1b" not in out
    assert UNSAFE.search(out) is None
    assert out.count("\n") == text.count("\n")
    assert all(UNSAFE_LINE.search(line) is None for line in out.split("\n"))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "\x1b",
                "[",
                "]",
                "\x07",
                "\\",
                "P",
                "31",
                ";",
                "m",
                "\r",
                "\n",
                "\x9b",
                "\x9d",
                "\x9c",
                "\x00",
                "a",
                "é",
                "\u202e",
                "8",
                "52",
                "c",
            ]
        ),
        max_size=80,
    )
)
def test_escape_fragments_in_any_order_never_survive(parts: list[str]) -> None:
    text = "".join(parts)
    assert UNSAFE.search(sanitize_text(text)) is None
    assert UNSAFE.search(clean_chunk((text + "\n").encode()).decode()) is None


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=2000), cuts=st.lists(st.integers(0, 2000), max_size=6))
def test_store_lines_are_safe_for_any_bytes_split_anywhere(
    tmp_path_factory, data: bytes, cuts: list[int]
) -> None:
    store = LogStore(tmp_path_factory.mktemp("spool"), run_id="prop")
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    for a, b in itertools.pairwise(points):
        store.append(data[a:b])
    store.flush()
    read = data.replace(b"\x00", b"")  # NULs are dropped (and counted) before lines are cut
    if b"\n" not in read and b"\r" in read.rstrip(b"\r"):  # a CR-only log: its lines end at CRs
        read = read.replace(b"\r", b"\n")
    expected_lines = read.count(b"\n") + (0 if read.endswith(b"\n") or not read else 1)
    assert len(store) == expected_lines
    for line in store.lines(0, len(store)):
        assert UNSAFE_LINE.search(line.text) is None, line.text
    store.close()


def test_invalid_utf8_is_replaced_not_fatal(tmp_path) -> None:
    store = LogStore(tmp_path, run_id="u")
    store.append(b"bad \xff\xfe bytes\nsplit \xe2\x82")
    store.append(b"\xac euro\n")  # a multi-byte character split across two appends
    assert store.line(0).text == "bad \ufffd\ufffd bytes"
    assert store.line(1).text == "split \u20ac euro"
    store.close()


def test_one_megabyte_line_is_truncated_and_bounded_while_pending(tmp_path) -> None:
    store = LogStore(tmp_path, run_id="big")
    blob = b"y" * (1 << 20)
    for i in range(0, len(blob), 4096):  # no newline yet: the pending buffer must stay bounded
        store.append(blob[i : i + 4096])
        assert len(store.front.pending) <= 4 * store.line_cap
    store.append(b"\nnext\n")
    first = store.line(0).text
    assert first.startswith("y" * 100) and "truncated" in first
    assert len(first) < store.line_cap + 100
    assert store.line(1).text == "next"
    # a 1 MB line arriving in one piece is capped too
    store.append(b"\x1b[31m" + b"z" * (1 << 20) + b"\x1b[0m\n")
    assert len(store.line(2).text) < store.line_cap + 100 and "\x1b" not in store.line(2).text
    store.close()


@pytest.mark.parametrize("piece", [777, 4096, 1 << 20])
@pytest.mark.parametrize("lead", [0, 37, 500])
def test_a_long_line_says_how_much_was_cut_however_it_arrives(tmp_path, piece: int, lead: int) -> None:
    """The count in the mark is the line's, whether it came whole or held over many pieces (a held line
    cut while waiting was once cut a second time, its mark saying only the mark's own length)."""
    store = LogStore(tmp_path, run_id=f"long{piece}-{lead}", line_cap=1000)
    data = b"a" * lead + b"\n" + b"x" * 6100 + b"\nnext\n"
    for i in range(0, len(data), piece):
        store.append(data[i : i + piece])
    store.flush()
    line = store.line(1).text
    assert line == "x" * 1000 + TRUNCATION_MARK.format(n=5100)
    assert store.line(2).text == "next" and store.unreadable.long_lines == 1
    store.close()


def test_progress_bar_longer_than_the_cap_keeps_its_last_state(tmp_path) -> None:
    store = LogStore(tmp_path, run_id="bar", line_cap=200)
    for pct in range(0, 101):
        store.append(f"\rRollout generation: {pct:3d}%|{'#' * (pct // 10)}")
    store.append("\n")
    assert store.line(0).text == "Rollout generation: 100%|##########"
    store.close()


# Pieces that make partial, nested, caret-spelt and non-SGR escapes when strung together at random.
_SGR_SOUP = st.lists(
    st.sampled_from(
        [
            b"\x1b",
            b"[",
            b"\x1b[",
            b"2m",
            b"36m",
            b"0m",
            b"32m",
            b"1;31m",
            b";",
            b"m",
            b"3",
            b"\x1b[2m\x1b[36m",
            b"\x1b[0m",
            b"^[[36m",
            b"(A pid=1)",
            b" ",
            b"\r",
            b"\n",
            b"\x00",
            b"\x9b",
            b"\xff",
            b"\xc2\x9b",
            b"\x1b]8;;x\x07",
            b"\x1b[2J",
            b"\x1b[?25l",
            b"\x1b\\",
            b"text",
        ]
    ),
    max_size=60,
).map(b"".join)


@settings(max_examples=400, deadline=None)
@given(data=_SGR_SOUP)
def test_sgr_strip_is_the_regex_sub_byte_for_byte(data: bytes) -> None:
    assert strip_sgr(data) == _SGR_BYTES.sub(b"", data)


def _hear(heard: list[str], _first: int, _count: int, text: str) -> None:
    heard.append(text)


@settings(max_examples=200, deadline=None)
@given(data=_SGR_SOUP, cut=st.integers(0, 400))
def test_a_chunk_cut_anywhere_stores_what_it_stores_whole(tmp_path_factory, data: bytes, cut: int) -> None:
    """The store joins a held partial line to the next chunk (one copy, through a memoryview): cut at any
    byte, even inside an escape, a chunk's spool and listener text are those of the chunk appended whole."""
    spools = []
    for pieces in ([data], [data[:cut], data[cut:]]):
        store = LogStore(tmp_path_factory.mktemp("spool"), run_id="cut")
        heard: list[str] = []
        store.subscribe(functools.partial(_hear, heard))
        for piece in pieces:
            store.append(piece)
        store.flush()
        spool = store.spool_bytes(0, len(store))
        assert "".join(heard).encode("utf-8") == spool
        spools.append(spool)
        store.close()
    assert spools[0] == spools[1]
