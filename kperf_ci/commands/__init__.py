"""`kperf` subcommands. Each one opens what it needs, calls one library function, prints.

Exit codes: 0 fine, 1 a threshold was crossed (compare), 2 bad input (a missing or broken
database, a bad setting): one line on stderr, no traceback.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kperf_ci.units import fmt_value  # noqa: F401 - re-exported for the commands

F = TypeVar("F", bound=Callable[..., Any])


class KperfError(click.ClickException):
    """A user error: one line, exit code 2 (1 is reserved for "a regression was found")."""

    exit_code = 2


def user_errors(fn: F) -> F:
    """Turn StoreError / ConfigError into KperfError (one line, exit 2)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from kperf_ci.config import ConfigError
        from kperf_ci.store import StoreError

        try:
            return fn(*args, **kwargs)
        except (StoreError, ConfigError) as e:
            raise KperfError(str(e)) from None

    return wrapper  # type: ignore[return-value]


def load_settings(**cli: Any) -> Any:
    """Settings for the current directory; options given on the command line win."""
    from kperf_ci.config import load_settings as _load

    return _load(Path.cwd(), {k: v for k, v in cli.items() if v is not None})


def console() -> Any:
    """A rich console for stdout; wide when not a terminal, so CI logs do not wrap tables."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console()
    try:
        width = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        width = 0
    return Console(width=max(width, 160), soft_wrap=False)
