"""Write a `torch.save` archive of built-in objects with the standard library only (no torch).

Why: the simulated trainer and the tests write miles' `rollout_data/<N>.pt` exactly as `torch.save` lays it
out (reference/miles-rollout-data.md §2; checked once against torch 2.13's own torch.save: the same members in
the same order, 64-byte aligned data, and byte-identical data.pkl): a zip of stored members `<stem>/data.pkl`
(pickle protocol 2, torch's default), `.format_version`, `.storage_alignment`, `byteorder`, `version`,
`.data/serialization_id`, each member's data aligned the way torch's stream writer pads its local headers.
`partial` writes only a prefix of it: the half-written file a reader can catch (torch.save writes in place).
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import zipfile
from pathlib import Path

ALIGNMENT = 64
PICKLE_PROTOCOL = 2
_LOCAL_HEADER = 30
_PAD_ID = 0x4246  # "FB", the extra-field id torch's writer pads with


def torch_zip_bytes(obj: object, stem: str, serialization_id: str = "0" * 40) -> bytes:
    """The bytes `torch.save(obj, f"{stem}.pt")` writes for an object of built-in types."""
    buf = io.BytesIO()
    records = [  # torch's order
        ("data.pkl", pickle.dumps(obj, protocol=PICKLE_PROTOCOL)),
        (".format_version", b"1"),
        (".storage_alignment", str(ALIGNMENT).encode()),
        ("byteorder", b"little"),
        ("version", b"3\n"),
        (".data/serialization_id", serialization_id.encode()),
    ]
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in records:
            info = zipfile.ZipInfo(f"{stem}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            info.extra = _padding(buf.tell(), len(info.filename))
            zf.writestr(info, data)
    return buf.getvalue()


def write_torch_zip(path: str | os.PathLike[str], obj: object, partial: float | None = None) -> Path:
    """Write `obj` where torch.save would, in place (no rename); `partial` = the fraction written so far."""
    out = Path(path)
    data = torch_zip_bytes(obj, out.stem)
    if partial is not None:
        data = data[: int(len(data) * partial)]
    out.write_bytes(data)
    return out


def _padding(offset: int, name_len: int) -> bytes:
    """An extra field that puts the member's data at a multiple of ALIGNMENT."""
    start = offset + _LOCAL_HEADER + name_len + 4  # +4: the extra field's own id and size
    pad = -start % ALIGNMENT
    return struct.pack("<HH", _PAD_ID, pad) + b"Z" * pad
