"""Render docs/example-pr-comment.md: the sticky PR comment of a real `kperf ab` run on a GPU.

Needs a CUDA GPU (the README's example comes from an H100). Run from the repository root:

    python benchmarks/render_example_comment.py [--out docs/example-pr-comment.md] [--keep-db PATH]
    python benchmarks/render_example_comment.py --from-db PATH   # re-render a kept A/B database

It builds the planted-change repository of benchmarks/pr_check_eval.py (base commit, then a head
commit with one planted change per case), runs `kperf ab --base HEAD~1 -k plant` in it as a user
would, and renders the comment from the stored A/B database through the same code `kperf github
comment` posts with (kperf_ci.github.body), marker included. Nothing in the output is written
by hand.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from pr_check_eval import planted_repo  # noqa: E402  (a sibling script, not a package)

from kperf_ci.github import body as body  # noqa: E402
from kperf_ci.github.comment import marker, with_marker  # noqa: E402


def run_ab(repo: Path, db: Path) -> tuple[int, float]:
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "ab", "--base", "HEAD~1", "--db", str(db), "-k", "plant"],
        cwd=repo,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        },
        capture_output=True,
        text=True,
    )
    sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
    if not db.exists():
        raise SystemExit(f"kperf ab wrote no database (exit {p.returncode})")
    return p.returncode, time.monotonic() - t0


def render(db: Path, gpu_class: str) -> str:
    verdict = body.combine(gpu_class, [body.from_ab(db)])
    return with_marker(verdict.markdown, marker("kperf", gpu_class))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "example-pr-comment.md")
    ap.add_argument("--class", dest="gpu_class", default="h100")
    ap.add_argument("--keep-db", type=Path, help="also keep the A/B database here")
    ap.add_argument("--from-db", type=Path, help="render this A/B database; run nothing")
    args = ap.parse_args()
    if args.from_db:
        db = args.from_db
    else:
        tmp = Path(tempfile.mkdtemp(prefix="kperf-example-comment-"))
        repo = planted_repo(tmp / "repo")
        db = tmp / "ab.db"
        code, wall = run_ab(repo, db)
        print(f"kperf ab: exit {code} in {wall:.0f} s", file=sys.stderr)
        if args.keep_db:
            args.keep_db.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(db, args.keep_db)
    text = render(db, args.gpu_class)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(text)} characters)")


if __name__ == "__main__":
    main()
