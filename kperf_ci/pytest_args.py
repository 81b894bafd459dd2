"""`kperf run`'s arguments for pytest: the database paths pinned to the working directory, and
``--bench SCRIPT|-m MODULE [ARGS]`` turned into the plugin's options (also used by `kperf ab`)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from kperf_ci.errors import KperfError
from kperf_ci.inputs import load_settings
from kperf_ci.pytest_ini import project_config


def script_of(args: list[str]) -> str | None:
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
    configuration file (:func:`kperf_ci.pytest_ini.project_config`) when the benchmark
    script lies outside it; either one the user named is kept, and a ``-c`` of theirs settles
    both. pytest takes its rootdir and its configuration file from its arguments, so a script
    elsewhere made the script's folder (or a common ancestor) the rootdir, the project's
    [tool.kperf] was never read, and a pytest configuration beside the script set the run's
    options; the project in the working directory decides, as for `kperf run` without --bench."""
    script = script_of(args)
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
