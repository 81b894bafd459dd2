"""What the agent hands to people: a branch and a pull request, never a merge.

The PR body carries the diff, the evidence table (same-job A/B against the original, with its
interval), what was checked (shapes, dtypes, distributions, seeds, tolerances, each reward-hack
check) and the profile lines that motivated the search. ``--dry-run`` writes the body and the
patch to files and touches no git state. A real run commits the variant on a new branch in a
temporary worktree, pushes that branch (never ``main``/``master`` or the base), and opens the
pull request through :mod:`kperf_ci.github` (imported only here, only then).
"""

from __future__ import annotations

import difflib
import re
import tempfile
from pathlib import Path
from typing import Any

from kperf_ci.agent import checks
from kperf_ci.agent.population import VariantRow
from kperf_ci.git import git
from kperf_ci.github import client as gh_client
from kperf_ci.github import pulls
from kperf_ci.report.safe_text import markdown_safe

PROTECTED = frozenset({"main", "master"})
CHECKS_RUN = (
    (checks.NETWORK, "no network (dead proxy, socket guard), own process with a timeout"),
    (checks.TORCH_OPS, "no torch compute outside a Triton kernel"),
    (checks.REFERENCE, "never launches the original kernel"),
    (checks.STREAM, "no side streams"),
    (checks.TIMERS, "clocks, CUDA events and kperf's timing untouched"),
    (checks.LAZY, "plain tensors returned"),
    (checks.ALIAS, "outputs alias no input and no earlier output"),
    (checks.INPUTS, "inputs unmodified"),
    (checks.NONFINITE, "no NaN/Inf"),
    (checks.DOWNCAST, "original dtype and precision"),
    (checks.CACHE, "fresh result when the same buffers get new values"),
    (checks.VALUE_DEP, "same speed ratio on zeros and random data as the original"),
    (checks.TIMING_INPUTS, "timing inputs differ from the checked ones and are re-validated after timing"),
    (checks.ROOFLINE, "achieved bandwidth below the device's peak"),
)


def diff(original: str, candidate: str, path: str) -> str:
    return "".join(
        difflib.unified_diff(original.splitlines(True), candidate.splitlines(True), f"a/{path}", f"b/{path}")
    )


def _fmt(x: Any, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def pr_title(kernel: str, v: VariantRow) -> str:
    gain = f" ({(1 - v.ratio) * 100:.1f}% faster)" if v.ratio is not None and v.ratio < 1 else ""
    return f"kperf agent: {kernel}{gain}: {v.hypothesis[:80]}"


def pr_body(
    kernel: str, module: str, original: str, v: VariantRow, motivation: list[str], session: dict[str, Any]
) -> str:
    t, c = v.timings or {}, v.checks or {}
    ms = markdown_safe
    lines = [
        f"Proposed by `kperf agent` ({ms(v.proposer)}), session `{ms(session.get('id', ''))}`, "
        f"round {v.round}. **Review before merging: kperf never merges.**",
        "",
        f"**Hypothesis:** {markdown_safe(v.hypothesis)}",
        "",
        "## Evidence (same-job interleaved A/B against the original)",
        "",
        "| | original | this PR |",
        "|---|---|---|",
        f"| median time (ms) | {_fmt(t.get('base_ms'), '.4f')} | {_fmt(t.get('head_ms'), '.4f')} |",
        f"| time ratio (99% CI) | 1 | {_fmt(t.get('ratio'), '.4f')} "
        f"({_fmt(t.get('ci_low'), '.4f')} .. {_fmt(t.get('ci_high'), '.4f')}) |",
        "",
        f"Timed on {markdown_safe(t.get('device') or 'no GPU (not timed)')}, shape {t.get('shape')}, "
        f"{ms(t.get('dtype') or '')}, {t.get('pairs')} pairs, method {ms(t.get('method') or '')}; "
        f"{markdown_safe(t.get('plausibility') or '')}.",
        "",
        "## Checked",
        "",
        f"- {c.get('cases', 0)} cases: shapes {c.get('shapes')}, dtypes {c.get('dtypes')}, "
        f"distributions {c.get('distributions')}, seeds {c.get('seeds')}",
        f"- tolerance |new - original| <= atol + rtol x |original| per dtype: {c.get('tolerances')}; "
        f"worst error {_fmt(c.get('worst_error_over_tol'), '.3g')} x tolerance",
    ]
    lines += [f"- {why}" for _, why in CHECKS_RUN]  # constants of this module, not stored text
    if motivation:
        lines += ["", "## What motivated it", ""] + [f"- {markdown_safe(m)}" for m in motivation]
    lines += ["", "## Diff", "", "```diff", diff(original, v.code, module).replace("```", "` ` `"), "```"]
    return "\n".join(lines) + "\n"


def write_dry_run(out_dir: Path, title: str, body: str, patch: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [out_dir / "pr_body.md", out_dir / "candidate.patch"]
    files[0].write_text(f"# {title}\n\n{body}", encoding="utf-8")
    files[1].write_text(patch, encoding="utf-8")
    return files


def branch_name(kernel: str, session_id: str, variant_id: int) -> str:
    return f"kperf-agent/{re.sub(r'[^A-Za-z0-9_.-]', '-', kernel)}-{session_id}-{variant_id}"


def push_branch(
    repo: Path, module: str, code: str, branch: str, message: str, *, base: str, remote: str = "origin"
) -> str:
    """Commit ``code`` at ``module`` on a new branch off ``base`` in a temporary worktree and push
    that branch. Refuses protected names; the caller's checkout is never touched."""
    if branch in PROTECTED or branch == base or not branch.startswith("kperf-agent/"):
        raise ValueError(f"refusing to push to {branch!r}: the agent only pushes kperf-agent/* branches")
    with tempfile.TemporaryDirectory(prefix="kperf-agent-wt-") as d:
        wt = Path(d) / "wt"
        git(repo, "worktree", "add", "-q", "-b", branch, str(wt), base)
        try:
            (wt / module).write_text(code, encoding="utf-8")
            git(wt, "add", "--", module)
            git(
                wt,
                "-c",
                "user.name=kperf agent",
                "-c",
                "user.email=kperf-agent@users.noreply.github.com",
                "commit",
                "-q",
                "-m",
                message,
            )
            sha = git(wt, "rev-parse", "HEAD")
            git(wt, "push", "-q", remote, f"{branch}:refs/heads/{branch}")
        finally:
            git(repo, "worktree", "remove", "--force", str(wt))
    return sha


def open_pr(repo_name: str, head: str, base: str, title: str, body: str) -> Any:
    """The one call into the GitHub module: a pull request, never a merge."""
    c = gh_client.connect()
    return pulls.open_pull_request(c, c.repo(repo_name), head, base, title, body)
