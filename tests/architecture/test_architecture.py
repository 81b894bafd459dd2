"""The package's shape, checked: import rules between the stages (import-linter contract in
pyproject.toml, drawn in docs/ARCHITECTURE.md), project modules imported at module level,
small modules and short functions."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kperf_ci"

#: Function-level imports of project modules that are there on purpose, and why.
DEFERRED_IMPORTS = {
    # pytest loads the plugin in every session of every project that has kperf-ci installed,
    # kperf enabled or not: the session, store and hooks are imported only once kperf is on
    # (benchmarks/results/plugin_overhead.md measures the disabled plugin's cost)
    "plugin/__init__.py",
}
MAX_MODULE_LINES = 450  # a module past this mixes jobs: split it by its seams
#: A function past this does several steps: name them (helpers whose docstrings say the step).
MAX_FUNCTION_LINES = 100
#: A command function past this does more than parse arguments, call the library and print
#: (issue 38): the rest belongs in the library, below the entry points.
MAX_COMMAND_FUNCTION_LINES = 40


def _function_level_project_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            where = f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.ImportFrom) and (
                node.level or (node.module or "").startswith("kperf_ci")
            ):
                found.append(f"{where} from {'.' * node.level}{node.module}")
            elif isinstance(node, ast.Import) and any(a.name.startswith("kperf_ci") for a in node.names):
                found.append(f"{where} import kperf_ci...")
    return found


def test_no_function_level_imports_of_project_modules():
    found = [
        hit
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.relative_to(PACKAGE).as_posix() not in DEFERRED_IMPORTS
        for hit in _function_level_project_imports(p)
    ]
    why = "import project modules at module level (or justify in DEFERRED_IMPORTS):\n"
    assert not found, why + "\n".join(found)


def test_the_check_sees_a_function_level_import(tmp_path):
    mod = tmp_path / "kperf_ci" / "x.py"
    mod.parent.mkdir()
    mod.write_text("def f():\n    from kperf_ci import store\n    from .model import Metric\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path / "kperf_ci"
    try:
        assert len(_function_level_project_imports(mod)) == 2
    finally:
        PACKAGE = saved


def test_modules_stay_small():
    big = {
        p.relative_to(PACKAGE).as_posix(): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not big, f"split these by their seams (over {MAX_MODULE_LINES} lines): {big}"


def _long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``module:line name (n lines)`` for each function or method in ``path`` (nested ones too)
    longer than ``limit`` lines, from its ``def`` line to its last line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            if n > limit:
                found.append(f"{path.relative_to(PACKAGE).as_posix()}:{node.lineno} {node.name} ({n} lines)")
    return found


def test_functions_stay_short():
    long = [hit for p in sorted(PACKAGE.rglob("*.py")) for hit in _long_functions(p)]
    why = f"split these into named steps (over {MAX_FUNCTION_LINES} lines):\n"
    assert not long, why + "\n".join(long)


def test_the_length_check_names_a_long_function(tmp_path):
    mod = tmp_path / "kperf_ci" / "x.py"
    mod.parent.mkdir()
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))  # def + 100 lines = 101
    mod.write_text(f"def short():\n    return 1\n\n\nclass C:\n    def long(self):\n{body}")
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path / "kperf_ci"
    try:
        assert _long_functions(mod) == [f"x.py:6 long ({MAX_FUNCTION_LINES + 1} lines)"]
        assert _long_functions(mod, limit=MAX_FUNCTION_LINES + 1) == []
    finally:
        PACKAGE = saved


def test_command_functions_stay_short():
    """commands/ is argument parsing, a call into the library and printing: no function there
    is long enough to hold more (counted as test_functions_stay_short counts)."""
    long = [
        hit
        for p in sorted((PACKAGE / "commands").rglob("*.py"))
        for hit in _long_functions(p, limit=MAX_COMMAND_FUNCTION_LINES)
    ]
    why = f"move library logic out of commands/, split the printing (over {MAX_COMMAND_FUNCTION_LINES}):\n"
    assert not long, why + "\n".join(long)


def test_the_command_length_check_names_a_long_command(tmp_path):
    mod = tmp_path / "kperf_ci" / "commands" / "x.py"
    mod.parent.mkdir(parents=True)
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_COMMAND_FUNCTION_LINES))  # def + 40 lines = 41
    mod.write_text(f"@click.command()\ndef cmd():\n{body}\n\ndef ok():\n    return 1\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path / "kperf_ci"
    try:
        found = _long_functions(mod, limit=MAX_COMMAND_FUNCTION_LINES)
        assert found == [f"commands/x.py:2 cmd ({MAX_COMMAND_FUNCTION_LINES + 1} lines)"]
    finally:
        PACKAGE = saved


def _command_imports(path: Path) -> list[str]:
    """The ``kperf_ci.commands`` modules that ``path`` (a module of commands/) imports, at any
    level of the file, absolute or relative (``from . import x``, ``from .x import y``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("kperf_ci.commands")]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 1:  # a sibling in commands/ (commands has no subpackages)
                names = [module] if module else [a.name for a in node.names]
                found += [f"kperf_ci.commands.{n}" for n in names]
            elif module == "kperf_ci.commands" or module.startswith("kperf_ci.commands."):
                names = [a.name for a in node.names] if module == "kperf_ci.commands" else [""]
                found += [f"{module}.{n}".rstrip(".") for n in names]
            elif module == "kperf_ci" and any(a.name == "commands" for a in node.names):
                found.append("kperf_ci.commands")
    return found


def test_commands_import_no_other_command():
    """A command shares code with another only through the library (errors.py, inputs.py, ...
    at the package root): one command's module never imports another's."""
    found = {
        p.relative_to(PACKAGE).as_posix(): hits
        for p in sorted((PACKAGE / "commands").rglob("*.py"))
        if p.name != "__init__.py" and (hits := _command_imports(p))
    }
    assert not found, f"move what these share out of commands/ (e.g. kperf_ci/errors.py): {found}"


def test_the_command_import_check_sees_an_import(tmp_path):
    mod = tmp_path / "x.py"
    mod.write_text(
        "from kperf_ci.commands.show import print_run\n"
        "from kperf_ci.commands import gate\n"
        "import kperf_ci.commands.merge\n"
        "from . import compare\n"
        "from .ab import ab_cmd\n"
        "from kperf_ci import commands\n"
        "from kperf_ci.errors import KperfError\n"
        "from kperf_ci.inputs import read_run\n"
    )
    assert _command_imports(mod) == [
        "kperf_ci.commands.show",
        "kperf_ci.commands.gate",
        "kperf_ci.commands.merge",
        "kperf_ci.commands.compare",
        "kperf_ci.commands.ab",
        "kperf_ci.commands",
    ]


def _imports_of(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports, at any level of the file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_commands_import_no_sqlite3():
    """commands/ is as thin as cli.py: SQL lives in the store (kperf_ci/store), commands call it."""
    found = [
        p.relative_to(PACKAGE).as_posix()
        for p in sorted((PACKAGE / "commands").rglob("*.py"))
        if {"sqlite3", "sqlite_utils"} & _imports_of(p)
    ]
    assert not found, f"move the SQL of these into kperf_ci/store: {found}"


def test_the_sqlite3_check_sees_an_import(tmp_path):
    mod = tmp_path / "x.py"
    mod.write_text("def f():\n    import sqlite3\n    from sqlite_utils import Database\n")
    assert {"sqlite3", "sqlite_utils"} <= _imports_of(mod)


_RUNS_GIT = re.compile(r"""\[\s*["']git["']""")  # a command line that starts with git


def _runs_git(path: Path) -> bool:
    return bool(_RUNS_GIT.search(path.read_text()))


def test_one_module_runs_git():
    """One git runner (issue 38): kperf_ci/git.py; every other module calls it, so a missing git,
    a failing command and a hung one read alike everywhere."""
    found = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if _runs_git(p))
    assert found == ["git.py"], f"run git through kperf_ci.git: {found}"


def test_the_git_check_sees_a_git_command(tmp_path):
    mod = tmp_path / "x.py"
    mod.write_text('import subprocess\nsubprocess.run(["git", "-C", ".", "status"])\n')
    assert _runs_git(mod)


def _ab_tag_strings(path: Path) -> list[str]:
    """String constants (f-string parts included) that start an ``ab:`` tag."""
    import ast

    return [
        n.value
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("ab:")
    ]


def test_no_ab_verdict_tag_is_built_or_parsed():
    """An A/B verdict is stored typed, in the ``ab`` artifact's ``verdict`` field (issue 38):
    no ``ab:`` tag string is built or looked for anywhere in the package."""
    found = {p.relative_to(PACKAGE).as_posix(): s for p in PACKAGE.rglob("*.py") if (s := _ab_tag_strings(p))}
    assert not found, found


def test_the_tag_check_sees_a_tag(tmp_path):
    mod = tmp_path / "x.py"
    mod.write_text('v = "slower"\ntag = f"ab:{v}"\nok = any(t.startswith("ab:") for t in [])\n')
    assert _ab_tag_strings(mod) == ["ab:", "ab:"]


# --------------------------------------------------------------------------- one regression answer

#: the one module that answers "is this a regression?" (issue 38): kperf_ci.judge.verdict
REGRESSION_HOME = "judge/verdict.py"
#: what decides an exit code, a commit status or label, a red headline or a banner, per module:
#: each must read the one answer (call ``regression()`` or read a ``.regression`` it returned)
REGRESSION_READERS = {
    "prcheck/document.py": ["ABReport.regression", "ABReport.exit_code"],  # `kperf ab`'s exit code
    "judge/comparison.py": ["Comparison.exit_code"],  # `kperf compare`'s and the plugin's exit code
    "report/terminal.py": ["verdict_line"],  # compare's, show's and the plugin's last line
    "report/build.py": ["build_report"],  # the run report's answer, for the views below
    "report/view.py": ["Report.verdict_line", "Report.verdict_state"],  # run comment, HTML banner
    "report/ab_view.py": ["headline"],  # the A/B comment, summary and page headline
    "report/ab_html.py": ["_state"],  # the A/B page's banner
    "github/body.py": ["from_ab", "from_run", "status_of"],  # the PR verdict; the commit status
    "commands/github.py": ["label_cmd"],  # the label (status_cmd asks body.status_of)
}


def _slower_tests(path: Path) -> list[str]:
    """Where a module decides by the word "slower" itself: a comparison with it (``==``, ``in``
    a tuple of words, ...), or a "slower" count or field looked up (``c["slower"]``,
    ``c.get("slower")``). A dict that maps the word to another, or lists it, decides nothing."""

    def word(n: ast.AST) -> bool:
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            return any(word(e) for e in n.elts)
        return isinstance(n, ast.Constant) and n.value == "slower"

    found = []
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(n, ast.Compare) and any(word(x) for x in [n.left, *n.comparators]):
            found.append(f"{path.name}:{n.lineno} compares with 'slower'")
        elif isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and word(n.slice):
            found.append(f"{path.name}:{n.lineno} looks up 'slower'")
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "get"
            and n.args
            and word(n.args[0])
        ):
            found.append(f"{path.name}:{n.lineno} looks up 'slower'")
    return sorted(found, key=lambda hit: int(hit.split(":")[1].split()[0]))


def test_only_the_verdict_module_decides_by_slower():
    """One place says what "slower" means for a check (issue 38): every other module asks
    kperf_ci.judge.verdict (``is_regression`` for a row, ``regression`` for a document or a
    comparison), so the exit code, the comment, the status and the HTML cannot disagree."""
    found = [
        hit
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.relative_to(PACKAGE).as_posix() != REGRESSION_HOME
        for hit in _slower_tests(p)
    ]
    assert not found, "ask kperf_ci.judge.verdict instead:\n" + "\n".join(found)
    # the home itself is where the word is compared: the check looks at real code
    assert _slower_tests(PACKAGE / REGRESSION_HOME), "judge/verdict.py no longer compares with 'slower'?"


def test_the_slower_check_sees_a_second_answer(tmp_path):
    mod = tmp_path / "x.py"
    mod.write_text(
        "def exit_code(doc):\n"
        "    if doc['counts'].get('slower') or doc['counts']['slower']:\n"
        "        return 1\n"
        "    state = 'failure' if doc['timed'][0]['verdict'] == 'slower' else 'success'\n"
        "    red = doc['verdict'] in ('slower', 'worse')\n"
        "    words = {'slower': 'worse'}.get(doc['verdict'], 'same')  # a mapping: no decision\n"
        "    return int(red or state == 'failure')\n"
    )
    assert _slower_tests(mod) == [
        "x.py:2 looks up 'slower'",
        "x.py:2 looks up 'slower'",
        "x.py:4 compares with 'slower'",
        "x.py:5 compares with 'slower'",
    ]


def _functions(tree: ast.AST) -> dict[str, ast.AST]:
    """Every function of a module by its qualified name ("Class.method", "function")."""
    out: dict[str, ast.AST] = {}
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            out |= {f"{node.name}.{k}": v for k, v in _functions(node).items()}
    return out


def _reads_the_answer(fn: ast.AST) -> bool:
    """Calls ``regression(...)`` (or ``x.regression(...)``) or reads a ``.regression`` attribute."""
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "regression":
            return True
        if isinstance(n, ast.Attribute) and n.attr == "regression" and isinstance(n.ctx, ast.Load):
            return True
    return False


def _answer_not_read(package: Path, readers: dict[str, list[str]]) -> list[str]:
    missing = []
    for rel, names in readers.items():
        fns = _functions(ast.parse((package / rel).read_text(encoding="utf-8")))
        for name in names:
            if name not in fns:
                missing.append(f"{rel}: {name} is gone (name its successor in REGRESSION_READERS)")
            elif not _reads_the_answer(fns[name]):
                missing.append(f"{rel}: {name} decides without kperf_ci.judge.verdict.regression")
    return missing


def test_every_exit_code_status_and_headline_reads_the_one_answer():
    """The exit code, the terminal, the PR comment, the commit status and label, and the HTML
    read kperf_ci.judge.verdict.regression's answer (issue 38: github_body.py had its own)."""
    missing = _answer_not_read(PACKAGE, REGRESSION_READERS)
    assert not missing, "\n".join(missing)


def test_the_reader_check_sees_a_consumer_that_decides_itself(tmp_path):
    (tmp_path / "body.py").write_text(
        "def from_ab(doc):\n"
        "    return bool(doc['counts'].get('slower') or doc.get('static_regressions'))\n"
        "class R:\n"
        "    def exit_code(self):\n"
        "        return regression(self).exit_code\n"
        "    def state(self):\n"
        "        return 'bad' if self.regression else 'good'\n"
    )
    readers = {"body.py": ["from_ab", "R.exit_code", "R.state", "renamed"]}
    assert _answer_not_read(tmp_path, readers) == [
        "body.py: from_ab decides without kperf_ci.judge.verdict.regression",
        "body.py: renamed is gone (name its successor in REGRESSION_READERS)",
    ]


# --------------------------------------------------------------------------- docstring references

_ROLE = re.compile(r":(mod|func|class|meth|data|attr):`~?([.\w]+)`")
_DOTTED = re.compile(r"(?<![\w/])(kperf_ci(?:\.\w+)+)")


def _module_file(root: Path, dotted: str) -> Path | None:
    p = root.joinpath(*dotted.split("."))
    for f in (p.with_suffix(".py"), p / "__init__.py"):
        if f.is_file():
            return f
    return None


def _resolves(root: Path, dotted: str, want_module: bool) -> bool:
    """The longest module prefix exists and the first name after it is defined or imported there."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        f = _module_file(root, ".".join(parts[:k]))
        if f is None:
            continue
        if k == len(parts) or want_module and k < len(parts):
            return k == len(parts)
        name = re.escape(parts[k])
        return bool(
            re.search(rf"^\s*(?:async def|def|class) {name}\b|^{name}\s*[:=]|\bimport .*\b{name}\b|"
                      rf"^\s+{name},?$", f.read_text(), re.M)
        )  # fmt: skip
    return False


def _stale_references(root: Path) -> list[str]:
    """Module and function names in the package's docstrings and comments that do not resolve:
    `:mod:`/`:func:` roles (relative ones against the module's package) and dotted
    ``kperf_ci.x.y`` names."""
    stale = []
    for f in sorted((root / "kperf_ci").rglob("*.py")):
        dotted = ".".join(f.relative_to(root).with_suffix("").parts)
        package = dotted.removesuffix(".__init__") if f.name == "__init__.py" else dotted.rsplit(".", 1)[0]
        text = f.read_text()
        for m in _ROLE.finditer(text):
            role, target = m.groups()
            if target.startswith("."):
                ups = len(target) - len(target.lstrip(".")) - 1
                base = package.split(".")[: len(package.split(".")) - ups]
                target = ".".join([*base, target.lstrip(".")])
            elif not target.startswith("kperf_ci"):
                continue
            if not _resolves(root, target, role == "mod"):
                stale.append(f"{f.relative_to(root)}: :{role}:`{m.group(2)}`")
        stale += [
            f"{f.relative_to(root)}: {m.group(1)}"
            for m in _DOTTED.finditer(text)
            if not _resolves(root, m.group(1).rstrip("."), False)
        ]
    return stale


def test_docstrings_name_modules_that_exist():
    """A newcomer follows the docstrings' names: each must still be there (a move renames them)."""
    stale = _stale_references(ROOT)
    assert not stale, "rename these in the docstrings and comments:\n" + "\n".join(stale)


def test_the_reference_check_sees_a_stale_name(tmp_path):
    pkg = tmp_path / "kperf_ci" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "kperf_ci" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text('"""See :mod:`.here`, :mod:`.gone` and kperf_ci.sub.here.fn."""\n')
    (pkg / "here.py").write_text(
        '"""kperf_ci.sub.here.nothing and :func:`kperf_ci.sub.here.fn`."""\ndef fn(): ...\n'
    )
    assert _stale_references(tmp_path) == [
        "kperf_ci/sub/__init__.py: :mod:`.gone`",
        "kperf_ci/sub/here.py: kperf_ci.sub.here.nothing",
    ]


def _lint_imports() -> str:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.fail("import-linter is not installed (the lint extra: pip install -e '.[test,lint]')")
    return exe


def test_import_rules_hold():
    proc = subprocess.run(
        [_lint_imports(), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "6 kept, 0 broken" in proc.stdout


def test_import_rules_catch_a_violation(tmp_path):
    """A copy of the package with violations of each contract must break all six: the store
    importing the report (the stages), capture's static job importing the timing job (capture's
    own layers), the measurement of a callable importing the replay's (the measure stage's own
    layers), capture importing the store (capture never reads or writes it), capture importing
    the judge, the analysis or the report (capture only captures: issue 38's measurement stage
    puts them together), the judge importing the store (it decides from dataclasses it is
    handed)."""
    shutil.copytree(PACKAGE, tmp_path / "kperf_ci", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    violations = {
        "store/blobs.py": "from kperf_ci.report import safe_text",
        "capture/static/ptx.py": "from kperf_ci.capture.timing import engine",
        "capture/launches/gpu.py": "from kperf_ci import store",
        "measure/measure.py": "from kperf_ci.measure import measure_replay",
        "capture/timing/interleaved.py": "from kperf_ci.judge import ab",
        "capture/timing/steps.py": "from kperf_ci.analysis import findings",
        "capture/imported/liger_csv.py": "from kperf_ci.report import safe_text",
        "judge/compare.py": "from kperf_ci import store",
    }
    for rel, line in violations.items():
        bad = tmp_path / "kperf_ci" / rel
        bad.write_text(bad.read_text() + f"\n{line}  # noqa\n")
    proc = subprocess.run(
        [_lint_imports(), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(tmp_path), "PATH": str(Path(sys.executable).parent)},
    )
    assert proc.returncode != 0
    assert "0 kept, 6 broken" in proc.stdout, proc.stdout[-4000:]
    assert "kperf_ci.store is not allowed to import kperf_ci.report" in proc.stdout
    assert "kperf_ci.capture.static is not allowed to import kperf_ci.capture.timing" in proc.stdout
    assert "kperf_ci.capture is not allowed to import kperf_ci.store" in proc.stdout
    assert "kperf_ci.measure.measure -> kperf_ci.measure.measure_replay" in proc.stdout
    for below in ("judge", "analysis", "report"):
        assert f"kperf_ci.capture is not allowed to import kperf_ci.{below}" in proc.stdout
    assert "kperf_ci.judge is not allowed to import kperf_ci.store" in proc.stdout
