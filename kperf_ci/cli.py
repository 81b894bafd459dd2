"""The `kperf` command: compare runs, show them, manage baselines, import, run pytest."""

from __future__ import annotations

from typing import Any

import click

from kperf_ci import __version__
from kperf_ci.commands.ab import ab_cmd
from kperf_ci.commands.agent import agent_group
from kperf_ci.commands.analyze import analyze_cmd
from kperf_ci.commands.baseline import baseline_group
from kperf_ci.commands.compare import compare_cmd
from kperf_ci.commands.gate import gate_cmd
from kperf_ci.commands.github import github_group
from kperf_ci.commands.import_ import import_cmd
from kperf_ci.commands.merge import merge_cmd
from kperf_ci.commands.report import report_cmd
from kperf_ci.commands.run import run_cmd
from kperf_ci.commands.show import show_cmd
from kperf_ci.errors import CLICK_EXITS, exit_error
from kperf_ci.exit_codes import EXIT_INTERRUPTED


class KperfGroup(click.Group):
    """The command group; a command that raises what no command handled exits 2 for bad input
    or 3 for a bug (``kperf_ci.errors.exit_error``), never 1 (1 means "a regression")."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CLICK_EXITS:
            raise
        except Exception as e:  # noqa: BLE001 - commands without @user_errors (run, baseline, ab)
            raise exit_error(e) from e
        except KeyboardInterrupt:
            # click would say "Aborted!" and exit 1, which CI reads as a regression; 130 is the
            # shell's code for a process ended by Ctrl-C (SIGINT)
            click.echo("kperf: interrupted (Ctrl-C)", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


@click.group(cls=KperfGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kperf")
def main() -> None:
    """kperf-ci: continuous performance for Triton kernels."""


for _cmd in (
    compare_cmd,
    show_cmd,
    baseline_group,
    import_cmd,
    run_cmd,
    report_cmd,
    analyze_cmd,
    ab_cmd,
    gate_cmd,
    agent_group,
    github_group,
    merge_cmd,
):
    main.add_command(_cmd)


if __name__ == "__main__":  # pragma: no cover
    main()
