"""Issue 14, security and exit codes: a database or an imported file is data.

Nothing in one is opened as a path, run, or rendered as markup (Rich, terminal escapes,
markdown links); bad input is one line and exit 2; a crash is exit 3, never 1 (a regression).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import uuid
import zlib
from pathlib import Path

import cmarkgfm
import pytest
from click.testing import CliRunner
from cmarkgfm.cmark import Options
from conftest import without

from kperf_ci import store
from kperf_ci.cli import main
from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult
from kperf_ci.report.safe_text import markdown_safe, rich_safe, terminal_safe

KPERF = [sys.executable, "-m", "kperf_ci.cli"]
REPO = Path(__file__).parent.parent

#: Kernel names that were trouble: Rich markup that crashed or linked, names that displayed
#: alike, a terminal title escape, a bidi override, a bare URL and a markdown image.
HOSTILE_NAMES = [
    "vector_add[old]",
    "vector_add[new]",
    "bad[/]",
    "[link=https://evil.example]click[/link]",
    "title\x1b]0;PWNED\x07",
    "rev\u202eelif",
    "https://evil.example/x",
    "![img](https://evil.example/i.png)<img src=x>",
]


def _env(**extra: str) -> dict[str, str]:
    env = without("PYTEST_", "KPERF_")
    return {**env, "PYTHONPATH": str(REPO), **extra}


def _info(run_id: str, started: str = "2026-01-01T00:00:00+00:00", **kw) -> RunInfo:
    fp = Fingerprint(cpu="cpu", triton="3.6.0", python="3.11", host_hash="x", **kw)
    return RunInfo(run_id, started, "static", fp, git_sha="deadbeef", git_branch="main")


def _variant(name: str, regs: float, sass_hash: str, **artifacts: str) -> VariantResult:
    return VariantResult(
        VariantKey(name, "sm_90", "x:*fp32", "num_warps=4", test=f"t.py::{name}"),
        metrics=[Metric("registers", regs, "count"), Metric("num_warps", 4, "count")],
        sass_hash=sass_hash,
        artifacts=dict(artifacts),
    )


def _all_output(result: subprocess.CompletedProcess, out_dir: Path | None) -> str:
    texts = [result.stdout, result.stderr]
    if out_dir is not None and out_dir.exists():
        texts += [p.read_text("utf-8", "replace") for p in out_dir.rglob("*") if p.is_file()]
    return "\n".join(texts)


# --------------------------------------------------------------------------- crafted database


def test_crafted_baseline_reads_no_local_file_and_no_environment(tmp_path):
    """The reported attack: blobs holding paths of a secret file and of /proc/self/environ."""
    file_canary = f"FILE-CANARY-{uuid.uuid4().hex}"
    env_canary = f"ENV-CANARY-{uuid.uuid4().hex}"
    secret = tmp_path / "secret.txt"
    secret.write_text(f"root:x:0:0:{file_canary}\n")
    paths = {"sass": str(secret), "ptx": str(secret), "trace": "/proc/self/environ"}
    store.save_run(tmp_path / "evil.db", _info("base"), [_variant("k", 32, "aaa", **paths)])
    store.save_run(
        tmp_path / "run.db",
        _info("cur", "2026-01-02T00:00:00+00:00"),
        [_variant("k", 40, "bbb", sass="FFMA R1, R2, R3 ;", ptx="fma.rn.f32", timeline=str(secret))],
    )
    env = _env(GITHUB_TOKEN=env_canary)
    commands = [
        ("report", "--db", "run.db", "--baseline", "evil.db", "-o", "rep"),
        ("report", "--db", "run.db", "--baseline", "evil.db", "--format", "markdown", "-o", "md/"),
        ("report", "--db", "run.db", "--baseline", "evil.db", "--format", "summary"),
        ("analyze", "--db", "evil.db"),
        ("analyze", "--db", "run.db"),
        ("show", "--db", "evil.db", "--run", "base"),
        ("compare", "--db", "run.db", "--baseline", "evil.db"),
    ]
    for args in commands:
        r = subprocess.run(
            [*KPERF, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
        )
        assert r.returncode in (0, 1), (args, r.stdout, r.stderr)
        everything = _all_output(r, tmp_path / "rep") + _all_output(r, tmp_path / "md")
        assert file_canary not in everything, args
        assert env_canary not in everything, args
    # the report was written (so the assertions above looked at real output) and the SASS diff
    # shows the stored value as text
    page = next((tmp_path / "rep" / "k").glob("*.html")).read_text()
    assert str(secret) in page and "FFMA R1, R2, R3" in page
    assert not list((tmp_path / "rep" / "k").glob("*.trace.json"))  # nothing copied from /proc
    assert (tmp_path / "md" / "comment.md").is_file()


# --------------------------------------------------------------------------- terminal


def _hostile_pair(tmp_path: Path) -> tuple[Path, Path]:
    base, cur = tmp_path / "base.db", tmp_path / "run.db"
    store.save_run(base, _info("base"), [_variant(n, 32, "a") for n in HOSTILE_NAMES])
    info = _info("cur", "2026-01-02T00:00:00+00:00")
    info = RunInfo(
        **{**info.__dict__, "label": "lab[/]\x1b]0;LABEL\x07", "git_branch": "[link=https://e.x]b[/link]"}
    )
    store.save_run(cur, info, [_variant(n, 40, "a") for n in HOSTILE_NAMES])
    return base, cur


@pytest.mark.parametrize(
    "args, shown",
    [
        (("show", "--db", "run.db", "--run", "cur"), ["\\x1b]0;PWNED\\x07", "vector_add[old]", "bad[/]"]),
        (("show", "--db", "run.db"), ["lab[/]\\x1b]0;LABEL\\x07", "[link=https://e.x]b[/link]"]),
        (("compare", "--db", "run.db", "--baseline", "base.db"), ["\\x1b]0;PWNED\\x07", "vector_add[new]"]),
        (("analyze", "--db", "run.db"), ["\\x1b]0;PWNED\\x07", "\\u202e", "bad[/]"]),
        (("report", "--db", "run.db", "--baseline", "base.db", "--format", "markdown"), ["PWNED"]),
    ],
)
def test_hostile_kernel_names_reach_the_terminal_as_text(tmp_path, args, shown):
    """As a subprocess with FORCE_COLOR, so Rich emits escape codes for whatever it takes for
    markup: a [link=...] would come out as an OSC 8 hyperlink, a stored title escape as OSC 0."""
    _hostile_pair(tmp_path)
    r = subprocess.run(
        [*KPERF, *args], capture_output=True, text=True, cwd=tmp_path, env=_env(FORCE_COLOR="1"), timeout=120
    )
    # compare finds the real +25% registers regressions: 1; everything else 0; never a crash
    assert r.returncode == (1 if args[0] == "compare" else 0), r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    out = r.stdout + r.stderr
    assert "\x1b]" not in out  # no OSC sequence: neither a hyperlink nor a window title
    assert "\x07" not in out and "\u202e" not in out
    plain = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout)  # colours off: the text as a reader sees it
    for text in shown:
        assert text in plain, (text, plain)
    if args[0] == "compare":
        assert "[link=https://evil.example]click[/link]" in plain


def test_terminal_helpers():
    assert terminal_safe("a\x1b[31mb\r\nc\u202e") == "a\\x1b[31mb\\x0d\\x0ac\\u202e"
    assert terminal_safe(None) == "" and terminal_safe("plain ü 名前") == "plain ü 名前"
    assert terminal_safe("\x85") == "\\x85"  # C1 control (NEL)
    assert rich_safe("v[old] [/] [link=x]") == "v\\[old] \\[/] \\[link=x]"
    from rich.console import Console

    con = Console(width=200, record=True, force_terminal=True, color_system=None)
    con.print(rich_safe("x[/]y [bold]z[/bold]"))  # the raw text would raise MarkupError
    assert con.export_text().strip() == "x[/]y [bold]z[/bold]"


def test_pytest_summary_prints_names_safely():
    from kperf_ci.analysis.findings import Finding
    from kperf_ci.plugin.finish import write_findings

    lines: list[str] = []

    class Writer:
        def write_line(self, line: str, **_markup: bool) -> None:
            lines.append(line)

    f = Finding("sm_utilization", 0.5, "fraction", True, "why\x1b[2J", suggestion="try\x1b]0;t\x07")
    write_findings([("t.py::k", "k\x1b]0;PWNED\x07 sm_90", f)], Writer())
    text = "\n".join(lines)
    assert "\x1b" not in text and "\x07" not in text
    assert "k\\x1b]0;PWNED\\x07 sm_90" in text and "try\\x1b]0;t\\x07" in text


# --------------------------------------------------------------------------- markdown


def _gfm(text: str) -> str:
    """HTML as GitHub renders a comment: cmark-gfm with its extensions (autolink, tables)."""
    return cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)


def test_pr_comment_has_no_link_image_or_html_from_stored_names(tmp_path):
    _hostile_pair(tmp_path)
    for fmt in ("markdown", "summary"):
        r = CliRunner().invoke(
            main,
            [
                "report",
                "--db",
                str(tmp_path / "run.db"),
                "--baseline",
                str(tmp_path / "base.db"),
                "--format",
                fmt,
            ],
        )
        assert r.exit_code == 0, r.output
        html = _gfm(r.stdout)
        assert "evil.example" in html  # the names are there, as text
        assert "<a " not in html and "<img" not in html and "href" not in html
        assert "\x1b" not in r.stdout and "\\x1b]0;PWNED" in html


@pytest.mark.parametrize(
    "raw",
    [
        "https://evil.example/path?q=1",
        "www.evil.example",
        "mail me: someone@evil.example",
        "<https://evil.example>",
        "[x](https://evil.example)",
        "![x](https://evil.example/i.png)",
        "<img src=x onerror=alert(1)>",
        "&lt;b&gt; entity",
        "ftp://evil.example/f",
    ],
)
def test_markdown_safe_renders_literally_in_gfm(raw):
    html = _gfm(f"| a |\n|---|\n| {markdown_safe(raw)} |\n")
    assert "<a " not in html and "<img" not in html and "href" not in html
    cell = html.split("<td>")[1].split("</td>")[0]
    import html as _html

    # what GitHub shows is the input itself (less the invisible word joiners)
    assert _html.unescape(cell).replace("\u2060", "") == raw


# --------------------------------------------------------------------------- host hash


def test_host_hash_is_keyed_per_install(tmp_path, monkeypatch):
    import hashlib

    from kperf_ci import fingerprint

    monkeypatch.delenv("KPERF_HOST_SALT", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    fingerprint._install_salt.cache_clear()
    h = fingerprint.host_hash("vm")
    assert h != hashlib.sha256(b"vm").hexdigest()[:12]  # no longer a dictionary lookup away
    key_file = tmp_path / "cfg" / "kperf" / "host_salt"
    assert key_file.stat().st_mode & 0o077 == 0  # only the owner may read the key
    fingerprint._install_salt.cache_clear()
    assert fingerprint.host_hash("vm") == h  # same host, same install: same hash
    assert fingerprint.host_hash("vm2") != h
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "other-install"))
    assert fingerprint.host_hash("vm") != h
    monkeypatch.setenv("KPERF_HOST_SALT", "a shared CI secret")
    shared = fingerprint.host_hash("vm")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert fingerprint.host_hash("vm") == shared != h  # the variable wins over the install key
    fingerprint._install_salt.cache_clear()


# --------------------------------------------------------------------------- exit codes


def _one_line_error(r, *needles: str) -> None:
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    for n in needles:
        assert n in lines[0], (n, lines[0])


def invoke(*args: str, **kw):
    return CliRunner().invoke(main, list(args), catch_exceptions=False, **kw)


@pytest.fixture
def run_db(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):
        if key.startswith("KPERF_"):
            monkeypatch.delenv(key)
    store.save_run(tmp_path / "run.db", _info("cur"), [_variant("k", 40, "a")])
    return tmp_path / "run.db"


def test_report_into_a_file_or_unwritable_dir_is_one_line(run_db, tmp_path, monkeypatch):
    (tmp_path / "afile").write_text("x")
    _one_line_error(invoke("report", "--db", "run.db", "-o", "afile"), "afile", "is a file")
    _one_line_error(invoke("report", "--db", "run.db", "-o", "afile/sub"), "afile", "not a directory")

    def denied(self, *a, **kw):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", denied)  # root ignores chmod; this is what EACCES looks like
    _one_line_error(invoke("report", "--db", "run.db", "-o", "locked"), "locked", "Permission denied")
    r = invoke("report", "--db", "run.db", "--format", "markdown", "-o", "locked/c.md")
    _one_line_error(r, "locked", "Permission denied")


def test_markdown_into_a_missing_directory_writes_comment_md(run_db, tmp_path):
    r = invoke("report", "--db", "run.db", "--format", "markdown", "-o", "out/")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "comment.md").read_text().startswith("<!-- kperf-report -->")
    r = invoke("report", "--db", "run.db", "--format", "summary", "-o", "out")  # exists: a directory
    assert r.exit_code == 0 and (tmp_path / "out" / "summary.md").is_file()


BAD_BENCH_JSON = {
    "list.json": ("[1, 2]", "no 'benchmarks' list"),
    "item.json": ('{"benchmarks": [1]}', "benchmarks[0] is a number"),
    "nan.json": ('{"benchmarks": [{"name": "a", "stats": {"median": NaN}}]}', "stats.median"),
    "inf.json": ('{"benchmarks": [{"name": "a", "stats": {"mean": Infinity}}]}', "stats.mean"),
    "big.json": ('{"benchmarks": [{"name": "a", "stats": {"min": 1' + "0" * 400 + "}}]}", "stats.min"),
    "str.json": ('{"benchmarks": [{"name": "a", "stats": {"max": "1"}}]}', "stats.max"),
    "data.json": ('{"benchmarks": [{"name": "a", "stats": {"data": [1, "x"]}}]}', "stats.data"),
    "stats.json": ('{"benchmarks": [{"name": "a", "stats": "fast"}]}', "'stats' is a string"),
    "machine.json": ('{"machine_info": [], "benchmarks": []}', "'machine_info' is a list"),
    "deep.json": ("[" * 100_000, "nested too deeply"),
    "binary.json": (None, "not a readable JSON file"),
}


@pytest.mark.parametrize("name", sorted(BAD_BENCH_JSON))
def test_import_of_malformed_json_is_one_line_exit_2(run_db, tmp_path, name):
    text, needle = BAD_BENCH_JSON[name]
    if text is None:
        (tmp_path / name).write_bytes(b"\xff\xfe\x00garbage")
    else:
        (tmp_path / name).write_text(text)
    _one_line_error(invoke("import", name, "--db", "imp.db"), name, needle)
    assert not (tmp_path / "imp.db").exists()  # nothing half-written


def test_import_keeps_benchmarks_with_the_same_name(run_db, tmp_path):
    doc = {
        "benchmarks": [
            {"name": "t[a]", "fullname": "t.py::t[a]", "stats": {"median": 0.001}},
            {"name": "t[a]", "fullname": "t.py::t[a]", "stats": {"median": 0.002}},
            {"name": "t[b]", "fullname": "t.py::t[b]", "stats": {"median": 0.003}},
            {"name": "t[a]", "fullname": "t.py::t[a]", "stats": {"median": 0.004}},
        ]
    }
    (tmp_path / "b.json").write_text(json.dumps(doc))
    r = CliRunner().invoke(main, ["import", "b.json", "--db", "imp.db"])
    assert r.exit_code == 0 and "imported 4 benchmarks" in r.stdout, r.output
    assert "occurrence 2 stored as 't.py::t[a] #2'" in r.stderr
    assert "occurrence 3 stored as 't.py::t[a] #3'" in r.stderr
    rec = store.load_run(tmp_path / "imp.db")
    by_spec = {x.key.spec: x.metric("time.median").value for x in rec.results}
    assert by_spec == pytest.approx(
        {"t.py::t[a]": 1, "t.py::t[a] #2": 2, "t.py::t[b]": 3, "t.py::t[a] #3": 4}
    )
    # deterministic: a second import of the same file matches the same variants
    invoke("import", "b.json", "--db", "imp2.db")
    assert invoke("compare", "--db", "imp2.db", "--baseline", "imp.db").exit_code == 0


@pytest.mark.parametrize(
    "content, needle",
    [
        ("[1, 2, 3]", "not a Proton Chrome trace"),
        ('{"traceEvents": 5}', "not a Proton Chrome trace"),
        ('{"format": "kperf-timeline", "records": "x"}', "not a Proton Chrome trace"),
        ("[" * 100_000, "not a Proton Chrome trace"),
        ("{", "not a Proton Chrome trace"),
        ("1", "JSON int"),  # was open(1): read and closed stdout's file descriptor
    ],
)
def test_analyze_trace_garbage_names_the_file(tmp_path, content, needle):
    p = tmp_path / "garbage-trace.json"
    p.write_text(content)
    _one_line_error(invoke("analyze", "--trace", str(p)), "garbage-trace.json", needle)


@pytest.mark.parametrize("content", ["[1, 2, 3]", '{"a": 1}', "[]", "{", '"text"', "[" * 100_000])
def test_analyze_records_garbage_is_exit_2_not_silence(tmp_path, content):
    p = tmp_path / "garbage-records.json"
    p.write_text(content)
    _one_line_error(invoke("analyze", "--records", str(p)), "garbage-records.json")


def _raw_db(tmp_path: Path, sql: str, *params) -> Path:
    """A valid run database, then one row changed behind the store's back."""
    db = tmp_path / "raw.db"
    store.save_run(db, _info("r1"), [_variant("k", 40, "a", sass="S", trace='{"traceEvents": []}')])
    conn = sqlite3.connect(db)
    conn.execute(sql, params)
    conn.commit()
    conn.close()
    return db


@pytest.mark.parametrize(
    "sql, params",
    [
        ("UPDATE runs SET fingerprint = ?", ("{not json",)),
        ("UPDATE runs SET fingerprint = ?", ("[1, 2]",)),
        ("UPDATE runs SET git_sha = ?", (12345,)),
        ("UPDATE run_variants SET tags = ?", ("{",)),
        ("UPDATE run_variants SET tags = ?", ('{"a": 1}',)),
        ("UPDATE run_variants SET thresholds = ?", ('{"registers": "lots"}',)),
        ("UPDATE metrics SET value = ?", ("many",)),
        ("UPDATE kernels SET name = ?", (b"\x00bytes",)),
        ("UPDATE blobs SET data = ?", (b"not zlib at all",)),
        ("UPDATE blobs SET data = ?", (zlib.compress(b"[" * 100_000),)),
        ("UPDATE blobs SET data = ?", (zlib.compress(b"PK\x03\x04 but no zip"),)),  # was BadZipFile
    ],
)
@pytest.mark.parametrize("command", ["show", "report", "analyze"])
def test_malformed_rows_are_bad_input_not_a_crash(tmp_path, monkeypatch, sql, params, command):
    monkeypatch.chdir(tmp_path)
    db = _raw_db(tmp_path, sql, *params)
    args = {
        "show": ["show", "--db", str(db), "--run", "r1"],
        "report": ["report", "--db", str(db), "-o", str(tmp_path / "rep")],
        "analyze": ["analyze", "--db", str(db)],
    }[command]
    r = CliRunner().invoke(main, args)
    # 0 where the command never reads the broken part (show loads no sass/trace blobs, analyze
    # notes an unreadable artifact), else one line and 2; never a crash, never 1
    assert r.exit_code in (0, 2), (r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    if r.exit_code == 2:
        assert len(r.output.strip().splitlines()) == 1 and "raw.db" in r.output


def test_a_crash_is_exit_3_with_a_short_message(run_db, monkeypatch):
    def boom(*a, **kw):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr("kperf_ci.commands.show.print_kernels", boom)  # the default view
    r = CliRunner().invoke(main, ["show", "--db", "run.db", "--run", "cur"])
    assert r.exit_code == 3, r.output
    assert "internal error, a bug in kperf-ci: ZeroDivisionError" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_a_crash_in_a_real_process_exits_3(tmp_path):
    """The exit status CI sees, from the installed entry point's code path (no CliRunner)."""
    code = (
        "import sys, kperf_ci.commands.show as s\n"
        "s.print_runs = lambda runs, sizes=None: 1 / 0\n"
        "from kperf_ci.cli import main\n"
        "main(['show', '--db', sys.argv[1]])\n"
    )
    store.save_run(tmp_path / "run.db", _info("cur"), [_variant("k", 40, "a")])
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "run.db")],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr and "ZeroDivisionError" in r.stderr
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "run.db")],
        capture_output=True,
        text=True,
        env=_env(KPERF_TRACEBACK="1"),
        timeout=60,
    )
    assert r.returncode == 3 and "Traceback" in r.stderr  # on request, for the bug report


def test_gate_prints_hostile_kernel_names_as_text(tmp_path, monkeypatch):
    """kperf gate names the blocking kernel; a stored title escape must not reach the terminal."""
    import numpy as np
    from conftest import make_info, make_result

    gpu = "NVIDIA H100 80GB HBM3"
    evil = "soft\x1b]0;PWNED\x07max[/]"
    rng = np.random.default_rng(3)

    def timed(level: float) -> VariantResult:
        xs = (level * np.exp(rng.normal(0, 0.005, 50))).tolist()
        return make_result(evil, gpu, samples=xs, **{"time.median": float(np.median(xs))})

    (tmp_path / "pyproject.toml").write_text(
        '[tool.kperf]\ndb = "run.db"\n[tool.kperf.gate]\nagainst = "history"\ndb = "history.db"\n'
    )
    for i in range(8):
        info = make_info(mode="gpu", gpu=gpu, started_at=f"2026-01-0{1 + i // 4}T00:00:0{i % 4}+00:00")
        store.save_run(tmp_path / "history.db", info, [timed(1.0)])
    late = make_info(mode="gpu", gpu=gpu, started_at="2026-02-01T00:00:00+00:00")
    store.save_run(tmp_path / "run.db", late, [timed(1.15)])
    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):
        if key.startswith("KPERF_"):
            monkeypatch.delenv(key)
    r = CliRunner().invoke(main, ["gate"])
    assert r.exit_code == 1, r.output  # the 15% slowdown blocks
    assert "\x1b" not in r.output and "\x07" not in r.output
    assert "soft\\x1b]0;PWNED\\x07max[/]" in r.output


def test_a_command_without_user_errors_still_exits_3_on_a_crash(monkeypatch, tmp_path):
    """kperf run (and ab, baseline's group) are not decorated: the kperf group maps for them."""
    monkeypatch.chdir(tmp_path)

    def boom(*a, **kw):
        raise KeyError("surprise")

    monkeypatch.setattr("kperf_ci.commands.run.subprocess.Popen", boom)
    r = CliRunner().invoke(main, ["run", "-q"])
    assert r.exit_code == 3 and "internal error" in r.output and "KeyError" in r.output, r.output

    def denied(*a, **kw):
        raise PermissionError(13, "Permission denied", str(tmp_path / "x"))

    monkeypatch.setattr("kperf_ci.commands.run.subprocess.Popen", denied)
    r = CliRunner().invoke(main, ["run", "-q"])
    _one_line_error(r, "Permission denied", str(tmp_path / "x"))


@pytest.mark.parametrize("version", ["Infinity", "NaN", "1e400", '"one"', "[1]", "null"])
def test_a_timeline_whose_version_is_no_integer_is_bad_input(tmp_path: Path, monkeypatch, version: str):
    """Found by tests/test_fuzz_cli.py's hostile trace numbers: `"version": Infinity` raised an
    OverflowError out of the loader, exit 3 "a bug in kperf-ci", where a bad file is exit 2."""
    monkeypatch.chdir(tmp_path)
    Path("t.json").write_text('{"format": "kperf-timeline", "version": ' + version + ', "columns": {}}')
    r = CliRunner().invoke(main, ["analyze", "--trace", "t.json", "--fail-on-flag"])
    assert r.exit_code == 2, r.output
    assert "version" in r.output and "is not supported (expected 1)" in r.output
