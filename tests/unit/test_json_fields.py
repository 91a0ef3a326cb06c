"""Fields reads decoded JSON the way the parsers always did: a missing, null or odd field is its default."""

from __future__ import annotations

import math

from backend.json_fields import Fields, as_int, objects

ODD: dict[str, object] = {
    "name": "gpu-0",
    "empty": "",
    "null": None,
    "zero": 0,
    "flag": True,
    "int_text": "42",
    "float_text": "3.9",
    "word": "many",
    "real": 7.5,
    "inf": float("inf"),
    "obj": {"inner": 1},
    "list": [{"a": 1}, 2, "x", {"b": 2}],
    "tuple": (1, 2),
}


def test_text_and_optional_text_fall_back_on_missing_null_and_empty() -> None:
    f = Fields(ODD)
    assert f.text("name") == "gpu-0" and f.text("zero") == "" and f.text("missing", "dflt") == "dflt"
    assert f.text("null", "dflt") == "dflt" and f.text("real") == "7.5"
    assert f.optional_text("empty") is None and f.optional_text("name") == "gpu-0"


def test_numbers_truncate_and_tolerate_what_is_not_one() -> None:
    f = Fields(ODD)
    assert [f.integer(k) for k in ("int_text", "float_text", "real", "flag")] == [42, 3, 7, 1]
    assert [f.integer(k, -1) for k in ("word", "null", "missing", "inf", "obj")] == [-1] * 5
    assert f.real("float_text") == 3.9 and f.real("word", 2.0) == 2.0 and f.real("zero", 9.0) == 9.0
    # a JSON number only: never text, never a bool
    assert f.number("real") == 7.5 and f.number("int_text") is None and f.number("flag") is None
    assert as_int("12") == 12 and as_int(None, 5) == 5


def test_objects_lists_and_the_empty_reader() -> None:
    f = Fields(ODD)
    assert f.obj("obj").integer("inner") == 1 and f.obj("name").raw == {} and f.obj("missing").text("x") == ""
    assert [o.raw for o in f.objs("list")] == [{"a": 1}, {"b": 2}] and f.objs("obj") == []
    assert objects("not a list") == [] and f.items("tuple") == [1, 2] and f.items("name") == []
    assert Fields.of([1, 2]).raw == {} and Fields.of({"k": "v"}).text("k") == "v"
    assert f.has("flag") and not f.has("zero") and f.value("null") is None


def test_strict_readers_take_only_their_own_json_type() -> None:
    """For files whose author must write the type (rules, catalogs, meta.json): no coercion, no bools."""
    f = Fields(ODD)
    assert f.string("empty") == "" and f.string("name") == "gpu-0"
    assert [f.string(k) for k in ("zero", "null", "missing", "list")] == [None] * 4
    assert (
        f.whole("zero") == 0 and [f.whole(k) for k in ("flag", "real", "int_text", "missing")] == [None] * 4
    )
    assert f.reading("real") == 7.5 and f.reading("zero") == 0.0
    assert all(math.isnan(f.reading(k)) for k in ("flag", "int_text", "null", "missing"))
