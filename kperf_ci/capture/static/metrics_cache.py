"""One home for cached static metrics: memoized by the compiled kernel they are read from.

``static_metrics`` (:mod:`kperf_ci.capture.static.sass`) runs ``cuobjdump``, ``nvdisasm`` and ``ptxas``:
about 0.5 s per kernel on an H100 host, where a GPU-mode launch otherwise costs kperf well under a
second. Its result depends only on the cubin, the PTX, a few metadata fields, the arch and the
metric code itself, so it is cached under a hash of exactly those:

* in memory, for the process (a kernel launched by several tests, or replayed twice, is read once);
* on disk, across processes, runs and work trees: one JSON file per key in the directory named by
  ``KPERF_METRICS_CACHE_DIR`` (default ``<triton cache>/kperf-static``), none with
  ``KPERF_NO_METRICS_CACHE``. Static mode's compile workers and GPU mode share this directory and
  key, so a cubin seen by either is never disassembled again.

The directory may be shared (a runner's /tmp), so an entry is data, never trusted by its name
(:mod:`.metrics_entry` checks it): an entry is written through ``tempfile.mkstemp`` in the
directory and renamed into place (no predictable name, no symlink followed), read without
following a symlink and only up to ``MAX_ENTRY_BYTES``, and used only when it is well formed
(finite numbers, catalogue names, units and kinds, every metric ``static_metrics`` writes) and its
recorded hashes match the cubin it describes, its SASS and its metric rows. Any other entry is
recomputed and overwritten, with one warning line. A directory that is a file (or lies under one)
is one warning per process, and the disk cache is off; so is a directory that cannot take a new
entry (it cannot be created, or is not writable), and nothing is written to it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kperf_ci.capture.static import sass
from kperf_ci.capture.static.metrics_entry import (
    MAX_ENTRY_BYTES,
    BadEntry,
    check_entry,
    make_entry,
    read_entry,
)
from kperf_ci.config import ENV_METRICS_CACHE_DIR, ENV_NO_METRICS_CACHE, env_switch, env_text
from kperf_ci.model import Metric

__all__ = [
    "MAX_ENTRY_BYTES",
    "atomic_write",
    "cache_dir",
    "cache_key",
    "cached_static_metrics",
    "clear_memory",
]

StaticFn = Callable[[dict[str, Any], Any, str], tuple[list[Metric], str, str]]
Warn = Callable[[str], None]

# key -> (metrics as rows, normalized SASS, SASS hash): the process's own copy of the disk cache
_MEMORY: dict[str, tuple[list[list[Any]], str, str]] = {}
# cache directories found unusable and said so: one warning per process, not one per entry
_UNUSABLE: set[str] = set()
# cache directories that could not take a new entry, said so once
_UNWRITABLE: set[str] = set()


def cache_dir() -> str | None:
    """The on-disk cache directory, or None when ``KPERF_NO_METRICS_CACHE`` is set."""
    if env_switch(ENV_NO_METRICS_CACHE):
        return None
    d = env_text(ENV_METRICS_CACHE_DIR)
    if not d:
        try:
            from triton import knobs

            d = os.path.join(knobs.cache.dir, "kperf-static")
        except Exception:
            return None
    return d


@functools.lru_cache(maxsize=1)
def _code_version() -> str:
    """Changes whenever the metric code changes, so cached metrics never go stale."""
    with open(sass.__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def _meta(md: Any, key: str) -> Any:
    return md.get(key) if isinstance(md, dict) else getattr(md, key, None)


def _cubin(asm: dict[str, Any]) -> bytes:
    cubin = asm.get("cubin") or b""
    return cubin if isinstance(cubin, bytes) else str(cubin).encode()


def cache_key(asm: dict[str, Any], metadata: Any, arch: str) -> str:
    """sha256 of what :func:`kperf_ci.capture.static.sass.static_metrics` reads: the metric code's
    version, arch, PTX, shared memory, warps, stages, the ptxas report and the cubin."""
    h = hashlib.sha256()
    for part in (
        _code_version(),
        arch,
        asm.get("ptx", ""),
        json.dumps(
            [_meta(metadata, k) for k in ("shared", "num_warps", "num_stages", "kperf_ptxas")],
            sort_keys=True,
        ),
    ):
        h.update(str(part).encode())
        h.update(b"\0")
    h.update(_cubin(asm))
    return h.hexdigest()


def _rows(metrics: list[Metric]) -> list[list[Any]]:
    return [[m.name, m.value, m.unit, m.kind, m.better] for m in metrics]


def _stderr_warning(line: str) -> None:
    sys.stderr.write(f"kperf: warning: {line}\n")


def _from_disk(path: str, cubin: bytes, warn: Warn) -> tuple[list[list[Any]], str, str] | None:
    """The entry at ``path`` when it is sound; None (and one warning when it exists but is not)."""
    try:
        raw = read_entry(path)
        if raw is None:
            return None
        return check_entry(raw, cubin)
    except BadEntry as e:
        warn(
            f"static-metrics cache entry {path}: {e}; recomputed it (the cache is "
            f"{ENV_METRICS_CACHE_DIR}; delete the entry or the directory if this repeats)"
        )
        return None


def _usable(d: str, warn: Warn) -> bool:
    """False when ``d`` cannot hold entries because it, or the nearest existing folder above it,
    is a file: said once per process (each entry's read failed with its own warning line before),
    and the cache is then off for this process."""
    if d in _UNUSABLE:
        return False
    top = next((p for p in (Path(d), *Path(d).absolute().parents) if p.exists()), None)
    if top is None or top.is_dir():
        return True
    _UNUSABLE.add(d)
    warn(
        f"static-metrics cache {d}: {top} is a file, not a directory; nothing is cached (each "
        f"kernel's metrics are computed); point {ENV_METRICS_CACHE_DIR} at a directory"
    )
    return False


def atomic_write(d: str, path: str, entry: bytes) -> None:
    """``entry`` at ``path`` in ``d``, atomically and under a name no one can predict: mkstemp
    creates the file itself (O_EXCL, so a planted symlink is never followed) in the directory,
    and rename replaces whatever the entry's name held (a link is replaced, not written
    through). OSError when ``d`` cannot take a file; nothing half-written is left."""
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".kperf-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 would hide entries from a shared cache's users
            f.write(entry)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _write(d: str, path: str, entry: bytes, warn: Warn) -> None:
    """:func:`atomic_write`; a directory that cannot take a file is said once per process, and
    not tried again (its entries may still be read: a cache filled by others, read-only here, is
    still a cache)."""
    if len(entry) > MAX_ENTRY_BYTES:
        return  # a reader would refuse it; such a kernel is recomputed each time
    if d in _UNWRITABLE:
        return
    try:
        atomic_write(d, path, entry)
    except OSError:
        # no errno in the line: under /proc, mkdir says "No such file or directory" of a parent
        # that exists
        _UNWRITABLE.add(d)
        warn(
            f"static-metrics cache {d}: not a writable directory; new metrics are not cached (each "
            f"kernel's metrics are computed); point {ENV_METRICS_CACHE_DIR} at a writable directory"
        )


def cached_static_metrics(
    asm: dict[str, Any], metadata: Any, arch: str, fn: StaticFn | None = None, *, warn: Warn | None = None
) -> tuple[list[Metric], str, str, bool]:
    """(metrics, normalized SASS, SASS hash, cached) of one compiled kernel: ``fn`` (default
    :func:`kperf_ci.capture.static.sass.static_metrics`) runs only when neither this process nor the
    disk cache has a sound entry for the kernel. ``cached`` says the tools were not run. ``warn``
    gets the one line about a refused entry (default: stderr)."""
    key = cache_key(asm, metadata, arch)
    cubin = _cubin(asm)
    hit = _MEMORY.get(key)
    d = cache_dir()
    if d and not _usable(d, warn or _stderr_warning):
        d = None
    path = os.path.join(d, key + ".json") if d else None
    if hit is None and path:
        hit = _from_disk(path, cubin, warn or _stderr_warning)
        if hit is not None:
            _MEMORY[key] = hit
    if hit is not None:
        return [Metric(*m) for m in hit[0]], hit[1], hit[2], True
    metrics, normalized, digest = (fn or sass.static_metrics)(asm, metadata, arch)
    _MEMORY[key] = (_rows(metrics), normalized, digest)
    if path and d:
        _write(d, path, make_entry(_rows(metrics), normalized, digest, cubin), warn or _stderr_warning)
    return list(metrics), normalized, digest, False


def clear_memory() -> None:
    """Forget the in-memory copy and the directories said to be unusable (tests; the disk
    cache stays)."""
    _MEMORY.clear()
    _UNUSABLE.clear()
    _UNWRITABLE.clear()
