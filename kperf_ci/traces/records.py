"""Kernel records: the flat table of timed region records that every intra-kernel analysis reads.

One record = one region (``kernel``, ``prologue``, ``loop0``, ``epilogue``, ``body`` or a user
scope) executed by one warp (or one CTA, at CTA granularity) of one CTA on one SM, with a start
and an end time in nanoseconds from the start of the launch. Every trace format kperf reads
(:mod:`.proton_chrome`, :mod:`.proton_raw` through :mod:`.kernel_trace`, :mod:`.timeline_file`)
ends up as a :class:`Timeline`; :mod:`.perfetto` writes one out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..hardware import MAX_SMS

KERNEL_REGION = "kernel"


def group_min(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each element, the minimum of ``values`` over the elements with the same key."""
    _, inv = np.unique(keys, return_inverse=True)
    inv = inv.reshape(-1)
    lo = np.full(int(inv.max()) + 1 if len(inv) else 0, np.inf)
    np.minimum.at(lo, inv, values)
    return lo[inv]


def group_slices(keys: np.ndarray) -> tuple[np.ndarray, list[tuple[int, np.ndarray]]]:
    """Indices of the elements of each key, without one pass over all elements per key:
    (unique keys, [(key, indices)])."""
    keys = np.asarray(keys)
    order = np.argsort(keys, kind="stable")
    uniq, first = np.unique(keys[order], return_index=True)
    bounds = list(first) + [len(keys)]
    return uniq, [(uniq[i], order[bounds[i] : bounds[i + 1]]) for i in range(len(uniq))]


@dataclass
class CtaSpans:
    """One row per CTA: where it ran and from when to when (ns)."""

    cta: np.ndarray
    sm: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.cta)

    @property
    def duration_ns(self) -> np.ndarray:
        return self.end_ns - self.start_ns


def check_sm_count(n: int | None) -> None:
    """Refuse an SM count no GPU has: analyses allocate and loop per SM (a float such as 1.0 from
    a hand-written trace reached numpy's allocation as a TypeError, exit 3: found by the fuzz test)."""
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise ValueError(f"SM count {n!r} is not an integer (1..{MAX_SMS})")
    if not 0 < n <= MAX_SMS:
        raise ValueError(f"SM count {n} is outside 1..{MAX_SMS}")


@dataclass
class Timeline:
    """Region records of one kernel launch, as parallel numpy arrays (one entry per record).

    ``warp`` is -1 for CTA-granularity records. ``num_sms`` is the device's SM count when known
    (SMs that ran nothing are idle time too); ``meta`` carries provenance (source file, clock,
    dropped events, arch, ...).
    """

    cta: np.ndarray
    warp: np.ndarray
    sm: np.ndarray
    region: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    kernel: str = ""
    num_sms: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:  # an id of 1e300 or 10**30 does not fit: bad input, not a crash
            self.cta = np.asarray(self.cta, dtype=np.int64).reshape(-1)
            self.warp = np.asarray(self.warp, dtype=np.int64).reshape(-1)
            self.sm = np.asarray(self.sm, dtype=np.int64).reshape(-1)
        except OverflowError as e:
            raise ValueError(f"a CTA, warp or SM id does not fit a 64-bit integer ({e})") from None
        self.region = np.asarray(self.region, dtype=object).reshape(-1)
        self.start_ns = np.asarray(self.start_ns, dtype=np.float64).reshape(-1)
        self.end_ns = np.asarray(self.end_ns, dtype=np.float64).reshape(-1)
        n = len(self.cta)
        for name in ("warp", "sm", "region", "start_ns", "end_ns"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Timeline.{name} has {len(getattr(self, name))} entries, cta has {n}")
        if isinstance(self.num_sms, float) and self.num_sms.is_integer():
            self.num_sms = int(self.num_sms)  # 132.0 from a JSON writer is 132 SMs
        check_sm_count(self.num_sms)
        if n and (self.sm.min() < 0 or self.sm.max() >= MAX_SMS):
            bad = int(np.argmax((self.sm < 0) | (self.sm >= MAX_SMS)))
            raise ValueError(f"record {bad} names SM {self.sm[bad]}, outside 0..{MAX_SMS - 1}")
        finite = np.isfinite(self.start_ns) & np.isfinite(self.end_ns)
        if n and not finite.all():  # NaN compares False everywhere: every finding would read "ok"
            bad = int(np.argmin(finite))
            raise ValueError(
                f"record {bad} has a time that is not a finite number "
                f"({self.start_ns[bad]}, {self.end_ns[bad]})"
            )
        if n and np.any(self.end_ns < self.start_ns):
            bad = int(np.argmax(self.end_ns < self.start_ns))
            raise ValueError(
                f"record {bad} ends before it starts ({self.start_ns[bad]} > {self.end_ns[bad]})"
            )

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_records(
        cls,
        records: Iterable[Sequence[Any] | dict[str, Any]],
        *,
        kernel: str = "",
        num_sms: int | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Timeline:
        """Records as dicts with keys cta, warp, sm, region, start_ns, end_ns (warp optional)
        or as tuples in that order."""
        cols: dict[str, list[Any]] = {k: [] for k in ("cta", "warp", "sm", "region", "start_ns", "end_ns")}
        for r in records:
            if isinstance(r, dict):
                cols["cta"].append(r["cta"])
                cols["warp"].append(r.get("warp", -1))
                cols["sm"].append(r["sm"])
                cols["region"].append(r["region"])
                cols["start_ns"].append(r["start_ns"])
                cols["end_ns"].append(r["end_ns"])
            else:
                cta, warp, sm, region, s, e = r
                for k, v in zip(cols, (cta, warp, sm, region, s, e), strict=True):
                    cols[k].append(v)
        return cls(**cols, kernel=kernel, num_sms=num_sms, meta=dict(meta or {}))

    def to_records(self) -> list[dict[str, Any]]:
        return [
            {
                "cta": int(c),
                "warp": int(w),
                "sm": int(s),
                "region": str(r),
                "start_ns": float(a),
                "end_ns": float(b),
            }
            for c, w, s, r, a, b in zip(
                self.cta, self.warp, self.sm, self.region, self.start_ns, self.end_ns, strict=True
            )
        ]

    # -- views --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.cta)

    @property
    def empty(self) -> bool:
        return len(self) == 0

    @property
    def t0(self) -> float:
        return float(self.start_ns.min()) if len(self) else 0.0

    @property
    def t1(self) -> float:
        return float(self.end_ns.max()) if len(self) else 0.0

    @property
    def span_ns(self) -> float:
        return self.t1 - self.t0

    @property
    def duration_ns(self) -> np.ndarray:
        return self.end_ns - self.start_ns

    def regions(self) -> list[str]:
        """Region names in order of first appearance."""
        seen: dict[str, None] = {}
        for r in self.region:
            seen.setdefault(str(r), None)
        return list(seen)

    def where(self, mask: np.ndarray) -> Timeline:
        mask = np.asarray(mask, dtype=bool)
        return Timeline(
            self.cta[mask],
            self.warp[mask],
            self.sm[mask],
            self.region[mask],
            self.start_ns[mask],
            self.end_ns[mask],
            kernel=self.kernel,
            num_sms=self.num_sms,
            meta=dict(self.meta),
        )

    def only(self, *names: str) -> Timeline:
        return self.where(np.isin(self.region.astype(str), list(names)))

    def sm_count(self) -> int:
        """Device SM count if known, else the SMs seen in the trace (a lower bound)."""
        seen = int(self.sm.max()) + 1 if len(self) else 0
        return max(self.num_sms or 0, seen)

    def cta_spans(self) -> CtaSpans:
        """Per CTA: its SM and its span, from the ``kernel`` region when the CTA has one
        (union over its warps), else from all of its records."""
        if self.empty:
            z = np.zeros(0)
            return CtaSpans(z.astype(np.int64), z.astype(np.int64), z, z)
        has_kernel = self.region.astype(str) == KERNEL_REGION
        ctas_with_kernel = set(np.unique(self.cta[has_kernel]).tolist())
        use = has_kernel | ~np.isin(self.cta, list(ctas_with_kernel))
        cta = self.cta[use]
        order = np.argsort(cta, kind="stable")
        cta_sorted = cta[order]
        uniq, first = np.unique(cta_sorted, return_index=True)
        starts = np.minimum.reduceat(self.start_ns[use][order], first)
        ends = np.maximum.reduceat(self.end_ns[use][order], first)
        sms = self.sm[use][order][first]
        return CtaSpans(uniq.astype(np.int64), sms.astype(np.int64), starts, ends)

    def shifted(self, t0: float | None = None) -> Timeline:
        """The same timeline with times measured from ``t0`` (default: its first start)."""
        base = self.t0 if t0 is None else t0
        out = self.where(np.ones(len(self), dtype=bool))
        out.start_ns = self.start_ns - base
        out.end_ns = self.end_ns - base
        return out
