"""Data that flows between the stages: capture -> store -> compare -> report/gate -> act.

Everything here is a plain dataclass with no behaviour beyond (de)serialisation, so each
stage can be run and tested alone on data produced by the previous one.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

MetricKind = Literal["static", "time", "region", "analysis"]
Better = Literal["lower", "higher", "none"]


#: Triton's launch options when a launch names none: a config string that leaves one out means this.
DEFAULT_OPTIONS = {"num_warps": 4, "num_stages": 3, "num_ctas": 1}

#: The artifact a benchmark-script call (or an imported Liger CSV row) stores: what was called,
#: at which sizes (``canonical_json``); written by the plugin and the CSV import, read by the
#: report's sweep plots.
BENCH_CALL = "bench_call"
#: The tag of every variant measured from a benchmark script's do_bench calls.
SCRIPT_TAG = "script"


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: the one spelling used for hashing and keys."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def config_key(values: dict[str, Any]) -> str:
    """One spelling of an autotune config's values, whoever recorded them: a ``triton.Config``'s
    ``all_kwargs()`` at capture time (a call's config list) and a launch row's tuned values
    (its arguments as text) give the same key. Unset values (None) are no value."""
    kept = {k: str(v) for k, v in values.items() if v is not None and str(v) != "None"}
    return json.dumps(kept, sort_keys=True)


@dataclass(frozen=True)
class Fingerprint:
    """What a number depends on besides the code: the machine and the software stack."""

    cpu: str = ""
    gpu: str | None = None  # e.g. "NVIDIA H100 80GB HBM3"; None in static mode without a GPU
    sm_count: int | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str = ""
    python: str = ""
    host_hash: str = ""  # sha256 of the hostname, truncated: never the raw name
    extra: dict[str, Any] = field(default_factory=dict)  # clocks, temperature, ...

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Fingerprint:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    started_at: str  # ISO 8601 UTC
    mode: Literal["static", "gpu"]
    fingerprint: Fingerprint
    git_sha: str | None = None
    git_branch: str | None = None
    kperf_version: str = ""
    label: str | None = None  # e.g. "base" / "head" in an A/B job


@dataclass(frozen=True)
class VariantKey:
    """One compiled kernel: kernel + specialization + config + target.

    `kernel` is the user-facing name (marker name or the Triton function name), `source`
    the importable location ("examples/kernels/add.py::add_kernel"), `spec` the canonical
    signature/constexpr/specialization string, `config` launch options (num_warps, ...).
    """

    kernel: str
    arch: str  # "sm_90" in static mode, GPU model name in gpu mode
    spec: str = ""
    config: str = ""
    test: str = ""  # pytest node id that produced it
    source: str = ""

    @functools.cached_property
    def id(self) -> str:
        """Identity used to match a variant across runs and machines (excludes the test id).
        Computed once per key (the fields are frozen): a 100,000-variant run asks for it often."""
        raw = canonical_json([self.kernel, self.arch, self.spec, self.config])
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    def label(self) -> str:
        parts = [self.kernel, self.arch]
        if self.config:
            parts.append(self.config)
        return " ".join(parts)


@dataclass(frozen=True, slots=True)  # slots: a 100,000-variant run holds a million of them
class Metric:
    name: str  # e.g. "registers", "sass.fma", "time.median", "region.epilogue"
    value: float
    unit: str = ""  # "count", "bytes", "ms", "cycles", "fraction", ...
    kind: MetricKind = "static"
    better: Better = "lower"


_new = object.__new__
_METRIC_SET = tuple(Metric.__dict__[f].__set__ for f in ("name", "value", "unit", "kind", "better"))


def make_metric(name: str, value: float, unit: str, kind: str, better: str) -> Metric:
    """``Metric(name, value, unit, kind, better)`` at half the cost, for code that makes
    millions of them (a 100,000-variant import or load): a frozen dataclass's ``__init__`` sets
    each field through ``object.__setattr__``; this sets the slots directly. The same instance
    (Metric has no __post_init__ and no validation)."""
    m = _new(Metric)
    set_name, set_value, set_unit, set_kind, set_better = _METRIC_SET
    set_name(m, name)
    set_value(m, value)
    set_unit(m, unit)
    set_kind(m, kind)
    set_better(m, better)
    return m


@dataclass
class VariantResult:
    """Everything captured for one variant in one run."""

    key: VariantKey
    metrics: list[Metric] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)  # raw timing samples, ms
    tags: list[str] = field(default_factory=list)
    thresholds: dict[str, Any] = field(default_factory=dict)  # per-kernel overrides from the marker
    sass_hash: str | None = None
    artifacts: dict[str, str] = field(default_factory=dict)  # name -> text (sass, ptx) or path
    error: str | None = None  # one line: why this variant has no metrics (e.g. compile failure)

    def metric(self, name: str) -> Metric | None:
        for m in self.metrics:
            if m.name == name:
                return m
        return None


@dataclass
class RunRecord:
    """A stored run as read back from a database."""

    info: RunInfo
    results: list[VariantResult]
    # "complete", "empty", "running" or "interrupted" (see kperf_ci.store); only an explicit
    # run id loads a running/interrupted run
    status: str = "complete"
    # newer running/interrupted runs passed over to find this one when no id was given: (id, status)
    skipped: list[tuple[str, str]] = field(default_factory=list)
