"""Triton's ``triton_key()``, remembered across compile workers.

Triton keys every compile (and its on-disk cache) with ``triton_key()``: the sha256 of its
compiler, backend and language sources and of ``libtriton.so`` (~400 MB), computed once per
process. That is about 0.45 s of a core on the 2-core CPU, a quarter of a compile worker's start,
paid again by every worker of every session although the answer only changes when Triton does.

Its value depends on the files it reads, all inside the installed ``triton`` package, and on its
own code. So it is remembered under a signature of exactly those, cheap to take: each file's
path, size, modification time and inode under the package (``os.stat``, a few ms for its ~350
files; ``__pycache__`` left out, it is not read and changes as Python writes bytecode), Triton's
version and the function's compiled code. Any change to the package, an upgrade or an edited
file, gives a new signature, and the value is computed again by Triton's own function.

The memo sits in ``triton-key/`` under the static-metrics cache directory
(``KPERF_METRICS_CACHE_DIR``; none with ``KPERF_NO_METRICS_CACHE``), one small JSON entry per
signature, written and read the way that cache's entries are: never through a symlink, never over
a size bound, used only when it is well formed for the signature it is filed under. Anything else
is computed again by Triton and filed over it. It is quiet: at worst a worker pays Triton's own
cost, and the metrics cache already says what is wrong with the directory, once, where the run shows
it. A worker installs it only in its own process (:func:`install`); a user's pytest session
keeps Triton's function as it is.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from kperf_ci.capture.static.metrics_cache import atomic_write, cache_dir
from kperf_ci.capture.static.metrics_entry import BadEntry, read_entry

__all__ = ["FORMAT", "install", "package_signature", "remembered"]

FORMAT = "kperf-triton-key/1"


def package_signature(package_dir: str, version: str, fn: Callable[[], str]) -> str:
    """sha256 of what ``fn`` (Triton's ``triton_key``) answers from: the package's files by
    (path, size, mtime, inode), the version and the function's code."""
    h = hashlib.sha256()
    h.update(f"{FORMAT}\0{os.path.realpath(package_dir)}\0{version}\0".encode())
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    h.update(marshal.dumps(code) if code is not None else b"no code")
    rows = []
    for root, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            path = os.path.join(root, name)
            st = os.stat(path)
            rows.append(f"{os.path.relpath(path, package_dir)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}")
    h.update("\n".join(sorted(rows)).encode())
    return h.hexdigest()


def _well_formed(value: Any, version: str) -> bool:
    # what triton_key returns: the version, then sha256 hex digests joined by '-'
    return (
        isinstance(value, str)
        and re.fullmatch(re.escape(version) + r"[0-9a-f]{64}(?:-[0-9a-f]{64})*", value) is not None
    )


def _from_disk(path: str, signature: str, version: str) -> str | None:
    try:
        raw = read_entry(path)
        doc = json.loads(raw) if raw is not None else None
    except (BadEntry, ValueError, UnicodeDecodeError, OSError):
        return None
    if isinstance(doc, dict) and doc.get("format") == FORMAT and doc.get("signature") == signature:
        value = doc.get("triton_key")
        if _well_formed(value, version):
            return value
    return None


def remembered(package_dir: str, version: str, fn: Callable[[], str], directory: str | None) -> str:
    """``fn()``, read from ``directory`` when a sound entry for this package is there, else
    computed and filed there (``directory`` None: computed, nothing filed)."""
    if not directory:
        return fn()
    d = os.path.join(directory, "triton-key")
    try:
        signature = package_signature(package_dir, version, fn)
    except OSError:  # a file went away under the walk: a package being replaced
        return fn()
    path = os.path.join(d, signature + ".json")
    value = _from_disk(path, signature, version)
    if value is not None:
        return value
    value = fn()
    if _well_formed(value, version):
        try:
            atomic_write(
                d, path, json.dumps({"format": FORMAT, "signature": signature, "triton_key": value}).encode()
            )
        except OSError:
            pass  # not a writable directory: the next worker computes it too
    return value


def install() -> bool:
    """In this process (a compile worker), Triton's ``triton_key`` answers the remembered value;
    False (nothing changed) where this Triton has no such function."""
    try:
        import triton
        import triton.runtime.cache as cache
    except ImportError:
        return False
    original = getattr(cache, "triton_key", None)
    if not callable(original):
        return False
    value = remembered(os.path.dirname(triton.__file__), triton.__version__, original, cache_dir())

    def triton_key() -> str:
        return value

    # Triton's modules that imported the function by name (the autotuner) get it too
    for name, mod in list(sys.modules.items()):
        if (name == "triton" or name.startswith("triton.")) and getattr(mod, "triton_key", None) is original:
            mod.triton_key = triton_key
    return True
