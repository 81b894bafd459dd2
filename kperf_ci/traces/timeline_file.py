"""kperf's own timeline files, the one writer and reader of each:

- ``kperf-timeline`` JSON (version 1): a :class:`~.records.Timeline` as columns, small enough
  for test data and what ``kperf analyze --trace`` reads besides Proton's Chrome trace;
  ``kperf-timelines`` holds several.
- ``timeline.npz``: the capture stage's compact binary form of one launch, stored as a blob per
  variant: the :class:`~.kernel_trace.KernelTrace` arrays (cycles) plus a JSON header with at
  least ``kernel``, ``names`` and ``clock_ghz`` (also clock_source, granularity,
  dropped_events, grid, config when the capture stage writes it).
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..model import canonical_json
from .kernel_trace import ARRAY_FIELDS, KernelTrace, to_timeline
from .proton_chrome import load_proton_traces
from .records import Timeline

FORMAT = "kperf-timeline"
FORMAT_MANY = "kperf-timelines"
VERSION = 1


def timeline_document(tl: Timeline, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """kperf's timeline JSON as a dict: a compact, versioned form (columns, not objects).
    ``meta`` replaces ``tl.meta`` (e.g. only its JSON-safe entries)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "kernel": tl.kernel,
        "num_sms": tl.num_sms,
        "meta": tl.meta if meta is None else meta,
        "columns": {
            "cta": tl.cta.tolist(),
            "warp": tl.warp.tolist(),
            "sm": tl.sm.tolist(),
            "region": [str(r) for r in tl.region],
            "start_ns": [round(float(x), 1) for x in tl.start_ns],
            "end_ns": [round(float(x), 1) for x in tl.end_ns],
        },
    }


def save_timeline(tl: Timeline, path: str | os.PathLike[str]) -> None:
    text = json.dumps(timeline_document(tl), separators=(",", ":"))  # C encoder: see perfetto.py
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def timeline_from_json(obj: dict[str, Any]) -> Timeline:
    if obj.get("format") != FORMAT:
        raise ValueError("not a kperf-timeline JSON object")
    try:
        version = int(obj.get("version", 0))
    except (TypeError, ValueError, OverflowError):  # a list, a word, Infinity: no version at all
        version = None
    if version != VERSION:
        raise ValueError(f"kperf-timeline version {obj.get('version')} is not supported (expected {VERSION})")
    c = obj["columns"]
    return Timeline(
        c["cta"],
        c["warp"],
        c["sm"],
        c["region"],
        c["start_ns"],
        c["end_ns"],
        kernel=obj.get("kernel", ""),
        num_sms=obj.get("num_sms"),
        meta=dict(obj.get("meta") or {}),
    )


def load_timelines(src: str | os.PathLike[str] | dict[str, Any] | list[Any], **kw: Any) -> list[Timeline]:
    """Any timeline document kperf knows (a file or a parsed object): its own format or a Proton
    Chrome trace (``kw`` go to :func:`~.proton_chrome.load_proton_traces`)."""
    if isinstance(src, (str, os.PathLike)):
        with open(src, encoding="utf-8") as f:
            obj = json.load(f)
    else:
        obj = src
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        return [timeline_from_json(obj)]
    if isinstance(obj, dict) and obj.get("format") == FORMAT_MANY:
        return [timeline_from_json(o) for o in obj["timelines"]]
    return load_proton_traces(obj, **kw)


# --------------------------------------------------------------------------------------------
# timeline.npz


def write_npz(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> bytes:
    """numpy .npz (zlib-compressed) of the KernelTrace arrays plus the JSON header (canonical
    JSON, so equal launches give equal bytes)."""
    buf = io.BytesIO()
    head = np.frombuffer(canonical_json(dict(header)).encode(), dtype=np.uint8)
    np.savez_compressed(buf, header=head, **{k: np.asarray(arrays[k]) for k in ARRAY_FIELDS})
    return buf.getvalue()


def kernel_trace_npz(kt: KernelTrace, header: Mapping[str, Any]) -> bytes:
    """:func:`write_npz` of a KernelTrace; its kernel name (unless `header` names one) and its
    region names go into the header."""
    return write_npz({"kernel": kt.kernel, **header, "names": list(kt.names)}, kt.arrays())


#: The most bytes the arrays of one timeline.npz may hold once loaded. A stored blob is capped
#: when it is decompressed (store/blobs.py), but an npz is a zip of its own: a few KB can inflate
#: to GBs, and an .npy header can declare any shape. 64 MiB is ~2.8 million records, far above
#: what one instrumented launch stores (CTA granularity).
MAX_NPZ_BYTES = 64 * 2**20


def _check_npz(data: bytes) -> None:
    """Refuse an npz whose members would load to more than MAX_NPZ_BYTES, before loading any:
    the zip's declared sizes (zipfile stops a member at its declared size) and each .npy
    header's shape and dtype (numpy allocates the declared shape before reading)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
            if sum(i.file_size for i in infos) > MAX_NPZ_BYTES:
                raise ValueError(f"timeline.npz inflates to more than {MAX_NPZ_BYTES >> 20} MiB")
            total = 0
            for info in infos:
                with zf.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                    else:
                        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                total += int(np.prod(shape, dtype=object)) * dtype.itemsize
                if total > MAX_NPZ_BYTES:
                    raise ValueError(
                        f"timeline.npz declares arrays of more than {MAX_NPZ_BYTES >> 20} MiB "
                        f"({info.filename}: shape {shape})"
                    )
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ValueError(f"timeline.npz is not a readable npz ({e})") from None


def read_npz(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Inverse of :func:`write_npz`: (header, arrays). Never unpickles (a blob is data); never
    loads more than MAX_NPZ_BYTES (:func:`_check_npz`)."""
    _check_npz(data)
    with np.load(io.BytesIO(data)) as z:
        header = json.loads(bytes(z["header"]).decode())
        arrays = {k: z[k] for k in z.files if k != "header"}
    return header, arrays


def kernel_trace_from_npz(data: bytes) -> tuple[dict[str, Any], KernelTrace]:
    """(header, KernelTrace) of a timeline.npz; KeyError when an array is missing."""
    header, arrays = read_npz(data)
    kt = KernelTrace(
        str(header.get("kernel", "")), list(header.get("names", [])), *(arrays[k] for k in ARRAY_FIELDS)
    )
    return header, kt


def timeline_from_npz(data: bytes, *, num_sms: int | None = None) -> Timeline:
    """Timeline from a timeline.npz, converted with the clock in its header."""
    header, kt = kernel_trace_from_npz(data)
    out = to_timeline(kt, clock_ghz=header.get("clock_ghz"), num_sms=num_sms)
    out.meta["source"] = "RegionResult.timeline_bytes"
    out.meta["dropped_events"] = int(header.get("dropped_events") or 0)
    if header.get("grid"):
        out.meta["grid"] = list(header["grid"])
    return out
