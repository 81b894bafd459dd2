"""Where the test suite's CPU goes by process: a census of every Python process the suite starts.

Used by ``benchmarks/suite_cost.py``. For the length of one run, a ``.pth`` file in the running
interpreter's site-packages makes every Python process of that environment that sees
``SUITE_CENSUS_DIR`` set to this census's directory write, at exit, one JSON line: its argv, its
own CPU seconds, the CPU seconds of the children it waited for, and whether it imported torch and
pytest. The ``.pth`` file is removed when the run ends, whatever the outcome; without the variable
it does nothing.

A process's children that are not Python processes of this environment (git, ptxas, cuobjdump,
nvdisasm, Chromium) are counted as the part of its children's CPU that its Python children do not
account for. Processes that never reach ``atexit`` (killed on purpose by a test) are not counted.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path

#: not a KPERF_ name: many tests start their subprocesses with the KPERF_ variables removed
ENV = "SUITE_CENSUS_DIR"

# the logger each process runs at exit (kept to the standard library; a plain string, no template)
_LOGGER = """
import atexit, json, os, resource, sys
def _kperf_census():
    try:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        rec = {"pid": os.getpid(), "ppid": os.getppid(),
               "argv": list(getattr(sys, "orig_argv", sys.argv))[:8],
               "cpu": me.ru_utime + me.ru_stime, "children_cpu": kids.ru_utime + kids.ru_stime,
               "torch": "torch" in sys.modules, "pytest": "_pytest.main" in sys.modules}
        with open(os.path.join(os.environ[ENV], str(os.getpid()) + ".json"), "w") as f:
            json.dump(rec, f)
    except Exception:
        pass
atexit.register(_kperf_census)
""".replace("ENV", repr(ENV))

#: the kinds a process is counted as, in the order the census lists them
KINDS = (
    "pytest session, imports torch",
    "pytest session, no torch",
    "compile worker",
    "kperf command",
    "xdist worker",
    "other Python",
)


def pth_file() -> Path:
    """This process's ``.pth`` file: named by its pid, so a census inside a census (the test of
    this module, run by a counted suite) removes only its own."""
    return Path(sysconfig.get_paths()["purelib"]) / f"zz_kperf_census_{os.getpid()}.pth"


@contextlib.contextmanager
def logging_processes(log_dir: Path) -> Iterator[bool]:
    """While inside, every Python process of this environment started with ``SUITE_CENSUS_DIR`` set
    to ``log_dir`` logs itself at exit. Yields False (and logs nothing) where site-packages cannot
    be written."""
    logger, pth = log_dir / "_census_logger.py", pth_file()
    logger.write_text(_LOGGER)
    # only for this census's directory: a census inside a census (this module's test, in a counted
    # suite run) neither logs into the other's directory nor removes the other's file
    line = (
        f"import os; exec(open({str(logger)!r}).read(), {{}}) "
        f"if os.environ.get({ENV!r}) == {str(log_dir)!r} else None\n"
    )
    try:
        pth.write_text(line)
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        pth.unlink(missing_ok=True)


def kind(rec: dict) -> str:
    argv = " ".join(rec["argv"])
    if "kperf_ci.capture.static._worker" in argv:
        return "compile worker"
    if "exec(eval(sys.stdin.readline()))" in argv:  # execnet's bootstrap: an xdist worker
        return "xdist worker"
    if rec["pytest"]:
        return "pytest session, imports torch" if rec["torch"] else "pytest session, no torch"
    if "kperf_ci" in argv or rec["argv"][1:2] and rec["argv"][1].endswith("/kperf"):
        return "kperf command"
    return "other Python"


def _subcommand(rec: dict) -> str:
    argv = rec["argv"]
    for i, a in enumerate(argv):
        if a in ("kperf_ci", "kperf_ci.cli") or a.endswith("/kperf"):
            rest = [x for x in argv[i + 1 :] if not x.startswith("-")]
            return rest[0] if rest else "(none)"
    return "(none)"


def census(log_dir: Path) -> dict:
    """The logged processes, counted by kind, with the CPU of the non-Python tools each kind
    started, and the kperf commands by subcommand."""
    recs = {}
    for f in log_dir.glob("*.json"):
        with contextlib.suppress(ValueError, OSError):
            rec = json.loads(f.read_text())
            recs[rec["pid"]] = rec
    children = collections.defaultdict(list)
    for rec in recs.values():
        children[rec["ppid"]].append(rec)
    rows = {k: {"kind": k, "processes": 0, "cpu_s": 0.0, "tools_cpu_s": 0.0} for k in KINDS}
    subs: dict[str, dict] = collections.defaultdict(lambda: {"processes": 0, "cpu_s": 0.0})
    for rec in recs.values():
        row = rows[kind(rec)]
        row["processes"] += 1
        row["cpu_s"] += rec["cpu"]
        python_children = sum(c["cpu"] + c["children_cpu"] for c in children[rec["pid"]])
        row["tools_cpu_s"] += max(0.0, rec["children_cpu"] - python_children)
        if row["kind"] == "kperf command":
            s = subs[_subcommand(rec)]
            s["processes"] += 1
            s["cpu_s"] += rec["cpu"]
    return {
        "kinds": [
            {**r, "cpu_s": round(r["cpu_s"], 1), "tools_cpu_s": round(r["tools_cpu_s"], 1)}
            for r in rows.values()
        ],
        "kperf_subcommands": sorted(
            (
                {"subcommand": k, "processes": v["processes"], "cpu_s": round(v["cpu_s"], 1)}
                for k, v in subs.items()
            ),
            key=lambda r: -r["cpu_s"],
        ),
    }


def markdown(c: dict, tree_cpu_s: float) -> list[str]:
    logged = sum(r["cpu_s"] + r["tools_cpu_s"] for r in c["kinds"])
    out = [
        "## Where the CPU goes, by process",
        "",
        "Every Python process the run started, counted at its exit (`benchmarks/_suite_census.py`); "
        "*tools* are the non-Python programs each kind started and waited for (git, ptxas, cuobjdump, "
        f"nvdisasm, Chromium) and any Python process that did not log itself. Together: {logged:.0f} of "
        f"the tree's {tree_cpu_s:.0f} CPU-s.",
        "",
        "| process | count | own CPU s | CPU s each | tools' CPU s |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in c["kinds"]:
        each = r["cpu_s"] / r["processes"] if r["processes"] else 0.0
        out.append(
            f"| {r['kind']} | {r['processes']} | {r['cpu_s']:.1f} | {each:.2f} | {r['tools_cpu_s']:.1f} |"
        )
    out += [
        "",
        "`kperf` commands by subcommand:",
        "",
        "| subcommand | count | CPU s | CPU s each |",
        "|---|---:|---:|---:|",
    ]
    for s in c["kperf_subcommands"]:
        out.append(
            f"| {s['subcommand']} | {s['processes']} | {s['cpu_s']:.1f} | {s['cpu_s'] / s['processes']:.2f} |"
        )
    return out
