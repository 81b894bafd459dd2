"""`kperf run [PYTEST ARGS]`: the main job. pytest with the kperf plugin enabled (the plugin
stores the run and compares it with the baseline), then the reports of that run.

`kperf run [PYTEST ARGS] --bench SCRIPT|-m MODULE [SCRIPT ARGS]`: an existing benchmark script
instead of tests, each of its do_bench calls a benchmark (kperf_ci/plugin/bench_script.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from kperf_ci.config import ENV_NO_REPORT, env_switch
from kperf_ci.errors import Terminated, exit_error, user_errors
from kperf_ci.exit_codes import EXIT_BAD_INPUT, EXIT_INTERRUPTED
from kperf_ci.inputs import load_settings
from kperf_ci.pytest_args import bench_args, pin_paths, project_rootdir, script_of
from kperf_ci.reporting import show, write_run_report

#: pytest's exit status for a usage error (a bad option or setting, before any test ran)
PYTEST_USAGE_ERROR = 4
PYTEST_NO_TESTS = 5


@click.command(
    "run",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
)
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
@user_errors
def run_cmd(pytest_args: tuple[str, ...]) -> None:
    """Run `python -m pytest --kperf PYTEST_ARGS...`, then write the HTML report and the PR-comment
    markdown under [tool.kperf] report (skip with KPERF_NO_REPORT=1). Exits with pytest's code:
    1 when a test failed, a kernel did not compile, or a metric crossed its threshold; 2 for a
    bad setting, when the code under test ended the process before the run was stored, or when
    the run database could not take the run (it went to a pending file, to merge in); 130 on
    Ctrl-C.

    `--bench SCRIPT [ARGS]` (or `--bench -m MODULE [ARGS]`), last: run that benchmark script
    unmodified instead of tests; each triton.testing.do_bench call becomes a benchmark."""
    args = list(pytest_args)
    if args in (["--help"], ["-h"]):
        click.echo(click.get_current_context().get_help() + "\n\npytest's own options follow.\n")
    bench = next((i for i, a in enumerate(args) if a == "--bench" or a.startswith("--bench=")), len(args))
    db, pinned = pin_paths(args[:bench])
    if bench < len(args):
        args = project_rootdir(bench_args(pinned + args[bench:]))
    else:
        args = pinned
    with tempfile.TemporaryDirectory(prefix="kperf-run-") as tmp:
        status_file = Path(tmp) / "status.json"
        cmd = [sys.executable, "-m", "pytest", "--kperf", f"--kperf-run-status={status_file}", *args]
        rc, pid = _pytest(cmd)
        ended = _read_status(status_file, pid)
    code = exit_code(rc, ended, script=script_of(args))
    if code in (0, 1) and not env_switch(ENV_NO_REPORT):
        _reports(db)
    raise SystemExit(code)


def _pytest(cmd: list[str]) -> tuple[int, int]:
    """(exit status, pid) of pytest run to its end. Ctrl-C reaches pytest too (one process
    group): this process ignores it meanwhile, as a shell does for its foreground job, so that
    pytest can store the run as interrupted (subprocess.run killed it 0.25 s after a Ctrl-C)."""
    proc = subprocess.Popen(cmd)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return proc.wait(), proc.pid
    except Terminated:  # a SIGTERM sent to kperf's pid alone: pytest is told too, not left running
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        signal.signal(signal.SIGINT, previous)


def _read_status(path: Path, pid: int) -> dict[str, Any] | None:
    """What the plugin wrote to ``--kperf-run-status`` (kperf_ci.plugin.finish.write_run_status):
    None when pytest never started its session; only pytest's own process counts (a forked
    child of the code under test shares the option)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("pid") == pid else None


def exit_code(rc: int, ended: dict[str, Any] | None, *, script: str | None) -> int:
    """`kperf run`'s exit status (the README's table for every kperf command) from pytest's and
    how far its session got: 2 for a usage error (pytest says 4), for an empty selection (pytest
    says 5) and for a process that ended before kperf-ci stored the run; 130 for a Ctrl-C
    (pytest says 2); else pytest's."""
    if rc == PYTEST_USAGE_ERROR:
        return EXIT_BAD_INPUT  # pytest printed the one line (ERROR: kperf: ...)
    if ended is not None and ended.get("stage") == "started":
        signalled = rc < 0 and -rc in signal.valid_signals()
        how = f"signal {signal.Signals(-rc).name}" if signalled else f"exit {rc}"
        who = f"{script}: the script" if script else "the tests"
        fix = "let it return or call sys.exit() instead of os._exit() or a signal"
        click.echo(
            f"kperf run: {who} ended the process ({how}) before kperf-ci could store the run: "
            f"nothing stored; {fix}",
            err=True,
        )
        return EXIT_BAD_INPUT
    if ended is not None and ended.get("ctrl_c"):
        return EXIT_INTERRUPTED
    if rc == PYTEST_NO_TESTS:  # outside the README's table: the selection is the input at fault
        click.echo(
            "kperf run: no test ran (pytest's selection is empty: a -k/-m that matches nothing, or "
            "paths without tests); check the test paths and selection options",
            err=True,
        )
        return EXIT_BAD_INPUT
    return rc if rc >= 0 else 128 - rc  # killed after the run was stored: as a shell reports it


def _reports(db: Path) -> None:
    if not db.exists():
        if load_settings().save:
            click.echo(f"kperf run: {db}: no run database was written; reports not written", err=True)
        return
    out = Path(load_settings().report)
    said: set[str] = set()
    for fmt, output in (("html", str(out)), ("markdown", str(out / "comment.md"))):
        try:
            show(write_run_report(load_settings(db=str(db)), fmt=fmt, output=output))
        except SystemExit:
            pass
        except Exception as e:  # noqa: BLE001 - as `kperf report` exits: one line, then the next report
            err = e if isinstance(e, click.ClickException) else exit_error(e)
            # both reports read the one database: a database they cannot read is said once
            if err.format_message() not in said:
                said.add(err.format_message())
                click.echo(f"kperf run: report not written: {err.format_message()}", err=True)
