"""Issue 37, items 2, 16 and 17: how `kperf run` ends when the code it runs ends the process
its own way, and its exit codes (the README's table: 2 bad input, 130 Ctrl-C).

Every case is `kperf run` as a subprocess on a small script in static mode; none of them
compiles a kernel (the session stops first, or the script launches none), so each takes a few
seconds.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_info, make_result, without

from kperf_ci import store
from kperf_ci.device import cuda_available

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)
"""


def kperf(where: Path, *args: str, reports: bool = False) -> subprocess.CompletedProcess:
    env = without("KPERF_", "PYTEST_")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    if not reports:
        env["KPERF_NO_REPORT"] = "1"
    # pytest plugins these runs do not use cost seconds of import each (hypothesis: 2 s)
    quiet = ["-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:cacheprovider"]
    return subprocess.run(
        [sys.executable, "-m", "kperf_ci", "run", *quiet, *args],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def bench(where: Path, script: str, *, reports: bool = False) -> subprocess.CompletedProcess:
    (where / "bench_it.py").write_text(script)
    (where / "kern37.py").write_text(KERNEL)
    args = ("--kperf-mode", "static", "--kperf-db", "run.db", "--bench", "bench_it.py")
    return kperf(where, *args, reports=reports)


@pytest.mark.parametrize(
    "ending",
    ["os._exit(0)", "os._exit(3)", "os.kill(os.getpid(), signal.SIGKILL)"],
)
def test_a_script_that_ends_the_process_is_exit_2_and_no_report_of_another_run(tmp_path, ending):
    """Was: exit 0 (and reports/ rebuilt from the previous run), exit 3 ("a bug in kperf-ci"),
    exit 247. Nothing was stored: one line says so, exit 2, and no report is written."""
    store.save_run(tmp_path / "run.db", make_info("previous"), [make_result(registers=1)])
    r = bench(tmp_path, f"import os, signal\nprint('about to end')\n{ending}\n", reports=True)
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "bench_it.py: the script ended the process" in lines[0]
    assert "before kperf-ci could store the run: nothing stored" in lines[0]
    assert "Traceback" not in r.stdout + r.stderr
    assert set(store.run_statuses(tmp_path / "run.db")) == {"previous"}
    assert not (tmp_path / "reports").exists()


def test_keyboard_interrupt_in_the_script_is_130_and_names_what_was_captured(tmp_path):
    """Was: exit 2 and "nothing was measured", though one do_bench call had been captured."""
    script = (
        "import torch, triton\nfrom kern37 import double\nx = torch.rand(64)\n"
        "print(triton.testing.do_bench(lambda: double[(1,)](x, 64, BLOCK=64)))\n"
        "raise KeyboardInterrupt\n"
    )
    r = bench(tmp_path, script)
    assert r.returncode == 130, (r.returncode, r.stdout[-2000:], r.stderr)
    assert "1 do_bench call(s), 1 captured" in r.stdout
    said = "interrupted (Ctrl-C while the tests ran): not stored (1 captured launch(es) not compiled"
    assert said in r.stdout
    assert "nothing was measured" not in r.stdout


FORKS = """
import os, sys
pid = os.fork()
if pid == 0:
    print("the child")
    sys.exit(0)
os.waitpid(pid, 0)
print("the parent")
"""


def test_a_forked_child_that_exits_does_not_run_the_rest_of_the_session(tmp_path):
    """Was: two summaries, two "stored" lines (the child went on through pytest's session)."""
    r = bench(tmp_path, FORKS)
    assert "the child" in r.stdout and "the parent" in r.stdout, r.stdout
    assert r.stdout.count("kperf bench: ") == 1, r.stdout
    assert r.stdout.count(" stored in ") == 1, r.stdout
    assert r.stdout.count(" passed") == 1, r.stdout
    assert len(store.run_statuses(tmp_path / "run.db")) == 1


NESTED = """
import triton
inner = lambda: triton.testing.do_bench(lambda: sum(range(10)))
print("outer", triton.testing.do_bench(inner))
"""


def test_a_nested_do_bench_does_not_reach_tritons_own(tmp_path):
    """Was: the inner call went to Triton's do_bench, which failed without a GPU ("0 active
    drivers") and failed the script."""
    r = bench(tmp_path, NESTED)
    assert "0 active drivers" not in r.stdout, r.stdout[-3000:]
    assert "1 passed" in r.stdout, r.stdout[-3000:]
    assert "outer nan" in r.stdout
    assert "do_bench called inside another do_bench call's function at 1 site(s)" in r.stdout


REPLACED = """
import triton.testing


def my_bench(fn, *args, **kwargs):
    fn()
    return 1.0


triton.testing.do_bench = my_bench
print("mine", triton.testing.do_bench(lambda: None))
"""


def test_a_do_bench_replaced_at_import_is_said_not_a_silent_empty_run(tmp_path):
    """Was: exit 0, nothing captured, a warning at most."""
    r = bench(tmp_path, REPLACED)
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr)
    # once: kperf's summary repeated pytest's own line (walk of issue 37)
    assert (r.stdout + r.stderr).count("replaced triton.testing.do_bench with a function of its own") == 1
    assert not (tmp_path / "run.db").exists() or not store.run_statuses(tmp_path / "run.db")


def test_settings_errors_of_kperf_run_are_exit_2_not_pytests_4(tmp_path):
    """The README's exit-code table holds for `kperf run` too: pytest's usage error (4) is
    bad input (2), with pytest's one line."""
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    (tmp_path / "afile").write_text("")
    cases = [
        (["--kperf-db", "afile/run.db"], "cannot be written here"),
        # as root os.access says yes here; the store failed after the tests (walk of issue 37)
        (["--kperf-db", "/proc/kperf/run.db"], "cannot be written here"),
        (["--kperf-db", "/sys/kperf/run.db"], "cannot be written here"),
        (["--kperf-db", "run.db", "--kperf-baseline", "missing.db"], "does not exist"),
    ]
    if not cuda_available():
        cases.append((["--kperf-mode", "gpu"], "needs a usable CUDA GPU"))
    for args, words in cases:
        r = kperf(tmp_path, *args, "test_x.py")
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("ERROR: kperf: ") and words in lines[0], r.stderr


def test_an_unwritable_database_names_the_commands_own_option_and_what_is_wrong(tmp_path):
    """Found by the second fresh walk of issue 37: the fix said `--db / KPERF_DB` to a user of
    `kperf run`, whose option is --kperf-db; and a database under /proc was said to be "No such
    file or directory" (`kperf import`, `kperf merge -o`) or "File exists" (a file as its parent),
    when the directory is there and takes no file."""
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    cases = [
        ("/proc/kperf/run.db", "(/proc is not a writable directory)"),
        ("/proc/1/status/run.db", "(/proc/1/status is a file, not a directory)"),
    ]
    for db, words in cases:
        r = kperf(tmp_path, "--kperf-db", db, "test_x.py")
        assert r.returncode == 2, (db, r.returncode, r.stderr)
        (line,) = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert words in line and line.endswith("choose a writable path (--kperf-db / KPERF_DB)"), line
    (tmp_path / "v.csv").write_bytes(
        (Path(__file__).parent / "data/liger/all_benchmark_data_excerpt.csv").read_bytes()
    )
    store.save_run(tmp_path / "in.db", make_info("one"), [make_result(registers=1)])
    env = without("KPERF_", "PYTEST_")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    for args, words in (
        (["import", "v.csv", "--db", "/proc/1/run.db"], "(/proc/1 is not a writable directory); "),
        (
            ["import", "v.csv", "--db", "/proc/1/status/run.db"],
            "(/proc/1/status is a file, not a directory); ",
        ),
        (["merge", "in.db", "-o", "/proc/1/out.db"], "(/proc/1 is not a writable directory); "),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "kperf_ci", *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        (line,) = r.stderr.splitlines()
        option = "--output" if args[0] == "merge" else "--db"
        assert words in line and line.endswith(f"choose a writable path ({option})"), line


OVERWRITES_THE_DATABASE = """
import pytest


@pytest.mark.kperf
def test_overwrites_the_run_database(benchmark):
    benchmark(sum, range(10))  # measured: pytest-benchmark's statistics are stored by kperf
    with open("run.db", "r+b") as f:  # then the code under test overwrites the database's header
        f.write(b"this is no longer SQLite" * 4)
"""


@pytest.mark.slow
def test_a_store_that_fails_mid_run_diverts_the_run_to_a_pending_file(tmp_path):
    """Item 5. Was: the run lost (a locked database already diverted it to a side file).
    Found by the walk after: exit 1, which the README keeps for a regression, and "report not
    written" twice. Now exit 2, one line naming the pending file and the merge that brings it in,
    and no report of another run."""
    pytest.importorskip("pytest_benchmark")
    store.save_run(tmp_path / "run.db", make_info("previous"), [make_result(registers=1)])
    (tmp_path / "test_overwrites.py").write_text(OVERWRITES_THE_DATABASE)
    # PYTEST_XDIST_* left out: pytest-benchmark measures nothing when it sees an xdist worker
    env = without("KPERF_", "PYTEST_")
    r = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "run", "-p", "no:hypothesispytest", "-p", "no:cacheprovider",
         "--kperf-mode", "static", "--kperf-db", "run.db", "test_overwrites.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert r.returncode == 2, (r.returncode, r.stdout[-3000:], r.stderr)
    assert "report not written" not in r.stderr, r.stderr
    (side,) = tmp_path.glob("run.db.pending-*.db")
    run_id = side.name.split("pending-")[1][: -len(".db")]
    (line,) = [ln for ln in r.stdout.splitlines() if "kperf ERROR" in ln]
    assert "<store>" in line and "could not store the run (not a SQLite database (bad header))" in line
    assert f"run {run_id} was written to {side} instead" in line
    assert "Traceback" not in r.stdout + r.stderr
    assert not list(tmp_path.glob(".kperf-probe-*")), "the writability check left its probe file"
    rec = store.load_run(side, run_id)
    assert rec.status == store.COMPLETE and rec.results, "the measured run is kept whole"
    # the line's own fix: restore the database, then its `kperf merge` brings the run in
    merge = re.search(r"`kperf merge (\S+) (\S+) -o (\S+)`", line)
    assert merge and merge.groups() == (str(tmp_path / "run.db"), str(side), str(tmp_path / "run.db")), line
    (tmp_path / "run.db").unlink()
    store.save_run(tmp_path / "run.db", make_info("previous"), [make_result(registers=1)])
    m = subprocess.run([sys.executable, "-m", "kperf_ci", "merge", *merge.groups()[:2], "-o", merge[3]],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert m.returncode == 0, m.stderr
    assert set(store.run_statuses(tmp_path / "run.db")) == {"previous", run_id}


def test_an_empty_selection_is_exit_2_with_one_line_not_pytests_5(tmp_path):
    """Found by the fresh walk of issue 37: `kperf run -k nomatch` exited 5, outside the table."""
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    r = kperf(tmp_path, "--kperf-db", "run.db", "test_x.py", "-k", "nomatch")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("kperf run: no test ran") == 1, r.stderr
