"""`kperf run [PYTEST ARGS]`: the main job. pytest with the kperf plugin enabled (the plugin
stores the run and compares it with the baseline), then the reports of that run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from kperf_ci.commands import load_settings
from kperf_ci.commands.report import report_cmd
from kperf_ci.config import ENV_NO_REPORT, env_switch


@click.command(
    "run",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
)
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def run_cmd(pytest_args: tuple[str, ...]) -> None:
    """Run `python -m pytest --kperf PYTEST_ARGS...`, then write the HTML report and the PR-comment
    markdown under [tool.kperf] report (skip with KPERF_NO_REPORT=1). Exits with pytest's code:
    1 when a test failed, a kernel did not compile, or a metric crossed its threshold."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--kperf", *pytest_args], check=False)
    if proc.returncode in (0, 1) and not env_switch(ENV_NO_REPORT):
        _reports()
    raise SystemExit(proc.returncode)


def _reports() -> None:

    settings = load_settings()
    if not Path(settings.db).exists():
        return
    out = Path(settings.report)
    for args in (["-o", str(out)], ["--format", "markdown", "-o", str(out / "comment.md")]):
        try:
            report_cmd.main(args, standalone_mode=False)
        except (click.ClickException, SystemExit) as e:
            if isinstance(e, click.ClickException):
                click.echo(f"kperf run: report not written: {e.format_message()}", err=True)
