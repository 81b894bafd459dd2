"""Existing benchmark scripts, unmodified, through `kperf run --bench` and `kperf ab --bench`.

Every journey runs the CLI as a subprocess. Static mode compiles what each do_bench call
launched (Triton's interpreter runs the kernels); the A/B journey fakes only the device boundary
(test_pr_check_replay's conftest: a clock charging 11 us per head launch, 10 us per base launch);
the gpu-marked test times the bundled script on a real GPU.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_gpu

pytest.importorskip("torch")
pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "benchmarks" / "bench_softmax.py"


def kperf(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: int = 600):
    e = dict(os.environ, KPERF_BASELINE="", KPERF_NO_REPORT="1", **(env or {}))
    e.pop("KPERF_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "kperf_ci", *args],
        cwd=cwd,
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def calls_blob(db: Path) -> dict:
    from kperf_ci import store

    run = store.load_run(str(db))
    names = [n for n in store.blob_names(str(db), run.info.run_id) if n.startswith("bench_calls:")]
    (name,) = names
    return json.loads(store.load_blob(str(db), run.info.run_id, "", name))


# ------------------------------------------------------------------------------ static mode


@pytest.mark.slow
def test_an_unmodified_script_becomes_one_benchmark_per_do_bench_call(tmp_path):
    db = tmp_path / "run.db"
    r = kperf(
        "run", "--kperf-mode", "static", "--kperf-db", str(db), "--kperf-arch", "sm_90",
        "--bench", str(EXAMPLE), "--rows", "64", "--cols", "128", "256",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    # the script ran as itself: its own lines, NaN where nothing was timed (no GPU)
    assert "softmax triton 64x128: p50 nan ms" in r.stdout
    assert "softmax  torch 64x256: p50 nan ms" in r.stdout
    assert "4 do_bench call(s), 2 captured (1 Triton kernel(s)), 2 not captured" in r.stdout
    from kperf_ci import store

    run = store.load_run(str(db))
    tests = sorted({v.key.test for v in run.results})
    assert tests == [
        "examples/benchmarks/bench_softmax.py::bench_softmax.bench_speed#1[fp16:64x128]",
        "examples/benchmarks/bench_softmax.py::bench_softmax.bench_speed#1[fp16:64x256]",
    ]
    assert {v.key.kernel for v in run.results} == {"softmax_kernel"}
    assert all("script" in v.tags for v in run.results)
    for v in run.results:
        names = {m.name for m in v.metrics}
        assert {"registers", "spills"} <= names, names  # compiled: static metrics
    doc = calls_blob(db)
    statuses = [(c["site"], c["status"], c["reason"]) for c in doc["calls"]]
    assert statuses[:2] == [("bench_softmax.bench_speed#1", "captured", "")] * 2
    # the torch reference: listed with why, at its own call site (the second do_bench written)
    assert statuses[2][0] == "bench_softmax.bench_speed#2" and statuses[2][1] == "listed"
    assert "launched no Triton kernel" in statuses[2][2]


@pytest.mark.slow
def test_selection_limits_which_calls_are_measured(tmp_path):
    db = tmp_path / "run.db"
    r = kperf(
        "run", "--kperf-mode", "static", "--kperf-db", str(db), "--kperf-arch", "sm_90",
        "--kperf-bench-select", "*64x256*",
        "--bench", str(EXAMPLE), "--rows", "64", "--cols", "128", "256",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = calls_blob(db)
    reasons = [c["reason"] for c in doc["calls"] if c["status"] == "listed"]
    assert "not selected (bench_select)" in reasons
    from kperf_ci import store

    tests = {v.key.test for v in store.load_run(str(db)).results}
    assert tests == {"examples/benchmarks/bench_softmax.py::bench_softmax.bench_speed#1[fp16:64x256]"}


def test_bad_bench_arguments_are_one_line_and_exit_2(tmp_path):
    for args, words in (
        (["--bench", "nosuch.py"], "no such file"),
        (["--bench"], "--bench needs a script"),
        (["--bench", "-m", "no_such_module_kperf"], "no such Python module"),
        (["--kperf-bench-limit", "-3", "--bench", str(EXAMPLE)], None),
    ):
        r = kperf("run", *args, cwd=tmp_path)
        if words is None:  # a bad plugin option: pytest's usage error (4), kperf's bad input (2)
            assert r.returncode == 2, r.stdout + r.stderr
            assert "--kperf-bench-limit must be an integer >= 0" in r.stderr
            continue
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert words in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.slow
def test_the_database_and_reports_are_where_kperf_looks_from_the_working_directory(tmp_path):
    """The script lives in another tree (kperf-ci's own examples, whose pytest rootdir has a
    pyproject): the run, and the reports of that run, land here, where `kperf show` reads."""
    r = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "run", "--kperf-mode", "static", "--kperf-db", "sel.db",
         "--bench", str(EXAMPLE), "--rows", "64", "--cols", "128"],
        cwd=tmp_path, env=dict(os.environ, KPERF_BASELINE=""), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "sel.db").exists() and (tmp_path / "reports" / "index.html").exists()
    assert not (ROOT / "sel.db").exists()
    show = kperf("show", "--db", "sel.db", cwd=tmp_path)
    assert show.returncode == 0, show.stderr


def test_a_script_outside_the_project_runs_under_the_projects_settings(tmp_path):
    """Found by the fresh walk of issue 37: pytest took its rootdir from the script's path (here
    the common ancestor of both folders), so the project's [tool.kperf] was never read and the
    run was made for the default arch. The project in the working directory decides."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "pyproject.toml").write_text('[tool.kperf]\narch = ["sm_80"]\nmode = "static"\n')
    (elsewhere / "bench_x.py").write_text("print('the script ran')\n")
    r = kperf("run", "-p", "no:cacheprovider", "--bench", str(elsewhere / "bench_x.py"), cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the script ran" in r.stdout
    (header,) = [ln for ln in r.stdout.splitlines() if ln.startswith("kperf: mode=")]
    assert "mode=static arch=sm_80 " in header, header
    assert f"rootdir: {project}" in r.stdout, r.stdout


@pytest.mark.slow
def test_the_projects_pytest_configuration_decides_not_the_scripts_folders(tmp_path):
    """Found by the second fresh walk of issue 37: with the rootdir pinned, pytest still took its
    configuration file from the script's folder upward. A pytest configuration beside the script
    chose the arch and the label; without one, the project's own addopts were ignored."""
    project, outside = tmp_path / "proj2", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / "pyproject.toml").write_text(
        '[tool.kperf]\narch = ["sm_80"]\nmode = "static"\n\n'
        '[tool.pytest.ini_options]\naddopts = "-p no:cacheprovider --kperf-label fromproject"\n'
    )
    (outside / "b.py").write_text("print('the script ran')\n")
    (outside / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\naddopts = "--kperf-label fromoutside --kperf-arch sm_86"\n'
    )
    from kperf_ci import store

    for script_config in (True, False):  # a pytest configuration beside the script, then none
        if not script_config:
            (outside / "pyproject.toml").unlink()
        db = project / f"r{int(script_config)}.db"
        r = kperf("run", "--kperf-db", db.name, "--bench", "../outside/b.py", cwd=project)
        assert r.returncode == 0, r.stdout + r.stderr
        (header,) = [ln for ln in r.stdout.splitlines() if ln.startswith("kperf: mode=")]
        assert "mode=static arch=sm_80 " in header, header
        # pytest 8 prints "rootdir: R, configfile: C", pytest 9.2 one line each
        assert f"rootdir: {project}" in r.stdout
        assert re.search(r"configfile: pyproject\.toml$", r.stdout, re.M), r.stdout
        assert store.load_run(str(db)).info.label == "fromproject"
    # the user's own configuration file still wins
    (outside / "pytest.ini").write_text("[pytest]\naddopts = --kperf-label mine\n")
    mine = ("-c", str(outside / "pytest.ini"), "--kperf-db", "u.db")
    r = kperf("run", *mine, "--bench", "../outside/b.py", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    assert store.load_run(str(project / "u.db")).info.label == "mine"


RAISES = """
import triton


def helper():
    raise RuntimeError("boom from script")


helper()
"""


@pytest.mark.slow
def test_a_script_that_raises_shows_its_own_traceback_short(tmp_path):
    (tmp_path / "bench_raises.py").write_text(RAISES)
    r = kperf(
        "run", "--kperf-mode", "static", "--kperf-db", "r.db", "--bench", "bench_raises.py", cwd=tmp_path
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "bench_raises.py:6: in helper" in r.stdout and "RuntimeError: boom from script" in r.stdout
    failure = r.stdout.split("FAILURES", 1)[1].split("kperf warning", 1)[0]
    assert "kperf_ci" not in failure and "runpy" not in failure  # the script's frames only
    assert "failed before its first triton.testing.do_bench call" in r.stdout
    assert len(r.stdout.splitlines()) < 80


@pytest.mark.slow
def test_a_selection_that_matches_no_call_is_bad_input(tmp_path):
    r = kperf(
        "run", "--kperf-mode", "static", "--kperf-db", str(tmp_path / "r.db"),
        "--kperf-bench-select", "nomatch*", "--bench", str(EXAMPLE), "--rows", "64", "--cols", "128",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "bench_select ['nomatch*'] matched none of the script's" in r.stdout


SCRIPT_EXITS = """
import sys
import triton
print("about to fail")
sys.exit(3)
"""


@pytest.mark.slow
def test_a_script_that_exits_non_zero_fails_the_run(tmp_path):
    script = tmp_path / "bench_fails.py"
    script.write_text(SCRIPT_EXITS)
    r = kperf(
        "run",
        "--kperf-mode",
        "static",
        "--kperf-db",
        str(tmp_path / "r.db"),
        "--bench",
        str(script),
        cwd=tmp_path,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the script exited with status 3" in r.stdout
    assert "failed before its first triton.testing.do_bench call" in r.stdout


# ------------------------------------------------------------------------------ do_bench itself


def test_the_script_gets_what_its_arguments_ask_for():
    import triton.testing

    from kperf_ci.capture.launches.do_bench import BenchCall

    samples = [1.0, 2.0, 3.0, 4.0, 10.0]

    def answer(**kw):
        return BenchCall("do_bench", lambda: None, "s#1", "f.py", 1, 25, 100, **kw).answer(samples)

    summarize = triton.testing._summarize_statistics
    assert answer(quantiles=[0.5, 0.2, 0.8]) == summarize(samples, [0.5, 0.2, 0.8], "mean")
    assert answer(quantiles=[0.5]) == 3.0
    assert answer() == 4.0  # mean, do_bench's default return_mode
    assert answer(return_mode="median") == 3.0
    assert answer(return_mode="min") == 1.0
    assert answer(return_mode="all") == samples
    nothing = BenchCall("do_bench", lambda: None, "s#1", "f.py", 1, 25, 100, quantiles=[0.5, 0.2, 0.8])
    assert all(math.isnan(x) for x in nothing.answer([]))


CALLER = """
import triton.testing


def bench(fn, mode):
    if mode == "a":
        return triton.testing.do_bench(fn, quantiles=[0.5])
    return triton.testing.do_bench(
        fn,
        rep=10,
    )


def via_lambda(fn):
    run = lambda: triton.testing.do_bench(fn, 5, 7)  # noqa: E731
    return run()
"""


def test_calls_are_named_by_site_and_triton_internal_calls_pass_through(tmp_path, monkeypatch):
    import triton.testing

    from kperf_ci.capture.launches import do_bench

    path = tmp_path / "caller_mod.py"
    path.write_text(CALLER)
    monkeypatch.syspath_prepend(str(tmp_path))
    import caller_mod

    seen = []
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, *a, **k: "original")
    with do_bench.intercept(lambda call: seen.append(call) or 1.5):
        assert caller_mod.bench(lambda: None, "a") == 1.5
        assert caller_mod.bench(lambda: None, "b") == 1.5
        assert caller_mod.via_lambda(lambda: None) == 1.5
        # the autotuner benchmarks configs from Triton's own modules: not a script benchmark
        exec_globals = {"__name__": "triton.runtime.autotuner", "triton": triton}
        assert eval("triton.testing.do_bench(lambda: None)", exec_globals) == "original"
    assert triton.testing.do_bench(lambda: None) == "original"  # restored
    sites = ["caller_mod.bench#1", "caller_mod.bench#2", "caller_mod.via_lambda.<lambda>#1"]
    assert [c.site for c in seen] == sites
    assert seen[0].quantiles == [0.5] and seen[1].rep_ms == 10 and seen[1].warmup_ms == 25
    assert (seen[2].warmup_ms, seen[2].rep_ms) == (5, 7)


def test_the_timing_budget_is_what_the_call_asked_for():
    from kperf_ci.capture.launches.do_bench import BenchCall
    from kperf_ci.plugin.bench_script import timing_config

    liger = timing_config(BenchCall("do_bench", lambda: None, "s#1", "f.py", 1, 25, 10), budget_s=2.0)
    assert liger.budget_s == 0.02 and liger.min_time_s == 0.01 and liger.warmup_min_s == 0.025
    assert not liger.use_graph  # do_bench times with events
    long = timing_config(BenchCall("do_bench", lambda: None, "s#1", "f.py", 1, 25, 5000), budget_s=2.0)
    assert long.budget_s == 2.0 and long.min_time_s == 0.25  # kperf's own floors and budget cap it
    cudagraph = BenchCall("do_bench_cudagraph", lambda: None, "s#1", "f.py", 1, 0, 20)
    graph = timing_config(cudagraph, budget_s=2.0)
    assert graph.use_graph and graph.graph_threshold_ms == float("inf")


# ------------------------------------------------------------------------------ kperf ab --bench

BENCH_SCRIPT = """
import torch
import triton

from abkern.ops import copy, scale

for n in (1000, 4096):
    x = torch.rand(n)
    print("scale", n, triton.testing.do_bench(lambda: scale(x), quantiles=[0.5, 0.2, 0.8]))
print("copy", triton.testing.do_bench(lambda: copy(torch.rand(512))))
"""


@pytest.mark.slow
def test_kperf_ab_times_the_changed_kernels_calls_against_the_base(tmp_path):
    from test_pr_check_replay import two_commit_repo

    repo = two_commit_repo(tmp_path, {"bench/bench_ops.py": BENCH_SCRIPT})
    log, out = tmp_path / "launches.jsonl", tmp_path / "ab.json"
    env = {"KPERF_TEST_FAKE_GPU": str(log), "TRITON_INTERPRET": "1", "PYTHONPATH": str(repo)}
    r = kperf(
        "ab", "--base", "HEAD~1", "--gpu", "--json", str(out), "--bench", "bench/bench_ops.py",
        cwd=repo, env=env,
    )  # fmt: skip
    doc = json.loads(out.read_text()) if out.exists() else {}
    assert doc, r.stdout + r.stderr
    assert r.returncode == 1, r.stdout + r.stderr  # the head's scale launches are 10% slower
    timed = doc["timed"]
    assert {t["test"] for t in timed} == {
        "bench/bench_ops.py::bench_ops.<module>#1[fp32:1000]",
        "bench/bench_ops.py::bench_ops.<module>#1[fp32:4096]",
    }, r.stdout
    assert {t["kernel"] for t in timed} == {"scale_kernel"}
    assert all(t["verdict"] == "slower" and 1.08 < t["ratio"] < 1.12 for t in timed)
    launches = [json.loads(x) for x in log.read_text().splitlines()]
    base = [x for x in launches if x["side"] == "base"]
    assert {(tuple(x["grid"]), x["num_warps"], x["const"]["BLOCK"]) for x in base} == {
        ((4, 1, 1), 4, 256),
        ((16, 1, 1), 4, 256),
    }
    # the copy kernel's call is identical on both sides: not replayed
    assert not [x for x in launches if x["kernel"] == "copy_kernel" and x["side"] == "base"]
    by_test = {t["test"]: t["status"] for t in doc["tests"]}
    assert by_test["bench/bench_ops.py::bench_ops.<module>#2[fp32:512]"] == "identical"


def _ab_bench(repo: Path, script: str) -> subprocess.CompletedProcess:
    # the work tree's kperf_ci after the repository's modules (PYTHONPATH replaces the caller's)
    env = {"TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([str(repo), str(ROOT)])}
    return kperf("ab", "--base", "HEAD~1", "--bench", script, cwd=repo, env=env, timeout=300)


def test_kperf_ab_bench_of_a_script_new_in_head_is_one_line_before_any_pass(tmp_path):
    """Found by the fresh walk of issue 37: the base pass ran without its script and ended on
    pytest's usage error ("--kperf-bench: expected one argument ... stored no run")."""
    from test_pr_check_replay import two_commit_repo

    repo = two_commit_repo(tmp_path, {})
    (repo / "bench").mkdir()
    (repo / "bench" / "bench_new.py").write_text(BENCH_SCRIPT)  # in the work tree (head) only
    r = _ab_bench(repo, "bench/bench_new.py")
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "bench/bench_new.py does not exist in the base tree: nothing to compare" in lines[0]
    assert "static:" not in r.stdout, r.stdout  # no pass started


def test_kperf_ab_bench_of_a_script_that_ends_the_process_names_the_side(tmp_path):
    """Found by the fresh walk of issue 37: "static pass in the base tree stored no run (pytest
    exit 0)", as if kperf-ci had failed. Now `kperf run`'s words, naming the side."""
    from test_pr_check_replay import two_commit_repo

    repo = two_commit_repo(tmp_path, {"bench/bench_exit.py": "import os\nprint('bye')\nos._exit(0)\n"})
    r = _ab_bench(repo, "bench/bench_exit.py")
    assert r.returncode == 2, r.stdout + r.stderr
    line = r.stderr.strip().splitlines()[-1]  # the one line, after the pass's output ("bye")
    # both trees' script ends the process: the pull request's tree is named, as it ran first
    # (issue 36's fourth walk, item 8)
    assert line.startswith("Error: static pass in the head tree: bench/bench_exit.py: the script "), line
    assert "ended the process (exit 0) before kperf-ci could store the run: nothing stored" in line
    assert "stored no run" not in r.stderr and "Traceback" not in r.stderr, r.stderr


# ------------------------------------------------------------------------------ on a GPU


@needs_gpu
@pytest.mark.gpu
def test_the_bundled_script_is_timed_on_the_gpu(tmp_path):
    db = tmp_path / "run.db"
    r = kperf(
        "run", "--kperf-mode", "gpu", "--kperf-db", str(db),
        "--bench", str(EXAMPLE), "--rows", "4096", "--cols", "1024", "4096",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    # (with -s, pytest prints the item's path in front of the script's first line)
    p50 = re.findall(r"softmax +(?:triton|torch) \d+x\d+: p50 (\S+) ms", r.stdout)
    assert len(p50) == 4 and all(float(x) > 0 for x in p50), r.stdout  # every call answered
    from kperf_ci import store

    run = store.load_run(str(db))
    medians = {v.key.test: v.metric("time.median") for v in run.results}
    assert len(medians) == 2 and all(m is not None and m.value > 0 for m in medians.values()), medians
    assert "4 do_bench call(s), 2 captured" in r.stdout


def test_a_call_kperf_cannot_measure_is_listed_and_answered_by_do_bench(monkeypatch):
    """GPU mode, the device faked at its boundary: the call's launch is seen, kperf's measurement
    raises; the call is listed with the reason and the script still gets Triton's own answer."""
    from types import SimpleNamespace

    import torch

    from kperf_ci.capture.launches import gpu
    from kperf_ci.capture.launches.do_bench import BenchCall
    from kperf_ci.measure import measure
    from kperf_ci.plugin import bench_script

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(gpu, "capture_launches", lambda fn, **kw: (fn(), [gpu.LaunchInfo(name="k")]))

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(measure, "bench", boom)
    settings = SimpleNamespace(bench_select=None, bench_limit=0, timing_budget_s=2.0)
    ks = SimpleNamespace(
        mode="gpu", settings=settings, config=SimpleNamespace(getoption=lambda *a, **k: None)
    )
    run = bench_script.ScriptRun(ks, "bench.py")
    call = BenchCall("do_bench", lambda: None, "bench.main#1", "bench.py", 3, 25, 100, quantiles=[0.5])
    call.original = lambda fn, **kw: 1.25
    assert run.handle(call) == 1.25
    (noted,) = run.calls
    assert noted["status"] == "listed" and "kperf could not measure it: RuntimeError: boom" in noted["reason"]
    assert noted["test"] == "bench.py::bench.main#1[k]"


def test_kperf_run_help_says_what_bench_does_then_pytests_options(tmp_path):
    r = kperf("run", "--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "--bench SCRIPT [ARGS]" in r.stdout and "pytest's own options follow" in r.stdout
    assert "usage:" in r.stdout and "--kperf-bench-select" in r.stdout
