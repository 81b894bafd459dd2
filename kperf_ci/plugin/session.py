"""One object per pytest session that owns kperf state; the hooks only delegate to it."""

from __future__ import annotations

import contextlib
import datetime as _dt
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from kperf_ci import __version__, store
from kperf_ci.analysis.findings import findings_from_json, findings_to_json
from kperf_ci.capture.imported import BadInput
from kperf_ci.capture.imported.pytest_benchmark import from_fixture
from kperf_ci.capture.launches.replay import LaunchCopier, ReplayLimits
from kperf_ci.capture.static.compile import compile_variants
from kperf_ci.capture.static.manifest import BLOB, build_manifest, manifest_json
from kperf_ci.capture.static.record import LaunchRecorder
from kperf_ci.config import Settings, effective_mode
from kperf_ci.fingerprint import git_info, machine_fingerprint
from kperf_ci.judge.compare import compare_runs
from kperf_ci.judge.policy import ThresholdPolicy
from kperf_ci.measure.measure import Measurement
from kperf_ci.model import RunInfo, VariantKey, VariantResult
from kperf_ci.plugin.compile_ahead import AheadFeed
from kperf_ci.plugin.gpu_bench import bench_on_gpu, replay_on_gpu
from kperf_ci.plugin.marker import KperfMarker, test_id

RESULTS_KEY = pytest.StashKey[list]()
LAUNCHES_KEY = pytest.StashKey[list]()
BENCHED_KEY = pytest.StashKey[bool]()  # the test called kperf.bench: it measured what it wanted


@dataclass
class KperfSession:
    config: pytest.Config
    settings: Settings
    mode: str
    run_id: str
    is_worker: bool = False
    results: list[VariantResult] = field(default_factory=list)
    pending: list[Any] = field(default_factory=list)  # LaunchSpecs of passed tests, compiled at the end
    ahead: AheadFeed | None = None  # static mode: pending sent to compile while the tests run
    errors: list[tuple[str, str]] = field(default_factory=list)  # (nodeid, one-line reason)
    # tests that stopped before their end in static mode (an unchecked result failed them): their
    # later launches were never seen, so `kperf ab` cannot call them identical (nodeid -> why)
    ended_early: dict[str, str] = field(default_factory=dict)
    # the errors above that say a run went to a pending file (exit 2, not 1: finish.py)
    diverted: list[str] = field(default_factory=list)
    saved_to: str | None = None
    # Why the run stopped early ("Ctrl-C", a lost xdist worker); None while it is whole.
    interrupted: str | None = None
    ctrl_c: bool = False  # it stopped on a KeyboardInterrupt (`kperf run` exits 130, as a shell would)
    stored_status: str | None = None  # the runs.status this session left in the database
    comparison: Any = None
    recorder: Any = None
    copier: LaunchCopier | None = None  # GPU mode: copies of each launch's arguments, for replay
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (nodeid, one line)
    blobs: list[tuple[str, str, bytes]] = field(default_factory=list)  # (variant id, name, data)
    ab_results: list[tuple[str, ...]] = field(default_factory=list)  # Measurement.ab_results
    findings: list[tuple[str, str, Any]] = field(default_factory=list)  # (nodeid, variant, flagged Finding)
    # static mode: marked tests that passed, and how many of them launched a Triton kernel that
    # was captured; all-zero is an error (a capture that silently saw nothing passes everything)
    marked_passed: int = 0
    marked_with_launches: int = 0
    # tests that ran marked (marker, kperf fixture or the mark setting), any mode: a session with
    # none captured nothing because nothing asked it to, and the summary says how to ask
    marked_run: int = 0
    started_at: str = field(
        default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    )

    # -- life cycle -------------------------------------------------------------------------

    @classmethod
    def from_config(cls, config: pytest.Config, settings: Any) -> KperfSession:
        workerinput = getattr(config, "workerinput", None)
        mode = workerinput["kperf_mode"] if workerinput else effective_mode(settings.mode)
        run_id = workerinput["kperf_run_id"] if workerinput else uuid.uuid4().hex[:12]
        self = cls(config=config, settings=settings, mode=mode, run_id=run_id, is_worker=bool(workerinput))
        if mode == "static":
            self.recorder = LaunchRecorder(execute=settings.static_execute, autotune=settings.autotune)
            self.ahead = AheadFeed.for_session(settings, str(config.rootpath))
        if mode == "gpu" and settings.replay_copy_mb > 0 and settings.replay_launches > 0:
            self.copier = LaunchCopier(ReplayLimits.from_settings(settings))
        return self

    def run_info(self) -> RunInfo:
        sha, branch = git_info(str(self.config.rootpath))
        return RunInfo(
            run_id=self.run_id,
            started_at=self.started_at,
            mode=self.mode,  # type: ignore[arg-type]
            fingerprint=machine_fingerprint(self.mode),
            git_sha=sha,
            git_branch=branch,
            kperf_version=__version__,
            label=self.settings.label,
        )

    def db_path(self) -> Path:
        path = Path(self.settings.db)
        return path if path.is_absolute() else self.config.rootpath / path

    # -- what the session keeps: the plugin's modules write its fields through these -------

    def warn(self, nodeid: str, message: str) -> None:
        self.warnings.append((nodeid, message))

    def error(self, nodeid: str, reason: str) -> None:
        """One line that fails the run (exit 1), named by the test or ``<stage>`` it is about."""
        self.errors.append((nodeid, reason))

    def mark_interrupted(self, reason: str, *, ctrl_c: bool = False) -> None:
        """The run stopped early: it is stored interrupted, never complete. The first reason
        is kept (a later one is a consequence of it)."""
        if self.interrupted is None:
            self.ctrl_c = ctrl_c
        self.interrupted = self.interrupted or reason

    def keep(self, m: Measurement) -> None:
        """What a measurement has to say beyond its variants: warnings, blobs, A/B verdicts and
        flagged findings, for the summary and the store."""
        self.warnings.extend(m.warnings)
        self.blobs.extend(m.blobs)
        self.ab_results.extend(m.ab_results)
        self.findings.extend(m.findings)

    def add_results(self, variants: Iterable[VariantResult]) -> None:
        """Measured variants, stored with the run."""
        self.results.extend(variants)

    def add_pending(self, launches: Iterable[Any]) -> None:
        """Static mode: recorded launches (LaunchSpecs), compiled at the end of the session."""
        self.pending.extend(launches)

    def add_blob(self, variant_id: str, name: str, data: bytes) -> None:
        """A blob stored with the run (``variant_id`` "" for one of the run itself)."""
        self.blobs.append((variant_id, name, data))

    def count_marked(self, passed: int, with_launches: int) -> None:
        """Static mode: marked tests (or do_bench calls) that passed, and how many of them
        launched a captured Triton kernel, for :meth:`capture_error`."""
        self.marked_passed += passed
        self.marked_with_launches += with_launches

    def saw_marked(self) -> None:
        """A marked test is running (counted in :attr:`marked_run`)."""
        self.marked_run += 1

    def fold_warnings(self, message: str, nodeid: str, summary: str) -> None:
        """Every warning that says ``message`` replaced by one line ``summary``, shown first."""
        self.warnings[:] = [(n, m) for n, m in self.warnings if m != message]
        self.warnings.insert(0, (nodeid, summary))

    def forget_saved(self) -> None:
        """Nothing of this session is stored (rolled back, or stored in a scratch database)."""
        self.saved_to, self.stored_status = None, None

    def worker_output(self) -> dict[str, Any]:
        """What an xdist worker hands the controller: errors (which must fail the run), warnings,
        A/B verdicts and flagged findings, in plain types (execnet carries no objects)."""
        return {
            "interrupted": self.interrupted,
            "errors": [list(e) for e in self.errors],
            "diverted": list(self.diverted),
            "warnings": [list(w) for w in self.warnings],
            "ab_results": [list(r) for r in self.ab_results],
            "findings": [[nodeid, label, findings_to_json([f])] for nodeid, label, f in self.findings],
            "capture": [self.marked_passed, self.marked_with_launches],
        }

    def merge_worker_output(self, out: dict[str, Any] | None) -> None:
        """The controller's side of :meth:`worker_output`. A worker that ended without handing
        it over (killed, crashed) took its unsaved results with it: the run is incomplete."""
        if not out:
            self.mark_interrupted("an xdist worker ended before storing its results")
            return
        if out.get("interrupted"):
            self.mark_interrupted(f"an xdist worker: {out['interrupted']}")
        self.errors.extend(tuple(e) for e in out.get("errors", []))
        self.diverted.extend(out.get("diverted", []))
        self.warnings.extend(tuple(w) for w in out.get("warnings", []))
        self.ab_results.extend(tuple(r) for r in out.get("ab_results", []))
        passed, with_launches = out.get("capture", [0, 0])
        self.count_marked(int(passed), int(with_launches))
        for nodeid, label, text in out.get("findings", []):
            self.findings.extend((nodeid, label, f) for f in findings_from_json(text))

    # -- per test ---------------------------------------------------------------------------

    def recording(self, item: pytest.Item, marker: KperfMarker):
        """Context manager active around a marked test's call in static mode."""
        if self.recorder is None:
            return contextlib.nullcontext()
        return self.recorder.recording(
            # a test that names no kernel: each launch is named by its Triton kernel
            test=test_id(item),
            name=marker.name if marker.named else None,
            tags=marker.tags,
            thresholds=marker.threshold_dict(),
        )

    def take_launches(self) -> list[Any]:
        if self.recorder is None:
            return []
        launches = self.recorder.unique()
        self.recorder.clear()
        return _name_per_kernel(launches)

    @contextlib.contextmanager
    def replaying(self, item: pytest.Item) -> Iterator[None]:
        """GPU mode, around a marked test's call: the arguments of each distinct Triton launch
        are copied before it runs (kperf_ci.capture.launches.replay), for :meth:`replay` after the test."""
        if self.copier is None:
            yield
            return
        self.copier.clear()
        try:
            with self.copier.capturing():
                yield
        except BaseException:
            self.copier.clear()  # a failed test is not measured: free the copies now
            raise

    def replay(self, item: pytest.Item, marker: KperfMarker) -> None:
        """After a marked test that did not call kperf.bench: its launches replayed and timed."""
        copier = self.copier
        if copier is None:
            return
        if item.stash.get(BENCHED_KEY, False) or not (copier.launches or copier.left_out):
            copier.clear()
            return
        item.stash.setdefault(RESULTS_KEY, []).extend(replay_on_gpu(self, item, marker, copier))

    def bench(
        self,
        item: pytest.Item,
        marker: KperfMarker,
        fns: dict[str, Callable[..., Any]],
        args: tuple,
        kwargs: dict,
        *,
        call_index: int,
    ) -> dict[str, Any]:
        if self.mode == "static":
            # The wrapper around the whole test records launches; one plain call each suffices.
            return {name: fn(*args, **kwargs) for name, fn in fns.items()}
        item.stash[BENCHED_KEY] = True
        with self.copier.paused() if self.copier is not None else contextlib.nullcontext():
            results, variants = bench_on_gpu(self, item, marker, fns, args, kwargs, call_index=call_index)
        item.stash.setdefault(RESULTS_KEY, []).extend(variants)
        return results

    def test_passed(self, item: pytest.Item, marker: KperfMarker) -> None:
        launches = item.stash.get(LAUNCHES_KEY, [])
        self.add_pending(launches)
        try:
            fixture_results = benchmark_fixture_results(item, marker)
        except BadInput as e:  # a timer that gave NaN or inf: the test's other results still count
            fixture_results = []
            self.warn(item.nodeid, f"pytest-benchmark statistics not stored: {e}")
        measured = item.stash.get(RESULTS_KEY, []) + fixture_results
        self.add_results(measured)
        if self.mode == "static" and not any(r.key.arch == "host" for r in measured):
            self.count_marked(1, 1 if launches else 0)
            if not launches:
                self.warn(item.nodeid, "no Triton launch captured in this marked test")
        if self.mode == "gpu" and not measured:
            self.warn(
                item.nodeid,
                "nothing measured: the test made no Triton launch that could be replayed and did not "
                "call kperf.bench(fn, ...)",
            )

    # -- end of session ---------------------------------------------------------------------

    def compile_ahead(self) -> None:
        """After each test: the launches pending since the last test sent to compile now
        (:mod:`kperf_ci.plugin.compile_ahead`), when this machine compiles ahead."""
        if self.ahead is not None:
            self.ahead.feed(self.pending)

    def stop_compiling(self) -> None:
        """An interrupted session: compiles sent ahead are killed (nothing of them is kept)."""
        if self.ahead is not None:
            self.ahead.stop()

    def compile_pending(self) -> None:
        """Compile every launch of every passed test: what was sent ahead is waited for, the
        rest compiled now, in one worker pool; results in first-seen order either way."""
        launches, self.pending = self.pending, []
        with contextlib.nullcontext(None) if self.ahead is None else self.ahead.pool() as pool:
            if not launches:
                return
            warnings: list[str] = []
            variants = compile_variants(
                launches,
                list(self.settings.arch),
                jobs=self.settings.jobs,
                rootdir=str(self.config.rootpath),
                warnings=warnings,
                pool=pool,
            )
        for line in warnings:  # a refused static-metrics cache entry, recomputed
            self.warn("<metrics cache>", line)
        manifest = build_manifest(
            launches, variants, list(self.settings.arch), str(self.config.rootpath), self.ended_early
        )
        worker = getattr(self.config, "workerinput", {}).get("workerid") if self.is_worker else None
        self.blobs.append(("", f"{BLOB}:{worker}" if worker else BLOB, manifest_json(manifest)))
        seen: set[str] = set()
        for variant in variants:
            if variant.error:
                self.errors.append((variant.key.test, f"{variant.key.label()}: {variant.error}"))
            if variant.key.id in seen:  # parametrized tests that compile to the same variant
                continue
            seen.add(variant.key.id)
            self.results.append(variant)

    def capture_error(self) -> str | None:
        """One line when static mode captured nothing although marked tests passed."""
        if self.mode != "static" or self.is_worker or not self.marked_passed or self.marked_with_launches:
            return None
        return (
            f"static mode captured no Triton launch in {self.marked_passed} marked test(s) that passed; "
            "the kernels may be launched in a way kperf cannot see (a subprocess, a C++ extension), "
            "or the tests are marked but launch nothing"
        )

    def save(self, to: Path | None = None) -> None:
        """Store the run: what this process measured and its blobs in one transaction, marked
        complete only when nothing stopped it early. Under xdist each worker appends its part
        and the controller marks the run (created ``running`` at the start) finished.

        A database locked past all retries gets the results in a side file instead
        (store.write_or_divert): the raised error names it, nothing measured is lost. ``to``:
        another database than the settings' (a scratch one, to judge a run not kept)."""
        path = to if to is not None else self.db_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        interrupted = self.interrupted is not None
        if self._xdist_controller():
            self.stored_status = store.retry_locked(
                lambda: store.finish_run(str(path), self.run_id, interrupted=interrupted)
            )
            self.saved_to = str(path)
            return
        if not self.is_worker and interrupted and not self.results:
            return  # nothing was measured: storing an empty interrupted run would only mislead
        info = self.run_info()
        blobs = list(self.blobs)
        if self.is_worker and not (self.results or blobs):
            return
        status = store.INTERRUPTED if interrupted else (store.COMPLETE if self.results else store.EMPTY)

        def write(target: Path) -> None:
            if self.is_worker:  # the controller wrote the run row; info only in case it could not
                store.add_results(str(target), self.run_id, self.results, info=info, blobs=blobs)
            else:
                store.save_run(str(target), info, self.results, status=status, blobs=blobs)

        self.saved_to = str(store.write_or_divert(path, self.run_id, write))
        if not self.is_worker:
            self.stored_status = status

    def _xdist_controller(self) -> bool:
        return getattr(self.config.option, "numprocesses", None) not in (None, 0) and not self.is_worker

    def compare_with_baseline(self) -> None:
        baseline = self.settings.baseline
        if not baseline or self.is_worker or not self.saved_to:
            return
        if self.stored_status == store.INTERRUPTED:
            # part of a run against a whole baseline: "removed" variants, no real verdict
            self.warn("<baseline>", "run interrupted: not compared with the baseline")
            return
        base_path = Path(baseline)
        if not base_path.is_absolute():
            base_path = self.config.rootpath / base_path
        if not base_path.exists():
            self.errors.append(
                (
                    "<baseline>",
                    f"baseline {base_path} does not exist; create it with "
                    "`kperf baseline update --db RUN.db --baseline PATH`",
                )
            )
            return
        current = store.load_run(self.saved_to, self.run_id)
        base = store.load_run(str(base_path), baseline=True)
        if base.skipped:
            ids = ", ".join(f"{rid} ({status})" for rid, status in base.skipped)
            self.warn("<baseline>", f"{base_path}: passed over incomplete run(s) {ids}")
        if not base.results:
            self.errors.append(
                (
                    "<baseline>",
                    f"baseline run {base.info.run_id} in {base_path} holds no variants, so nothing "
                    "can be compared; update it from a complete run (`kperf baseline update`)",
                )
            )
            return
        if not current.results:
            self.warn("<baseline>", f"run {self.run_id} holds no variants: nothing was compared")
        policy = ThresholdPolicy.from_settings(self.settings)
        self.comparison = compare_runs(base, current, policy)


def _name_per_kernel(launches: list[Any]) -> list[Any]:
    """A test that launches several kernels names each variant "<marker name>/<kernel>"."""
    kernels = {launch.qualname for launch in launches}
    if len(kernels) <= 1:
        return launches
    return [
        launch if launch.name is None else replace(launch, name=f"{launch.name}/{launch.kernel}")
        for launch in launches
    ]


def benchmark_fixture_results(item: pytest.Item, marker: KperfMarker) -> list[VariantResult]:
    """A marked test that uses pytest-benchmark's `benchmark` fixture: its statistics, converted
    as `kperf import` converts its JSON (:mod:`kperf_ci.capture.imported.pytest_benchmark`)."""
    key = VariantKey(kernel=marker.name, arch="host", spec="", config="pytest-benchmark", test=test_id(item))
    return from_fixture(
        getattr(item, "funcargs", {}).get("benchmark"),
        key,
        tags=list(marker.tags),
        thresholds=marker.threshold_dict(),
    )
