"""Synthetic timelines with known answers: for tests, examples and checking an analysis by hand.

The block scheduler is modelled as the hardware's in the simple case: CTAs in id order, each to
the SM slot that frees first (lowest SM on ties), ``ctas_per_sm`` slots per SM.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .timeline import Timeline


def schedule(
    durations_ns: Sequence[float], num_sms: int, ctas_per_sm: int = 1, launch_ns: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sm, start_ns, end_ns) per CTA under greedy in-order scheduling. ``launch_ns`` is the
    delay between consecutive CTA dispatches (a launch ramp)."""
    free = np.zeros((num_sms, ctas_per_sm))
    sm = np.zeros(len(durations_ns), dtype=np.int64)
    start = np.zeros(len(durations_ns))
    for i, d in enumerate(durations_ns):
        flat = int(np.argmin(free.T.reshape(-1)))  # slot-major: fill one slot on every SM first
        slot, s = divmod(flat, num_sms)
        t = max(free[s, slot], i * launch_ns)
        sm[i], start[i] = s, t
        free[s, slot] = t + d
    return sm, start, start + np.asarray(durations_ns, dtype=np.float64)


def grid_timeline(
    durations_ns: Sequence[float],
    *,
    num_sms: int = 132,
    ctas_per_sm: int = 1,
    warps: int = 0,
    prologue: float = 0.05,
    epilogue: float = 0.05,
    launch_ns: float = 0.0,
    kernel: str = "synthetic",
) -> Timeline:
    """CTAs with the given durations; each has regions kernel, prologue, loop0, epilogue
    (prologue/epilogue as fractions of its time). ``warps=0`` = CTA granularity (warp -1)."""
    sm, start, end = schedule(durations_ns, num_sms, ctas_per_sm, launch_ns)
    rows = []
    for cta, (s_, a, b) in enumerate(zip(sm, start, end, strict=True)):
        d = b - a
        p_end = a + prologue * d
        l_end = b - epilogue * d
        for w in range(warps) if warps else [-1]:
            rows += [
                (cta, w, s_, "kernel", a, b),
                (cta, w, s_, "prologue", a, p_end),
                (cta, w, s_, "loop0", p_end, l_end),
                (cta, w, s_, "epilogue", l_end, b),
            ]
    return Timeline.from_records(rows, kernel=kernel, num_sms=num_sms)


def pipelined_timeline(
    *,
    ctas: int = 4,
    warps: int = 4,
    iters: int = 32,
    load_ns: float = 800.0,
    mma_ns: float = 400.0,
    stages: int = 1,
    warp_specialized: bool = False,
    untracked_ns: float = 0.0,
    num_sms: int = 132,
) -> Timeline:
    """Matmul-like CTAs: each iteration waits for a tile (``tma_wait``) then runs ``mma``.

    stages=1: the load of tile k+1 starts after mma k, so every wait is a full load latency.
    stages>1: loads run stages-1 tiles ahead; a wait lasts max(0, load - (stages-1) * mma).
    warp_specialized: warp 0 is the producer (only waits), the other warps only run mma, and
    the producer's waits overlap the consumers' MMAs.
    untracked_ns: time per iteration between the wait and the MMA in no region (load issue
    code, instrumentation records)."""
    rows = []
    for c in range(ctas):
        t = 0.0
        ready = [0.0] * (iters + stages)  # when tile k has landed
        for k in range(min(stages - 1, iters)):
            ready[k] = load_ns  # prefetched in the prologue
        mma_spans = []
        waits = []
        for k in range(iters):
            if stages == 1:
                ready[k] = t + load_ns
            w_end = max(t, ready[k])
            waits.append((t, w_end))
            m_start = w_end + untracked_ns
            m_end = m_start + mma_ns
            mma_spans.append((m_start, m_end))
            if stages > 1 and k + stages - 1 < iters:
                ready[k + stages - 1] = w_end + load_ns  # issued once slot k is consumed
            t = m_end
        lo, hi = 0.0, t
        for w in range(warps):
            rows.append((c, w, c % num_sms, "kernel", lo - 100.0, hi + 100.0))
            rows.append((c, w, c % num_sms, "loop0", lo, hi))
            if warp_specialized:
                if w == 0:
                    for k in range(iters):
                        # the producer waits while tile k is in flight
                        rows.append((c, w, c % num_sms, "tma_wait", max(ready[k] - load_ns, lo), ready[k]))
                else:
                    for a, b in mma_spans:
                        rows.append((c, w, c % num_sms, "mma", a, b))
            else:
                for (wa, wb), (ma, mb) in zip(waits, mma_spans, strict=True):
                    if wb > wa:
                        rows.append((c, w, c % num_sms, "tma_wait", wa, wb))
                    rows.append((c, w, c % num_sms, "mma", ma, mb))
    return Timeline.from_records(rows, kernel=f"pipelined_s{stages}", num_sms=num_sms)


def proton_chrome_trace(ctas, *, kernel="k", clock_ghz=2.0, launch_offset_ns=0, stamps=True, suffix=""):
    """A Proton Chrome trace as Proton 3.6 writes it: ts/dur in 'us' = cycles / 1000 (1 GHz assumed), CTAs
    placed by their init stamp. ``ctas``: list of (cta, sm, init_ns, [(warp, region, t0_ns, t1_ns)])
    with times in true ns from the CTA's init."""
    events = []
    for cta, sm, init, regs in ctas:
        first = min(r[2] for r in regs)
        last = max(r[3] for r in regs)
        for warp, name, a, b in regs:
            cyc0 = (a - first) * clock_ghz
            cyc1 = (b - first) * clock_ghz
            args = {"Frequency (MHz)": 1000.0}
            if stamps:
                args.update(
                    {
                        "Init Time (ns)": init + launch_offset_ns,
                        "Post Final Time (ns)": init + launch_offset_ns + last + 500,
                        "Finalization Time (ns)": 500,
                    }
                )
            events.append(
                {
                    "name": name,
                    "ph": "X",
                    "cat": kernel,
                    "pid": f"{kernel} Core{sm} CTA{cta}{suffix}",
                    "tid": f"warp {warp} (line 0)",
                    "ts": (init + launch_offset_ns + cyc0) / 1000.0,
                    "dur": (cyc1 - cyc0) / 1000.0,
                    "args": args,
                }
            )
    return {"displayTimeUnit": "ns", "traceEvents": events}
