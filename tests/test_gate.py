"""The CI gate: against a release run, against a window of history; the command's exit codes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import git, make_info, make_result

from kperf_ci import store
from kperf_ci.cli import main
from kperf_ci.judge.gate import GateError, GatePolicy, gate_against_run, gate_history, last_release
from kperf_ci.model import RunRecord

GPU = "NVIDIA H100 80GB HBM3"


def samples(rng, level, n=50, noise=0.005):
    return (level * np.exp(rng.normal(0, noise, n))).tolist()


def timed(kernel, xs, **kw):
    r = make_result(kernel, GPU, samples=xs, **{"time.median": float(np.median(xs))}, **kw)
    return r


def run(results, **kw):
    kw.setdefault("mode", "gpu")
    kw.setdefault("gpu", GPU)
    return RunRecord(info=make_info(**kw), results=results)


# -------------------------------------------------------------------------------- release


def test_release_gate_blocks_a_confident_slowdown_with_evidence():
    rng = np.random.default_rng(0)
    base = run([timed("softmax", samples(rng, 1.0)), timed("add", samples(rng, 0.3))])
    cur = run([timed("softmax", samples(rng, 1.10)), timed("add", samples(rng, 0.3))])
    rep = gate_against_run(base, cur, GatePolicy(), label="release v1.0")
    assert rep.blocked and rep.exit_code == 1 and rep.checked == 2
    (b,) = rep.blockers
    assert b.kernel == "softmax" and b.metric == "time.median"
    assert "slower +10." in b.evidence and "n=50/50" in b.evidence and "threshold" in b.evidence
    text = rep.render()
    assert text.startswith("kperf gate: BLOCKED") and "softmax" in text and "release v1.0" in text
    assert rep.to_dict()["blockers"][0]["kernel"] == "softmax"


def test_release_gate_passes_noise_and_honours_ignore_and_thresholds():
    rng = np.random.default_rng(1)
    base = run([timed("softmax", samples(rng, 1.0))])
    same = run([timed("softmax", samples(rng, 1.0))])
    assert not gate_against_run(base, same, GatePolicy()).blocked
    slower = run([timed("softmax", samples(rng, 1.10))])
    assert not gate_against_run(base, slower, GatePolicy(ignore=("soft*",))).blocked
    generous = run([timed("softmax", samples(rng, 1.10), thresholds={"time": 0.2})])  # marker threshold
    assert not gate_against_run(base, generous, GatePolicy()).blocked


def test_release_gate_static_regressions_only_when_asked():
    base = run([make_result("k", "sm_90", spills=0)], mode="static", gpu=None)
    cur = run([make_result("k", "sm_90", spills=64)], mode="static", gpu=None)
    assert not gate_against_run(base, cur, GatePolicy()).blocked
    rep = gate_against_run(base, cur, GatePolicy(static=True))
    assert rep.blocked and rep.blockers[0].metric == "spills"


def test_release_gate_notes_incomparable_gpus():
    rng = np.random.default_rng(2)
    base = run([timed("k", samples(rng, 1.0))], gpu="NVIDIA A100-SXM4-80GB")
    cur = run([timed("k", samples(rng, 1.5))])
    rep = gate_against_run(base, cur, GatePolicy())
    assert not rep.blocked and any("not gated" in n for n in rep.notes)


# -------------------------------------------------------------------------------- history


def history(levels, seed=0, kernel="softmax", run_noise=0.0):
    """One run per level; ``run_noise``: run-to-run noise of the level (clocks, machines)."""
    rng = np.random.default_rng(seed)
    return [run([timed(kernel, samples(rng, lv * np.exp(rng.normal(0, run_noise))))]) for lv in levels]


def test_history_gate_blocks_current_run_above_the_level():
    hist = history([1.0] * 20)
    rng = np.random.default_rng(99)
    cur = run([timed("softmax", samples(rng, 1.08))])
    rep = gate_history(hist, cur, GatePolicy(against="history"))
    assert rep.blocked, rep.render()
    assert "vs the level of the last 20 runs" in rep.blockers[0].evidence
    ok = run([timed("softmax", samples(rng, 1.0))])
    assert not gate_history(hist, ok, GatePolicy(against="history")).blocked


def test_history_gate_unaccepted_step_blocks_and_accepting_relevels():
    hist = history([1.0] * 15 + [1.08] * 10)
    step_run = hist[15].info.run_id
    rng = np.random.default_rng(98)
    cur = run([timed("softmax", samples(rng, 1.08))])  # at the new level
    rep = gate_history(hist, cur, GatePolicy(against="history"))
    assert rep.blocked
    (b,) = rep.blockers
    assert f"at run {step_run}" in b.evidence and "accept" in b.evidence
    accepted = GatePolicy(against="history", accept=(step_run,))
    rep = gate_history(hist, cur, accepted)
    assert not rep.blocked, rep.render()  # the level after the step is the baseline now
    worse = run([timed("softmax", samples(rng, 1.08 * 1.08))])
    assert gate_history(hist, worse, accepted).blocked


def test_history_gate_accept_matches_a_prefix_of_the_run_id_or_commit():
    """accept = ["<sha prefix>"] accepts the step of the run whose commit starts with it; an entry
    longer than the sha (or one that only starts with the sha) does not. Catches the prefix match
    reversed (entry.startswith(sha)), which the full-id accept above cannot tell apart."""
    hist = history([1.0] * 15 + [1.08] * 10)
    sha = "0123456789abcdef0123456789abcdef01234567"
    hist = [
        dataclasses.replace(h, info=dataclasses.replace(h.info, git_sha=sha if i == 15 else f"{i:040x}"))
        for i, h in enumerate(hist)
    ]
    cur = run([timed("softmax", samples(np.random.default_rng(98), 1.08))])
    step_run = hist[15].info.run_id

    def blocked(*accept: str) -> bool:
        return gate_history(hist, cur, GatePolicy(against="history", accept=accept)).blocked

    assert blocked()  # the step itself blocks
    assert not blocked(sha[:10]) and not blocked(sha) and not blocked(step_run[:5])
    assert blocked(sha + "0") and blocked(step_run + "x")  # longer than what it names: no match
    assert blocked("1234567")  # a substring that is no prefix


def test_history_gate_speedups_relevel_and_single_outliers_do_not_block():
    levels = [1.0] * 12 + [0.9] * 12
    hist = history(levels)
    hist[5] = history([1.6], seed=5)[0]  # one wild run in the window
    rng = np.random.default_rng(97)
    cur = run([timed("softmax", samples(rng, 0.9))])
    assert not gate_history(hist, cur, GatePolicy(against="history")).blocked
    back_to_old = run([timed("softmax", samples(rng, 1.0))])  # losing the speedup is a regression
    assert gate_history(hist, back_to_old, GatePolicy(against="history")).blocked


def test_history_gate_needs_enough_runs_and_uses_medians_without_samples():
    short = history([1.0] * 3)
    rng = np.random.default_rng(1)
    cur = run([timed("softmax", samples(rng, 2.0))])
    rep = gate_history(short, cur, GatePolicy(against="history"))
    assert not rep.blocked and "need 5" in rep.notes[0]
    hist = [run([make_result("softmax", GPU, **{"time.median": v})]) for v in 1.0 + 0.002 * np.sin(range(20))]
    cur = run([make_result("softmax", GPU, **{"time.median": 1.2})])
    rep = gate_history(hist, cur, GatePolicy(against="history"))
    assert rep.blocked and "medians only" in rep.blockers[0].evidence


def test_history_threshold_rises_with_noisy_history():
    noisy = history([1.0] * 20, run_noise=0.03)  # run-to-run noise of 3%
    rng = np.random.default_rng(5)
    cur = run([timed("softmax", samples(rng, 1.055))])
    rep = gate_history(noisy, cur, GatePolicy(against="history"))
    assert not rep.blocked, rep.render()  # +5.5% is within what this history's noise allows
    assert gate_history(history([1.0] * 20), cur, GatePolicy(against="history")).blocked  # quiet history
    far = run([timed("softmax", samples(rng, 1.3))])
    rep = gate_history(noisy, far, GatePolicy(against="history"))
    assert rep.blocked and "history noise" in rep.blockers[0].evidence


# -------------------------------------------------------------------------------- policy, git


def test_policy_validation():
    p = GatePolicy.from_table({"against": "history", "window": 40, "accept": "abc", "ignore": ["x*"]})
    assert p.against == "history" and p.window == 40 and p.accept == ("abc",) and p.ignore == ("x*",)
    with pytest.raises(GateError, match="unknown key"):
        GatePolicy.from_table({"wndow": 3})
    with pytest.raises(GateError, match="'against'"):
        GatePolicy.from_table({"against": "yesterday"})
    with pytest.raises(GateError, match="window"):
        GatePolicy().merged(window=2)
    assert GatePolicy().merged(tag="rel-*", window=None).tag == "rel-*"


@pytest.fixture
def tagged_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    shas = []
    for i in range(3):
        (repo / "f.txt").write_text(str(i))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"c{i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    git(repo, "tag", "v1.0", shas[0])
    git(repo, "tag", "v1.1", shas[1])
    return repo, shas


def test_last_release(tagged_repo):
    repo, shas = tagged_repo
    assert last_release(repo, "v*", shas[2]) == ("v1.1", shas[1])
    git(repo, "checkout", "-q", "v1.1")
    assert last_release(repo, "v*", shas[1]) == ("v1.0", shas[0])  # the release itself: the one before
    assert last_release(repo, "nope-*", None) is None


def test_gate_command_exit_codes(tagged_repo, monkeypatch):
    repo, shas = tagged_repo
    (repo / "pyproject.toml").write_text(
        '[tool.kperf]\ndb = "run.db"\nbaseline = "main.db"\n[tool.kperf.gate]\nagainst = "release"\n'
    )
    rng = np.random.default_rng(0)
    rel = dataclasses.replace(make_info(mode="gpu", gpu=GPU), git_sha=shas[1])
    store.save_run(repo / "main.db", rel, [timed("softmax", samples(rng, 1.0))])
    cur_info = dataclasses.replace(make_info(mode="gpu", gpu=GPU), git_sha=shas[2])
    store.save_run(repo / "run.db", cur_info, [timed("softmax", samples(rng, 1.2))])
    monkeypatch.chdir(repo)
    r = CliRunner().invoke(main, ["gate"])
    assert r.exit_code == 1, r.output
    assert "BLOCK" in r.output and "softmax" in r.output and "release v1.1" in r.output
    r = CliRunner().invoke(main, ["gate", "--format", "json"])
    assert r.exit_code == 1 and '"blocked": true' in r.output
    ok_info = dataclasses.replace(make_info(mode="gpu", gpu=GPU), git_sha=shas[2])
    store.save_run(repo / "run.db", ok_info, [timed("softmax", samples(rng, 1.0))])
    r = CliRunner().invoke(main, ["gate"])
    assert r.exit_code == 0 and "passed" in r.output
    r = CliRunner().invoke(main, ["gate", "--tag", "none-*"])
    assert r.exit_code == 2 and "no release tag" in r.output
    (repo / "bad.toml").write_text('[tool.kperf.gate]\nagainst = "sometime"\n')
    r = CliRunner().invoke(main, ["gate", "--policy", "bad.toml"])
    assert r.exit_code == 2 and "against" in r.output
    r = CliRunner().invoke(main, ["gate", "--against", "history"])
    assert r.exit_code == 0 and "not gated" in r.output  # one stored run is not a history


def test_gate_command_history(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kperf]\ndb = "run.db"\n[tool.kperf.gate]\nagainst = "history"\ndb = "history.db"\n'
    )
    rng = np.random.default_rng(3)
    for i in range(8):
        info = make_info(mode="gpu", gpu=GPU, started_at=f"2026-01-0{1 + i // 4}T00:00:0{i % 4}+00:00")
        store.save_run(tmp_path / "history.db", info, [timed("softmax", samples(rng, 1.0))])
    late = "2026-02-01T00:00:00+00:00"
    store.save_run(
        tmp_path / "run.db",
        make_info(mode="gpu", gpu=GPU, started_at=late),
        [timed("softmax", samples(rng, 1.15))],
    )
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["gate"])
    assert r.exit_code == 1, r.output
    assert "history of 8 run(s)" in r.output and "vs the level of the last 8 runs" in r.output
    r = CliRunner().invoke(main, ["gate", "--window", "6", "--format", "json"])
    assert r.exit_code == 1 and "history of 6 run(s)" in r.output
