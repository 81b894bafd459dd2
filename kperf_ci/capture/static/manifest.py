"""The launch manifest of a static run: per test, every launch in order, with its compiled code.

Stored variants are deduplicated across tests (two parametrized tests that compile to the same
kernel are one variant), which is right for history but wrong for a pull-request check: there the
question is per test, "does anything this test launches differ from the base revision?".  A
launch differs when its code (normalized SASS per arch), its launch options, its specialization
or its work (grid, integer arguments, tensor shapes) differ.  The manifest keeps exactly that, as
plain JSON, stored as the run-level blob ``launches`` (one per xdist worker: ``launches:gw0``).

    manifest = build_manifest(launches, variants, archs, rootdir)
    {"tests/test_add.py::test_add[4096]": [
        {"site": "kernels/add.py::add_kernel", "name": "vector_add", "spec": "...",
         "config": "num_warps=4,num_stages=3,num_ctas=1", "grid": [4, 1, 1],
         "args": {"n": "4096", "BLOCK": "1024", "x": "fp32[4096]"}, "arg_order": ["x", "n", "BLOCK"],
         "code": {"sm_90": {"variant": "<id>", "sass": "<hash>", "registers": 26, ...}}}]}
"""

from __future__ import annotations

import json
from typing import Any

from kperf_ci.capture.static.compile import source_location, variant_key
from kperf_ci.capture.static.record import LaunchSpec
from kperf_ci.hardware import normalize_arch
from kperf_ci.metrics import CODE_METRICS as CODE_METRICS  # static metrics copied into the manifest
from kperf_ci.model import VariantResult

BLOB = "launches"
#: launches kept per test: a test that sweeps sizes is described by its first launches
MAX_LAUNCHES_PER_TEST = 64


def _arg_text(a: Any) -> str | None:
    if a.kind in ("int", "float", "bool", "str", "dtype", "torch_dtype"):
        return str(a.value)
    if a.kind == "tensor":
        return a.dtype or "tensor"
    if a.kind == "none":
        return "None"
    if a.kind == "jit" and isinstance(a.value, dict):
        return str(a.value.get("qualname"))
    if a.kind == "tuple":
        return "(" + ", ".join(_arg_text(x) or "?" for x in a.items) + ")"
    return None


def launch_args(ls: LaunchSpec) -> dict[str, str]:
    """Each argument as short text: values of scalars and constexprs, dtype[shape] of tensors."""
    out = {}
    for a in ls.args:
        text = _arg_text(a)
        if text is None:
            continue
        if a.kind == "tensor" and a.name in ls.shapes:
            text += "[" + "x".join(str(d) for d in ls.shapes[a.name]) + "]"
        out[a.name] = text
    return out


def launch_values(ls: LaunchSpec) -> dict[str, Any]:
    """Scalar and constexpr arguments with their typed values: the timing pass of `kperf ab`
    relaunches the base's own launch from them (``capture/launches/ab_launch.py``)."""
    return {a.name: a.value for a in ls.args if a.kind in ("int", "float", "bool", "str", "none")}


def build_manifest(
    launches: list[LaunchSpec],
    variants: list[VariantResult],
    archs: list[str],
    rootdir: str | None,
    ended_early: dict[str, str] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Per test, its launch rows. A test that stopped before its end (``ended_early``: test ->
    why) has ``ended_early`` on each row: its later launches were never seen."""
    by_id = {v.key.id: v for v in variants}
    archs = [normalize_arch(a) for a in archs]
    out: dict[str, list[dict[str, Any]]] = {}
    for ls in launches:
        rows = out.setdefault(ls.test, [])
        if len(rows) >= MAX_LAUNCHES_PER_TEST:
            continue
        code = {}
        for arch in archs:
            v = by_id.get(variant_key(ls, arch, rootdir).id)
            if v is None:
                continue
            m = {x.name: x.value for x in v.metrics}
            code[arch] = {
                "variant": v.key.id,
                "sass": v.sass_hash,
                "error": v.error,
                **{k: m[k] for k in CODE_METRICS if k in m},
            }
        args = launch_args(ls)
        rows.append(
            {
                "site": source_location(ls, rootdir),
                "name": ls.display_name,
                "spec": ls.spec,
                "config": ls.config,
                "grid": list(ls.grid),
                "args": args,
                # the signature's order: the manifest is written with sorted keys (one text for
                # one manifest), and a launch line reads "X, Y, W, ...", not "B, Mean, N, ..."
                "arg_order": list(args),
                "values": launch_values(ls),
                "options": dict(ls.options),
                "autotune": ls.autotune,
                # set by the kernel's decorators, not its caller: what changed, not identity
                "tuned": list(ls.tuned),
                "derived": list(ls.derived),
                # the marker's thresholds= / metrics=: what the user asked to gate
                "gate": dict(ls.thresholds or {}),
                "code": code,
                **({"ended_early": ended_early[ls.test]} if ended_early and ls.test in ended_early else {}),
            }
        )
    return out


def manifest_json(manifest: dict[str, list[dict[str, Any]]]) -> str:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"), default=str)
