"""A benchmark script run in the pytest process as ``python SCRIPT ARGS`` (or ``python -m
MODULE``) would run it, for :mod:`kperf_ci.plugin.bench_script`: its ``sys.argv``, its folder
first on ``sys.path``, its exit status, and a child it forks ending where the script ends."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any


class ScriptExit(Exception):
    """The script ended with a non-zero exit status."""


def run_script(path: Path, module: str | None, argv: list[str]) -> None:
    """As ``python path argv...`` (or ``python -m module``) would run it."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(path), *argv]
    sys.path.insert(0, os.getcwd() if module else str(path.resolve().parent))
    pid = os.getpid()
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(str(path), run_name="__main__")
    except SystemExit as e:
        _end_forked_child(pid, e.code)
        if e.code not in (None, 0):
            raise ScriptExit(f"{path}: the script exited with status {e.code!r}") from None
    except BaseException:
        if os.getpid() != pid:
            traceback.print_exc()
            _end_forked_child(pid, 1)
        raise
    else:
        _end_forked_child(pid, 0)
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path


def _end_forked_child(pid: int, code: Any) -> None:
    """A child the script forked (``os.fork``) that ends its part of the script ends there, as
    it would under ``python SCRIPT``: it must not go on through the rest of the pytest session
    (a second summary, a second "stored" run)."""
    if os.getpid() == pid:
        return
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # sys.exit("message"), as Python prints it
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream: nothing left to flush
            pass
    os._exit(code or 0)
