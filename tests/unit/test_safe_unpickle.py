"""The restricted unpickler: built-in types come back, every class and persistent id is refused unrun, with
a line naming what the file holds; torch.save's zip layout (reference/miles-rollout-data.md §2) is read."""

from __future__ import annotations

import io
import os
import pickle
import sys
import types
import zipfile

import pytest

from backend.demo.torch_zip import torch_zip_bytes, write_torch_zip
from backend.safe_unpickle import BrokenPickleError, PickleRefusedError, load_path, loads


class _Payload:
    """A pickle that, loaded by a plain unpickler, would run a shell command writing a marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Plain:
    def __init__(self) -> None:
        self.x = 1


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_reduce_payload_is_refused_without_running(tmp_path, protocol):
    marker = tmp_path / "ran"
    data = pickle.dumps({"samples": [_Payload(str(marker))]}, protocol=protocol)
    with pytest.raises(PickleRefusedError) as err:
        loads(data, "rollout 0")
    assert not marker.exists()
    assert "system" in err.value.holds[0]
    assert "needs torch/miles" in str(err.value)


def test_a_class_instance_is_refused_and_named():
    with pytest.raises(PickleRefusedError) as err:
        loads(pickle.dumps([_Plain()], protocol=2))
    assert err.value.holds[0] == f"{__name__}._Plain"


def test_a_persistent_id_is_refused():
    class WithPid(pickle.Pickler):
        def persistent_id(self, obj):
            return ("storage", "FloatStorage", "0", "cpu", 4) if obj == "tensor" else None

    buf = io.BytesIO()
    WithPid(buf, protocol=2).dump({"x": "tensor"})
    with pytest.raises(PickleRefusedError) as err:
        loads(buf.getvalue())
    assert "persistent id" in err.value.holds[0] and "storage" in err.value.holds[0]


def test_builtins_come_back_as_they_were():
    # What a miles sample holds, in every protocol (torch.save uses 2).
    obj = {"a": [1, 2.5, "x", None, True, (1, 2), {"k": -1.5e-3}], "n": -(10**30), "s": "é</think>"}
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert loads(pickle.dumps(obj, protocol=protocol)) == obj
    richer = {"set": {3}, "frozen": frozenset({4}), "bytes": b"b"}  # opcodes of their own from protocol 4
    assert loads(pickle.dumps(richer, protocol=4)) == richer


def test_before_protocol_4_a_set_is_a_class_and_refused():
    with pytest.raises(PickleRefusedError, match="builtin"):
        loads(pickle.dumps({3}, protocol=2))


def _numpy_array_pickle(monkeypatch) -> bytes:
    """What numpy writes for an int32 array (routing replay's `rollout_routed_experts`), without numpy: the
    same GLOBAL names (numpy.core.multiarray._reconstruct, numpy.ndarray), from stand-in modules."""
    numpy = types.ModuleType("numpy")
    core = types.ModuleType("numpy.core")
    multiarray = types.ModuleType("numpy.core.multiarray")

    def _reconstruct(cls, shape, dtype):
        raise AssertionError("never called")

    class ndarray:
        def __reduce__(self):
            return (_reconstruct, (ndarray, (0,), b"b"), (1, (3,), "i4", False, b"\x01\0\0\0" * 3))

    _reconstruct.__module__, _reconstruct.__qualname__ = "numpy.core.multiarray", "_reconstruct"
    ndarray.__module__, ndarray.__qualname__ = "numpy", "ndarray"
    numpy.ndarray, multiarray._reconstruct = ndarray, _reconstruct  # type: ignore[attr-defined]
    for name, mod in (("numpy", numpy), ("numpy.core", core), ("numpy.core.multiarray", multiarray)):
        monkeypatch.setitem(sys.modules, name, mod)
    sample = {"group_index": 0, "index": 0, "reward": 1, "rollout_routed_experts": ndarray()}
    return pickle.dumps({"rollout_id": 0, "metadata": {}, "samples": [sample]}, protocol=2)


def test_numpy_array_in_a_torch_zip_is_refused_naming_numpy(tmp_path, monkeypatch):
    raw = _numpy_array_pickle(monkeypatch)
    monkeypatch.undo()
    path = tmp_path / "0.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("0/data.pkl", raw)
    with pytest.raises(PickleRefusedError) as err:
        load_path(path)
    assert err.value.holds[:2] == ("numpy.core.multiarray._reconstruct", "numpy.ndarray")
    held = "needs torch/miles to read: it holds numpy.core.multiarray._reconstruct, numpy.ndarray"
    assert held in str(err.value)


def test_torch_zip_layout_is_read(tmp_path):
    obj = {"rollout_id": 3, "metadata": {}, "samples": [{"group_index": 0, "reward": 1}]}
    path = write_torch_zip(tmp_path / "eval_3.pt", obj)
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        members = ("data.pkl", "version", "byteorder", ".format_version", ".data/serialization_id")
        assert {f"eval_3/{m}" for m in members} <= names
        info = zf.getinfo("eval_3/data.pkl")
        assert info.compress_type == zipfile.ZIP_STORED
        header_end = info.header_offset + 30 + len(info.filename) + len(info.extra)
        assert header_end % 64 == 0  # torch aligns each record's data
    assert load_path(path) == obj


def test_raw_pickle_file_is_read(tmp_path):
    path = tmp_path / "r.pkl"
    path.write_bytes(pickle.dumps({"k": [1]}))
    assert load_path(path) == {"k": [1]}


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9, 0.99])
def test_half_written_zip_is_broken_not_empty(tmp_path, fraction):
    samples = [{"group_index": g, "response": "x" * 200} for g in range(50)]
    path = write_torch_zip(tmp_path / "1.pt", {"rollout_id": 1, "samples": samples}, partial=fraction)
    with pytest.raises(BrokenPickleError):
        load_path(path)


def test_truncated_raw_pickle_is_broken():
    data = pickle.dumps({"samples": list(range(1000))}, protocol=2)
    with pytest.raises(BrokenPickleError):
        loads(data[: len(data) // 2])


def test_zip_without_data_pkl_and_oversize(tmp_path):
    path = tmp_path / "0.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("0/other", b"x")
    with pytest.raises(BrokenPickleError, match=r"data\.pkl"):
        load_path(path)
    path.write_bytes(torch_zip_bytes({"x": "y" * 5000}, "0"))
    with pytest.raises(BrokenPickleError, match="limit"):
        load_path(path, max_bytes=1000)
