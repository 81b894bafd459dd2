"""The harness process: ``python -m kperf_ci.agent.harness`` reads one job (JSON) on stdin.

It installs the guards (:mod:`kperf_ci.agent.guards`) before anything of the candidate's is
imported, loads the original module and the candidate module by file path, runs the checks
(:mod:`kperf_ci.agent.checks`) and, when asked and a GPU is there, the same-job A/B timing
(:func:`kperf_ci.capture.timing.interleaved.adaptive_ab`, the timing ``kperf ab`` uses). The verdict goes
to the result file named in the job, tagged with the job's nonce, so that text a candidate prints is never
read as a verdict. The parent (:mod:`kperf_ci.agent.verify`) runs this with a timeout and an
environment without network.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from kperf_ci.agent import checks, guards
from kperf_ci.agent.targets import get_target

# loaded here, before the candidate: their entry points are watched (_TIMING_ENTRY_POINTS)
from kperf_ci.capture.timing import backend, cupti, engine, interleaved, steps  # noqa: F401
from kperf_ci.config import ABPolicy
from kperf_ci.error_text import error_text
from kperf_ci.judge import plausibility
from kperf_ci.judge.ab import stop_rule
from kperf_ci.sample_stats import median


def _load(path: str, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


#: kperf's own timing entry points a candidate could replace to fake a speedup (module, dotted
#: attribute); looked up by name so that a function moved to another module is reported, not a crash
_TIMING_ENTRY_POINTS = (
    ("kperf_ci.capture.timing.engine", "time_callable"),
    ("kperf_ci.capture.timing.engine", "time_interleaved"),
    ("kperf_ci.capture.timing.engine", "sample_batch"),
    ("kperf_ci.capture.timing.steps", "sample_batch"),
    ("kperf_ci.capture.timing.steps", "warmup"),
    ("kperf_ci.capture.timing.backend", "CudaBackend.elapsed_ms"),
    ("kperf_ci.capture.timing.backend", "CudaBackend.marker"),
    # the CUPTI clock (the default on a GPU): its markers, its durations and their attribution
    ("kperf_ci.capture.timing.cupti", "CuptiBackend.elapsed_ms"),
    ("kperf_ci.capture.timing.cupti", "CuptiBackend.marker"),
    ("kperf_ci.capture.timing.cupti", "KinetoSource.stop"),
    ("kperf_ci.capture.timing.cupti", "kernel_windows"),
    ("kperf_ci.capture.timing.interleaved", "adaptive_ab"),
    # the A/B's stop rule and verdict, handed to adaptive_ab
    ("kperf_ci.judge.ab", "stop_rule"),
    ("kperf_ci.judge.ab", "ab_verdict"),
    ("kperf_ci.judge.ab", "settled"),
    ("kperf_ci.agent.checks", "check_outputs"),
    ("kperf_ci.agent.checks", "check_record"),
    ("kperf_ci.agent.checks", "run_case"),
)


def _timer_objects() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mod, attr in _TIMING_ENTRY_POINTS:
        obj: Any = sys.modules.get(mod)
        for part in attr.split("."):
            obj = getattr(obj, part, None)
        out[f"{mod}.{attr}"] = obj
    return out


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    guards.install_network_guard()
    import torch

    on_gpu = job.get("device") == "cuda"
    guards.install_launch_hook(torch, on_gpu)
    guards.install_stream_guard(torch)
    ids0 = guards.timer_identities(torch, _timer_objects())

    def timers() -> list[str]:
        return guards.changed_timers(ids0, guards.timer_identities(torch, _timer_objects()))

    target = get_target(job["target"])
    orig_file = str(Path(job["original"]).resolve())
    cand_file = str(Path(job["candidate"]).resolve())
    orig = _load(orig_file, "kperf_agent_original")
    ref_fn = getattr(orig, target.launcher)
    result: dict[str, Any] = {"ok": False, "device": "cuda" if on_gpu else "cpu"}
    t0 = time.perf_counter()
    try:
        try:
            cand = _load(cand_file, "kperf_agent_candidate")
        except Exception as e:  # noqa: BLE001 - a candidate that does not import is a verdict
            if guards.RECORD.network:
                raise checks.Rejected(checks.NETWORK, "opened a network connection while importing") from None
            raise checks.Rejected(checks.IMPORT, f"import failed: {error_text(e)}") from None
        if guards.RECORD.network:
            raise checks.Rejected(checks.NETWORK, "opened a network connection while importing")
        if timers():
            raise checks.Rejected(checks.TIMERS, f"replaced timing functions: {', '.join(timers())}")
        cand_fn = getattr(cand, target.launcher, None)
        if not callable(cand_fn):
            raise checks.Rejected(checks.SIGNATURE, f"defines no launcher {target.launcher}()")
        if list(inspect.signature(cand_fn).parameters) != list(inspect.signature(ref_fn).parameters):
            raise checks.Rejected(
                checks.SIGNATURE, f"{target.launcher}() has another signature than the original"
            )
        files = (cand_file, orig_file)
        result["correctness"] = checks.correctness(
            torch, target, ref_fn, cand_fn, job.get("seeds", [1, 2]), on_gpu, files, timers
        )
        if job.get("value_check", True):
            tol = 0.15 if on_gpu else 2.0  # interpreter timings on a shared CPU are noisy: 3x
            result["value_dependence_ms"] = checks.value_dependence(
                torch, target, ref_fn, cand_fn, on_gpu, tol
            )
        if job.get("bench") and on_gpu:
            result["bench"] = _bench(torch, target, ref_fn, cand_fn, job, files, timers)
        if timers():
            raise checks.Rejected(checks.TIMERS, f"replaced timing functions: {', '.join(timers())}")
        result["ok"] = True
    except checks.Rejected as r:
        result.update(hack=r.hack, reason=r.reason)
    result["seconds"] = time.perf_counter() - t0
    return result


def _bench(
    torch: Any,
    target: Any,
    ref_fn: Any,
    cand_fn: Any,
    job: dict[str, Any],
    files: tuple[str, str],
    timers: Any,
) -> dict[str, Any]:
    """Same-job interleaved A/B on timing inputs that no check used, then re-validated."""
    shape, dtype = target.bench_shape, target.dtypes[0]
    seed = 1_000_003 + int(job.get("bench_seed", 0))  # never one of the verification seeds
    a = checks.make_inputs(torch, target, shape, dtype, "normal", seed, "cuda")
    b = checks.clones(a)
    snap = checks.clones(b)
    policy = ABPolicy(**job["ab"])  # the project's kperf ab settings, as the parent built them
    res = interleaved.adaptive_ab(
        lambda: ref_fn(*a),
        lambda: cand_fn(*b),
        stop_rule=stop_rule(policy),
        budget_s=float(job.get("bench_budget_s", 3.0)),
    )
    torch.cuda.synchronize()
    if timers():
        raise checks.Rejected(
            checks.TIMERS, f"replaced timing functions during timing: {', '.join(timers())}"
        )
    for x, s in zip(b, snap, strict=False):
        if not torch.equal(x, s):
            raise checks.Rejected(checks.INPUTS, "modified its timing inputs")
    try:  # re-validate on the timing inputs, outputs poisoned, after the timing loop
        checks.run_case(torch, ref_fn, cand_fn, b, True, files, "after timing")
    except checks.Rejected as e:
        raise checks.Rejected(
            checks.TIMING_INPUTS, f"wrong on the timing inputs after timing: {e.reason}"
        ) from None
    # the package's one median (NaN for no samples), as the A/B document's and the judge's
    head_ms, base_ms = median(res.head_ms), median(res.base_ms)
    out = cand_fn(*b)
    nbytes = plausibility.derive_bytes(*b, out)
    pl = plausibility.check(
        head_ms, device=torch.cuda.get_device_name(), bytes=nbytes, bytes_source="derived"
    )
    bench = {
        "shape": list(shape),
        "dtype": dtype,
        "verdict": res.verdict,
        "ratio": res.ratio,
        "ci_low": res.ci_low,
        "ci_high": res.ci_high,
        "pairs": res.n_pairs,
        "method": res.method,
        "seconds": res.seconds + res.warmup_seconds,
        "base_ms": base_ms,
        "head_ms": head_ms,
        "plausibility": pl.describe(),
        "device": torch.cuda.get_device_name(),
        "warnings": res.warnings,
    }
    if not pl.ok:
        raise checks.Rejected(
            checks.ROOFLINE, f"speedup above the roofline, a measurement error: {pl.problems[0]}"
        )
    return bench


def main() -> int:
    job = json.loads(sys.stdin.read())
    nonce, result_path = job["nonce"], job["result"]
    try:
        result = run_job(job)
    except BaseException as e:  # noqa: BLE001 - anything else is a harness crash, reported as such
        result = {"ok": False, "hack": checks.CRASH, "reason": f"harness: {error_text(e, 300)}"}
    result["nonce"] = nonce
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(result, f, default=str)
    sys.stdout.flush()
    os._exit(0)  # no interpreter shutdown: a candidate's atexit hooks never run after the verdict


if __name__ == "__main__":
    sys.exit(main())
