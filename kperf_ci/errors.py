"""The user errors of the `kperf` commands and the exit codes they give: 2 for bad input
(:class:`KperfError`), 3 for a bug in kperf-ci (:class:`KperfCrash`); every code and what it
means is :mod:`kperf_ci.exit_codes`.

Stored text that a message quotes (a kernel name, a label) goes through
:func:`kperf_ci.report.safe_text.terminal_safe`; :class:`KperfError` applies it to the whole line.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kperf_ci import store
from kperf_ci.capture.static.repo import ABError
from kperf_ci.config import ENV_TRACEBACK, ConfigError, env_switch
from kperf_ci.exit_codes import EXIT_BAD_INPUT, EXIT_BUG
from kperf_ci.report.safe_text import terminal_safe
from kperf_ci.store import StoreError, same_database
from kperf_ci.store.errors import DB_OPTION

F = TypeVar("F", bound=Callable[..., Any])


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread (:func:`kperf_ci.cli.on_sigterm`): a KeyboardInterrupt,
    so every path that cleans up after a Ctrl-C (a pass killed, the base worktree removed, a
    transaction rolled back) runs for it too; the command then exits 143, not 130."""


class KperfError(click.ClickException):
    """A user error: one line, exit code 2 (1 is reserved for "a regression was found")."""

    exit_code = EXIT_BAD_INPUT

    def format_message(self) -> str:
        # Messages quote paths, run ids and stored names: one line, nothing a terminal obeys.
        return terminal_safe(self.message)


class KperfCrash(click.ClickException):
    """kperf-ci itself failed (an exception nobody expected): exit 3, a short message.

    Never exit 1, which CI would read as a regression in the code under test."""

    exit_code = EXIT_BUG

    def __init__(self, exc: BaseException):
        self.exc = exc
        where = _crash_site(exc)
        super().__init__(
            f"internal error, a bug in kperf-ci: {type(exc).__name__}: {exc}{where} "
            "(set KPERF_TRACEBACK=1 to see the traceback; please report it)"
        )

    def format_message(self) -> str:
        msg = terminal_safe(self.message)
        return msg if len(msg) <= 600 else msg[:600] + "..."

    def show(self, file: Any = None) -> None:
        if env_switch(ENV_TRACEBACK):
            import traceback

            traceback.print_exception(self.exc, file=sys.stderr)
        super().show(file)


def _crash_site(exc: BaseException) -> str:
    """ " at kperf_ci/x.py:12": the innermost frame of kperf-ci, for a bug report in one line."""
    tb, site = exc.__traceback__, ""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if "kperf_ci" in name:
            site = f" at {name[name.rindex('kperf_ci') :]}:{tb.tb_lineno}"
        tb = tb.tb_next
    return site


def as_user_error(e: BaseException) -> KperfError | None:
    """The one-line user error (exit 2) an exception stands for, or None when it is a bug.

    StoreError / ConfigError say file, problem and fix themselves; an OSError that names a file
    (unwritable report directory, a path that is a file where a directory must be) is the
    environment, not a bug."""
    if isinstance(e, StoreError):
        return KperfError(e.naming(_option_naming(e.path)))
    if isinstance(e, (ConfigError, ABError)):  # ABError: a bad revision, a malformed A/B document
        return KperfError(str(e))
    if isinstance(e, OSError) and e.filename is not None:
        what = e.strerror or type(e).__name__
        other = f" -> {e.filename2}" if e.filename2 is not None else ""
        return KperfError(f"{e.filename}{other}: {what}; check the path and its permissions")
    return None


def _option_naming(path: str) -> str:
    """The running command's option that named the database at ``path`` (`kperf merge -o`,
    `kperf baseline update --baseline`), for its fix to name; else the store's own words
    (:data:`kperf_ci.store.errors.DB_OPTION`: --db, or KPERF_DB when [tool.kperf] chose it)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return DB_OPTION
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if isinstance(param, click.Option) and isinstance(value, str) and value:
            if same_database(value, path):
                return max(param.opts, key=len)
    return DB_OPTION


def user_errors(fn: F) -> F:
    """Exit codes for a command: StoreError / ConfigError / OSError on a path become one line
    and exit 2 (:func:`as_user_error`); any other exception is a bug: exit 3, never 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CLICK_EXITS:
            raise  # KperfError, click's usage errors: already one line with their own code
        except Exception as e:  # noqa: BLE001 - the boundary where a crash gets exit 3, not 1
            raise exit_error(e) from (None if as_user_error(e) else e)

    return wrapper  # type: ignore[return-value]


#: Exceptions click turns into an exit status itself (its own errors, ctx.exit, Ctrl-C).
CLICK_EXITS = (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort)


def exit_error(e: Exception) -> click.ClickException:
    """What an exception that escaped a command exits with: 2 and one line for bad input,
    3 for a bug (:class:`KperfCrash`)."""
    return as_user_error(e) or KperfCrash(e)


def check_output_file(path: str | os.PathLike[str], option: str) -> None:
    """A file a command writes at its end, checked at its start (a probe file is created in its
    directory and removed; nothing is left behind): a path found unwritable after minutes of work
    made that work for nothing. KperfError (exit 2, one line) for a directory there, a parent
    that is a file, or no permission (a read-only mount, /proc or /sys)."""
    p = Path(path)
    if p.is_dir():
        raise KperfError(f"{option} {path}: is a directory; give the path of a file")
    parent = next((a for a in p.absolute().parents if a.exists()), Path("/"))
    if not parent.is_dir():
        raise KperfError(f"{option} {path}: {parent} is a file, not a directory; choose another path")
    # a file created and removed in the directory proves it: os.access says yes to root for
    # /proc and /sys, and the write then failed after both passes
    if p.exists() and not os.access(p, os.W_OK):
        raise KperfError(f"{option} {path}: {p} cannot be written (permissions); choose another path")
    why = store.cannot_create_in(parent)
    if why is not None:
        raise KperfError(f"{option} {path}: {why}; choose another path")
