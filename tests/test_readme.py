"""The README is for users: short, its links resolve, and every command it shows runs.

* at most 250 lines (issue 38); the task guides live under docs/, linked from it;
* every relative link (and image) in README.md and docs/*.md names a file that exists, and a
  ``#anchor`` into a markdown file names one of its headings;
* every command in the README's ``bash`` blocks is listed in ``COMMANDS`` below: run here, in a
  scripted walk from a scratch directory, or exempt with the reason (GPU only, or what CI itself
  runs). A command added to the README without an entry here fails ``test_every_readme_command_is_
  run_or_exempt``.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import without

from kperf_ci.config import tomllib  # tomli before Python 3.11

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 250

#: Each command of the README's bash blocks (its trailing comment cut): None when the walk below
#: runs it, else why it is not run here.
COMMANDS: dict[str, str | None] = {
    "bash scripts/bootstrap.sh && .venv/bin/kperf run examples": (
        "installs everything into .venv, then the main job: .ci/run runs bootstrap.sh and "
        "pr.yml's static job runs `.venv/bin/kperf run examples -q` on every pull request"
    ),
    "bash scripts/bootstrap.sh && .venv/bin/python -m pytest -n auto": (
        "installs everything, then this whole test suite: what .ci/run runs (pr.yml's tests job)"
    ),
    "kperf report --ab docs/reviewer-walk/static-softmax.ab.json --format markdown --max-chars 20000"
    " -o comment.md": None,
    "kperf report --ab docs/reviewer-walk/static-softmax.ab.json --format html -o site/": None,
    "kperf run --bench examples/benchmarks/bench_softmax.py --rows 64 --cols 128 256": None,
    "kperf show": None,
    "kperf --help": None,
}

#: What the walk checks each run command left behind (paths relative to its directory).
WRITES = {
    "kperf report --ab docs/reviewer-walk/static-softmax.ab.json --format markdown --max-chars 20000"
    " -o comment.md": ["comment.md"],
    "kperf report --ab docs/reviewer-walk/static-softmax.ab.json --format html -o site/": ["site/index.html"],
    "kperf run --bench examples/benchmarks/bench_softmax.py --rows 64 --cols 128 256": [
        "reports/run.db",
        "reports/index.html",
    ],
}


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    return [(m[1].strip(), m[2]) for m in re.finditer(r"^```([^\n]*)\n(.*?)^```", text, re.M | re.S)]


def readme_commands() -> list[str]:
    out = []
    for lang, body in fenced_blocks(README.read_text(encoding="utf-8")):
        if lang != "bash":
            continue
        for line in body.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()  # a trailing comment
            if line and not line.startswith("#"):
                out.append(line)
    return out


def test_readme_is_at_most_250_lines():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines; move details to a page under docs/ and link it"


# ------------------------------------------------------------------------------------ links


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m[1] or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {slug(m[1]) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M)}


def links(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`(?!\])", "", text)  # code spans, but not a link's text `like this`
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text)


DOC_FILES = [README, *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path):
    bad = []
    for target in links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not bad, f"{doc.relative_to(ROOT)}: " + "; ".join(bad)


def test_readme_links_every_docs_page():
    """A page under docs/ that nothing links is a page nobody finds."""
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    example = (ROOT / "docs/example-pr-comment.md").resolve()  # linked from docs/github.md
    pages = {p.resolve() for p in (ROOT / "docs").glob("*.md")} - {example}
    missing = sorted(str(p.relative_to(ROOT)) for p in pages - linked)
    assert not missing, f"docs pages the README does not link: {missing}"


def test_evidence_lists_every_results_file():
    """docs/EVIDENCE.md names every markdown file in benchmarks/results/ (by its path there)."""
    text = (ROOT / "docs/EVIDENCE.md").read_text(encoding="utf-8")
    results = ROOT / "benchmarks/results"
    missing = []
    for f in sorted(results.rglob("*.md")):
        rel = f.relative_to(results).as_posix()
        # a file in a sub-folder may be named `folder/file.md`, beside the full path of its row
        if rel not in text and f"{f.parent.name}/{f.name}" not in text:
            missing.append(rel)
    assert not missing, f"benchmarks/results files docs/EVIDENCE.md does not list: {missing}"


def test_slug_matches_github():
    assert slug("The PR check: `kperf ab`") == "the-pr-check-kperf-ab"
    assert slug("Static mode: how, its limits") == "static-mode-how-its-limits"


# --------------------------------------------------------------------------------- commands


def test_every_readme_command_is_run_or_exempt():
    found = readme_commands()
    assert found, "no bash block in README.md"
    unlisted = [c for c in found if c not in COMMANDS]
    stale = [c for c in COMMANDS if c not in found]
    assert not unlisted, f"README commands neither run by the walk nor exempt: {unlisted}"
    assert not stale, f"COMMANDS lists commands the README no longer shows: {stale}"
    assert all(reason is None or reason.strip() for reason in COMMANDS.values())


def test_ci_runs_the_readme_test_command():
    """.ci/run is "the README's test command": the same pytest invocation, after bootstrap.sh."""
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8")
    assert "bash scripts/bootstrap.sh" in ci
    assert ".venv/bin/python -m pytest -q -n auto" in ci
    assert "bash scripts/bootstrap.sh && .venv/bin/python -m pytest -n auto" in readme_commands()


def test_readme_code_blocks_parse():
    """The python example compiles and the [tool.kperf] block is this project's own."""
    blocks = fenced_blocks(README.read_text(encoding="utf-8"))
    pythons = [body for lang, body in blocks if lang == "python"]
    tomls = [body for lang, body in blocks if lang == "toml"]
    assert pythons and tomls
    for body in pythons:
        ast.parse(body)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["kperf"]
    for body in tomls:
        for key, value in tomllib.loads(body)["tool"]["kperf"].items():
            assert pyproject.get(key) == value, key


@pytest.mark.slow
def test_readme_walk_runs_every_cpu_command(tmp_path):
    """The README's commands, in its order, from a scratch directory holding what they read
    (docs/, examples/): `kperf` is this tree's `python -m kperf_ci`."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    for name in ("docs", "examples"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    env = without("KPERF_")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["KPERF_PROGRESS"] = "0"
    for command in readme_commands():
        if COMMANDS.get(command, "") is not None:
            continue
        argv = shlex.split(command)
        assert argv[0] == "kperf", command
        r = subprocess.run(
            [sys.executable, "-m", "kperf_ci", *argv[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, f"{command}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        for path in WRITES.get(command, []):
            assert (tmp_path / path).is_file(), f"{command} wrote no {path}"
