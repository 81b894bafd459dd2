"""An existing benchmark script, unmodified, as a kperf run (``kperf run --bench SCRIPT``).

The script is collected as one pytest item and run as ``python SCRIPT ARGS`` would run it
(``__main__``, its ``sys.argv``, its folder first on ``sys.path``, the caller's working
directory). Every ``triton.testing.do_bench`` / ``do_bench_cudagraph`` call it makes is
intercepted (:mod:`kperf_ci.capture.launches.do_bench`) and becomes a benchmark of its own, stored under
the test id ``<script>::<site>[<label>]``:

- **static mode**: the call's ``fn`` runs once while its Triton launches are recorded; they are
  compiled with the session's other launches (registers, spills, SASS). The script gets NaN:
  nothing was timed.
- **GPU mode**: ``fn`` is measured as ``kperf.bench`` measures a callable (static metrics,
  kperf's timing engine within the time the call asked for); the script gets its quantiles /
  mean / median from kperf's samples.
- **kperf ab's timing pass**: the launches ``fn`` makes are copied and each launch of a changed
  kernel is timed against the base's own launch by the replay A/B tests use; the script gets
  NaN (its numbers are not the point of a PR check).

A call that launches no Triton kernel (a reference implementation), that the selection leaves
out, or that a script times with its own ``torch.cuda.Event`` loop is listed with the reason;
a call without Triton launches still gets Triton's own answer in GPU mode, so the script's
output stays whole.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kperf_ci.capture.launches import gpu
from kperf_ci.capture.launches.ab_launch import describe_launch
from kperf_ci.capture.launches.do_bench import BenchCall, intercept, launch_label
from kperf_ci.capture.launches.replay import ReplayDevice
from kperf_ci.capture.static.fake_device import fake_cuda
from kperf_ci.capture.static.record import make_launch_spec
from kperf_ci.capture.static.repo import git_toplevel
from kperf_ci.capture.timing.engine import TimingConfig
from kperf_ci.config import ABPolicy
from kperf_ci.error_text import error_text
from kperf_ci.measure import measure, measure_replay
from kperf_ci.model import BENCH_CALL, SCRIPT_TAG, canonical_json
from kperf_ci.plugin import SESSION_KEY
from kperf_ci.plugin.gpu_bench import keep, plan_of, plan_path
from kperf_ci.plugin.script_main import ScriptExit, run_script

if TYPE_CHECKING:
    from kperf_ci.plugin.session import KperfSession

#: where a script's list of do_bench calls is stored in its run (one blob per script)
CALLS_BLOB = "bench_calls"
TAG = SCRIPT_TAG  # tags every variant measured from a script
NO_LAUNCH = "launched no Triton kernel (a reference implementation?)"


def script_id(path: Path) -> str:
    """The script's path relative to its git work tree (as test ids are), else as given."""
    resolved = path.resolve()
    root = git_toplevel(str(resolved.parent))
    if root is not None:
        try:
            return resolved.relative_to(root).as_posix()
        except ValueError:
            pass
    return path.as_posix()


class ScriptFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        yield ScriptItem.from_parent(self, name="__main__")


class ScriptItem(pytest.Item):
    """The whole script; its do_bench calls are the benchmarks."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.script = script_id(Path(self.path))
        #: kperf ab's plan names benchmarks under this prefix, not the item itself
        self.kperf_prefix = self.script + "::"

    def runtest(self) -> None:
        ks = self.config.stash[SESSION_KEY]
        argv = json.loads(self.config.getoption("kperf_bench_argv") or "[]")
        module = self.config.getoption("kperf_bench_module", default=None)
        run = ScriptRun(ks, self.script)
        interpreted = ks.mode == "static" and os.environ.get("TRITON_INTERPRET", "") == "1"
        # the same fake device as a marked test's (plugin/capture_outcome.py), its gaps named alike
        capture = self.config.pluginmanager.get_plugin("kperf-static-capture")
        fake = capture.fake_for(self, interpreted) if capture is not None else fake_cuda(False)
        with intercept(run.handle) as events, fake:
            try:
                run_script(Path(self.path), module, argv)
            except BaseException:
                run.finish(events, failed=True)
                raise
            run.finish(events, failed=False)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"benchmark script {self.script}"

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        """The script's own frames, short: kperf's, pytest's and runpy's frames in between would
        bury the script's error under a thousand lines."""
        if isinstance(excinfo.value, ScriptExit):
            return str(excinfo.value)
        excinfo.traceback = excinfo.traceback.filter(lambda entry: not _machinery(str(entry.path)))
        return super().repr_failure(excinfo, style="short")


_MACHINERY = (f"{os.sep}kperf_ci{os.sep}", f"{os.sep}_pytest{os.sep}", f"{os.sep}pluggy{os.sep}")


def _machinery(path: str) -> bool:
    return any(m in path for m in _MACHINERY) or path.endswith("runpy.py") or path == "<frozen runpy>"


class ScriptRun:
    """The do_bench calls of one script run, handled per the session's mode."""

    def __init__(self, ks: KperfSession, script: str) -> None:
        self.ks = ks
        self.script = script
        self.calls: list[dict[str, Any]] = []
        self.seen: Counter[str] = Counter()  # per "<site>[<label>]": repeated calls get "#n"
        self.per_site: Counter[str] = Counter()  # captured calls per site (bench_limit)
        settings = ks.settings
        self.select = _globs(settings.bench_select)
        self.limit = settings.bench_limit
        path = plan_path(ks)
        self.plan = plan_of(path) if path and ks.mode == "gpu" else None

    # -- naming and selection ---------------------------------------------------------------

    def test_id(self, call: BenchCall, label: str) -> str:
        key = f"{call.site}[{label}]"
        self.seen[key] += 1
        n = self.seen[key]
        suffix = "" if n == 1 else f"#{n}"
        return f"{self.script}::{call.site}[{label}{suffix}]"

    def left_out(self, call: BenchCall, test: str) -> str | None:
        """Why the selection leaves this call out, or None to measure it."""
        if self.select and not any(fnmatch.fnmatchcase(test, g) or g in test for g in self.select):
            return "not selected (bench_select)"
        if self.limit and self.per_site[call.site] >= self.limit:
            return f"beyond bench_limit ({self.limit} call(s) per call site)"
        self.per_site[call.site] += 1
        return None

    def note(
        self, call: BenchCall, test: str | None, status: str, reason: str = "", kernels: Any = ()
    ) -> None:
        self.calls.append(
            {
                "index": len(self.calls) + 1,
                "site": call.site,
                "line": call.line,
                "function": call.function,
                "test": test,
                "status": status,
                "reason": reason,
                "kernels": sorted(set(kernels)),
            }
        )

    # -- one call ---------------------------------------------------------------------------

    def handle(self, call: BenchCall) -> Any:
        if self.ks.mode == "static":
            return self._static(call)
        if self.plan is not None:
            return self._ab(call)
        return self._gpu(call)

    def _static(self, call: BenchCall) -> Any:
        rec = self.ks.recorder
        with rec.recording(test=""):
            call.call()()
        specs = rec.unique()
        rec.clear()
        if not specs:
            self.note(call, None, "listed", NO_LAUNCH)
            return call.not_measured()
        test = self.test_id(call, launch_label(specs[0]))
        why = self.left_out(call, test)
        kernels = [s.kernel for s in specs]
        if why:
            self.note(call, test, "listed", why, kernels)
            return call.not_measured()
        self.ks.add_pending(replace(s, test=test, name=None, tags=(*s.tags, TAG)) for s in specs)
        self.note(call, test, "captured", kernels=kernels)
        return call.not_measured()

    def _gpu(self, call: BenchCall) -> Any:
        import torch

        fn = call.call()
        _, infos = gpu.capture_launches(fn, static=False)  # compiles; names the call
        torch.cuda.synchronize()
        if not infos:
            self.note(call, None, "listed", NO_LAUNCH)
            return call.run_original()
        test = self.test_id(call, _label_of(infos[0]))
        why = self.left_out(call, test)
        kernels = [i.name for i in infos]
        if why:
            self.note(call, test, "listed", why, kernels)
            return call.not_measured()
        req = self._request(call, test, regions=False, gaps=False)
        try:
            m = measure.bench(req, {"fn": fn}, (), {}, cfg=timing_config(call, req.budget_s))
        except Exception as e:  # kperf's measurement failed: the script goes on with do_bench's answer
            self._failed(call, test, "kperf could not measure it", e, kernels)
            return call.run_original()
        keep(self.ks, m)
        self._store(m.variants, call)
        timed = next((v for v in m.variants if v.samples), None)
        self.note(call, test, "captured" if timed else "listed", "" if timed else "not timed", kernels)
        return call.answer(do_bench_samples(timed)) if timed else call.run_original()

    def _ab(self, call: BenchCall) -> Any:
        copier = self.ks.copier
        if copier is None:
            self.note(call, None, "listed", "kernel replay is off (replay_copy_mb / replay_launches)")
            return call.not_measured()
        copier.clear()
        with copier.capturing():
            call.call()()
        if not copier.launches:
            copier.clear()
            self.note(call, None, "listed", NO_LAUNCH)
            return call.not_measured()
        test = self.test_id(call, launch_label(describe_launch(copier.launches[0])))
        kernels = [launch.name for launch in copier.launches]
        if test not in set(self.plan.tests()):
            copier.clear()
            self.note(call, test, "identical", "identical code and work on both sides", kernels)
            return call.not_measured()
        s = self.ks.settings
        req = self._request(
            call,
            test,
            base_tree=self.ks.config.getoption("kperf_base_tree", default=None),
            ab=ABPolicy.from_settings(s),
            ab_plan=self.plan,
        )
        try:
            m = measure_replay.replay(req, copier, ReplayDevice.cuda())
        except Exception as e:  # the A/B of this call failed: said, the script goes on
            copier.clear()
            self._failed(call, test, "kperf could not time it A/B", e, kernels)
            return call.not_measured()
        keep(self.ks, m)
        self._store(m.variants, call)
        self.note(call, test, "captured", kernels=kernels)
        return call.not_measured()

    def _request(self, call: BenchCall, test: str, **extra: Any) -> measure.Request:
        """The measurement request of one call: named by its Triton kernels, tagged "script"."""
        return measure.Request(
            nodeid=test,
            name=call.site,
            shape=_label(test),  # variant ids leave the test out: the sweep's point is in the spec
            tags=[TAG],
            budget_s=self.ks.settings.timing_budget_s,
            named=False,
            **extra,
        )

    def _failed(self, call: BenchCall, test: str, what: str, e: Exception, kernels: list[str]) -> None:
        self.note(call, test, "listed", f"{what}: {error_text(e)}", kernels)

    def _store(self, variants: list[Any], call: BenchCall) -> None:
        for v in variants:
            if TAG not in v.tags:
                v.tags.append(TAG)
            doc = {"script": self.script, "site": call.site, "index": len(self.calls) + 1}
            v.artifacts[BENCH_CALL] = canonical_json({**doc, "label": _label(v.key.test)})
        self.ks.add_results(variants)

    # -- end of the script ------------------------------------------------------------------

    def finish(self, events: Any, *, failed: bool) -> None:
        ks = self.ks
        event_loops = events.outside
        captured = [c for c in self.calls if c["status"] == "captured"]
        self._refuse_replaced(events.replaced(), failed=failed)
        if events.nested:
            ks.warn(
                self.script,
                f"do_bench called inside another do_bench call's function at {len(events.nested)} site(s) "
                f"({', '.join(sorted(events.nested)[:3])}): each ran its function once and returned NaN "
                "(the outer call is the benchmark)",
            )
        unselected = [c for c in self.calls if c["reason"] == "not selected (bench_select)"]
        if unselected and not captured and not failed:
            # a selection that matches nothing is bad input, not "a kernel captured nothing"
            examples = ", ".join(sorted({str(c["test"]) for c in unselected})[:3])
            pytest.exit(
                f"kperf: bench_select {self.select} matched none of the script's {len(unselected)} "
                f"do_bench call(s) with Triton launches (e.g. {examples}); check the globs",
                returncode=2,
            )
        if ks.mode == "static":  # the session's "captured nothing" check counts these
            ks.count_marked(len(self.calls), len(captured))
        if event_loops:
            ks.warn(
                self.script,
                f"the script timed {event_loops} interval(s) with torch.cuda.Event outside do_bench: "
                "not captured (kperf sees triton.testing.do_bench / do_bench_cudagraph calls only)",
            )
        reasons = Counter(c["reason"] for c in self.calls if c["status"] == "listed")
        for reason, n in reasons.items():
            ks.warn(self.script, f"{n} do_bench call(s) not captured: {reason}")
        if not self.calls:
            ks.warn(
                self.script,
                "the script failed before its first triton.testing.do_bench call: nothing captured"
                if failed
                else "the script made no triton.testing.do_bench call: nothing captured",
            )
        summary = {"script": self.script, "mode": ks.mode, "event_loops": event_loops, "calls": self.calls}
        ks.add_blob("", f"{CALLS_BLOB}:{self.script}", json.dumps(summary).encode())
        kernels = {k for c in captured for k in c["kernels"]}
        print(
            f"\nkperf bench: {self.script}: {len(self.calls)} do_bench call(s), {len(captured)} captured "
            f"({len(kernels)} Triton kernel(s)), {len(self.calls) - len(captured)} not captured"
            + "".join(f"; {n} {r}" for r, n in reasons.items())
        )

    def _refuse_replaced(self, replaced: list[str], *, failed: bool) -> None:
        """A script that put its own function in place of ``triton.testing.do_bench`` (at import)
        and never called Triton's: kperf saw nothing, which is not an empty benchmark run that
        passes (exit 0) but a script kperf cannot read: bad input, one line."""
        if not replaced or self.calls or failed:
            return
        names = ", ".join(f"triton.testing.{n}" for n in replaced)
        pytest.exit(
            f"kperf: {self.script} replaced {names} with a function of its own and made no call kperf "
            "could see: nothing captured; call Triton's own do_bench (a wrapper around it is fine)",
            returncode=2,
        )


def do_bench_samples(v: Any) -> list[float]:
    """The samples a script's do_bench call is answered from: what CUDA events read around each
    call (do_bench's own meaning, launch included) when kperf stored CUPTI kernel durations,
    else the stored samples themselves. kperf stores and judges the kernel durations."""
    try:
        events = json.loads(v.artifacts.get("timing", "{}")).get("event_samples_ms") or []
    except (ValueError, AttributeError):
        events = []
    return [float(x) for x in events] if events else list(v.samples)


def timing_config(call: BenchCall, budget_s: float) -> TimingConfig:
    """kperf's engine within the time the call asked for: do_bench's ``warmup + rep`` bounds the
    measurement (at most ``timing_budget_s``), so a sweep costs about what the script planned.
    The method is the one the script chose: do_bench times with events, do_bench_cudagraph
    replays a CUDA graph. (A script's callable often runs autograd's backward, which cannot be
    captured, and on an H100 a failed capture left torch's CUDA generator broken for the rest of
    the process: the script's next torch.randn raised "Offset increment outside graph capture".)"""
    rep_s = max(call.rep_ms, 1.0) / 1e3
    default = TimingConfig()
    return dataclasses.replace(
        default,
        budget_s=min(budget_s, max(rep_s, 0.02)),
        min_time_s=min(default.min_time_s, rep_s),
        warmup_min_s=min(default.warmup_min_s, max(call.warmup_ms, 1.0) / 1e3),
        use_graph=call.function == "do_bench_cudagraph",
        graph_threshold_ms=math.inf if call.function == "do_bench_cudagraph" else default.graph_threshold_ms,
    )


def _label_of(info: Any) -> str:
    """The label of a launch seen on the device (as the static pass labels its launches)."""
    if info.jit_fn is None or info.args is None:
        return info.name
    try:
        return launch_label(make_launch_spec(info.jit_fn, tuple(info.args), {}, info.grid))
    except Exception:  # a launch kperf cannot describe is still named
        return info.name


def _label(test: str) -> str:
    _, _, rest = test.rpartition("[")
    return rest[:-1] if rest.endswith("]") else ""


def _globs(value: Any) -> list[str]:
    if not value:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [g.strip() for g in items if g.strip()]


def make_script_file(module_path: Path, parent: pytest.Collector) -> ScriptFile | None:
    """The collector for ``--kperf-bench``'s script (pytest_pycollect_makemodule)."""
    target = parent.config.getoption("kperf_bench", default=None)
    if not target or Path(target).resolve() != Path(module_path).resolve():
        return None
    return ScriptFile.from_parent(parent, path=Path(module_path))
