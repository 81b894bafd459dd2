"""Render the reviewer walk's material (issue 36) into docs/reviewer-walk/: what a pull-request
reviewer reads, on one real GPU A/B document and one static (CPU) one.

    python scripts/reviewer_walk_render.py [--out docs/reviewer-walk] [--skip-static]

1. GPU: the whole A/B document of realrepo_ab_eval's ``launch_option`` case on an H200
   (Liger-Kernel's geglu kernel launched with fewer warps; ``benchmarks/results/issue36/
   realrepo_ab_eval.launch_option.ab.json``, as ``kperf ab --json`` wrote it), copied to
   ``gpu-launch_option.ab.json``.
2. Static: a two-commit git repository made from the bundled ``examples/`` (softmax, layernorm
   and vector_add with their kernels), whose head commit gives the softmax kernel one warp
   instead of four for short rows; ``kperf ab --base HEAD~1 --no-gpu`` on it (this checkout's
   kperf_ci) writes ``static-softmax.ab.json``. Commit dates and author are fixed, so the shas
   are the same on every run.

Each document is rendered with ``kperf report --ab`` as the PR comment (``<name>.comment.md``)
and the HTML page (``<name>-html/index.html``). The comment is rendered to HTML as GitHub does,
with cmark-gfm (the ``cmarkgfm`` package; the python ``markdown`` package when it is missing,
said in ``RENDERER.txt``), into ``<name>.comment.html`` with a small GitHub-like stylesheet.
``<name>.comment-open.html`` is the same with every fold open. Headless Chromium (``--chromium``,
default /usr/bin/chromium) takes a 1400 px wide screenshot of each page (``<name>.html.png``,
``<name>.comment.png``, ``<name>.comment-open.png``); a PNG over 400 KB is cut shorter. Emoji
need a colour emoji font (Debian: fonts-noto-color-emoji).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU_SOURCE = ROOT / "benchmarks/results/issue36/realrepo_ab_eval.launch_option.ab.json"
EXAMPLES = (
    "conftest.py",
    "sizes.py",
    "test_softmax.py",
    "test_layernorm.py",
    "test_vector_add.py",
    "kernels",
)
MAX_PNG = 400_000
WIDTH, HEIGHT = 1400, 1800

# GitHub's comment look, approximately: its own stylesheet is not public API
COMMENT_CSS = """
body { font: 14px/1.5 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1f2328;
       max-width: 1012px; margin: 24px auto; padding: 16px 24px; border: 1px solid #d0d7de;
       border-radius: 6px; }
table { border-collapse: collapse; display: block; overflow: auto; max-width: 100%; margin: 12px 0; }
th, td { border: 1px solid #d0d7de; padding: 6px 13px; vertical-align: top; }
tr:nth-child(2n) { background: #f6f8fa; } th { font-weight: 600; }
code { background: rgba(175,184,193,.2); border-radius: 6px; padding: .2em .4em; font-size: 85%; }
blockquote { color: #59636e; border-left: .25em solid #d0d7de; margin: 0; padding: 0 1em; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .3em; font-size: 1.5em; }
summary { cursor: pointer; }
"""


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    env.pop("KPERF_DB", None)
    return subprocess.run(cmd, env={**env, **kw.pop("env", {})}, capture_output=True, text=True, **kw)


def kperf(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "kperf_ci", *args], cwd=cwd or ROOT, timeout=900)


def gpu_document(out: Path) -> Path:
    doc = json.loads(GPU_SOURCE.read_text(encoding="utf-8"))
    path = out / "gpu-launch_option.ab.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _git(repo: Path, *args: str) -> None:
    env = {"GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z"}
    ident = [
        "-c",
        "user.name=kperf-walk",
        "-c",
        "user.email=walk@kperf.local",
        "-c",
        "init.defaultBranch=main",
    ]
    r = run(["git", "-C", str(repo), *ident, *args], env=env)
    if r.returncode:
        raise SystemExit(f"git {' '.join(args)}: {r.stderr.strip()}")


def static_document(out: Path) -> Path:
    """kperf ab --no-gpu on a two-commit repository of the examples (the head: one warp)."""
    path = out / "static-softmax.ab.json"
    with tempfile.TemporaryDirectory(prefix="kperf-walk-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        for name in EXAMPLES:
            src = ROOT / "examples" / name
            if src.is_dir():
                shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(src, repo / name)
        (repo / "pyproject.toml").write_text('[tool.kperf]\narch = ["sm_90"]\n', encoding="utf-8")
        _git(repo, "init", "-q")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", "examples")
        kernel = repo / "kernels" / "softmax.py"
        text = kernel.read_text(encoding="utf-8")
        changed = text.replace("        return 8\n    return 4\n", "        return 8\n    return 1\n")
        assert changed != text, "examples/kernels/softmax.py: softmax_num_warps no longer returns 4"
        kernel.write_text(changed, encoding="utf-8")
        _git(repo, "commit", "-qam", "softmax: one warp for short rows")
        r = kperf("ab", "--base", "HEAD~1", "--no-gpu", "--json", str(path), cwd=repo)
        print(r.stdout[-3000:], r.stderr[-2000:], sep="\n")
        if not path.exists():
            raise SystemExit(f"kperf ab wrote no document (exit {r.returncode})")
    doc = json.loads(path.read_text(encoding="utf-8"))
    for key in ("db", "created_at", "run_id", "wall_s", "stage_s"):  # this machine's, not the result's
        doc.pop(key, None)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def markdown_to_html(text: str) -> tuple[str, str]:
    """(HTML, the renderer's name): cmark-gfm as GitHub, else python-markdown."""
    try:
        import cmarkgfm
        from cmarkgfm.cmark import Options

        # unsafe: keep <details>, which GitHub allows; the comment itself escapes all stored text
        return cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE), "cmark-gfm"
    except ImportError:
        pass
    try:
        import markdown

        return markdown.markdown(text, extensions=["tables"]), "python-markdown (cmarkgfm not installed)"
    except ImportError:
        raise SystemExit("neither cmarkgfm nor markdown is installed: pip install cmarkgfm") from None


def screenshot(chromium: str, page: Path, png: Path) -> None:
    height = HEIGHT
    while True:
        r = run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 f"--screenshot={png}", f"--window-size={WIDTH},{height}", page.resolve().as_uri()],
                timeout=120)  # fmt: skip
        if not png.exists():
            raise SystemExit(f"chromium took no screenshot of {page}: {r.stderr.strip()[-500:]}")
        if png.stat().st_size <= MAX_PNG or height <= 600:
            return
        height -= 300


def render(doc: Path, name: str, out: Path, chromium: str | None) -> list[str]:
    notes = []
    comment = out / f"{name}.comment.md"
    for fmt, target in (("markdown", comment), ("html", out / f"{name}-html" / "index.html")):
        r = kperf("report", "--ab", str(doc), "--format", fmt, "-o", str(target))
        if r.returncode:
            raise SystemExit(f"kperf report --ab {doc} --format {fmt}: {r.stderr.strip()}")
    body, renderer = markdown_to_html(comment.read_text(encoding="utf-8"))
    page = out / f"{name}.comment.html"
    page.write_text(
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(name)}: PR comment</title>'
        f"<style>{COMMENT_CSS}</style></head><body>{body}</body></html>\n",
        encoding="utf-8",
    )
    # the same comment with every fold open: what a reviewer sees after clicking
    opened = out / f"{name}.comment-open.html"
    opened.write_text(
        page.read_text(encoding="utf-8").replace("<details>", "<details open>"), encoding="utf-8"
    )
    notes.append(f"{page.name}, {opened.name}: {renderer}")
    if chromium:
        screenshot(chromium, out / f"{name}-html" / "index.html", out / f"{name}.html.png")
        screenshot(chromium, page, out / f"{name}.comment.png")
        screenshot(chromium, opened, out / f"{name}.comment-open.png")
    return notes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs/reviewer-walk"))
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--skip-static", action="store_true", help="keep the static document already there")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chromium = args.chromium if Path(args.chromium).exists() else None
    if chromium is None:
        print(f"{args.chromium} not found: no screenshots (apt-get install chromium)", file=sys.stderr)
    static = out / "static-softmax.ab.json"
    if not (args.skip_static and static.exists()):
        static = static_document(out)
    notes = render(gpu_document(out), "gpu-launch_option", out, chromium)
    notes += render(static, "static-softmax", out, chromium)
    (out / "RENDERER.txt").write_text("\n".join(notes) + "\n", encoding="utf-8")
    for p in sorted(out.glob("*.png")):
        print(f"{p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}: {p.stat().st_size // 1000} KB")


if __name__ == "__main__":
    main()
