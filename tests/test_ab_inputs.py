"""Issue 37, item 10: ``--kperf-ab-plan`` (the plan `kperf ab` hands its timing pass) that is
missing, binary or malformed is one usage line and exit 2 from `kperf run`, in static mode too
(it was a pytest INTERNALERROR traceback, exit 3). A Hypothesis fuzz over plan files: the
plugin's check either accepts a plan whose every entry reads, or says one line; never another
exception. Item 14: `kperf ab --json PATH` that cannot be written is found before either pass."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import fuzz_settings, without
from hypothesis import given
from hypothesis import strategies as st

from kperf_ci.capture.launches.ab_launch import PLAN_VERSION

ROOT = Path(__file__).resolve().parents[1]


def _run_or_kill(cmd: list[str], **kw) -> subprocess.CompletedProcess[str]:
    """The command run to its end; one that hangs fails the test, and its whole process group
    (kperf run and the pytest it started) is killed rather than left blocked."""
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw
    )
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        pytest.fail(f"{cmd[3:]} still ran after 120 s")
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def test_a_bad_plan_is_one_line_and_exit_2_in_static_mode(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    (tmp_path / "binary.json").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "shape.json").write_text(json.dumps({"version": PLAN_VERSION, "tests": {"t": 3}}))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    # the second fresh walk of issue 37: a FIFO was opened for reading, and the run hung for good
    os.mkfifo(tmp_path / "fifo.json")
    env = without("KPERF_", "PYTEST_")
    env.update(KPERF_NO_REPORT="1", PYTHONPATH=str(ROOT))
    for plan, words in (
        ("missing.json", "cannot be read"),
        ("binary.json", "not JSON text"),
        ("shape.json", "not a list"),
        ("deep.json", "not JSON text"),
        ("fifo.json", "not a regular file"),
    ):
        r = _run_or_kill(
            [sys.executable, "-m", "kperf_ci", "run", "-p", "no:hypothesispytest", "-p", "no:cacheprovider",
             "--kperf-mode", "static", "--kperf-db", "run.db", "--kperf-ab-plan", plan, "test_x.py"],
            cwd=tmp_path, env=env,
        )  # fmt: skip
        assert r.returncode == 2, (plan, r.returncode, r.stdout[-2000:], r.stderr[-2000:])
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"ERROR: kperf: --kperf-ab-plan {plan}: "), r.stderr
        assert words in lines[0] and "INTERNALERROR" not in r.stdout + r.stderr


# --------------------------------------------------------------------------- fuzz

_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
_row = st.fixed_dictionaries(
    {},
    optional={"site": _json, "status": _json, "changes": _json, "head": _json, "base": _json, "test": _json},
)
_plan = st.fixed_dictionaries(
    {"version": st.just(PLAN_VERSION) | _json},
    optional={
        "tests": st.dictionaries(st.text(max_size=6), st.lists(_row | _json, max_size=3) | _json, max_size=3)
        | _json,
        "time_all": _json,
    },
)
_file = st.one_of(
    _plan.map(lambda d: json.dumps(d).encode()),
    _json.map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=64),
)


@fuzz_settings(150)
@given(data=_file)
def test_fuzzed_plan_files_are_read_or_refused_in_one_line(tmp_path, data):
    from kperf_ci import plugin
    from kperf_ci.plugin.gpu_bench import plan_of

    path = tmp_path / "plan.json"
    path.write_bytes(data)
    plan_of.cache_clear()
    config = SimpleNamespace(
        getoption=lambda name, default=None: str(path) if name == "kperf_ab_plan" else default
    )
    try:
        plugin._check_ab_plan(config)  # type: ignore[arg-type]
    except pytest.UsageError as e:
        assert "\n" not in str(e) and str(e).startswith(f"kperf: --kperf-ab-plan {path}: ")
        return
    plan = plan_of(str(path))
    for test in plan.tests():  # what the timing pass reads of an accepted plan
        plan.changed_sites(test)
        for entry in plan.entries[test]:
            assert isinstance(entry.head, dict) and (entry.base is None or isinstance(entry.base, dict))
            json.dumps(entry.to_dict(), default=str)


# --------------------------------------------------------------------------- kperf ab --json (item 14)


@pytest.mark.parametrize("where", ["file-as-parent", "proc", "sys"])
def test_kperf_ab_json_unwritable_is_found_before_both_passes(tmp_path, where):
    """Was: found only after both passes, and for a parent that is a file the message said
    "File exists". Found by the walk after: as root, os.access says /proc and /sys are writable,
    and the write failed after both passes; a file created there proves it, root or not."""
    if where in ("proc", "sys"):
        target, words = f"/{where}/kperf/ab.json", f"/{where} is not a writable directory"
    else:
        (tmp_path / "afile").write_text("")
        target, words = "afile/ab.json", "afile is a file, not a directory"
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    git = ["git", "-c", "user.name=k", "-c", "user.email=k@k", "-c", "commit.gpgsign=false"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "one"]):
        subprocess.run([*git, *cmd], cwd=tmp_path, check=True, capture_output=True)
    env = without("KPERF_", "PYTEST_")
    r = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "ab", "--base", "HEAD", "--no-gpu", "--json", target, "test_x.py"],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"--json {target}: " in lines[0] and words in lines[0], r.stderr
    assert "pass" not in r.stdout and not (tmp_path / "reports").exists(), r.stdout  # no pass ran
