"""Golden outputs: what `kperf analyze --db`, `kperf compare` and `kperf report` print and write
for the committed databases, so a refactor can show it changed nothing a user sees.

    python scripts/golden_outputs.py --out DIR            # this tree
    python scripts/golden_outputs.py --rev 92c4e80 --out DIR   # another revision (a git worktree)
    python scripts/golden_outputs.py --check tests/data/golden  # exit 1 and a diff when different
    python scripts/golden_outputs.py --journeys --diff-revs REV_A REV_B --report FILE.md

`--journeys` adds what the two commands users run most print on the bundled examples, each in a
scratch git repository built from that revision's `examples/` with fixed commit dates: the main
job (`kperf run examples`, static mode on a CPU) and the PR check (`kperf ab --base HEAD~1` on a
head commit with planted changes: a comment-only edit, a kernel body change, a launch-option
change). Minutes on a CPU, so tests/test_golden.py leaves them out; `--diff-revs` produces both
revisions' outputs in this process, on this machine, and writes the comparison to `--report`
(a refactor's evidence that no output changed). What differs between two runs of the same code
(run ids, durations, timestamps, the scratch path) is blanked.

Each command runs as a subprocess (`python -m kperf_ci`) in a scratch directory holding copies of
the databases (the CLI migrates old schemas in place; the committed files are never touched), with
relative paths so that no temporary path reaches an output. Printed output is kept as text; the
files a command writes (an HTML site with trace JSON, tens of MB) are kept as a SHA-256 manifest,
`files.sha256` (byte-identical or not; `--rev` on two revisions gives the full diff). The one
thing that differs between two renderings of a database, the report's "generated <minute> UTC"
stamp, is blanked before hashing.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATABASES = {
    "main.db": "baselines/main.db",
    "cpu.db": "tests/data/static/cpu_examples.db",
    "h100.db": "tests/data/gpu/h100_examples.db",
    "h100_copy.db": "tests/data/gpu/h100_examples.db",  # a run compared with itself
}
# name -> argv after `kperf`; outputs written under out/ are collected too.
COMMANDS: dict[str, list[str]] = {
    "analyze_h100": ["analyze", "--db", "h100.db"],
    "analyze_h100_softmax": ["analyze", "--db", "h100.db", "--kernel", "softmax"],
    "compare_cpu_vs_main": ["compare", "--db", "cpu.db", "--baseline", "main.db"],
    "compare_cpu_vs_main_all": ["compare", "--db", "cpu.db", "--baseline", "main.db", "--all"],
    "compare_cpu_vs_main_json": ["compare", "--db", "cpu.db", "--baseline", "main.db", "--format", "json"],
    "compare_h100_self": ["compare", "--db", "h100.db", "--baseline", "h100_copy.db", "--all"],
    "report_cpu_markdown": ["report", "--db", "cpu.db", "--baseline", "main.db", "--format", "markdown"],
    "report_cpu_summary": ["report", "--db", "cpu.db", "--baseline", "main.db", "--format", "summary"],
    "report_h100_markdown": ["report", "--db", "h100.db", "--format", "markdown"],
    "report_cpu_html": ["report", "--db", "cpu.db", "--baseline", "main.db", "--no-history",
                        "--jobs", "1", "-o", "out/report_cpu_html"],
    "report_h100_html": ["report", "--db", "h100.db", "--no-history", "--jobs", "1",
                         "-o", "out/report_h100_html"],
}  # fmt: skip

#: The journeys (--journeys): name -> (how the scratch repository's head differs from its base,
#: argv after `kperf`). An empty plant list means one commit, the examples as they are.
JOURNEYS: dict[str, tuple[list[tuple[str, str, str]], list[str]]] = {
    "journey_run_examples": ([], ["run", "examples"]),
    "journey_ab_examples": (
        [
            ("examples/kernels/vector_add.py", "", "# a comment-only change\n"),  # prepended
            ("examples/kernels/softmax.py", "    # Subtract the maximum for numerical stability.\n",
             "    row = tl.where(mask, row, -float(\"inf\"))  # redundant: same values, more code\n"
             "    # Subtract the maximum for numerical stability.\n"),
            ("examples/kernels/layernorm.py", "num_warps = min(max(BLOCK_SIZE // 256, 1), 8)",
             "num_warps = min(max(BLOCK_SIZE // 512, 1), 8)"),
        ],
        ["ab", "--base", "HEAD~1", "--json", "out/ab.json", "--report-dir", "out/ab", "examples"],
    ),
}  # fmt: skip
_GIT_ENV = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
            "GIT_AUTHOR_NAME": "golden", "GIT_AUTHOR_EMAIL": "golden@kperf",
            "GIT_COMMITTER_NAME": "golden", "GIT_COMMITTER_EMAIL": "golden@kperf"}  # fmt: skip


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, **_GIT_ENV})  # fmt: skip


def _kperf_section(pyproject: Path) -> str:
    """The [tool.kperf] table of a pyproject.toml, as text (the project's own settings)."""
    text = pyproject.read_text()
    start = text.index("[tool.kperf]")
    end = text.find("\n[", start + 1)
    return text[start : end if end != -1 else len(text)].strip() + "\n"


def _journey_repo(source_root: Path, repo: Path, plants: list[tuple[str, str, str]]) -> None:
    """A git repository of `source_root`'s examples, its [tool.kperf] settings and baseline; with
    plants, a second commit applies them (each old text must be there: a plant never silently
    misses)."""
    shutil.copytree(source_root / "examples", repo / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", "regressions", "*.md"))  # fmt: skip
    (repo / "baselines").mkdir()
    shutil.copy2(source_root / "baselines" / "main.db", repo / "baselines" / "main.db")
    (repo / "pyproject.toml").write_text(_kperf_section(source_root / "pyproject.toml"))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    if not plants:
        return
    for rel, old, new in plants:
        f = repo / rel
        text = f.read_text()
        if not old:
            text = new + text
        else:
            assert old in text, f"plant {rel}: {old!r} not found"
            text = text.replace(old, new, 1)
        f.write_text(text)
    _git(repo, "commit", "-qam", "head: planted changes")


_VOLATILE = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:\+00:00|Z)?"), "<timestamp>"),
    (re.compile(r"\b\d+:\d\d:\d\d\b"), "<h:mm:ss>"),
    (re.compile(r"\b\d+(?:\.\d+)?(?: ?)(?:s|ms|min)\b"), "<duration>"),
    # pytest pads its summary line with "=" to the terminal's width around a duration
    (re.compile(r"={3,}"), "==="),
    # pytest's header lists the environment's plugins in the order importlib.metadata finds their
    # distributions, which a rebuilt venv changes: the same plugins read alike in any order
    (re.compile(r"^plugins: (.+)$", re.M), lambda m: "plugins: " + ", ".join(sorted(m.group(1).split(", ")))),
]
#: JSON keys whose numbers are durations (everything under them is blanked)
_DURATION_KEY = re.compile(r"(?:_s|wall|elapsed|seconds|duration)$")


def _run_ids(work: Path) -> set[str]:
    """Every run id in the databases under `work`: random per run, blanked in the outputs."""
    ids: set[str] = set()
    for db in work.rglob("*.db"):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                ids.update(r[0] for r in conn.execute("SELECT run_id FROM runs"))
        except sqlite3.Error:
            continue
    return ids


def _blank_durations(doc: object, under: bool = False) -> object:
    if isinstance(doc, dict):
        return {k: _blank_durations(v, under or bool(_DURATION_KEY.search(str(k)))) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_blank_durations(v, under) for v in doc]
    if under and isinstance(doc, (int, float)) and not isinstance(doc, bool):
        return "<duration>"
    return doc


def _scrub(text: str, work: Path, run_ids: set[str], is_json: bool = False) -> str:
    """`text` without what differs between two runs of the same code: the scratch path, run ids
    (numbered by first appearance), timestamps, durations (in JSON: every number under a duration
    key)."""
    if is_json:
        try:
            text = json.dumps(_blank_durations(json.loads(text)), indent=1, sort_keys=True) + "\n"
        except ValueError:
            pass
    text = text.replace(str(work.resolve()), "<scratch>").replace(str(work), "<scratch>")
    seen = sorted((text.find(rid), rid) for rid in run_ids if rid in text)
    for i, (_, rid) in enumerate(seen):
        text = text.replace(rid, f"<run-{i}>")
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text


def produce_journeys(source_root: Path, out: Path, env: dict[str, str]) -> None:
    """Each journey in a fresh scratch repository; its printed output and the text files it
    writes under out/ (JSON, markdown) kept, scrubbed of what differs between two runs."""
    for name, (plants, argv) in JOURNEYS.items():
        with tempfile.TemporaryDirectory(prefix="kperf-golden-journey-") as scratch:
            work = Path(scratch)
            _journey_repo(source_root, work, plants)
            proc = subprocess.run(
                [sys.executable, "-m", "kperf_ci", *argv],
                cwd=work, env=env, capture_output=True, text=True, timeout=1800,
            )  # fmt: skip
            ids = _run_ids(work)
            (out / f"{name}.txt").write_text(_scrub(
                f"$ kperf {' '.join(argv)}\nexit {proc.returncode}\n--- stdout\n{proc.stdout}"
                f"--- stderr\n{proc.stderr}", work, ids))  # fmt: skip
            written = [p for d in ("out", "reports") for p in (work / d).rglob("*")]
            for f in sorted(p for p in written if p.is_file() and p.suffix in (".json", ".md", ".txt")):
                dest = out / name / f.relative_to(work)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(_scrub(f.read_text(errors="replace"), work, ids, f.suffix == ".json"))


_GENERATED = re.compile(rb"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC")


def produce(source_root: Path, out: Path, journeys: bool = False) -> None:
    """Run every command with the kperf_ci package of `source_root`; write outputs under `out`;
    with `journeys`, the journeys too (:func:`produce_journeys`)."""
    out.mkdir(parents=True, exist_ok=True)
    # KPERF_PROGRESS=0: progress output (kperf ab's heartbeat while a pass runs) depends on time
    env = {**os.environ, "PYTHONPATH": str(source_root), "NO_COLOR": "1", "COLUMNS": "160",
           "TERM": "dumb", "KPERF_TRACEBACK": "0", "KPERF_PROGRESS": "0"}  # fmt: skip
    env.pop("GITHUB_STEP_SUMMARY", None)
    manifest: list[str] = []
    for name, argv in COMMANDS.items():
        # A fresh scratch directory per command: a command that migrates or writes a database
        # cannot change what the next one reads.
        with tempfile.TemporaryDirectory(prefix="kperf-golden-") as scratch:
            work = Path(scratch)
            for dst, src in DATABASES.items():
                shutil.copy2(ROOT / src, work / dst)
            proc = subprocess.run(
                [sys.executable, "-m", "kperf_ci", *argv],
                cwd=work, env=env, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            (out / f"{name}.txt").write_text(
                f"$ kperf {' '.join(argv)}\nexit {proc.returncode}\n--- stdout\n{proc.stdout}"
                f"--- stderr\n{proc.stderr}"
            )
            written = work / "out"
            if written.is_dir():
                for f in sorted(p for p in written.rglob("*") if p.is_file()):
                    digest = hashlib.sha256(_GENERATED.sub(b"generated <time>", f.read_bytes())).hexdigest()
                    manifest.append(f"{digest}  {f.relative_to(written).as_posix()}")
    (out / "files.sha256").write_text("\n".join(manifest) + "\n")
    if journeys:
        produce_journeys(source_root, out, env)


def tree_diff(a: Path, b: Path) -> list[str]:
    """Unified diffs (text) or 'differs' lines (binary) between two output trees."""
    lines: list[str] = []
    names = sorted({p.relative_to(a) for p in a.rglob("*") if p.is_file()}
                   | {p.relative_to(b) for p in b.rglob("*") if p.is_file()})  # fmt: skip
    for rel in names:
        fa, fb = a / rel, b / rel
        if not fa.exists() or not fb.exists():
            lines.append(f"only in {'new' if fb.exists() else 'golden'}: {rel}")
            continue
        da, db = fa.read_bytes(), fb.read_bytes()
        if da == db:
            continue
        try:
            ta, tb = da.decode().splitlines(), db.decode().splitlines()
        except UnicodeDecodeError:
            lines.append(f"binary differs: {rel}")
            continue
        lines.extend(difflib.unified_diff(ta, tb, f"golden/{rel}", f"new/{rel}", lineterm="", n=1))
    return lines


def _worktree(rev: str, dest: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(dest), rev],
                   check=True, capture_output=True)  # fmt: skip


def _sources(revs: list[str], tmp: Path) -> list[Path]:
    """A source tree per revision: "." is this working tree, anything else a git worktree."""
    out = []
    for i, rev in enumerate(revs):
        if rev == ".":
            out.append(ROOT)
        else:
            out.append(tmp / f"src{i}")
            _worktree(rev, out[-1])
    return out


def _resolve(rev: str) -> str:
    if rev == ".":
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()  # fmt: skip
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()  # fmt: skip
        return f"the working tree at {head}" + (" with uncommitted changes" if dirty else "")
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip


def write_report(path: Path, revs: list[str], a: Path, b: Path, diff: list[str], journeys: bool) -> None:
    """The comparison of two revisions' outputs as markdown, every line from here."""
    import platform

    import triton

    names = sorted({p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file()}
                   | {p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file()})  # fmt: skip
    changed = {ln.split(": ", 1)[1] for ln in diff if ln.startswith(("only in", "binary differs"))}
    changed |= {ln[len("--- golden/") :] for ln in diff if ln.startswith("--- golden/")}
    cmd = "python scripts/golden_outputs.py" + (" --journeys" if journeys else "")
    lines = [
        f"# Golden outputs: {_resolve(revs[0])} against {_resolve(revs[1])}",
        "",
        f"Written by `{cmd} --diff-revs {revs[0]} {revs[1]} --report {path.as_posix()}` "
        f"(Python {platform.python_version()}, Triton {triton.__version__}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; both revisions produced in one process on this machine).",
        "",
        f"**{'identical' if not diff else 'DIFFERENT'}**: {len(names) - len(changed)} of {len(names)} "
        "outputs byte-identical after blanking run ids, durations, timestamps and the scratch path.",
        "",
        "| output | |",
        "|---|---|",
        *(f"| `{n}` | {'differs' if n in changed else 'identical'} |" for n in names),
    ]
    if diff:
        lines += ["", "```diff", *diff[:400], "```"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write outputs here")
    ap.add_argument("--rev", help="produce the outputs of this git revision instead of this tree")
    ap.add_argument("--check", type=Path, help="compare this tree's outputs with a golden dir")
    ap.add_argument("--journeys", action="store_true", help="also the examples' main job and PR check")
    ap.add_argument("--diff-revs", nargs=2, metavar="REV", help='two revisions ("." = this tree)')
    ap.add_argument("--report", type=Path, help="with --diff-revs: the markdown comparison")
    args = ap.parse_args(argv)
    if sum(map(bool, (args.out, args.check, args.diff_revs))) != 1:
        ap.error("give exactly one of --out, --check or --diff-revs")
    if args.diff_revs and not args.report:
        ap.error("--diff-revs needs --report FILE")
    tmp = Path(tempfile.mkdtemp(prefix="kperf-golden-src-"))
    sources: list[Path] = []
    try:
        if args.diff_revs:
            sources = _sources(args.diff_revs, tmp)
            for i, src in enumerate(sources):
                produce(src, tmp / f"out{i}", args.journeys)
            diff = tree_diff(tmp / "out0", tmp / "out1")
            write_report(args.report, args.diff_revs, tmp / "out0", tmp / "out1", diff, args.journeys)
            print("\n".join(diff) if diff else "golden outputs: identical", f"\n(report: {args.report})")
            return 1 if diff else 0
        sources = _sources([args.rev or "."], tmp)
        if args.out:
            if args.out.exists():
                shutil.rmtree(args.out)
            produce(sources[0], args.out, args.journeys)
            return 0
        produce(sources[0], tmp / "new", args.journeys)
        diff = tree_diff(args.check, tmp / "new")
        print("\n".join(diff) if diff else "golden outputs: identical")
        return 1 if diff else 0
    finally:
        for src in sources:
            if src != ROOT:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(src)],
                               capture_output=True)  # fmt: skip
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
