"""Golden outputs: what `kperf analyze --db`, `kperf compare` and `kperf report` print and write
for the committed databases, so a refactor can show it changed nothing a user sees.

    python scripts/golden_outputs.py --out DIR            # this tree
    python scripts/golden_outputs.py --rev 92c4e80 --out DIR   # another revision (a git worktree)
    python scripts/golden_outputs.py --check tests/data/golden  # exit 1 and a diff when different

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
import os
import re
import shutil
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


_GENERATED = re.compile(rb"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC")


def produce(source_root: Path, out: Path) -> None:
    """Run every command with the kperf_ci package of `source_root`; write outputs under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(source_root), "NO_COLOR": "1", "COLUMNS": "160",
           "TERM": "dumb", "KPERF_TRACEBACK": "0"}  # fmt: skip
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write outputs here")
    ap.add_argument("--rev", help="produce the outputs of this git revision instead of this tree")
    ap.add_argument("--check", type=Path, help="compare this tree's outputs with a golden dir")
    args = ap.parse_args(argv)
    if bool(args.out) == bool(args.check):
        ap.error("give exactly one of --out or --check")
    source = ROOT
    tmp = Path(tempfile.mkdtemp(prefix="kperf-golden-src-"))
    try:
        if args.rev:
            source = tmp / "src"
            _worktree(args.rev, source)
        if args.out:
            if args.out.exists():
                shutil.rmtree(args.out)
            produce(source, args.out)
            return 0
        produce(source, tmp / "new")
        diff = tree_diff(args.check, tmp / "new")
        print("\n".join(diff) if diff else "golden outputs: identical")
        return 1 if diff else 0
    finally:
        if args.rev:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(source)],
                           capture_output=True)  # fmt: skip
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
