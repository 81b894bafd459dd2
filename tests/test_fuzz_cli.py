"""Fuzz the CLI with hostile input (issue 14): random and hostile kernel names, pytest-benchmark
JSON and run databases with random blobs and strings, through ``kperf import``, ``show``,
``compare``, ``report`` and ``analyze``.

What must hold for every input: the exit status is 0, 1 (a real regression) or 2 (bad input,
one line), never a traceback or a crash (3); no stored value is ever opened as a file (an audit
hook watches every ``open``); the contents of a canary file and a canary environment variable
named in the data appear nowhere in the output or in what the report writes.

Bounded: about 60 examples per test with no deadline; the file runs in well under a minute on
two cores. In CI (``CI`` set) the examples are derandomized so a run is reproducible; locally
each run explores new ones.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
import zlib
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import fuzz_settings, without, zeros_packed
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from kperf_ci import store
from kperf_ci.cli import main
from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult

CANARY_TEXT = f"FUZZ-FILE-CANARY-{uuid.uuid4().hex}"
CANARY_ENV = f"FUZZ-ENV-CANARY-{uuid.uuid4().hex}"
_CANARY_DIR = Path(tempfile.mkdtemp(prefix="kperf-fuzz-canary-"))
CANARY_FILE = _CANARY_DIR / "secret.txt"
CANARY_FILE.write_text(f"root:x:0:0:{CANARY_TEXT}\n")
atexit.register(shutil.rmtree, _CANARY_DIR, True)  # module-level, so no fixture can clean it
#: Paths a crafted database names; none of them may ever be opened by a kperf command.
FORBIDDEN = {str(CANARY_FILE), "/etc/passwd", "/proc/self/environ"}

FUZZ = fuzz_settings(60)  # KPERF_FUZZ_EXAMPLES=1000 for a longer hunt; 60 keeps the file under a minute

# --------------------------------------------------------------------------- watching opens

_opened: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _opened is not None and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # cannot be removed; costs one comparison per event while not watching


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


def invoke(args: list[str], **kw) -> tuple[object, list[str]]:
    """Run the CLI in-process; returns (result, files opened meanwhile).

    A number from the data taken for a file (``open(3)``) reads that file descriptor and closes
    it: such a descriptor, open before the command and gone after it, is reported as opened."""
    global _opened
    _opened = []
    before = _fds()
    try:
        result = CliRunner().invoke(main, args, **kw)
    finally:
        opened, _opened = _opened, None
    opened += [f"<fd {fd}>" for fd in sorted(before - _fds())]
    return result, opened


def check(result, opened: list[str], *, allow_regression: bool = False, extra_text: str = "") -> None:
    """The properties every command must have on any input."""
    allowed = (0, 1, 2) if allow_regression else (0, 2)
    code = result.exit_code
    exc = result.exception
    assert code in allowed, (code, result.output, repr(exc))
    assert exc is None or isinstance(exc, SystemExit), repr(exc)  # click turned errors into codes
    out = result.output
    assert "Traceback" not in out and "internal error" not in out, out
    if code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    read = FORBIDDEN.intersection(opened) | {p for p in opened if p.startswith((str(_CANARY_DIR), "<fd"))}
    assert not read, f"opened a path named by the data: {read}"
    for text in (out, extra_text):
        assert CANARY_TEXT not in text and CANARY_ENV not in text


# --------------------------------------------------------------------------- strategies

HOSTILE = [
    "vector_add[old]",
    "vector_add[new]",
    "bad[/]",
    "[link=https://evil.example]x[/link]",
    "[bold red]loud",
    "esc\x1b]0;PWNED\x07",
    "\x1b[2J\x1b[H",
    "rev\u202eelif",
    "https://evil.example/x",
    "www.evil.example",
    "@octocat #1",
    "<script>alert(1)</script>",
    "![i](https://e.x/i.png)",
    "a|b\nc",
    "\\",
    "",
    "../../../etc/passwd",
    str(CANARY_FILE),
    "/etc/passwd",
    "/proc/self/environ",
    "%s%n{0}",
]
text = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=30))
name = st.one_of(st.sampled_from(HOSTILE), st.text(min_size=0, max_size=30))

json_value = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.floats(allow_nan=True, allow_infinity=True),
        text,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
    max_leaves=12,
)

ARTIFACT_NAMES = [
    "sass",
    "ptx",
    "trace",
    "timeline",
    "timeline.npz",
    "proton_trace",
    "perfetto",
    "findings",
    "kernel_records",
]
blob = st.one_of(
    st.sampled_from(sorted(FORBIDDEN)),
    st.binary(max_size=64),
    text,
    json_value.map(lambda v: json.dumps(v)),
    st.sampled_from(
        [
            '{"traceEvents": []}',
            '{"format": "kperf-timeline", "records": []}',
            '{"format": "kperf-timelines", "timelines": [{}]}',
            '{"format": "kperf-kernel-records", "records": [{"name": "k", "start_ns": 1, "end_ns": 0}]}',
            '[{"name": "x", "start_ns": "a", "end_ns": null}]',
            '[{"name": "f", "value": 1e308, "flagged": true}]',
            "PK\x03\x04garbage",
        ]
    ),
)
metric_value = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.sampled_from([0.0, -0.0, 1e-300, 1e300, 4.0, 132.0]),
)
metric_name = st.one_of(
    st.sampled_from(
        ["registers", "spills", "num_warps", "grid", "shared_bytes", "time.median", "time.ci_low",
         "time.ci_high", "region.loop0.cycles", "region.kernel.cycles", "analysis.sm_utilization",
         "sass.instructions"]
    ),
    text,
)  # fmt: skip
metric = st.builds(
    Metric,
    name=metric_name,
    value=metric_value,
    unit=st.one_of(st.sampled_from(["count", "ms", "bytes", "fraction", "cycles"]), text),
    kind=st.sampled_from(["static", "time", "region", "analysis"]),
    better=st.sampled_from(["lower", "higher", "none"]),
)


@st.composite
def variant(draw, kernels: list[str]) -> VariantResult:
    metrics = draw(st.lists(metric, max_size=6, unique_by=lambda m: m.name))
    return VariantResult(
        key=VariantKey(
            kernel=draw(st.sampled_from(kernels)),
            arch=draw(st.one_of(st.just("sm_90"), text)),
            spec=draw(st.one_of(st.just("x:*fp32"), text)),
            config=draw(st.one_of(st.just("num_warps=4"), text)),
            test=draw(text),
        ),
        metrics=metrics,
        samples=draw(st.lists(st.floats(min_value=1e-6, max_value=1e3), max_size=8)),
        tags=draw(st.lists(text, max_size=2)),
        sass_hash=draw(st.one_of(st.none(), st.sampled_from(["a", "b"]))),
        artifacts=draw(st.dictionaries(st.one_of(st.sampled_from(ARTIFACT_NAMES), text), blob, max_size=4)),
        error=draw(st.one_of(st.none(), text)),
    )


@st.composite
def run(draw, run_id: str, started: str, kernels: list[str]) -> tuple[RunInfo, list[VariantResult]]:
    fp = Fingerprint(
        cpu=draw(text),
        gpu=draw(st.one_of(st.none(), st.just("NVIDIA H100"), text)),
        sm_count=draw(st.one_of(st.none(), st.integers(1, 200))),
        triton=draw(st.one_of(st.just("3.6.0"), text)),
        host_hash=draw(text),
        extra=draw(st.dictionaries(text, text, max_size=2)),
    )
    info = RunInfo(
        run_id=run_id,
        started_at=started,
        mode=draw(st.sampled_from(["static", "gpu"])),
        fingerprint=fp,
        git_sha=draw(st.one_of(st.none(), text)),
        git_branch=draw(st.one_of(st.none(), text)),
        label=draw(st.one_of(st.none(), text)),
    )
    results = draw(st.lists(variant(kernels), max_size=4, unique_by=lambda r: r.key.id))
    return info, results


@st.composite
def database_pair(draw):
    """A baseline and a current run. Half the time the current run has the baseline's variants
    with scaled metrics and maybe another SASS hash, so compare and the report see real
    regressions, improvements and diffs, not only variants added and removed."""
    kernels = draw(st.lists(name, min_size=1, max_size=3))
    base = draw(run("base1", "2026-01-01T00:00:00+00:00", kernels))
    cur = draw(run("cur1", "2026-01-02T00:00:00+00:00", kernels))
    if draw(st.booleans()):
        scale = st.sampled_from([0.5, 1.0, 1.0, 2.0])
        # registers on both sides (32 -> 16, 32 or 64): a static regression to gate on
        regs = Metric("registers", 32.0, "count")
        base = (base[0], [replace(r, metrics=[*r.metrics, regs]) for r in base[1]])
        base = (base[0], [replace(r, metrics=list({m.name: m for m in r.metrics}.values())) for r in base[1]])
        same = [
            replace(
                r,
                metrics=[replace(m, value=m.value * draw(scale)) for m in r.metrics],
                sass_hash=draw(st.sampled_from([r.sass_hash, "c"])),
                artifacts=draw(st.dictionaries(st.sampled_from(ARTIFACT_NAMES), blob, max_size=3)),
            )
            for r in base[1]
        ]
        cur = (replace(cur[0], fingerprint=base[0].fingerprint, mode=base[0].mode), same)
    return base, cur


_RUN_BYTES: dict[str, bytes] = {}


def _save_fixed_run(path: Path, info: RunInfo, results: list[VariantResult]) -> None:
    """``store.save_run(path, info, results)`` for a run that is the same in every example: the
    file it writes is made once (60 times a test before) and its bytes written to ``path``, a
    fresh path as each example's was. Keyed by the run's repr: the same repr, the same run."""
    key = repr((info, results))
    if key not in _RUN_BYTES:
        work = Path(tempfile.mkdtemp(prefix="kperf-fuzz-template-"))
        try:
            store.save_run(work / "run.db", info, results)
            assert [p.name for p in work.iterdir()] == ["run.db"]  # one self-contained file, no -wal
            _RUN_BYTES[key] = (work / "run.db").read_bytes()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    path.write_bytes(_RUN_BYTES[key])


def _files_text(root: Path) -> str:
    return "\n".join(p.read_text("utf-8", "replace") for p in root.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- tests


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    """The canary is in the environment (what /proc/self/environ would show); no KPERF_* from
    the developer's shell; a clean cwd for the [tool.kperf] lookup."""
    for key in list(os.environ):
        if key.startswith("KPERF_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("GITHUB_TOKEN", CANARY_ENV)


@FUZZ
@given(pair=database_pair())
@pytest.mark.slow
def test_fuzz_databases_through_show_compare_report_analyze(pair, monkeypatch):
    (base_info, base_results), (cur_info, cur_results) = pair
    work = Path(tempfile.mkdtemp(prefix="kperf-fuzz-"))
    try:
        monkeypatch.chdir(work)
        store.save_run(work / "base.db", base_info, base_results)
        store.save_run(work / "run.db", cur_info, cur_results)
        cases = [
            (["show", "--db", "run.db"], False),
            (["show", "--db", "run.db", "--run", "cur1"], False),
            (["compare", "--db", "run.db", "--baseline", "base.db", "--all"], True),
            (["compare", "--db", "run.db", "--baseline", "base.db", "--format", "json"], True),
            (["report", "--db", "run.db", "--baseline", "base.db", "-o", "rep", "--jobs", "1"], False),
            (["report", "--db", "run.db", "--baseline", "base.db", "--format", "markdown"], False),
            (["analyze", "--db", "base.db"], False),
            (["analyze", "--db", "run.db", "--json"], False),
        ]
        for args, regression in cases:
            result, opened = invoke(args)
            written = _files_text(work / "rep") if args[0] == "report" and (work / "rep").exists() else ""
            check(result, opened, allow_regression=regression, extra_text=written)
            event(f"{args[0]} exit {result.exit_code}")  # --hypothesis-show-statistics: what was hit
            if args[0] == "show":
                assert "\x1b" not in result.output  # stored escapes are shown, never sent
    finally:
        shutil.rmtree(work, ignore_errors=True)


TABLE_COLUMNS = {
    "runs": ["run_id", "started_at", "mode", "git_sha", "git_branch", "label", "fingerprint"],
    "kernels": ["name", "source"],
    "variants": ["arch", "spec", "config"],
    "run_variants": ["test", "tags", "thresholds", "sass_hash", "error"],
    "metrics": ["name", "value", "unit", "kind", "better"],
    "samples": ["value_ms"],
    "blobs": ["name", "data"],
}
cell = st.one_of(
    text,
    st.binary(max_size=40),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    json_value.map(json.dumps),
    blob.map(lambda b: zlib.compress(b.encode() if isinstance(b, str) else b)),
)


@FUZZ
@given(
    edits=st.lists(
        st.sampled_from(sorted(TABLE_COLUMNS)).flatmap(
            lambda t: st.tuples(st.just(t), st.sampled_from(TABLE_COLUMNS[t]), cell)
        ),
        min_size=1,
        max_size=3,
    )
)
def test_fuzz_cells_written_behind_the_stores_back(edits, monkeypatch):
    """A file that was not written by kperf-ci: any cell of any table holds any SQLite value
    (text where a number belongs, bytes, JSON of the wrong shape, blobs that are not zlib).

    ``compare`` is left out: it loads runs in commands/compare.py, which this change does not
    touch (see kperf_ci.inputs.read_run for what it should call)."""
    import sqlite3

    work = Path(tempfile.mkdtemp(prefix="kperf-fuzz-raw-"))
    try:
        monkeypatch.chdir(work)
        results = [
            VariantResult(
                VariantKey("k", "sm_90", "x", "num_warps=4"),
                [Metric("registers", 32), Metric("num_warps", 4), Metric("grid", 264)],
                samples=[1.0, 1.1],
                sass_hash="a",
                artifacts={"sass": "FFMA", "trace": '{"traceEvents": []}'},
            )
        ]
        info = RunInfo("r1", "2026-01-01T00:00:00+00:00", "gpu", Fingerprint(gpu="NVIDIA H100", sm_count=132))
        _save_fixed_run(work / "run.db", info, results)
        conn = sqlite3.connect(work / "run.db")
        for table, column, value in edits:
            try:
                conn.execute(f"UPDATE {table} SET {column} = ?", (value,))
            except sqlite3.IntegrityError:
                pass  # a NOT NULL or key constraint SQLite itself enforces: nothing to test
        conn.commit()
        conn.close()
        for args in (
            ["show", "--db", "run.db"],
            ["show", "--db", "run.db", "--run", "latest"],
            ["report", "--db", "run.db", "-o", "rep", "--jobs", "1"],
            ["report", "--db", "run.db", "--format", "summary"],
            ["analyze", "--db", "run.db"],
        ):
            result, opened = invoke(args)
            check(result, opened)
            event(f"raw {args[0]} exit {result.exit_code}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


@st.composite
def bench_doc(draw):
    """pytest-benchmark JSON: mostly the real shape with hostile names and odd statistics,
    sometimes anything at all."""
    if draw(st.integers(0, 4)) == 0:
        return draw(json_value)
    stat = st.one_of(
        st.floats(min_value=1e-9, max_value=10.0),
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(10**400), max_value=10**400),
        json_value,
    )
    bench = st.fixed_dictionaries(
        {"name": st.one_of(name, json_value), "fullname": st.one_of(name, json_value)},
        optional={
            "group": st.one_of(st.none(), name, json_value),
            "stats": st.one_of(
                st.dictionaries(
                    st.sampled_from(["median", "mean", "min", "max", "iqr", "stddev", "rounds", "data"]),
                    st.one_of(stat, st.lists(stat, max_size=10)),
                    max_size=8,
                ),
                json_value,
            ),
        },
    )
    return draw(
        st.fixed_dictionaries(
            {"benchmarks": st.lists(st.one_of(bench, json_value), max_size=4)},
            optional={
                "machine_info": st.one_of(
                    st.fixed_dictionaries({}, optional={"node": json_value, "cpu": json_value}), json_value
                ),
                "commit_info": json_value,
                "datetime": json_value,
                "version": json_value,
            },
        )
    )


def _dump(doc) -> str:
    try:
        return json.dumps(doc)  # NaN and Infinity as Python writes them (pytest-benchmark too)
    except (ValueError, OverflowError):  # an integer too large for a str: its own test input
        return "[" + "0" * 5000 + "]"


@FUZZ
@given(doc=bench_doc())
def test_fuzz_import_of_pytest_benchmark_json(doc, monkeypatch):
    work = Path(tempfile.mkdtemp(prefix="kperf-fuzz-import-"))
    try:
        monkeypatch.chdir(work)
        (work / "bench.json").write_text(_dump(doc))
        result, opened = invoke(["import", "bench.json", "--db", "imp.db"])
        check(result, opened)
        event(f"import exit {result.exit_code}")
        if result.exit_code == 0:
            n = int(result.stdout.split("imported ")[1].split()[0])
            assert len(store.load_run(work / "imp.db").results) == n  # every benchmark stored
            for args, regression in (
                (["show", "--db", "imp.db", "--run", "latest"], False),
                (["compare", "--db", "imp.db", "--baseline", "imp.db"], True),
                (["report", "--db", "imp.db", "--format", "markdown"], False),
            ):
                r, opened = invoke(args)
                check(r, opened, allow_regression=regression)
                if args[0] == "compare":
                    # the same file and the same run: refused, never "no regressions" (an import
                    # of no benchmark is an empty run, which is never a baseline: refused too)
                    assert r.exit_code == 2
                    assert "compared with itself" in r.stderr or "only incomplete or empty" in r.stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)


@FUZZ
@given(content=st.one_of(json_value.map(_dump), st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_fuzz_analyze_trace_and_records_files(content, monkeypatch):
    work = Path(tempfile.mkdtemp(prefix="kperf-fuzz-analyze-"))
    try:
        monkeypatch.chdir(work)
        (work / "f.json").write_text(content, encoding="utf-8")
        for option in ("--trace", "--records"):
            result, opened = invoke(["analyze", option, "f.json"])
            check(result, opened)
            if result.exit_code == 2:
                assert "f.json" in result.stderr  # the error names the file
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_fuzz_examples_also_hold_in_real_processes(tmp_path):
    """A few of the same inputs through the real entry point: exit codes and stderr as CI sees
    them (CliRunner shares one process and could hide what a fresh interpreter does)."""
    names = ["bad[/]", "esc\x1b]0;PWNED\x07", "https://evil.example/x"]
    arts = {"sass": str(CANARY_FILE), "trace": "/proc/self/environ"}
    store.save_run(
        tmp_path / "base.db",
        RunInfo("b", "2026-01-01T00:00:00+00:00", "static", Fingerprint(triton="3.6.0")),
        [
            VariantResult(VariantKey(n, "sm_90"), [Metric("registers", 32)], sass_hash="a", artifacts=arts)
            for n in names
        ],
    )
    store.save_run(
        tmp_path / "run.db",
        RunInfo("c", "2026-01-02T00:00:00+00:00", "static", Fingerprint(triton="3.6.0")),
        [VariantResult(VariantKey(n, "sm_90"), [Metric("registers", 64)], sass_hash="b") for n in names],
    )
    (tmp_path / "bench.json").write_text('{"benchmarks": [{"name": "x", "stats": {"median": NaN}}]}')
    env = without("PYTEST_", "KPERF_")
    env.update(PYTHONPATH=str(Path(__file__).parent.parent), GITHUB_TOKEN=CANARY_ENV)
    expected = {
        ("compare", "--db", "run.db", "--baseline", "base.db"): 1,  # registers doubled: a regression
        ("report", "--db", "run.db", "--baseline", "base.db", "-o", "rep"): 0,
        ("analyze", "--db", "base.db"): 0,
        ("import", "bench.json", "--db", "imp.db"): 2,
    }
    for args, code in expected.items():
        r = subprocess.run(
            [sys.executable, "-m", "kperf_ci.cli", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
        )
        assert r.returncode == code, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr
        everything = r.stdout + r.stderr + (_files_text(tmp_path / "rep") if args[0] == "report" else "")
        assert CANARY_TEXT not in everything and CANARY_ENV not in everything
        assert "\x1b]" not in r.stdout + r.stderr


# --------------------------------------------------------------------------- hostile numbers (issue 23)
#
# Numbers read from a file (SM ids and counts, grid sizes, record counts, times that are NaN or
# Inf) and blob sizes must not size the work: every case runs in its own process under a memory
# and CPU-time limit, so a number that makes a command allocate or loop for it fails the case
# (MemoryError is exit 3, the CPU limit kills it) instead of slowing the suite or the machine.

BOUND_MEMORY = 2 * 1024**3  # address space of one case: kperf with torch imported fits well
BOUND_CPU_S = 60
BOUND = settings(FUZZ, max_examples=int(os.environ.get("KPERF_FUZZ_EXAMPLES", "12")))

huge_int = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([-1, 0, 1, 131, 132, 1183, 1184, 10**7, 10**9, 2**31, 2**63 - 1]),
)
hostile_float = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -1.0, 1e300, -1e300, float("nan"), float("inf"), 5e-324]),
)


def _bounded() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (BOUND_MEMORY, BOUND_MEMORY))
    resource.setrlimit(resource.RLIMIT_CPU, (BOUND_CPU_S, BOUND_CPU_S))


#: util-linux's prlimit sets the same limits (soft and hard) on itself, then execs the command:
#: the same process, limited from its first instruction, as with ``_bounded`` as a preexec_fn. A
#: preexec_fn makes subprocess fork this whole pytest process instead of spawning the child
#: (page tables copied, copy-on-write faults after): about 10 ms of a core a case, more where
#: torch is imported. Without prlimit, the preexec_fn.
_PRLIMIT = shutil.which("prlimit")


def _bounded_run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = without("PYTEST_", "KPERF_")
    env.update(PYTHONPATH=str(Path(__file__).parent.parent), GITHUB_TOKEN=CANARY_ENV)
    cmd, preexec = [sys.executable, "-m", "kperf_ci.cli", *args], _bounded
    if _PRLIMIT:
        cmd, preexec = [_PRLIMIT, f"--as={BOUND_MEMORY}", f"--cpu={BOUND_CPU_S}", "--", *cmd], None
    r = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=BOUND_CPU_S * 2,
        preexec_fn=preexec,
    )
    assert r.returncode in (0, 1, 2), (args, r.returncode, r.stdout[-1500:], r.stderr[-1500:])
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, (args, r.stderr[-1500:])
    if r.returncode == 2:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("Error: "), (args, r.stderr[-1500:])
    return r


HUGE_SM = st.one_of(st.sampled_from([-1, 1184, 10**7, 10**9, 2**31, 2**63 - 1]), huge_int)


@st.composite
def hostile_timeline(draw) -> dict:
    """A sane kperf-timeline document of a few records with one hostile thing in it: an SM id,
    the SM count, times, CTA or warp ids, the version, or a column of another length."""
    n = draw(st.integers(1, 6))
    cols = {
        "cta": list(range(n)),
        "warp": [-1] * n,
        "sm": [i % 132 for i in range(n)],
        "region": ["kernel"] * n,
        "start_ns": [10.0 * i for i in range(n)],
        "end_ns": [10.0 * i + 100 for i in range(n)],
    }
    doc = {"format": "kperf-timeline", "version": 1, "kernel": "k", "num_sms": 132, "columns": cols}
    knob = draw(st.sampled_from(["sm", "sm_all", "num_sms", "time", "cta", "warp", "version", "length"]))
    i = draw(st.integers(0, n - 1))
    if knob == "sm":
        cols["sm"][i] = draw(HUGE_SM)
    elif knob == "sm_all":
        cols["sm"] = [draw(HUGE_SM)] * n
    elif knob == "num_sms":
        doc["num_sms"] = draw(st.one_of(HUGE_SM, hostile_float))
    elif knob == "time":
        cols[draw(st.sampled_from(["start_ns", "end_ns"]))][i] = draw(hostile_float)
    elif knob in ("cta", "warp"):
        cols[knob][i] = draw(huge_int)
    elif knob == "version":
        doc["version"] = draw(st.one_of(huge_int, hostile_float))
    else:
        cols["sm"] = cols["sm"] * draw(st.sampled_from([0, 2, 3]))
    return doc


def _json(doc: object) -> str:
    return json.dumps(doc)  # NaN and Infinity as Python writes them


_FLOAT_SMS = {
    "format": "kperf-timeline",
    "version": 1,
    "kernel": "k",
    "num_sms": 1.5,  # a float SM count reached numpy's allocation as a TypeError (exit 3) once
    "columns": {
        "cta": [0],
        "warp": [-1],
        "sm": [0],
        "region": ["kernel"],
        "start_ns": [0.0],
        "end_ns": [2.0],
    },
}


@BOUND
@given(doc=hostile_timeline())
@example(doc=_FLOAT_SMS)
@example(doc={**_FLOAT_SMS, "num_sms": 1.0})
def test_fuzz_hostile_numbers_in_a_trace_file_are_bounded(doc, tmp_path_factory):
    work = tmp_path_factory.mktemp("fuzz-trace")
    (work / "t.json").write_text(_json(doc))
    r = _bounded_run(work, "analyze", "--trace", "t.json", "--fail-on-flag")
    event(f"trace exit {r.returncode}")
    if any(not math.isfinite(x) for c in ("start_ns", "end_ns") for x in doc["columns"][c]):
        assert r.returncode == 2  # NaN/Inf times are refused, never "nan [ok]" and exit 0


@st.composite
def hostile_run(draw) -> tuple[RunInfo, list[VariantResult]]:
    """A run whose stored numbers are hostile: the fingerprint's SM count, launch metrics (grid,
    warps, registers, shared memory) and a stored timeline."""
    fp = Fingerprint(
        cpu="cpu", gpu="NVIDIA H100", triton="3.6.0", sm_count=draw(st.one_of(st.none(), huge_int))
    )
    info = RunInfo("cur1", "2026-01-02T00:00:00+00:00", "gpu", fp)
    value = st.one_of(st.floats(allow_nan=False), huge_int, st.sampled_from([1e30, -1e30, float("inf")]))
    metrics = [
        Metric(n, draw(value), "count")
        for n in ("grid", "num_warps", "registers", "shared_bytes", "launch.grid", "sass.instructions")
        if draw(st.booleans())
    ]
    artifacts = {"timeline": _json(draw(hostile_timeline()))}
    key = VariantKey("k", "sm_90", "x:*fp32", "num_warps=4", test="t.py::k")
    samples = draw(
        st.lists(st.floats(min_value=1e-6, max_value=1e3), max_size=draw(st.sampled_from([0, 3, 50])))
    )
    return info, [VariantResult(key, metrics, samples=samples, artifacts=artifacts)]


@BOUND
@given(run_=hostile_run())
@pytest.mark.slow
def test_fuzz_hostile_numbers_in_a_database_are_bounded(run_, tmp_path_factory):
    work = tmp_path_factory.mktemp("fuzz-db")
    info, results = run_
    try:
        store.save_run(work / "run.db", info, results)
    except (ValueError, OverflowError):
        return  # SQLite itself cannot hold it (an integer past 64 bits): nothing to read back
    base = RunInfo("base1", "2026-01-01T00:00:00+00:00", "gpu", info.fingerprint)
    store.save_run(work / "base.db", base, [replace(r, artifacts={}) for r in results])
    for args in (
        ("analyze", "--db", "run.db"),
        ("show", "--db", "run.db", "--run", "cur1"),
        ("compare", "--db", "run.db", "--baseline", "base.db"),
        ("report", "--db", "run.db", "--baseline", "base.db", "--format", "markdown"),
    ):
        r = _bounded_run(work, *args)
        event(f"db {args[0]} exit {r.returncode}")


@BOUND
@given(
    size=st.sampled_from([0, 1, 4096, 60 * 2**20, 65 * 2**20, 300 * 2**20, 3 * 2**30]),
    name=st.sampled_from(ARTIFACT_NAMES),
)
@pytest.mark.slow
def test_fuzz_blob_sizes_are_bounded(size, name, tmp_path_factory):
    """A blob of any decompressed size, up to a 3 GiB bomb (3 MB stored) under a 2 GiB limit."""
    import sqlite3

    work = tmp_path_factory.mktemp("fuzz-blob")
    key = VariantKey("k", "sm_90", "x:*fp32", "num_warps=4", test="t.py::k")
    info = RunInfo("cur1", "2026-01-02T00:00:00+00:00", "static", Fingerprint(triton="3.6.0"))
    _save_fixed_run(
        work / "run.db", info, [VariantResult(key, [Metric("registers", 32)], artifacts={name: "x"})]
    )
    _save_fixed_run(
        work / "base.db", replace(info, run_id="base1"), [VariantResult(key, [Metric("registers", 32)])]
    )
    with sqlite3.connect(work / "run.db") as conn:
        conn.execute("UPDATE blobs SET data = ? WHERE name = ?", (zeros_packed(size), name))
    conn.close()
    for args in (
        ("show", "--db", "run.db", "--run", "cur1"),
        ("analyze", "--db", "run.db"),
        ("report", "--db", "run.db", "--baseline", "base.db", "--format", "markdown"),
        (
            "github",
            "comment",
            "--dry-run",
            "--pr",
            "1",
            "--repo",
            "o/n",
            "--db",
            "run.db",
            "--baseline",
            "base.db",
        ),
    ):
        r = _bounded_run(work, *args)
        event(f"blob {size >> 20} MiB {args[0]} exit {r.returncode}")
