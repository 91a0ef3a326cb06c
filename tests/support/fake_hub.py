"""A tiny checkpoint and dataset as real files, and a loopback HTTP server that answers the hub's endpoints
huggingface_hub uses to list and download them (`HF_ENDPOINT=http://127.0.0.1:PORT`).

Endpoints (the shapes huggingface_hub parses): `GET /api/{models|datasets}/{repo}/tree/{rev}` (a JSON list
of files with sizes; LFS files carry an `lfs` block), `HEAD|GET /{repo}/resolve/{rev}/{path}` and
`/datasets/{repo}/resolve/{rev}/{path}` with `Range: bytes=N-` answered 206. Every request is recorded
(method, path, range) so a test can assert what was fetched, how often, and from where a download resumed.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path

from loopback_http import QuietHandler, serve, stop_server

MODEL_REPO = "nvidia/Tiny-Ultra-2layer"
DATASET_REPO = "tests/tiny-math"
DATASET_FILE = "tiny-math.jsonl"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


def safetensors_bytes(tensors: dict[str, int], fill: int) -> bytes:
    """A valid safetensors file: F32 tensors of the given element counts, data filled with `fill`."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, count in tensors.items():
        header[name] = {"dtype": "F32", "shape": [count], "data_offsets": [offset, offset + 4 * count]}
        offset += 4 * count
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + bytes([fill]) * offset


def model_files() -> dict[str, bytes]:
    """config.json, the index and two shards (~96 KiB and ~160 KiB)."""
    shard1 = safetensors_bytes({"layers.0.w": 16384, "layers.0.b": 8192}, 1)
    shard2 = safetensors_bytes({"layers.1.w": 32768, "lm_head.w": 8192}, 2)
    weight_map = {
        "layers.0.w": SHARDS[0],
        "layers.0.b": SHARDS[0],
        "layers.1.w": SHARDS[1],
        "lm_head.w": SHARDS[1],
    }
    index = {"metadata": {"total_size": 4 * (16384 + 8192 + 32768 + 8192)}, "weight_map": weight_map}
    config = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "num_hidden_layers": 2}
    return {
        "config.json": json.dumps(config).encode(),
        "model.safetensors.index.json": json.dumps(index).encode(),
        SHARDS[0]: shard1,
        SHARDS[1]: shard2,
    }


def dataset_files(keys: tuple[str, str] = ("prompt", "label")) -> dict[str, bytes]:
    rows = [{keys[0]: f"What is {i}+{i}?", keys[1]: str(2 * i)} for i in range(4)]
    return {DATASET_FILE: "".join(json.dumps(r) + "\n" for r in rows).encode()}


def write_files(directory: Path, files: dict[str, bytes]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)


@dataclass
class Request:
    method: str
    path: str
    range: str | None


@dataclass
class FakeHub:
    repos: dict[tuple[str, str], dict[str, bytes]]  # (repo_type, repo id) -> files
    chunk_delay_s: float = 0.0  # between 16 KiB chunks of a download, so progress is visible
    requests: list[Request] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def downloads(self, name: str) -> list[Request]:
        return [
            r
            for r in self.requests
            if r.method == "GET" and "/resolve/" in r.path and r.path.endswith("/" + name)
        ]

    def start(self) -> FakeHub:
        hub = self

        class Handler(QuietHandler):
            def _file(self) -> tuple[bytes, str] | None:
                path = self.path.split("?", 1)[0]
                kind = "model"
                if path.startswith("/datasets/"):
                    kind, path = "dataset", path[len("/datasets") :]
                head, sep, rest = path.partition("/resolve/")
                if not sep:
                    return None
                rev, _, name = rest.partition("/")
                files = hub.repos.get((kind, head.strip("/")))
                if files is None or name not in files or rev not in ("main", COMMIT):
                    return None
                return files[name], name

            def _send_meta(self, data: bytes, status: int, length: int, extra: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(length))
                self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("Accept-Ranges", "bytes")
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()

            def do_HEAD(self) -> None:
                hub.requests.append(Request("HEAD", self.path, self.headers.get("Range")))
                found = self._file()
                if found is None:
                    self._not_found()
                    return
                self._send_meta(found[0], 200, len(found[0]), {})

            def do_GET(self) -> None:
                hub.requests.append(Request("GET", self.path, self.headers.get("Range")))
                if self.path.startswith("/api/"):
                    self._tree()
                    return
                found = self._file()
                if found is None:
                    self._not_found()
                    return
                data = found[0]
                start, status, extra = 0, 200, {}
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and rng[6:].split("-")[0].isdigit():
                    start = int(rng[6:].split("-")[0])
                    status, extra = 206, {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
                body = data[start:]
                self._send_meta(data, status, len(body), extra)
                for i in range(0, len(body), 16384):
                    self.wfile.write(body[i : i + 16384])
                    if hub.chunk_delay_s:
                        time.sleep(hub.chunk_delay_s)

            def _tree(self) -> None:
                parts = self.path.split("?", 1)[0].split("/")  # '', api, models, org, name, tree, rev
                kind = {"models": "model", "datasets": "dataset"}.get(parts[2], "")
                files = hub.repos.get((kind, "/".join(parts[3:5])))
                if files is None or len(parts) < 7 or parts[5] != "tree":
                    self._not_found()
                    return
                listing = []
                for name, data in sorted(files.items()):
                    item: dict[str, object] = {
                        "type": "file",
                        "oid": hashlib.sha1(data).hexdigest(),
                        "size": len(data),
                        "path": name,
                    }
                    if name.endswith(".safetensors"):
                        item["lfs"] = {
                            "oid": hashlib.sha256(data).hexdigest(),
                            "size": len(data),
                            "pointerSize": 134,
                        }
                    listing.append(item)
                body = json.dumps(listing).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _not_found(self) -> None:
                body = b'{"error":"Repository Not Found"}'
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Error-Code", "RepoNotFound")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

        self.server = serve(Handler)
        return self

    def stop(self) -> None:
        stop_server(self.server)
