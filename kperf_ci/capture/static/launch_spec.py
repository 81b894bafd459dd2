"""What a recorded launch is: :class:`ArgSpec` and :class:`LaunchSpec`, and how they are
written and read (JSON lines). Describing live arguments is :mod:`kperf_ci.capture.static.describe`."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from kperf_ci.model import canonical_json

# Launch options spelled in this order in a config string; DEFAULT_OPTIONS fills in the first three
# so that "no options" and "the defaults spelled out" are the same config.
OPTION_ORDER = ("num_warps", "num_stages", "num_ctas")
# Keyword arguments of a launch that are bookkeeping of the runtime, never compile options.
IGNORED_KWARGS = {"grid", "warmup", "stream", "device"}

NOT_IMPORTABLE = "not importable: define the kernel at module level"


# --------------------------------------------------------------------------------------------
# data


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument, described well enough to rebuild a stand-in for compilation.

    kind: "tensor" (dtype = Triton type name such as "fp32", aligned = data_ptr % 16 == 0),
    "int", "float", "bool", "none", "str", "dtype" (a Triton dtype, value = its name),
    "torch_dtype", "jit" (a jit function passed as constexpr; value = {"module", "qualname"}),
    "tuple" (items), "tensordesc" (host TensorDescriptor; dtype/aligned of the base, value =
    {"shape", "strides", "block_shape", "padding"}), "unknown" (value = repr; not replayable).
    """

    name: str
    kind: str
    constexpr: bool = False
    dtype: str | None = None
    aligned: bool | None = None
    value: Any = None
    items: tuple[ArgSpec, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.constexpr:
            d["constexpr"] = True
        if self.dtype is not None:
            d["dtype"] = self.dtype
        if self.aligned is not None:
            d["aligned"] = self.aligned
        if self.value is not None:
            d["value"] = self.value
        if self.items:
            d["items"] = [a.to_dict() for a in self.items]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ArgSpec:
        return cls(
            name=d.get("name", ""),
            kind=d["kind"],
            constexpr=bool(d.get("constexpr", False)),
            dtype=d.get("dtype"),
            aligned=d.get("aligned"),
            value=d.get("value"),
            items=tuple(cls.from_dict(x) for x in d.get("items", ())),
        )

    @property
    def replayable(self) -> bool:
        return self.kind != "unknown" and all(a.replayable for a in self.items)


@dataclass(frozen=True)
class LaunchSpec:
    """One recorded kernel launch: everything needed to compile the same variant elsewhere."""

    kernel: str  # the Triton function's __name__
    qualname: str
    module: str
    source_file: str  # absolute path of the kernel's module ("" when unknown)
    args: tuple[ArgSpec, ...]
    options: dict[str, Any]  # launch options as given (num_warps, num_stages, ...)
    grid: tuple[int, ...]
    spec: str  # canonical specialization string (VariantKey.spec)
    config: str  # canonical launch options string (VariantKey.config)
    test: str = ""  # pytest node id
    name: str | None = None  # user-facing kernel name override (marker)
    tags: tuple[str, ...] = ()
    thresholds: dict[str, Any] = field(default_factory=dict)
    importable: bool = True
    reason: str | None = None  # why it cannot be compiled elsewhere
    executed: bool = True  # False: recorded only (an autotune config that was not run)
    autotune: dict[str, Any] | None = None  # {"index": i, "count": n} for autotuned launches
    # Tensor argument shapes: they size the work without always changing the specialization, so
    # the A/B static pass compares them per launch (never used to compile).
    shapes: dict[str, list[int]] = field(default_factory=dict)
    # Arguments and options the kernel's decorators set, not the caller: names an autotune
    # config sets (``tuned``) and names ``@triton.heuristics`` computes (``derived``). A launch is
    # its call (site, kernel, the caller's arguments); these values are what a pull request
    # changed, so the A/B static pass pairs launches without them (judge/launch_diff.py).
    tuned: tuple[str, ...] = ()
    derived: tuple[str, ...] = ()

    @property
    def display_name(self) -> str:
        return self.name or self.kernel

    @property
    def identity(self) -> str:
        """Launches with equal identity compile to the same variant (for any arch)."""
        return canonical_json([self.source_file, self.qualname, self.spec, self.config])

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["args"] = [a.to_dict() for a in self.args]
        d["grid"] = list(self.grid)
        d["tags"] = list(self.tags)
        d["tuned"] = list(self.tuned)
        d["derived"] = list(self.derived)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaunchSpec:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["args"] = tuple(ArgSpec.from_dict(a) for a in d.get("args", ()))
        known["grid"] = tuple(d.get("grid", ()))
        known["tags"] = tuple(d.get("tags", ()))
        known["options"] = dict(d.get("options", {}))
        known["thresholds"] = dict(d.get("thresholds", {}) or {})
        known["shapes"] = {k: list(v) for k, v in (d.get("shapes") or {}).items()}
        known["tuned"] = tuple(d.get("tuned") or ())
        known["derived"] = tuple(d.get("derived") or ())
        return cls(**known)

    def to_json(self) -> str:
        return canonical_json(self.to_dict())


def work_signature(ls: LaunchSpec) -> str:
    """What sizes a launch's work besides its compiled code: grid, integer arguments, shapes."""
    ints = {a.name: a.value for a in ls.args if a.kind == "int" and not a.constexpr}
    return canonical_json([list(ls.grid), ints, ls.shapes])


def load_launches(path: str | os.PathLike[str]) -> list[LaunchSpec]:
    with open(path, encoding="utf-8") as f:
        return [LaunchSpec.from_dict(json.loads(line)) for line in f if line.strip()]


def with_context(spec: LaunchSpec, **changes: Any) -> LaunchSpec:
    """A copy of ``spec`` with fields changed (test, name, tags, thresholds, ...)."""
    return replace(spec, **changes)
