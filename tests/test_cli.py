"""The `kperf` CLI: in-process (CliRunner) and as a real subprocess for exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import make_info, make_result, without

from kperf_ci import __version__, store
from kperf_ci.cli import main

# The installed console script when there is one (what CI calls), else the module.
_SCRIPT = Path(sys.executable).parent / "kperf"
KPERF = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "kperf_ci.cli"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty project directory (own pyproject, own .git) as the cwd, KPERF_* cleared."""
    for key in list(os.environ):
        if key.startswith("KPERF_"):
            monkeypatch.delenv(key)
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kperf]\ndb = "reports/run.db"\nbaseline = "baselines/main.db"\n'
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _runs(project: Path, base_regs: int, cur_regs: int) -> tuple[Path, Path]:
    db, base = project / "reports/run.db", project / "baselines/main.db"
    store.save_run(base, make_info("base1"), [make_result("add_kernel", registers=base_regs, spills=0)])
    store.save_run(db, make_info("cur1"), [make_result("add_kernel", registers=cur_regs, spills=0)])
    return db, base


def clean_env(**extra: str) -> dict[str, str]:
    """Environment for child processes: this checkout importable, no xdist/pytest state (an
    inherited PYTEST_XDIST_WORKER makes pytest-benchmark disable itself)."""
    env = without("PYTEST_", "KPERF_")
    return {**env, "PYTHONPATH": str(Path(__file__).parent.parent), **extra}


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_version():
    r = invoke("--version")
    assert r.exit_code == 0 and __version__ in r.output


def test_compare_exit_codes_in_process(project):
    _runs(project, 32, 40)  # +25% registers
    r = invoke("compare")  # paths from [tool.kperf]
    assert r.exit_code == 1, r.output
    assert "REGRESSION" in r.output and "add_kernel" in r.output and "registers" in r.output
    assert "32 -> 40" in r.output and "+25.0%" in r.output
    r = invoke("compare", "--format", "json")
    doc = json.loads(r.output)
    assert r.exit_code == 1 and doc["regressions"] == 1 and doc["changes"][0]["metric"] == "registers"


def test_compare_no_change_and_all(project):
    _runs(project, 32, 32)
    r = invoke("compare")
    assert r.exit_code == 0 and "no changes" in r.output
    r = invoke("compare", "--all")
    assert r.exit_code == 0 and "registers" in r.output and "same" in r.output


def test_compare_bad_input_exit_2(project):
    r = invoke("compare")
    assert r.exit_code == 2 and "baseline does not exist" in r.output and "kperf baseline update" in r.output
    _runs(project, 1, 1)
    (project / "garbage.db").write_bytes(b"not a database at all" * 10)
    r = invoke("compare", "--db", "garbage.db")
    assert r.exit_code == 2 and "garbage.db: not a SQLite database" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    r = invoke("compare", "--run", "nope")
    assert r.exit_code == 2 and "no run with id 'nope'" in r.output
    (project / "pyproject.toml").write_text('[tool.kperf]\nmode = "fast"\n')
    r = invoke("compare")
    assert r.exit_code == 2 and "'mode'" in r.output


def test_show(project):
    db = project / "reports/run.db"
    res = make_result(
        "attn",
        registers=128,
        **{"region.loop0.cycles": 900.0, "region.loop0.fraction": 0.75, "region.my.scope.cycles": 10.0},
    )
    res.samples = [1.0, 1.1]
    store.save_run(db, make_info("r1", label="head"), [res, make_result("other", registers=1)])
    r = invoke("show")
    assert r.exit_code == 0 and "r1" in r.output and "head" in r.output
    r = invoke("show", "--run", "r1", "--kernel", "attn", "--details")
    assert r.exit_code == 0, r.output
    assert "registers" in r.output and "regions" in r.output and "loop0" in r.output and "75.0%" in r.output
    assert "my.scope" in r.output and "other" not in r.output and "2 timing samples" in r.output
    r = invoke("show", "--db", "missing.db")
    assert r.exit_code == 2 and "missing.db: no such run database" in r.output
    # --details alone is the latest run's details (issue 35's walk: it listed the runs instead)
    r = invoke("show", "--details")
    assert r.exit_code == 0 and "regions" in r.output and "loop0" in r.output, r.output
    # each run's variants and tests counted: a suite's run and a bench script's, both without a
    # label, were two alike rows (walk 2 of issue 38, finding 8)
    bench = [make_result("softmax", registers=32, config=f"num_warps={w}") for w in (4, 8)]
    for i, b in enumerate(bench):
        b.key, b.tags = replace(b.key, test=f"benchmarks/bench_softmax.py::softmax[64x{i}]"), ["script"]
    store.save_run(db, make_info("r2"), bench)
    # and what each run ran (walk 3 of issue 38, J1-8: nothing named the bench script)
    suite = [make_result(k, registers=8) for k in ("a", "b", "c")]
    files = ("tests/ops/test_a.py", "tests/ops/test_b.py", "tests/ops/x/test_c.py")
    for r, f in zip(suite, files, strict=True):
        r.key = replace(r.key, test=f"{f}::test_{r.key.kernel}")
    store.save_run(db, make_info("r3"), suite)
    out = CliRunner().invoke(main, ["show"], env={"COLUMNS": "250"}, catch_exceptions=False).output
    rows = {ln.split("│")[1].strip(): [c.strip() for c in ln.split("│")[5:8]] for ln in out.splitlines()
            if ln.count("│") > 5}  # fmt: skip
    assert rows["r1"] == ["tests/t.py", "2", "2"], rows
    assert rows["r2"] == ["bench benchmarks/bench_softmax.py", "2", "2 calls"], rows
    assert rows["r3"] == ["3 files in tests/ops/", "3", "3"], rows


def test_baseline_update(project):
    db = project / "reports/run.db"
    store.save_run(db, make_info("r1", started_at="2026-01-01T00:00:00Z"), [make_result(registers=1)])
    store.save_run(db, make_info("r2", started_at="2026-01-02T00:00:00Z"), [make_result(registers=2)])
    r = invoke("baseline", "update")
    assert r.exit_code == 0 and "copied run r2 (1 variants)" in r.output
    r = invoke("baseline", "update", "--run", "r1", "--baseline", "other.db")
    assert r.exit_code == 0
    assert [i.run_id for i in store.list_runs(project / "other.db")] == ["r1"]
    assert store.load_run(project / "baselines/main.db").results[0].metric("registers").value == 2


def test_subprocess_exit_codes(project):
    """The installed entry point's exit codes, as CI sees them."""
    env = clean_env()
    _runs(project, 32, 40)

    def run(*args):
        return subprocess.run(
            [*KPERF, *args], capture_output=True, text=True, env=env, cwd=project, timeout=120
        )

    assert run("compare").returncode == 1
    # the same file as --db and --baseline would compare the latest run with itself
    same = run("compare", "--baseline", "reports/run.db")
    assert same.returncode == 2 and "compared with itself" in same.stderr
    assert len(same.stderr.strip().splitlines()) == 1 and "Traceback" not in same.stderr
    bad = run("compare", "--baseline", "nope.db")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == [
        "Error: nope.db: baseline does not exist; create it with "
        "`kperf baseline update --db RUN.db --baseline nope.db`"
    ]


BENCH_TEST = textwrap.dedent(
    """
    import pytest

    @pytest.mark.parametrize("n", [10, 1000])
    def test_sum(benchmark, n):
        benchmark.pedantic(sum, args=(range(n),), rounds=30, iterations=5)

    @pytest.mark.benchmark(group="sorting")
    def test_sort(benchmark):
        benchmark.pedantic(sorted, args=(list(range(100, 0, -1)),), rounds=15)
    """
)


@pytest.mark.slow
def test_import_real_pytest_benchmark_json(project):
    (project / "test_bench.py").write_text(BENCH_TEST)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:kperf", "-p", "no:xdist",
         "test_bench.py", "--benchmark-json=bench.json", "--benchmark-save-data"],
        capture_output=True, text=True, cwd=project, timeout=300, env=clean_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads((project / "bench.json").read_text())
    r = invoke("import", "bench.json", "--label", "bench")
    assert r.exit_code == 0 and "imported 3 benchmarks" in r.output, r.output
    rec = store.load_run(project / "reports/run.db")
    assert rec.info.label == "bench" and rec.info.fingerprint.cpu
    by_kernel = {x.key.kernel: x for x in rec.results}
    assert set(by_kernel) == {"test_sum[10]", "test_sum[1000]", "sorting"}
    s = by_kernel["test_sum[1000]"]
    src = next(b for b in doc["benchmarks"] if b["name"] == "test_sum[1000]")["stats"]
    assert s.key.arch == "host" and len(s.samples) == 30
    assert s.metric("time.median").value == pytest.approx(src["median"] * 1e3)
    assert s.metric("time.median").unit == "ms" and s.metric("time.median").kind == "time"
    assert s.samples[0] == pytest.approx(src["data"][0] * 1e3)
    assert {"time.mean", "time.min", "time.iqr", "time.cv", "time.ci_low", "time.ci_high"} <= {
        m.name for m in s.metrics
    }
    # a second import compares against the first: same CPU, so timings are comparable
    invoke("import", "bench.json", "--db", "second.db")
    r = invoke("compare", "--db", "second.db", "--baseline", "reports/run.db")
    assert r.exit_code == 0 and "no changes" in r.output


def test_import_bad_files(project):
    r = invoke("import", "missing.json")
    assert r.exit_code == 2 and "no such file" in r.output
    (project / "x.json").write_text("{")
    assert invoke("import", "x.json").exit_code == 2
    (project / "y.json").write_text('{"hello": 1}')
    r = invoke("import", "y.json")
    assert r.exit_code == 2 and "no 'benchmarks' list" in r.output


def test_run_passes_args_and_exit_code(project):
    (project / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    (project / "test_bad.py").write_text("def test_bad():\n    assert False\n")
    env = clean_env(KPERF_SAVE="0", KPERF_MODE="static")

    def run(test_file: str) -> subprocess.CompletedProcess:
        args = [*KPERF, "run", "-q", "-p", "no:cacheprovider", test_file]
        return subprocess.run(args, capture_output=True, text=True, cwd=project, env=env, timeout=300)

    ok, bad = run("test_ok.py"), run("test_bad.py")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert bad.returncode == 1, bad.stdout + bad.stderr


def test_variant_labels_tell_variants_apart():
    from kperf_ci.model import VariantKey
    from kperf_ci.report.terminal import variant_labels

    cfg = "num_warps=4,num_stages=3,num_ctas=1"
    a = VariantKey("softmax", "sm_90", "x:*fp16:D, n:i32, BLOCK=1024", cfg)
    b = VariantKey("softmax", "sm_90", "x:*fp32:D, n:i32:D, BLOCK=256", cfg)
    c = VariantKey("add", "sm_90", "x:*fp32:D", "num_warps=8")
    labels = variant_labels([a, b, c])
    assert labels[a.id] == "w4 s3 *fp16:D i32 BLOCK=1024"
    assert labels[b.id] == "w4 s3 *fp32:D i32:D BLOCK=256"
    assert labels[c.id] == "w8"


def test_baseline_update_refuses_incomplete_and_empty_runs(project):
    db, base = project / "reports/run.db", project / "baselines/main.db"
    store.save_run(db, make_info("good", started_at="2026-01-01T00:00:00Z"), [make_result(registers=1)])
    store.save_run(
        db,
        make_info("cut", started_at="2026-01-02T00:00:00Z"),
        [make_result(registers=2)],
        status="interrupted",
    )
    store.save_run(db, make_info("none", started_at="2026-01-03T00:00:00Z"), [])
    # the latest finished run is empty: a baseline without variants makes every compare pass
    r = CliRunner().invoke(main, ["baseline", "update"])
    assert r.exit_code == 2 and "run none holds no variants, not a baseline" in r.output
    r = CliRunner().invoke(main, ["baseline", "update", "--run", "cut"])
    assert r.exit_code == 2 and "run cut is incomplete (status interrupted)" in r.output
    assert not base.exists()  # nothing copied
    r = CliRunner().invoke(main, ["baseline", "update", "--run", "good"])
    assert r.exit_code == 0 and "copied run good (1 variants)" in r.output


def test_baseline_update_says_which_incomplete_runs_it_passed_over(project):
    db = project / "reports/run.db"
    store.save_run(db, make_info("good", started_at="2026-01-01T00:00:00Z"), [make_result(registers=1)])
    store.save_run(db, make_info("killed", started_at="2026-01-02T00:00:00Z"), [], status="running")
    r = CliRunner().invoke(main, ["baseline", "update"])
    assert r.exit_code == 0 and "copied run good" in r.output
    assert "passed over incomplete run(s) killed (running)" in r.output


def test_compare_names_an_incomplete_run_and_passes_over_an_empty_baseline(project):
    db, base = _runs(project, 32, 32)
    store.save_run(
        db, make_info("cut"), [make_result("add_kernel", registers=32, spills=0)], status="interrupted"
    )
    r = CliRunner().invoke(main, ["compare", "--run", "cut"])
    assert r.exit_code == 0 and "run cut is interrupted, not a complete run" in r.output
    store.save_run(base, make_info("emptybase", started_at="2027-01-01T00:00:00Z"), [])
    # an empty run is never a baseline: the latest complete one is used, and the empty one named
    r = CliRunner().invoke(main, ["compare"])
    assert r.exit_code == 0, r.output
    assert "emptybase" in r.output


def test_compare_two_runs_of_one_file_is_allowed(project):
    db, _ = _runs(project, 32, 40)
    store.save_run(db, make_info("old"), [make_result("add_kernel", registers=32, spills=0)])
    # one file, two different runs: a real comparison (only the same run twice is refused)
    r = CliRunner().invoke(main, ["compare", "--baseline", str(db), "--base-run", "old", "--run", "cur1"])
    assert r.exit_code == 1, r.output


def test_a_command_imports_its_own_module_only():
    """Every `kperf` process imported all twelve command modules (kperf ab's pipeline, the agent,
    github3): `kperf compare --help` took 0.63 s of which about half was other commands' imports.
    The group imports a command's module when that command runs; `kperf --help` lists them all."""
    code = (
        "import sys, click, kperf_ci.cli as cli\n"
        "assert not [m for m in sys.modules if m.startswith('kperf_ci.commands.')]\n"
        "cmd = cli.main.get_command(click.Context(cli.main), 'compare')\n"
        "assert cmd.name == 'compare'\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('kperf_ci.commands.'))\n"
        "assert loaded == ['kperf_ci.commands.compare'], loaded\n"
        "assert 'github3' not in sys.modules and 'kperf_ci.prcheck.pipeline' not in sys.modules\n"
        "assert cli.main.get_command(click.Context(cli.main), 'nope') is None\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    listed = subprocess.run([*KPERF, "--help"], capture_output=True, text=True, timeout=120).stdout
    from kperf_ci.cli import COMMANDS

    for name in COMMANDS:
        assert f"\n  {name} " in listed, name


@pytest.mark.skipif(not Path("/proc/self/task").is_dir() or (os.cpu_count() or 1) < 2, reason="2 cores")
def test_kperf_starts_no_blas_thread_pool_and_passes_none_on(project):
    """numpy's OpenBLAS started a thread per core in each `kperf` process (0.15 s of CPU for a
    2-core runner's import), for medians and intervals that never use it. The command's own
    children (the tests `kperf run` starts) get the environment the user gave."""
    code = (
        "import atexit, os\n"
        "threads = lambda: len(os.listdir('/proc/self/task'))\n"
        "atexit.register(lambda: print(threads(), os.environ.get('OPENBLAS_NUM_THREADS')))\n"
        "from kperf_ci.cli import main\n"
        "main(['show', '--db', 'missing.db'])\n"
    )
    env = {k: v for k, v in clean_env().items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, r.stderr  # the command ran, and refused the missing file
    assert r.stdout.split() == ["1", "None"], r.stdout + r.stderr
    (project / "test_env.py").write_text(
        "import os\n\ndef test_env():\n    assert 'OPENBLAS_NUM_THREADS' not in os.environ\n"
    )
    args = [*KPERF, "run", "-q", "-p", "no:cacheprovider", "test_env.py"]
    env.update(KPERF_SAVE="0", KPERF_MODE="static")
    ran = subprocess.run(args, capture_output=True, text=True, cwd=project, env=env, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    mine = {**env, "OPENBLAS_NUM_THREADS": "2"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=mine, timeout=120)
    assert r.stdout.split() == ["2", "2"], r.stdout + r.stderr  # the user's own setting is theirs
