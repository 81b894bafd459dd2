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

Entries are written atomically (temporary file, then rename); an unreadable entry is recomputed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from typing import Any

from kperf_ci.capture.static import sass
from kperf_ci.config import ENV_METRICS_CACHE_DIR, ENV_NO_METRICS_CACHE, env_switch, env_text
from kperf_ci.model import Metric

__all__ = ["cache_dir", "cache_key", "cached_static_metrics", "clear_memory"]

StaticFn = Callable[[dict[str, Any], Any, str], tuple[list[Metric], str, str]]

# key -> (metrics as rows, normalized SASS, SASS hash): the process's own copy of the disk cache
_MEMORY: dict[str, tuple[list[list[Any]], str, str]] = {}


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


def cache_key(asm: dict[str, Any], metadata: Any, arch: str) -> str:
    """sha256 of what :func:`kperf_ci.capture.static.sass.static_metrics` reads: the metric code's
    version, arch, PTX, shared memory, warps, stages, the ptxas report and the cubin."""
    h = hashlib.sha256()
    cubin = asm.get("cubin") or b""
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
    h.update(cubin if isinstance(cubin, bytes) else str(cubin).encode())
    return h.hexdigest()


def _rows(metrics: list[Metric]) -> list[list[Any]]:
    return [[m.name, m.value, m.unit, m.kind, m.better] for m in metrics]


def cached_static_metrics(
    asm: dict[str, Any], metadata: Any, arch: str, fn: StaticFn | None = None
) -> tuple[list[Metric], str, str, bool]:
    """(metrics, normalized SASS, SASS hash, cached) of one compiled kernel: ``fn`` (default
    :func:`kperf_ci.capture.static.sass.static_metrics`) runs only when neither this process nor the
    disk cache has seen the kernel. ``cached`` says the tools were not run."""
    key = cache_key(asm, metadata, arch)
    hit = _MEMORY.get(key)
    d = cache_dir()
    path = os.path.join(d, key + ".json") if d else None
    if hit is None and path and os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                c = json.load(f)
            hit = ([list(m) for m in c["metrics"]], str(c["sass"]), str(c["sass_hash"]))
            [Metric(*m) for m in hit[0]]  # a malformed entry raises here, not in the caller
            _MEMORY[key] = hit
        except (OSError, ValueError, KeyError, TypeError):
            hit = None
    if hit is not None:
        return [Metric(*m) for m in hit[0]], hit[1], hit[2], True
    metrics, normalized, digest = (fn or sass.static_metrics)(asm, metadata, arch)
    _MEMORY[key] = (_rows(metrics), normalized, digest)
    if path and d:
        try:
            os.makedirs(d, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"metrics": _rows(metrics), "sass": normalized, "sass_hash": digest}, f)
            os.replace(tmp, path)
        except OSError:
            pass
    return list(metrics), normalized, digest, False


def clear_memory() -> None:
    """Forget the in-memory copy (tests; the disk cache stays)."""
    _MEMORY.clear()
