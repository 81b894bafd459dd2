"""What the comment, status and label say, rendered from the databases the jobs stored (used by
`kperf github`; it lives beside the command because it reads databases the way the commands do).

The databases are data from the PR's job (for a fork PR, from untrusted code): they are opened
through :mod:`kperf_ci.store` (header, integrity and schema checked, never written) and rendered
by the product's own renderers, which escape every stored string for markdown
(:mod:`kperf_ci.report.safe_text`). No markdown file from the artifact is ever posted as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kperf_ci import store
from kperf_ci.analysis.findings import ARTIFACT as FINDINGS
from kperf_ci.errors import KperfError
from kperf_ci.inputs import blob_reader, bulk_objects, load_pair, load_settings
from kperf_ci.judge.compare import compare_runs
from kperf_ci.judge.policy import ThresholdPolicy
from kperf_ci.judge.verdict import regression
from kperf_ci.prcheck.document import load_ab_document
from kperf_ci.report import ab as ab_report
from kperf_ci.report import build_report, render_markdown
from kperf_ci.report.safe_text import markdown_safe, plain_url


@dataclass(frozen=True)
class Verdict:
    markdown: str  # the comment body (without the sticky marker)
    # what sets the perf-regression label and a failing status: judge.verdict.regression's
    # answer, the one the exit code of `kperf ab` / `kperf compare` reads
    regression: bool
    summary: str  # one line for the commit status
    # why there is no verdict ("no comparable baseline ..."), "" when there is one: never a
    # success status (kperf github status makes it a neutral check run or an error status)
    no_verdict: str = ""


def status_of(verdict: Verdict | None, state: str | None, description: str | None) -> tuple[str, str, str]:
    """(state, summary, why there is no verdict or "") of the commit status ``kperf github status``
    sets. ``verdict`` None: the state and description were given (e.g. the release gate: its
    verdict comes from `kperf gate`); else they override what the verdict says. A run with no
    verdict keeps its reason only when no state was given and nothing regressed."""
    no_verdict = ""
    if verdict is None:
        regression, summary = state != "success", description or ""
    else:
        regression, summary = verdict.regression, description or verdict.summary
        no_verdict = "" if (state or regression) else verdict.no_verdict
    return state or ("failure" if regression else "success"), summary, no_verdict


# GitHub refuses a comment body over 65,536 characters; the parts of one comment share this budget.
COMMENT_BUDGET = 65_000


def link_line(link: str | None) -> str:
    """``[Full report](URL)`` for the --link the workflow passes (its own run page, not artifact
    data); anything that is not a plain http(s) URL is refused rather than rendered."""
    if not link:
        return ""
    if not plain_url(link):
        raise KperfError(f"--link {link!r}: expected a plain http(s) URL (the workflow run or artifact page)")
    return f"**[Full report]({link})** (HTML report and databases in the job's artifacts)"


def from_ab(db: Path, max_chars: int = COMMENT_BUDGET, link: str | None = None) -> Verdict:
    doc = load_ab_document(db)
    if doc is None:
        raise KperfError(f"{db}: holds no A/B document; pass the database `kperf ab` wrote (reports/ab.db)")
    extra = link_line(link)
    body = ab_report.render_markdown(doc, max_chars=max_chars - len(extra) - 2)
    if extra:
        body = body.rstrip() + "\n\n" + extra + "\n"
    return Verdict(body, bool(regression(doc)), ab_report.headline(doc))


def from_run(db: Path, baseline: Path | None, link: str | None, max_chars: int = COMMENT_BUDGET) -> Verdict:
    settings = load_settings(db=str(db), baseline=str(baseline) if baseline else None)
    current, base, base_path = load_pair(settings.db, settings.baseline, None, None, artifacts=(FINDINGS,))
    with bulk_objects():
        comparison = None
        if base is not None:
            comparison = compare_runs(base, current, ThresholdPolicy.from_settings(settings))
        report = build_report(
            current, base, comparison, blob=blob_reader(settings.db, current, base_path, base), link=link
        )
    if comparison is None:
        no_verdict = "no baseline to compare with"
    elif comparison.status != "compared":
        no_verdict = comparison.status_line
    else:
        no_verdict = ""
    return Verdict(
        render_markdown(report, max_chars=max_chars),
        bool(report.regression),
        f"static: {report.verdict_line}",
        no_verdict,
    )


def combine(gpu_class: str, parts: list[Verdict]) -> Verdict:
    """One comment for a GPU class: the A/B section and the static compare under one heading."""
    if not parts:
        raise KperfError("nothing to post: pass --ab-db (kperf ab's database) and/or --db (a run database)")
    head = f"### kperf-ci · {markdown_safe(gpu_class)}"
    text = "\n".join([head, ""] + [p.markdown.rstrip() + "\n" for p in parts])
    if len(text) > COMMENT_BUDGET:  # many sections at their renderers' minimum size
        text = (
            text[: COMMENT_BUDGET - 200].rsplit("\n", 1)[0] + "\n\n… (truncated: see the job's artifacts)\n"
        )
    missing = "; ".join(p.no_verdict for p in parts if p.no_verdict)
    return Verdict(text, any(p.regression for p in parts), "; ".join(p.summary for p in parts), missing)


def check_database(path: Path) -> None:
    """Opened and checked (header, integrity, schema) like any input; StoreError is exit 2.
    A pending write-ahead log is folded into the file: the file's bytes are what gets pushed."""
    store.fold_wal(path)
