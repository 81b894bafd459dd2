"""`kperf run [PYTEST ARGS]`: pytest with the kperf plugin enabled, in a subprocess."""

from __future__ import annotations

import subprocess
import sys

import click


@click.command(
    "run",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
)
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def run_cmd(pytest_args: tuple[str, ...]) -> None:
    """Run `python -m pytest --kperf PYTEST_ARGS...` and exit with its exit code."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--kperf", *pytest_args], check=False)
    raise SystemExit(proc.returncode)
