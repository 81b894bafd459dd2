"""Proton's raw profile buffer, read from the device without Proton's host parser (Proton 3.6).

It carries what Proton 3.6's Chrome trace drops: every record's absolute SM cycle and each CTA's
globaltimer init / pre-final / post-final stamps, so the clock can be fitted
(:func:`kperf_ci.traces.clock.fit_clock`). The capture stage copies the head of each CTA's block
off the device (:func:`raw_header_bytes` wide) and hands it to :func:`parse_raw_buffer`.
"""

from __future__ import annotations

import numpy as np

from .kernel_trace import KernelTrace

# # Layout per CTA, at ``cta_linear_id * profile_scratch_size`` (read off the PTX of an sm_90
# build with Proton 3.6's lowering; thread 0 of the CTA writes the header):
#   +0  u32 preamble 0xdeadbeef      +4  u32 linear CTA id      +8  u32 %smid
#   +12 u32 buffer bytes (shared)    +16 u64 init  %globaltimer (kernel entry, before any record)
#   +24 u64 pre-final %globaltimer (after the kernel's last record and a CTA barrier)
#   +32 u64 post-final %globaltimer (after the records were copied out)
#   +40 u32 words written per warp (num_warps entries; 2 words a record), then the copied shared
#   buffer: one segment per recording warp, 8-byte records
#   word0 = is_end << 31 | scope_id << 23 | (%clock_hi & 0x7ff), word1 = %clock (low 32 bits)
# so each record carries 43 bits of the SM's clock64: absolute cycles, comparable between all
# CTAs that ran on the same SM. The Chrome trace that Proton 3.6 writes drops exactly that (it
# subtracts each CTA's first cycle) and the CTA's pre/post-final times.

PREAMBLE = 0xDEADBEEF
HEADER_BYTES = 40


def raw_header_bytes(num_warps: int, max_records: int) -> int:
    """Bytes per CTA worth copying off the device for `max_records` records of warp 0."""
    return HEADER_BYTES + 4 * num_warps + 8 * max_records


def parse_raw_buffer(
    blocks: np.ndarray,
    num_warps: int,
    scope_names: dict[int, str],
    kernel: str = "kernel",
    recording_warps: tuple[int, ...] = (0,),
) -> KernelTrace:
    """KernelTrace from the per-CTA head of Proton's device buffer (``blocks``: uint8, one row
    per CTA, at least ``raw_header_bytes`` wide). Records are paired per scope in order, as
    Proton's own parser does. ``start`` stays cycles since the CTA's first record (as from the
    Chrome trace); the absolute clock of that first record is ``raw["cycle0"]`` (per CTA) and
    the per-CTA globaltimer stamps are ``cta_init_ns`` / ``cta_final_ns`` (pre-final) and
    ``raw["cta_post_ns"]``. Records beyond the copied width are not seen (warned)."""
    b = np.ascontiguousarray(blocks, dtype=np.uint8)
    n, width = b.shape
    u32 = b[:, : width - width % 4].view("<u4")
    ok = u32[:, 0] == PREAMBLE
    warnings = []
    if not ok.all():
        warnings.append(
            f"{int((~ok).sum())} of {n} CTAs have no valid Proton header (not run or not written)"
        )
    b, u32 = b[ok], u32[ok]
    u64 = b[:, 16:40].copy().view("<u8")
    cta_ids = u32[:, 1].astype(np.int64)
    sm = u32[:, 2].astype(np.int64)
    buf_bytes = u32[:, 3].astype(np.int64)
    counts = u32[:, 10 : 10 + num_warps].astype(np.int64)
    payload = HEADER_BYTES + 4 * num_warps
    nseg = len(recording_warps)
    rows: list[tuple[int, int, int, int, int, int]] = []  # region, cta, sm, unit, start, end
    dropped = 0
    for i in range(b.shape[0]):
        seg_bytes = int(buf_bytes[i]) // nseg
        for s, w in enumerate(recording_warps):
            cnt = int(counts[i, w]) // 2  # the header counts 4-byte words; a record is two
            cap = seg_bytes // 8
            if cnt > cap:
                dropped += cnt - cap
            take = min(cnt, cap)
            off = payload + s * seg_bytes
            avail = max(0, (width - off) // 8)
            if take > avail:
                warnings.append(
                    f"CTA {int(cta_ids[i])} warp {w}: {take - avail} records beyond the copied width"
                )
                take = avail
            if take <= 0:
                continue
            w32 = b[i, off : off + 8 * take].view("<u4").reshape(take, 2)
            open_: dict[int, int] = {}
            for w0, w1 in w32.tolist():
                sid = (w0 >> 23) & 0xFF
                cyc = ((w0 & 0x7FF) << 32) | w1
                if not w0 >> 31:
                    open_[sid] = cyc
                elif sid in open_:
                    rows.append((sid, int(cta_ids[i]), int(sm[i]), w, open_.pop(sid), cyc))
    if dropped:
        warnings.append(f"{dropped} events are dropped (Proton's buffer was too small)")
    arr = np.array(rows, dtype=np.int64).reshape(-1, 6)
    sids = np.unique(arr[:, 0])  # region index in scope-id order (Proton's order of first start)
    names = [scope_names.get(int(k), f"scope_{int(k)}") for k in sids]
    arr[:, 0] = np.searchsorted(sids, arr[:, 0])
    order = np.argsort(cta_ids, kind="stable")
    ids_sorted = cta_ids[order]
    pos = np.searchsorted(ids_sorted, arr[:, 1])
    cycle0 = np.full(ids_sorted.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(cycle0, pos, arr[:, 4])
    start = arr[:, 4] - cycle0[pos]
    return KernelTrace(
        kernel=kernel,
        names=names,
        region=arr[:, 0].astype(np.uint16),
        cta=arr[:, 1].astype(np.uint32),
        sm=arr[:, 2].astype(np.uint16),
        unit=arr[:, 3].astype(np.uint16),
        start=start,
        dur=arr[:, 5] - arr[:, 4],
        cta_ids=ids_sorted.astype(np.uint32),
        cta_sm=sm[order].astype(np.uint16),
        cta_init_ns=u64[order, 0].astype(np.int64),
        cta_final_ns=u64[order, 1].astype(np.int64),
        warnings=warnings,
        raw={"cycle0": cycle0, "cta_post_ns": u64[order, 2].astype(np.int64)},
    )
