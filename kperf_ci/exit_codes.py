"""The exit codes of the `kperf` commands, in one place (the README's and configuration.md's
table). Foundation level, importing nothing, so that every stage names a code from here: the
judge's :class:`~kperf_ci.judge.verdict.Regression` (whose ``exit_code`` `kperf compare`,
`kperf ab` and the plugin return), `kperf gate`, `kperf analyze --fail-on-flag`, the plugin's end
of session and the commands' user errors (:mod:`kperf_ci.errors`).

- 0: fine;
- 1 (:data:`EXIT_REGRESSION`): a regression was found (compare, gate, ``analyze --fail-on-flag``),
  and nothing else: CI reads 1 as "the change made things worse";
- 2 (:data:`EXIT_BAD_INPUT`): bad input (a missing or broken database or file, a bad setting, a
  path that cannot be written): one line on stderr naming the file, the problem and the fix;
- 3 (:data:`EXIT_BUG`): kperf-ci crashed. That is a bug in kperf-ci, never a verdict about the
  code under test; a short message on stderr (``KPERF_TRACEBACK=1`` shows the traceback).
- 130 (:data:`EXIT_INTERRUPTED`): stopped by Ctrl-C, as a shell reports SIGINT (no verdict).
- 143 (:data:`EXIT_TERMINATED`): stopped by SIGTERM (what `timeout` and a cancelled CI job send),
  as a shell reports it; cleaned up as for Ctrl-C (no verdict).
"""

from __future__ import annotations

__all__ = ["EXIT_BAD_INPUT", "EXIT_BUG", "EXIT_INTERRUPTED", "EXIT_REGRESSION", "EXIT_TERMINATED"]

EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 2
EXIT_BUG = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
