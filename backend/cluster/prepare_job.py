"""The per-node job of `ultra-console prepare`: check (and with `--fetch`, complete) one node's checkpoint
and dataset. Runs as a tiny Ray job pinned to the node.

Self-contained on purpose (stdlib; huggingface_hub only to fetch), like the cleanup reaper: the console
sends this file's source as `python3 -c <source> --prepare-job <json request>`, so worker nodes need no copy
of the console. It prints one marked JSON line per event (`ULTRA_CONSOLE_PREPARE {...}`) and nothing else
the console reads.

The checkpoint is checked against its own index: `config.json` parses, `model.safetensors.index.json` names
the shards, and every shard's size is what its safetensors header says (8 bytes of header length, the JSON
header, then tensor data up to the largest `data_offsets` end), or what the hub's file listing said when
this tool fetched it (`.ultra-console-manifest.json`). A fetch never touches a complete file: it downloads
what is missing, resumes what is short (its own `.part` file beside it, or a truncated file in place), and
takes a lock file in the target directory so nodes that share the directory fetch it once. Every name the hub
lists is checked by backend.safe_paths before anything is written: one that would land outside the target
(`..`, an absolute path, a symlink out) refuses the fetch with one line naming it; nothing that existed is
moved, renamed or deleted.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from backend.cluster.node_tools import expand  # inlined on the node
from backend.json_fields import Fields  # inlined on the node
from backend.safe_paths import UnsafePath, all_inside, inside, lexically_inside  # inlined on the node

MARK = "ULTRA_CONSOLE_PREPARE "
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
MANIFEST = ".ultra-console-manifest.json"
LOCK = ".ultra-console-fetch.lock"
PART = ".part"
STALE_LOCK_S = 900.0
PROGRESS_EVERY_S = 0.5


@dataclass(frozen=True)
class PrepareRequest:
    """The `--prepare-job` argument, as backend.cluster.prepare writes it (repos fetched with `fetch`)."""

    node_id: str
    node_ip: str
    checkpoint: str
    dataset: str
    input_key: str
    label_key: str
    fetch: bool
    token: str
    model_repo: str
    dataset_repo: str
    revision: str
    wait_s: float

    @classmethod
    def parse(cls, text: str) -> PrepareRequest:
        """Raises KeyError for a missing path or key, ValueError for text that is not JSON."""
        raw = Fields.of(json.loads(text))
        needed = ("node_id", "checkpoint", "dataset", "input_key", "label_key")
        missing = [key for key in needed if key not in raw.raw]
        if missing:
            raise KeyError(missing[0])
        return cls(
            node_id=str(raw.value("node_id")),
            node_ip=raw.text("node_ip"),
            checkpoint=str(raw.value("checkpoint")),
            dataset=str(raw.value("dataset")),
            input_key=str(raw.value("input_key")),
            label_key=str(raw.value("label_key")),
            fetch=raw.has("fetch"),
            token=raw.text("token"),
            model_repo=raw.text("model_repo"),
            dataset_repo=raw.text("dataset_repo"),
            revision=raw.text("revision", "main"),
            wait_s=raw.real("wait_s", 3600.0),
        )


def read_json_object(path: str) -> Fields:
    """The JSON object in `path`; an empty one when the file is missing, unreadable or holds another value."""
    try:
        with open(path, encoding="utf-8") as fh:
            return Fields.of(json.load(fh))
    except (OSError, ValueError):
        return Fields()


def emit(**event: object) -> None:
    print(MARK + json.dumps(event, sort_keys=True), flush=True)


def _problem(kind: str, path: str, detail: str = "") -> dict[str, str]:
    return {"kind": kind, "path": path, "detail": detail}


def _header(path: str) -> tuple[int, dict] | None:
    """A safetensors file's header length and its JSON header; None when either cannot be read."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return None
            n = int.from_bytes(head, "little")
            if n <= 0 or n > 100 << 20:
                return None
            header = json.loads(fh.read(n))
    except (OSError, ValueError):
        return None
    return (n, header) if isinstance(header, dict) else None


def _data_end(header: dict) -> int:
    """Where the tensor data ends: the largest `data_offsets` end of any tensor."""
    ends = [
        info.get("data_offsets", [None, None])
        for name, info in header.items()
        if name != "__metadata__" and isinstance(info, dict)
    ]
    return max(
        (o[1] for o in ends if isinstance(o, list) and len(o) == 2 and isinstance(o[1], int)), default=0
    )


def safetensors_size(path: str) -> int | None:
    """The size a safetensors file must have, from its own header; None when the header cannot be read."""
    found = _header(path)
    if found is None:
        return None
    n, header = found
    return 8 + n + _data_end(header)


def read_manifest(directory: str) -> dict[str, int]:
    files = read_json_object(os.path.join(directory, MANIFEST)).obj("files").raw
    return {str(k): int(v) for k, v in files.items() if isinstance(v, int)}


def _config_problem(directory: str) -> dict[str, str] | None:
    """What is wrong with the checkpoint's config.json (missing, or not a JSON object), if anything."""
    config = os.path.join(directory, "config.json")
    if not os.path.isfile(config):
        return _problem("missing", config)
    try:
        with open(config, encoding="utf-8") as fh:
            if not isinstance(json.load(fh), dict):
                raise ValueError("not a JSON object")
    except (OSError, ValueError) as err:
        return _problem("unreadable", config, f"does not parse: {err}")
    return None


def _shards(directory: str) -> tuple[list[str], dict[str, str] | None]:
    """The shard files the checkpoint's index names (or its single file); a problem when neither can say."""
    index = os.path.join(directory, INDEX)
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as fh:
                weight_map = json.load(fh).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise ValueError("no weight_map")
        except (OSError, ValueError, AttributeError) as err:
            return [], _problem("unreadable", index, f"does not parse: {err}")
        return sorted({str(v) for v in weight_map.values()}), None
    if os.path.isfile(os.path.join(directory, SINGLE)):
        return [SINGLE], None
    return [], _problem("missing", index, "no index: the shards cannot be checked")


def _shard_problem(path: str, size: int, listed: int | None) -> dict[str, str] | None:
    """A shard whose size is not the hub's listing's (when this tool fetched it) or its own header's."""
    want, source = listed, "the hub's listing"
    if want is None:
        want, source = safetensors_size(path), "its header"
        if want is None:
            return _problem("corrupt", path, f"{size} bytes, header unreadable")
    if size < want:
        return _problem("short", path, f"{size} of {want} bytes ({source})")
    if size > want:
        return _problem("size", path, f"{size} bytes, {source} says {want}")
    return None


def _size(path: str) -> tuple[int | None, dict[str, str] | None]:
    """A file's size, or why it has none (missing, unreadable)."""
    try:
        return os.stat(path).st_size, None
    except FileNotFoundError:
        return None, _problem("missing", path)
    except OSError as err:
        return None, _problem("unreadable", path, err.strerror or str(err))


def _directory_problem(directory: str) -> dict[str, str] | None:
    """A checkpoint directory that is not there or cannot be listed."""
    if not os.path.isdir(directory):
        return _problem("missing", directory, "the checkpoint directory does not exist")
    try:
        os.listdir(directory)
    except OSError as err:
        return _problem("unreadable", directory, err.strerror or str(err))
    return None


def check_checkpoint(directory: str) -> dict[str, object]:
    """Verdict on one checkpoint directory: problems (kind, path, detail) and the files it holds."""
    out: dict[str, object] = {"path": directory, "problems": [], "shards": 0, "bytes": 0}
    problems: list[dict[str, str]] = out["problems"]  # type: ignore[assignment]
    unusable = _directory_problem(directory)
    if unusable is not None:
        problems.append(unusable)
        return out
    manifest = read_manifest(directory)
    config = _config_problem(directory)
    problems += [config] if config else []
    shards, no_index = _shards(directory)
    if no_index is not None:
        problems.append(no_index)
        return out
    total = 0
    for name in shards:
        path = os.path.join(directory, name)
        size, problem = _size(path)
        if size is not None:
            total += size
            problem = _shard_problem(path, size, manifest.get(name))
        problems += [problem] if problem else []
    out["shards"], out["bytes"] = len(shards), total
    return out


def _first_row(path: str) -> tuple[object, dict[str, str] | None]:
    """The dataset's first line as JSON, or why it cannot be read as such."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(1 << 20)
        row = json.loads(first)
    except OSError as err:
        return None, _problem("unreadable", path, err.strerror or str(err))
    except ValueError:
        return None, _problem("format", path, "the first line is not JSON")
    if not isinstance(row, dict):
        return None, _problem("format", path, "the first line is not a JSON object")
    return row, None


def _readable_rows(path: str) -> tuple[int, dict, dict[str, str] | None]:
    """The dataset's size and first row; a problem when it is missing, empty or its first row no object."""
    size, problem = _size(path)
    if size is None or problem is not None:
        return 0, {}, problem
    if size == 0:
        return 0, {}, _problem("empty", path)
    row, problem = _first_row(path)
    return size, row if isinstance(row, dict) else {}, problem


def check_dataset(path: str, input_key: str, label_key: str) -> dict[str, object]:
    out: dict[str, object] = {"path": path, "problems": []}
    size, row, problem = _readable_rows(path)
    if problem is not None:
        out["problems"] = [problem]
        return out
    lacking = [k for k in (input_key, label_key) if k not in row]
    if lacking:
        keys = ", ".join(sorted(map(str, row))[:8])
        out["problems"] = [_problem("keys", path, f"first row lacks {', '.join(lacking)} (it has {keys})")]
    out["bytes"] = size
    return out


# ----------------------------------------------------------------------------- fetch


class _Lock:
    """A lock file made with O_EXCL (atomic on local disks and NFS): who fetches this directory now."""

    def __init__(self, directory: str, token: str, node: str) -> None:
        self.path = os.path.join(directory, LOCK)
        self.token, self.node = token, node
        self.held = False

    def take(self) -> Fields | None:
        """None when taken; else the holder's record."""
        body = json.dumps({"token": self.token, "node": self.node, "time": time.time()}).encode()
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = self.holder()
                if holder.value("token") != self.token and time.time() - holder.real("time") > STALE_LOCK_S:
                    os.unlink(self.path)  # a lock of ours left by a fetch that died long ago
                    continue
                return holder
            with os.fdopen(fd, "wb") as fh:
                fh.write(body)
            self.held = True
            return None
        return self.holder()

    def holder(self) -> Fields:
        return read_json_object(self.path)

    def release(self) -> None:
        if self.held:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            self.held = False


def _progress_class(what: str, filename: str):  # type: ignore[no-untyped-def]
    """A tqdm stand-in for huggingface_hub's http_get that prints throttled progress events."""

    class Progress:
        def __init__(
            self, *args: object, total: int | None = None, initial: int = 0, **kwargs: object
        ) -> None:
            self.total, self.n, self.last = total, initial, 0.0

        def update(self, n: int = 1) -> None:
            self.n += n
            now = time.monotonic()
            if now - self.last >= PROGRESS_EVERY_S:
                self.last = now
                emit(event="progress", what=what, file=filename, done=self.n, total=self.total)

        def close(self) -> None:
            pass

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def set_description(self, *args: object, **kwargs: object) -> None:
            pass

    return Progress


def _listing(repo: str, repo_type: str, revision: str) -> dict[str, int]:
    # huggingface_hub: only a fetch needs it (a node may lack it)
    from huggingface_hub import HfApi

    files: dict[str, int] = {}
    for item in HfApi().list_repo_tree(repo, repo_type=repo_type, revision=revision, recursive=True):
        size = getattr(item, "size", None)
        if isinstance(size, int) and getattr(item, "path", None) is not None and not hasattr(item, "tree_id"):
            files[str(item.path)] = size
    return files


def _download(
    what: str, repo: str, repo_type: str, revision: str, directory: str, name: str, size: int
) -> int:
    """One file into `directory`, resuming `name.part` (or
    a short `name`, in place); returns bytes transferred."""
    # huggingface_hub: only a fetch needs it (a node may lack it)
    from huggingface_hub import hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    final = lexically_inside(directory, name)
    if os.path.exists(final) and os.path.getsize(final) >= size:
        return 0  # complete (or larger: reported by the check, never overwritten)
    os.makedirs(os.path.dirname(inside(directory, name)), exist_ok=True)
    final = inside(directory, name)  # again, now that its directories exist: none of them may lead out
    target = final + PART
    if os.path.lexists(final) and not os.path.lexists(target):
        target = final  # a truncated file is a partial download: resumed where it is, never moved
    resume = os.path.getsize(target) if os.path.lexists(target) else 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)  # never through a symlink
    if resume > size:
        flags, resume = (
            flags | os.O_TRUNC,
            0,
        )  # our own partial download, longer than the file: start it again
    if resume:
        emit(event="resume", what=what, file=name, done=resume, total=size)
    url = hf_hub_url(repo, name, repo_type=repo_type, revision=revision)
    with open(os.open(target, flags, 0o644), "ab") as fh:
        http_get(
            url,
            fh,
            resume_size=resume,
            headers=build_hf_headers(),
            expected_size=size,
            displayed_filename=name,
            tqdm_class=_progress_class(what, name),
        )
    if os.path.getsize(target) != size:
        raise OSError(f"{name}: got {os.path.getsize(target)} of {size} bytes")
    if target != final:
        os.replace(target, final)
    emit(event="file_done", what=what, file=name, total=size)
    return size - resume


def refused_entry(directory: str, names: list[str]) -> str | None:
    """Why a hub listing cannot be written into `directory` (the first bad entry), or None."""
    try:
        all_inside(directory, names)
    except UnsafePath as err:
        return str(err)
    own = [n for n in names if os.path.basename(n) in (MANIFEST, LOCK) or n.endswith(PART)]
    if own:
        return f"refused entry {own[0][:200]!r}: the name of a file prepare keeps for itself"
    return None


def fetch(
    what: str,
    repo: str,
    repo_type: str,
    revision: str,
    directory: str,
    only: list[str] | None,
    token: str,
    node: str,
    wait_s: float,
) -> None:
    """Fetch what `directory` lacks from `repo` (every file of it, or `only` these)."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as err:
        emit(event="error", what=what, message=f"cannot create {directory}: {err.strerror or err}")
        return
    lock = _Lock(directory, token, node)
    holder = lock.take()
    if holder is not None:
        _wait_for_holder(what, lock, holder, directory, wait_s)
        return
    try:
        before = read_json_object(os.path.join(directory, MANIFEST))
        if before.value("token") == token and before.value("node") != node:
            emit(event="shared", what=what, node=before.text("node"), path=directory)
            return  # another node of this prepare fetched this very directory already
        files = _wanted(what, repo, repo_type, revision, only)
        if files is None or _refused(what, f"{repo_type} {repo}", directory, files):
            return
        manifest = {"repo": repo, "repo_type": repo_type, "revision": revision, "files": files}
        with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as fh:
            json.dump({**manifest, "node": node, "token": token}, fh)
        _download_all(what, repo, repo_type, revision, directory, files)
    finally:
        lock.release()


def _wait_for_holder(what: str, lock: _Lock, holder: Fields, directory: str, wait_s: float) -> None:
    """Another fetch holds the directory: a node of this same prepare (same token) fetches the shared
    directory, so wait for it; another prepare's fetch is an error."""
    if holder.value("token") != lock.token:
        emit(
            event="error", what=what, message=f"another fetch (node {holder.value('node')}) holds {lock.path}"
        )
        return
    deadline = time.monotonic() + wait_s
    while os.path.exists(lock.path) and time.monotonic() < deadline:
        time.sleep(0.2)
    emit(event="shared", what=what, node=holder.text("node"), path=directory)


def _wanted(
    what: str, repo: str, repo_type: str, revision: str, only: list[str] | None
) -> dict[str, int] | None:
    """The files to fetch with their sizes (every file, or `only` these); None, said, when it cannot be."""
    try:
        files = _listing(repo, repo_type, revision)
    except Exception as err:  # network, auth, unknown repo: one line for the operator
        emit(event="error", what=what, message=f"cannot list {repo_type} {repo}: {_one_line(err)}")
        return None
    if not only:
        return files
    missing = [k for k in only if k not in files]
    if missing:
        emit(event="error", what=what, message=f"{repo} has no {', '.join(missing)}")
        return None
    return {k: v for k, v in files.items() if k in only}


def _refused(what: str, source: str, directory: str, files: dict[str, int]) -> bool:
    """Whether the listing holds a name that cannot be written into `directory` (said when it does)."""
    refused = refused_entry(directory, list(files))
    if refused is not None:
        emit(event="error", what=what, message=f"{source}: {refused}; nothing fetched")
    return refused is not None


def _download_all(
    what: str, repo: str, repo_type: str, revision: str, directory: str, files: dict[str, int]
) -> None:
    """Every file in name order; the first that fails ends the fetch with one line."""
    moved = count = 0
    for name, size in sorted(files.items()):
        try:
            got = _download(what, repo, repo_type, revision, directory, name, size)
        except Exception as err:
            emit(event="error", what=what, message=f"{name}: {_one_line(err)}")
            return
        moved += got
        count += 1 if got else 0
    emit(event="fetched", what=what, files=count, bytes=moved, path=directory)


def hub_unreachable() -> str | None:
    """Why the hub cannot be reached from this node (one TCP connect, 5 s), else None: huggingface_hub
    itself retries a refused connection for half a minute before it says so."""
    # huggingface_hub: only a fetch needs it (a node may lack it)
    from huggingface_hub import constants

    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=5.0).close()
    except OSError as err:
        return f"cannot reach the hub at {constants.ENDPOINT}: {err.strerror or err}"
    return None


def _one_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}"
    return " ".join(text.split())[:300]


def main(argv: list[str]) -> int:
    request = PrepareRequest.parse(argv[argv.index("--prepare-job") + 1])
    fields = {"node_id": request.node_id, "node_ip": request.node_ip, "hostname": socket.gethostname()}
    ckpt = expand(request.checkpoint, fields)
    data = expand(request.dataset, fields)
    offline = None
    if request.fetch:
        try:
            offline = hub_unreachable()
        except ImportError:
            offline = "huggingface_hub is not installed on this node (pip install huggingface_hub)"
        for what in ("checkpoint", "dataset") if offline else ():
            emit(event="error", what=what, message=offline)
    if request.fetch and not offline:
        if request.model_repo:
            fetch(
                "checkpoint",
                request.model_repo,
                "model",
                request.revision,
                ckpt,
                None,
                request.token,
                request.node_id,
                request.wait_s,
            )
        if request.dataset_repo:
            fetch(
                "dataset",
                request.dataset_repo,
                "dataset",
                "main",
                os.path.dirname(data),
                [os.path.basename(data)],
                request.token,
                request.node_id,
                request.wait_s,
            )
    emit(event="checkpoint", **check_checkpoint(ckpt))
    emit(event="dataset", **check_dataset(data, request.input_key, request.label_key))
    emit(event="done", host=socket.gethostname())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
