"""One static-metrics cache entry (:mod:`kperf_ci.capture.static.metrics_cache`): its JSON shape,
how it is read from a directory others may write to, and the checks that make it trusted.

An entry is one JSON object::

    {"format": "kperf-static-metrics/2", "cubin_sha256": "...", "sass_hash": "...",
     "metrics": [[name, value, unit, kind, direction], ...], "sass": "<normalized SASS>",
     "entry_sha256": "..."}

``cubin_sha256`` is the hash of the cubin the metrics were read from, ``sass_hash`` the hash of
``sass`` (the value stored as the variant's SASS hash), ``entry_sha256`` a hash over the format,
both hashes and the metric rows: an entry copied from another kernel, a SASS swapped under its
hash, or one number edited in place (``registers`` 26 -> 255) no longer matches, and is
recomputed. These hashes catch a stale, corrupt or carelessly edited entry; someone who may
write the directory could still compute matching ones, so a shared cache directory must be
writable only by those whose results you trust.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from typing import Any

from kperf_ci.capture.static.sass import METRIC_NAMES
from kperf_ci.metrics import spec
from kperf_ci.model import canonical_json

__all__ = ["FORMAT", "MAX_ENTRY_BYTES", "BadEntry", "check_entry", "make_entry", "read_entry"]

FORMAT = "kperf-static-metrics/2"

#: Largest entry read or written. The normalized SASS dominates: a large fused kernel's is a few
#: MB; a bigger one is not cached (recomputed each time), and a bigger file is never read.
MAX_ENTRY_BYTES = 16 * 2**20

#: Names every real entry holds (static_metrics always writes them all): an entry missing some
#: (emptied, or cut down to its registers) would otherwise turn a regression in the missing
#: metrics into "not compared".
REQUIRED = METRIC_NAMES


class BadEntry(ValueError):
    """An entry that must not be used: the message says why, in a few words."""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _seal(cubin_sha: str, sass_hash: str, rows: list[list[Any]]) -> str:
    return _sha(canonical_json([FORMAT, cubin_sha, sass_hash, rows]).encode())


def make_entry(rows: list[list[Any]], normalized: str, digest: str, cubin: bytes) -> bytes:
    """The entry's bytes for metric rows computed from ``cubin``."""
    cubin_sha = _sha(cubin)
    doc = {
        "format": FORMAT,
        "cubin_sha256": cubin_sha,
        "sass_hash": digest,
        "metrics": rows,
        "sass": normalized,
        "entry_sha256": _seal(cubin_sha, digest, rows),
    }
    return json.dumps(doc).encode()


def read_entry(path: str) -> bytes | None:
    """The entry's bytes; None when there is none. A symlink, a non-file, or a file over the cap
    is a BadEntry, and is never read (a FIFO cannot block: it is opened non-blocking)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:  # ELOOP: a symlink planted at the entry's name (never followed)
        raise BadEntry(f"cannot be opened as a plain file ({e.strerror})") from None
    # the raw descriptor, never os.fdopen: Python refuses a directory's descriptor there with an
    # IsADirectoryError naming the descriptor, which reached the run as "did not compile"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadEntry("not a regular file")
        if st.st_size > MAX_ENTRY_BYTES:
            raise BadEntry(f"{st.st_size:,} bytes, over the {MAX_ENTRY_BYTES // 2**20} MiB an entry may hold")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_ENTRY_BYTES and (chunk := os.read(fd, MAX_ENTRY_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise BadEntry(f"cannot be read ({e.strerror})") from None
    finally:
        os.close(fd)
    if size > MAX_ENTRY_BYTES:  # grew after the stat
        raise BadEntry(f"over the {MAX_ENTRY_BYTES // 2**20} MiB an entry may hold")
    return b"".join(chunks)


def _row(row: Any, cubin: bytes) -> list[Any]:
    """One metric row, checked against the catalogue: a static metric it knows, with its unit,
    kind and direction, and a finite, non-negative number."""
    if not isinstance(row, list) or len(row) != 5:
        raise BadEntry("a metric row is not [name, value, unit, kind, direction]")
    name, value, unit, kind, better = row
    s = spec(name) if isinstance(name, str) else None
    if s is None or s.kind != "static":
        raise BadEntry(f"{str(name)[:60]!r} is not a static metric of the catalogue")
    if (unit, kind, better) != (s.unit, s.kind, s.better):
        raise BadEntry(f"{name}: unit, kind or direction differ from the catalogue's")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadEntry(f"{name} is {str(value)[:40]!r}, not a number")
    try:
        v = float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise BadEntry(f"{name} is out of range") from None
    if not math.isfinite(v) or v < 0:
        raise BadEntry(f"{name} is {v}, not a finite count")
    if name == "cubin_bytes" and v != len(cubin):
        raise BadEntry(f"cubin_bytes is {v:g}, the cubin has {len(cubin)}")
    return [name, v, unit, kind, better]


def check_entry(raw: bytes, cubin: bytes) -> tuple[list[list[Any]], str, str]:
    """(metric rows, normalized SASS, SASS hash) of a sound entry for ``cubin``; else BadEntry."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):  # ValueError covers bad UTF-8 and 4,300-digit integers
        raise BadEntry("not a JSON entry") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BadEntry(f"not a {FORMAT} entry")
    cubin_sha, digest, normalized, rows = (
        doc.get(k) for k in ("cubin_sha256", "sass_hash", "sass", "metrics")
    )
    if cubin_sha != _sha(cubin):
        raise BadEntry("it was computed from another cubin")
    if not isinstance(normalized, str) or not isinstance(digest, str) or _sha(normalized.encode()) != digest:
        raise BadEntry("its SASS does not match its sass_hash")
    if not isinstance(rows, list) or not rows:
        raise BadEntry("it holds no metrics")
    checked = [_row(r, cubin) for r in rows]
    names = [r[0] for r in checked]
    if len(set(names)) != len(names):
        raise BadEntry("its metrics repeat a name")
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        every = f"an entry holds all {len(REQUIRED)} metrics"
        raise BadEntry(f"it lacks {', '.join(missing[:3])}{more} ({every})")
    if doc.get("entry_sha256") != _seal(cubin_sha, digest, rows):
        raise BadEntry("its metrics do not match its entry_sha256")
    return checked, normalized, digest
