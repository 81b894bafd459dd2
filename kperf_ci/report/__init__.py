"""Reports people read: a static HTML site, a PR-comment markdown and a job summary.

Data flows in one direction: runs (``kperf_ci.store``) and their comparison
(``kperf_ci.compare``) -> :func:`build_report` -> a renderer. The renderers never read a
database themselves, except through the ``history`` callable the report carries.
"""

from __future__ import annotations

from .html import write_site
from .markdown import render_markdown, render_summary
from .view import MetricRow, Report, VariantView, build_report

__all__ = [
    "Report",
    "VariantView",
    "MetricRow",
    "build_report",
    "write_site",
    "render_markdown",
    "render_summary",
]
