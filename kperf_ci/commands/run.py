"""`kperf run [PYTEST ARGS]`: the main job. pytest with the kperf plugin enabled (the plugin
stores the run and compares it with the baseline), then the reports of that run.

`kperf run [PYTEST ARGS] --bench SCRIPT|-m MODULE [SCRIPT ARGS]`: an existing benchmark script
instead of tests, each of its do_bench calls a benchmark (kperf_ci/plugin/bench_script.py)."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from kperf_ci.commands import EXIT_BAD_INPUT, EXIT_INTERRUPTED, KperfError, load_settings, user_errors
from kperf_ci.commands.pytest_ini import project_config
from kperf_ci.commands.report import report_cmd
from kperf_ci.config import ENV_NO_REPORT, env_switch

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
    code = exit_code(rc, ended, script=_script_of(args))
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


def _script_of(args: list[str]) -> str | None:
    """The benchmark script (``--kperf-bench SCRIPT``), for messages."""
    i = next((i for i, a in enumerate(args) if a == "--kperf-bench"), None)
    return args[i + 1] if i is not None and i + 1 < len(args) else None


#: options whose relative paths kperf run resolves from the working directory, as every other kperf
#: command does (pytest's plugin resolves them from pytest's rootdir, which is wherever the tests or
#: the script live: a run stored there was then reported from an older database here)
_PATH_OPTIONS = ("--kperf-db", "--kperf-baseline")


def pin_paths(args: list[str]) -> tuple[Path, list[str]]:
    """(the run database, ``args`` with ``--kperf-db`` / ``--kperf-baseline`` made absolute from
    the working directory, and ``--kperf-db`` added when not given: [tool.kperf] db as
    `kperf show` and `kperf report` read it here)."""
    out: list[str] = []
    db: Path | None = None
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, value = a.partition("=")
        if name in _PATH_OPTIONS and (eq or i + 1 < len(args)):
            if not eq:
                i += 1
                value = args[i]
            path = str(Path(value).expanduser().absolute()) if value else value
            out.append(f"{name}={path}")
            if name == "--kperf-db":
                db = Path(path)
        else:
            out.append(a)
        i += 1
    if db is None:
        db = Path(load_settings().db).expanduser().absolute()
        out = [f"--kperf-db={db}", *out]
    return db, out


def bench_args(args: list[str]) -> list[str]:
    """``[pytest args] --bench SCRIPT [script args]`` as pytest arguments: the script is collected
    as one item (``--kperf-bench``), its own arguments travel as JSON, and its output is shown as
    it prints (``-s``)."""
    i = next(i for i, a in enumerate(args) if a == "--bench" or a.startswith("--bench="))
    before, rest = args[:i], args[i + 1 :]
    if args[i].startswith("--bench="):
        rest = [args[i].split("=", 1)[1], *rest]
    if not rest or not rest[0]:
        raise KperfError("--bench needs a script (--bench benchmark/scripts/bench_x.py) or -m MODULE")
    module = None
    if rest[0] == "-m":
        if len(rest) < 2:
            raise KperfError("--bench -m needs a module name (--bench -m benchmarks.bench_x)")
        module, rest = rest[1], rest[2:]
        script = _module_file(module)
    else:
        script, rest = rest[0], rest[1:]
        if not Path(script).is_file():
            raise KperfError(f"--bench {script}: no such file; give a benchmark script's path or -m MODULE")
        if Path(script).suffix != ".py":
            raise KperfError(f"--bench {script}: not a Python file (.py); give a benchmark script's path")
    out = [*before, "-s", "--kperf-bench", script, "--kperf-bench-argv", json.dumps(rest)]
    if module:
        out += ["--kperf-bench-module", module]
    return [*out, script]


def project_rootdir(args: list[str]) -> list[str]:
    """``args`` with ``--rootdir`` set to the working directory and ``-c`` to the project's pytest
    configuration file (:func:`kperf_ci.commands.pytest_ini.project_config`) when the benchmark
    script lies outside it; either one the user named is kept, and a ``-c`` of theirs settles
    both. pytest takes its rootdir and its configuration file from its arguments, so a script
    elsewhere made the script's folder (or a common ancestor) the rootdir, the project's
    [tool.kperf] was never read, and a pytest configuration beside the script set the run's
    options; the project in the working directory decides, as for `kperf run` without --bench."""
    script = _script_of(args)
    if script is None:
        return args
    here = Path.cwd().resolve()
    if Path(script).resolve().is_relative_to(here):
        return args  # pytest finds the project from the script's folder upward
    if any(a.startswith("--config-file") or (a.startswith("-c") and not a.startswith("--")) for a in args):
        return args  # pytest roots the run at the user's configuration file
    rootdir = [] if any(a.startswith("--rootdir") for a in args) else [f"--rootdir={here}"]
    return [*rootdir, "-c", project_config(here), *args]


def _module_file(module: str) -> str:
    sys.path.insert(0, str(Path.cwd()))  # as `python -m` looks it up
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        raise KperfError(f"--bench -m {module}: cannot be found ({e}); check the module name") from None
    finally:
        sys.path.pop(0)
    origin = getattr(spec, "origin", None) if spec is not None else None
    if not origin or not origin.endswith(".py"):
        raise KperfError(f"--bench -m {module}: no such Python module here; check the name and the directory")
    try:  # relative where it can be: kperf ab finds the same module in the base tree
        return Path(origin).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return origin


def _reports(db: Path) -> None:
    if not db.exists():
        if load_settings().save:
            click.echo(f"kperf run: {db}: no run database was written; reports not written", err=True)
        return
    out = Path(load_settings().report)
    said: set[str] = set()
    for args in (
        ["--db", str(db), "-o", str(out)],
        ["--db", str(db), "--format", "markdown", "-o", str(out / "comment.md")],
    ):
        try:
            report_cmd.main(args, standalone_mode=False)
        except (click.ClickException, SystemExit) as e:
            # both reports read the one database: a database they cannot read is said once
            if isinstance(e, click.ClickException) and e.format_message() not in said:
                said.add(e.format_message())
                click.echo(f"kperf run: report not written: {e.format_message()}", err=True)
