"""The `kperf` command: compare runs, show them, manage baselines, import, run pytest."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import click

from kperf_ci import __version__
from kperf_ci.errors import CLICK_EXITS, Terminated, exit_error
from kperf_ci.exit_codes import EXIT_INTERRUPTED, EXIT_TERMINATED

BLAS_THREADS = "OPENBLAS_NUM_THREADS"

#: each command's module, imported when the command is run (or listed by `kperf --help`): every
#: `kperf` process imported all twelve, kperf ab's pipeline and github3 included, whatever it ran
COMMANDS = {
    "compare": "kperf_ci.commands.compare:compare_cmd",
    "show": "kperf_ci.commands.show:show_cmd",
    "baseline": "kperf_ci.commands.baseline:baseline_group",
    "import": "kperf_ci.commands.import_:import_cmd",
    "run": "kperf_ci.commands.run:run_cmd",
    "report": "kperf_ci.commands.report:report_cmd",
    "analyze": "kperf_ci.commands.analyze:analyze_cmd",
    "ab": "kperf_ci.commands.ab:ab_cmd",
    "gate": "kperf_ci.commands.gate:gate_cmd",
    "agent": "kperf_ci.commands.agent:agent_group",
    "github": "kperf_ci.commands.github:github_group",
    "merge": "kperf_ci.commands.merge:merge_cmd",
}


class KperfGroup(click.Group):
    """The command group; a command that raises what no command handled exits 2 for bad input
    or 3 for a bug (``kperf_ci.errors.exit_error``), never 1 (1 means "a regression")."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)

    def invoke(self, ctx: click.Context) -> Any:
        numpy_with_one_blas_thread()  # before the command's module is imported
        try:
            with on_sigterm():
                return super().invoke(ctx)
        except CLICK_EXITS:
            raise
        except Exception as e:  # noqa: BLE001 - commands without @user_errors (run, baseline, ab)
            raise exit_error(e) from e
        except Terminated:
            click.echo("kperf: terminated (SIGTERM)", err=True)
            raise click.exceptions.Exit(EXIT_TERMINATED) from None
        except KeyboardInterrupt:
            # click would say "Aborted!" and exit 1, which CI reads as a regression; 130 is the
            # shell's code for a process ended by Ctrl-C (SIGINT)
            click.echo("kperf: interrupted (Ctrl-C)", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


def numpy_with_one_blas_thread() -> None:
    """Import numpy with OpenBLAS limited to one thread, unless the user set its thread count.
    kperf's own numbers (medians, intervals, timelines) never need a BLAS thread pool, and
    starting one cost each `kperf` process 0.15 s of CPU (0.34 against 0.19 s for the import on
    a 2-core runner), where a CI job runs kperf many times. The variable is read when OpenBLAS
    loads and removed again at once, so the tests and passes a command starts inherit the
    environment the user gave it."""
    if BLAS_THREADS in os.environ:
        return
    os.environ[BLAS_THREADS] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ[BLAS_THREADS]


@contextlib.contextmanager
def on_sigterm() -> Iterator[None]:
    """SIGTERM raises :class:`~kperf_ci.errors.Terminated` while a command runs. Its default
    action ends the process at once, so `timeout` or a cancelled CI job left `kperf ab`'s base
    worktree checked out and its passes running; raised instead, the cleanup that a Ctrl-C gets
    runs. The previous handler comes back afterwards (a command invoked inside another program,
    as the tests do, leaves it as it was)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def _raise(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.group(cls=KperfGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kperf")
def main() -> None:
    """kperf-ci: continuous performance for Triton kernels."""


if __name__ == "__main__":  # pragma: no cover
    main()
