"""Reports people read: a static HTML site, a PR-comment markdown and a job summary.

Data flows in one direction: runs (``kperf_ci.store``) and their comparison
(``kperf_ci.judge.compare``) -> :func:`build_report` -> a renderer. The renderers never read a
database themselves, except through the ``history`` callable the report carries.

The names below are imported on first use: every command imports ``report.safe_text``, and
that must not pull in Jinja2 and the analyses (PEP 562 module ``__getattr__``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .build import build_report
    from .html import write_site
    from .markdown import render_markdown, render_summary
    from .view import MetricRow, Report, VariantView

_WHERE = {
    "write_site": "html",
    "render_markdown": "markdown",
    "render_summary": "markdown",
    "MetricRow": "view",
    "Report": "view",
    "VariantView": "view",
    "build_report": "build",
}

__all__ = [
    "Report",
    "VariantView",
    "MetricRow",
    "build_report",
    "write_site",
    "render_markdown",
    "render_summary",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
