"""The fleet: one GPU per xdist worker (fake GPUs through CUDA_VISIBLE_DEVICES), more workers
than GPUs refused, and --kperf-shard slices that cover the marked tests exactly once."""

from __future__ import annotations

import os

import pytest

from kperf_ci.plugin import fleet

pytest.importorskip("xdist")

# Records what CUDA_VISIBLE_DEVICES is when the first user code of a worker is imported, i.e.
# what torch would see if this conftest initialised CUDA.
RECORDER = """
import os, pathlib

_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    out = pathlib.Path(os.environ["FLEET_OUT"])
    out.mkdir(exist_ok=True)
    (out / _worker).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
"""

TESTS = """
import pytest

@pytest.mark.kperf
@pytest.mark.parametrize("i", range(6))
def test_marked(i):
    pass

def test_plain():
    pass
"""


@pytest.fixture
def fleet_dir(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest(RECORDER)
    pytester.makepyfile(test_fleet_plain="def test_plain():\n    pass\n")
    monkeypatch.setenv("FLEET_OUT", str(pytester.path / "seen"))
    monkeypatch.delenv(fleet.ENV_GPUS, raising=False)
    # when this suite itself runs under xdist, the inner pytest must not think it is a worker
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    return pytester


def _run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest_subprocess("-p", "no:cacheprovider", "--kperf", "--kperf-no-save", *args)


def test_each_worker_sees_one_distinct_gpu(
    fleet_dir: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    r = _run(fleet_dir, "-n", "3", "--kperf-mode", "auto")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    seen = {p.name: p.read_text() for p in (fleet_dir.path / "seen").iterdir()}
    assert sorted(seen) == ["gw0", "gw1", "gw2"]
    assert sorted(seen.values()) == ["0", "1", "2"], seen  # one each, none shared, none unset


def test_n_auto_is_one_worker_per_gpu(fleet_dir: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # one GPU more than CPUs, so xdist's own `auto` (CPU count) would give another answer
    gpus = [str(i) for i in range((os.cpu_count() or 1) + 1)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(gpus))
    r = _run(fleet_dir, "-n", "auto", "--kperf-mode", "auto")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    assert f"created: {len(gpus)}/{len(gpus)} workers" in r.stdout.str()
    assert sorted(p.read_text() for p in (fleet_dir.path / "seen").iterdir()) == sorted(gpus)


def test_gpu_uuids_are_handed_out_too(fleet_dir: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    uuids = ["GPU-aaaa", "GPU-bbbb"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(uuids))
    r = _run(fleet_dir, "-n", "2", "--kperf-mode", "auto")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    assert sorted(p.read_text() for p in (fleet_dir.path / "seen").iterdir()) == uuids


def test_more_workers_than_gpus_is_a_usage_error(
    fleet_dir: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    r = _run(fleet_dir, "-n", "3", "--kperf-mode", "auto")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "-n 3 starts 3 workers but 2 GPU(s) are visible" in r.stderr.str()
    assert not (fleet_dir.path / "seen").exists(), "no worker may start"


def test_two_workers_on_one_gpu_is_a_usage_error(
    fleet_dir: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue-26 journey: `-n 2` on a machine (or a CUDA_VISIBLE_DEVICES) with one GPU."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    r = _run(fleet_dir, "-n", "2", "--kperf-mode", "auto")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "-n 2 starts 2 workers but 1 GPU(s) are visible" in r.stderr.str()
    assert not (fleet_dir.path / "seen").exists(), "no worker may start"


def test_static_mode_is_not_pinned(fleet_dir: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    r = _run(fleet_dir, "-n", "2", "--kperf-mode", "static")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    assert sorted(p.read_text() for p in (fleet_dir.path / "seen").iterdir()) == ["0", "0"]


def test_pin_outside_a_fleet_does_nothing() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert fleet.pin_worker_gpu(env) is None and env["CUDA_VISIBLE_DEVICES"] == "0,1"
    env = {"PYTEST_XDIST_WORKER": "gw1", fleet.ENV_GPUS: "0,1"}
    assert fleet.pin_worker_gpu(env) == "1" and env["CUDA_VISIBLE_DEVICES"] == "1"
    with pytest.raises(pytest.UsageError, match="no GPU of its own"):
        fleet.pin_worker_gpu({"PYTEST_XDIST_WORKER": "gw2", fleet.ENV_GPUS: "0,1"})


def _collected(p: pytest.Pytester, *args: str) -> list[str]:
    r = p.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "-q", *args)
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    return [line for line in r.stdout.lines if "::" in line]


def test_shards_cover_marked_tests_exactly_once(fleet_dir: pytest.Pytester) -> None:
    fleet_dir.makepyfile(test_fleet_sample=TESTS)
    everything = _collected(fleet_dir)
    shards = [_collected(fleet_dir, "--kperf-shard", f"{i}/3") for i in (1, 2, 3)]
    assert sorted(sum(shards, [])) == sorted(everything)  # disjoint and complete
    assert all(len([t for t in s if "test_marked" in t]) == 2 for s in shards)  # balanced
    assert "test_fleet_sample.py::test_plain" in shards[0]  # unmarked: shard 1 only
    assert "test_fleet_plain.py::test_plain" in shards[0]
    assert shards == [_collected(fleet_dir, "--kperf-shard", f"{i}/3") for i in (1, 2, 3)]  # deterministic


def test_kperf_all_shards_an_unedited_suite(fleet_dir: pytest.Pytester) -> None:
    """--kperf-all marks every test, so every test is dealt round-robin (on 2 H100s the Liger tests,
    unmarked in their files, all landed in shard 1 and the shards ran 24 and 8 tests)."""
    fleet_dir.makepyfile(test_fleet_sample=TESTS)
    everything = _collected(fleet_dir)
    shards = [_collected(fleet_dir, "--kperf", "--kperf-all", "--kperf-shard", f"{i}/2") for i in (1, 2)]
    assert sorted(sum(shards, [])) == sorted(everything)
    assert abs(len(shards[0]) - len(shards[1])) <= 1, shards
    assert "test_fleet_plain.py::test_plain" in sum(shards, [])


@pytest.mark.parametrize("bad", ["0/3", "4/3", "x", "1/0", "2"])
def test_bad_shard_is_a_usage_error(fleet_dir: pytest.Pytester, bad: str) -> None:
    r = fleet_dir.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "--kperf-shard", bad)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "--kperf-shard must be i/n" in r.stderr.str()


def test_an_empty_shard_is_exit_0_with_one_line(fleet_dir: pytest.Pytester) -> None:
    """A shard the slicing leaves empty did what it was asked: not pytest's exit 5."""
    fleet_dir.makepyfile(test_one="import pytest\n\n@pytest.mark.kperf\ndef test_m():\n    pass\n")
    r = _run(fleet_dir, "--kperf-mode", "static", "--kperf-shard", "2/2")
    out = r.stdout.str()
    assert r.ret == 0, out + r.stderr.str()
    assert out.count("nothing to run here") == 1 and "shard 2/2" in out
    r1 = _run(fleet_dir, "--kperf-mode", "static", "--kperf-shard", "1/2")
    assert "nothing to run here" not in r1.stdout.str()  # shard 1 holds the test
