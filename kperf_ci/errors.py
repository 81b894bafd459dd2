"""`kperf` subcommands. Each one opens what it needs, calls one library function, prints.

Exit codes, for every command:

- 0: fine;
- 1 (:data:`EXIT_REGRESSION`): a regression was found (compare, gate, ``analyze --fail-on-flag``),
  and nothing else: CI reads 1 as "the change made things worse";
- 2 (:data:`EXIT_BAD_INPUT`): bad input (a missing or broken database or file, a bad setting, a
  path that cannot be written): one line on stderr naming the file, the problem and the fix;
- 3 (:data:`EXIT_BUG`): kperf-ci crashed. That is a bug in kperf-ci, never a verdict about the
  code under test; a short message on stderr (``KPERF_TRACEBACK=1`` shows the traceback).
- 130 (:data:`EXIT_INTERRUPTED`): stopped by Ctrl-C, as a shell reports SIGINT (no verdict).

Stored text that a message quotes (a kernel name, a label) goes through
:func:`kperf_ci.report.safe_text.terminal_safe`; :class:`KperfError` applies it to the whole line.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from kperf_ci import config, store
from kperf_ci.capture.static.repo import ABError
from kperf_ci.config import ENV_TRACEBACK, ConfigError, env_switch
from kperf_ci.hardware import MAX_SMS
from kperf_ci.report.safe_text import terminal_safe
from kperf_ci.report.terminal import console  # noqa: F401 - re-exported for the commands
from kperf_ci.store import StoreError, same_database
from kperf_ci.store.errors import DB_OPTION
from kperf_ci.units import fmt_value  # noqa: F401 - re-exported for the commands

F = TypeVar("F", bound=Callable[..., Any])

EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 2
EXIT_BUG = 3
EXIT_INTERRUPTED = 130


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


def load_settings(**cli: Any) -> Any:
    """Settings for the current directory; options given on the command line win."""
    return config.load_settings(Path.cwd(), {k: v for k, v in cli.items() if v is not None})


# --------------------------------------------------------------------------- reading runs

#: What decoding a stored run raises when a row holds something no kperf-ci wrote (JSON that does
#: not parse or has the wrong shape, a blob that is not zlib data).
_DECODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, RecursionError)


def _malformed(path: Any, what: str) -> KperfError:
    return KperfError(
        f"{path}: holds a malformed run ({what}); restore the file from git, or delete the run "
        "and record it again"
    )


@contextlib.contextmanager
def bulk_objects() -> Iterator[None]:
    """Around code that makes millions of objects that live on (a run's variants, metrics,
    changes): no cyclic garbage collection meanwhile, and what was made is frozen out of later
    collections. Each full collection walks every live object, so with a 100,000-variant run in
    memory the collector alone took a third of `kperf compare`'s CPU time. Commands only: they
    are short-lived processes that make no cycles worth collecting."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def read_run(path: str | os.PathLike[str], run_id: str | None = None, **kw: Any) -> Any:
    """``store.load_run``, for a command: a run whose rows do not decode, or whose fields have
    types no kperf-ci writes (SQLite keeps whatever a crafted file put in a column), is bad
    input (exit 2, one line naming the file), not a crash in whatever code reads it next."""
    import zlib

    try:
        with bulk_objects():
            record = store.load_run(path, run_id, **kw)
    except (*_DECODE_ERRORS, zlib.error, store.OperationalError) as e:  # a table dropped by hand
        raise _malformed(path, f"{type(e).__name__}: {str(e)[:120]}") from None
    try:
        typed = store.rows_typed(path, record.info.run_id)
    except Exception:  # any doubt: every row is checked below
        typed = False
    problem = run_problem(record, rows_typed=typed)
    if problem:
        raise _malformed(path, problem)
    return record


def read_runs(path: str | os.PathLike[str]) -> list[Any]:
    """``store.list_runs`` with :func:`read_run`'s treatment of rows that do not decode."""
    try:
        infos = store.list_runs(path)
    except _DECODE_ERRORS as e:
        raise _malformed(path, f"{type(e).__name__}: {str(e)[:120]}") from None
    for info in infos:
        problem = _info_problem(info)
        if problem:
            raise _malformed(path, problem)
    return infos


def _str(x: Any, optional: bool = False) -> bool:
    return isinstance(x, str) or (optional and x is None)


def _num(x: Any) -> bool:
    """A finite number: an Inf metric would judge every comparison with it (inf -> x is "better")."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _info_problem(info: Any) -> str | None:
    fp = info.fingerprint
    if not (_str(info.run_id) and _str(info.started_at) and _str(info.mode)):
        return f"run {info.run_id!r}: id, start time and mode must be text"
    for name in ("git_sha", "git_branch", "label"):
        if not _str(getattr(info, name), optional=True):
            return f"run {info.run_id!r}: {name} is not text"
    for name in ("gpu", "driver", "cuda", "torch"):
        if not _str(getattr(fp, name), optional=True):
            return f"run {info.run_id!r}: fingerprint.{name} is not text"
    for name in ("cpu", "triton", "python", "host_hash"):
        if not _str(getattr(fp, name)):
            return f"run {info.run_id!r}: fingerprint.{name} is not text"
    if not (fp.sm_count is None or (isinstance(fp.sm_count, int) and 0 < fp.sm_count <= MAX_SMS)):
        return f"run {info.run_id!r}: fingerprint.sm_count is not an SM count (1..{MAX_SMS})"
    if not isinstance(fp.extra, dict):
        return f"run {info.run_id!r}: fingerprint.extra is not an object"
    return None


def run_problem(record: Any, *, rows_typed: bool = False) -> str | None:
    """Why a loaded run cannot be a run kperf-ci wrote (a field of the wrong type), or None.

    ``rows_typed``: the database said (:func:`kperf_ci.store.rows_typed`) that every metric and
    sample row has the types kperf-ci writes, so those are not checked one by one here."""
    problem = _info_problem(record.info)
    if problem:
        return problem
    for r in record.results:
        k = r.key
        if not all(_str(x) for x in (k.kernel, k.arch, k.spec, k.config, k.test, k.source)):
            return f"a variant's kernel, arch, spec, config, test or source is not text ({k.kernel!r})"
        what = f"variant {k.kernel!r}"
        for m in () if rows_typed else r.metrics:
            if not (_str(m.name) and _str(m.unit) and _str(m.kind) and _str(m.better)):
                return f"{what}: metric {m.name!r} has a name, unit, kind or direction that is not text"
            if not _num(m.value):
                return f"{what}: metric {m.name!r} is {m.value!r}, not a finite number"
        if not rows_typed and not all(_num(x) for x in r.samples):
            return f"{what}: a timing sample is not a finite number"
        if not (isinstance(r.tags, list) and all(_str(t) for t in r.tags)):
            return f"{what}: tags are not a list of text"
        if not isinstance(r.thresholds, dict) or not all(
            v is None or _num(v) or (isinstance(v, list) and all(_str(x) for x in v))
            for v in r.thresholds.values()
        ):
            return f"{what}: thresholds are not an object of numbers (and a list of metric names)"
        if not (_str(r.sass_hash, optional=True) and _str(r.error, optional=True)):
            return f"{what}: sass hash or error is not text"
    return None
