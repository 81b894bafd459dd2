"""The pytest configuration file of the project in a directory, found by pytest's own rules.

`kperf run --bench SCRIPT` with a script outside the working directory hands pytest this file
with ``-c``: left to itself, pytest looks for its configuration from the script's folder upward,
so a pytest.ini or pyproject.toml beside the script set the run's options (its addopts chose the
arch and the label) and the project's own addopts were never read.

A small finder of our own rather than pytest's private ``locate_config``: its signature and its
return value changed between the pytest versions kperf-ci supports (8.0 up)."""

from __future__ import annotations

import os
import re
import sys
from importlib.metadata import version
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: the file to pass when the project has no configuration: pytest reads nothing from it (8.0 up
#: load an unknown suffix as no configuration; 9.2 documents ``--config-file=/dev/null``), and,
#: given any file, pytest stops looking beside the script
NO_CONFIG = os.devnull

#: pytest's configuration files, in its order of precedence in one directory
_NAMES = (
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
)

#: an ini section header, as iniconfig (pytest's ini reader) reads one: at the line's start, a
#: comment after it allowed
_SECTION = re.compile(r"\[([^\]]*)\]\s*(?:[#;].*)?$")


def _pytest_major() -> int:
    try:
        return int(version("pytest").split(".")[0])
    except (ValueError, LookupError):  # a development version: the newest rules
        return 9


def _ini_sections(path: Path) -> set[str] | None:
    """The section names of an ini file; None when it cannot be read (pytest shall say why)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return {m.group(1) for line in text.splitlines() if (m := _SECTION.match(line.rstrip()))}


def _toml_pytest(path: Path) -> dict[str, object] | None:
    """A TOML file's ``[tool.pytest]`` table (or {} when it has none); None when unreadable."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    tool = doc.get("tool")
    table = tool.get("pytest") if isinstance(tool, dict) else None
    return table if isinstance(table, dict) else {}


def _holds_config(path: Path, pytest_major: int) -> bool:
    """Whether pytest takes its configuration from ``path`` (a file of one of its names). A file
    that cannot be parsed counts: pytest, handed it, says what is wrong with it."""
    name = path.name
    if name in ("pytest.ini", ".pytest.ini"):
        return True  # always the configuration, even without a [pytest] section
    if name in ("pytest.toml", ".pytest.toml"):
        return pytest_major >= 9  # read since pytest 9
    if name == "pyproject.toml":
        table = _toml_pytest(path)
        # [tool.pytest.ini_options]; pytest 9 also reads a native [tool.pytest] table
        return table is None or "ini_options" in table or (pytest_major >= 9 and bool(table))
    sections = _ini_sections(path)
    wanted = "pytest" if name == "tox.ini" else "tool:pytest"
    return sections is None or wanted in sections


def project_config(directory: Path) -> str:
    """The configuration file pytest would use, run in ``directory`` with no path arguments:
    the first of its names, from ``directory`` upward, that holds pytest configuration; else the
    first pyproject.toml (pytest 8.1 up settle on it, configuration empty); else
    :data:`NO_CONFIG`."""
    major = _pytest_major()
    first_pyproject: Path | None = None
    for base in (directory, *directory.parents):
        for name in _NAMES:
            path = base / name
            if not path.is_file():
                continue
            if name == "pyproject.toml" and first_pyproject is None:
                first_pyproject = path
            if _holds_config(path, major):
                return str(path)
    return str(first_pyproject) if first_pyproject is not None else NO_CONFIG
