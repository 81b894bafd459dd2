"""The one answer to "is this a regression?" (issue 38): :func:`regression`.

Two things are judged whole, and each has one answer here that every consumer reads instead of
deciding again from the rows:

* an A/B document (`kperf ab`'s, :mod:`kperf_ci.prcheck.document`, as stored or as the
  ``ABReport`` about to be stored): a regression when a Triton kernel is slower with confidence,
  or a launch not timed has a static regression;
* a :class:`~kperf_ci.judge.comparison.Comparison` of two runs (`kperf compare`, `kperf report`,
  the plugin): a regression when a metric is over its threshold (or a build newly fails), or a
  baseline variant is missing although its test ran (unless ``allow_removed``).

The exit code (`kperf ab`, `kperf compare`, the plugin), the terminal, the PR comment, the commit
status and label (`kperf github`) and the HTML pages all read the :class:`Regression` it returns.
A row's own verdict is :func:`is_regression` (a timing verdict: "slower" only); `kperf gate`
asks its own question (has the run left its history's level?) and reads that for its rows.

Nothing else in the package compares a verdict with "slower" or looks up a "slower" count:
``tests/architecture`` checks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kperf_ci.exit_codes import EXIT_REGRESSION

from .group import kernel_groups, kernel_site, static_groups

if TYPE_CHECKING:  # the comparison module reads this one for its exit code
    from .comparison import Comparison

__all__ = ["Regression", "document_kernels", "document_static_kernels", "is_regression", "regression"]


def is_regression(verdict: str | None) -> bool:
    """Whether a row's timing verdict fails a check: "slower" only. "inconclusive" is not a
    regression: the interval straddles the threshold and more samples settle it."""
    return verdict == "slower"


@dataclass(frozen=True)
class Regression:
    """What fails, counted in kernels (:mod:`kperf_ci.judge.group`'s unit). True when anything
    does; the exit code, a failing commit status, the label and a red headline or banner follow
    from that and from nothing else."""

    #: A/B: the Triton kernels (launch sites) slower with confidence
    slower: tuple[str, ...] = ()
    #: A/B: the Triton kernels (launch sites) whose untimed launches regress statically
    static: tuple[str, ...] = ()
    #: comparison: kernels with a metric over its threshold or a new build error
    regressed: int = 0
    #: comparison: kernels missing from this run although their test ran (not allowed)
    removed: int = 0

    def __bool__(self) -> bool:
        return bool(self.slower or self.static or self.regressed or self.removed)

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self else 0


def document_kernels(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An A/B document's timed launches per Triton kernel (:func:`kernel_groups`): grouped again
    from its timed rows, so that a document stored before launches had their identity reads as
    today's; a document that holds only ``kernels`` (a slimmed one) is read as it is."""
    timed = doc.get("timed")
    kernels = kernel_groups(timed) if isinstance(timed, list) and timed else doc.get("kernels")
    return list(kernels) if isinstance(kernels, list) else []


def document_static_kernels(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An A/B document's static regressions per Triton kernel and arch (stored since document
    version 2; grouped from the rows for an older one)."""
    groups = doc.get("static_kernels")
    return list(groups) if isinstance(groups, list) else static_groups(doc.get("static_regressions") or [])


def _slower_sites(doc: Mapping[str, Any]) -> tuple[str, ...]:
    """The kernels of the slower timed rows, by the rows themselves (a kernel's verdict is its
    worst launch's, so "a kernel is slower" is "one of its launches is"): no grouping needed,
    and the same sites :func:`document_kernels` groups by; a slimmed document's ``kernels``."""
    timed = doc.get("timed")
    if isinstance(timed, list) and timed:
        slower = [kernel_site(t) for t in timed if isinstance(t, dict) and is_regression(t.get("verdict"))]
    else:
        kernels = doc.get("kernels")
        slower = [
            str(k.get("site") or "")
            for k in (kernels if isinstance(kernels, list) else [])
            if isinstance(k, dict) and is_regression(k.get("verdict"))
        ]
    return tuple(dict.fromkeys(slower))


def _of_document(doc: Mapping[str, Any]) -> Regression:
    static = tuple(dict.fromkeys(str(g.get("site") or "") for g in document_static_kernels(doc)))
    return Regression(slower=_slower_sites(doc), static=static)


def _of_comparison(comparison: Comparison) -> Regression:
    return Regression(regressed=comparison.regressed_kernels, removed=comparison.removed_kernels)


def regression(judged: Mapping[str, Any] | Comparison) -> Regression:
    """The one answer to "is this a regression?" for an A/B document (a mapping: the stored
    document, or the rows of one about to be stored) or a Comparison of two runs."""
    if isinstance(judged, Mapping):
        return _of_document(judged)
    return _of_comparison(judged)
