"""Triton's triton_key() remembered across compile workers (kperf_ci/capture/static/triton_key.py):
the same value as Triton's own, computed again whenever the package changes, and a bad entry is
never trusted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kperf_ci.capture.static import triton_key as memo

VERSION = "9.9.9"
VALUE = VERSION + "-".join(["ab" * 32, "cd" * 32])


class Counting:
    """A stand-in for Triton's function that counts its calls."""

    def __init__(self, value: str = VALUE) -> None:
        self.value, self.calls = value, 0

    def __call__(self) -> str:
        self.calls += 1
        return self.value


def _package(tmp_path: Path) -> Path:
    pkg = tmp_path / "triton"
    (pkg / "_C").mkdir(parents=True)
    (pkg / "_C" / "libtriton.so").write_bytes(b"\0" * 64)
    (pkg / "compiler.py").write_text("x = 1\n")
    return pkg


def _entries(d: Path) -> list[Path]:
    return sorted((d / "triton-key").glob("*.json"))


def test_computed_once_then_read_from_the_directory(tmp_path: Path) -> None:
    pkg, d, fn = _package(tmp_path), tmp_path / "cache", Counting()
    assert memo.remembered(str(pkg), VERSION, fn, str(d)) == VALUE
    assert memo.remembered(str(pkg), VERSION, fn, str(d)) == VALUE
    assert fn.calls == 1
    (entry,) = _entries(d)
    assert json.loads(entry.read_text())["triton_key"] == VALUE


@pytest.mark.parametrize(
    "change",
    [
        lambda pkg: (pkg / "compiler.py").write_text("x = 22\n"),  # an edited source
        lambda pkg: (pkg / "_C" / "libtriton.so").write_bytes(b"\1" * 65),  # a new library
        lambda pkg: (pkg / "language.py").write_text(""),  # a file added
    ],
    ids=["edited", "library", "added"],
)
def test_a_changed_package_is_computed_again(tmp_path: Path, change) -> None:
    pkg, d, fn = _package(tmp_path), tmp_path / "cache", Counting()
    memo.remembered(str(pkg), VERSION, fn, str(d))
    change(pkg)
    memo.remembered(str(pkg), VERSION, fn, str(d))
    assert fn.calls == 2


def test_another_version_or_function_is_computed_again(tmp_path: Path) -> None:
    pkg, first = _package(tmp_path), Counting()

    def other() -> str:  # other code: another Triton's algorithm
        return VALUE

    assert memo.package_signature(str(pkg), VERSION, first) != memo.package_signature(
        str(pkg), VERSION, other
    )
    assert memo.package_signature(str(pkg), VERSION, first) != memo.package_signature(
        str(pkg), "9.9.10", first
    )


def test_bytecode_written_beside_the_sources_keeps_the_signature(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    before = memo.package_signature(str(pkg), VERSION, Counting())
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "compiler.cpython-311.pyc").write_bytes(b"pyc")
    assert memo.package_signature(str(pkg), VERSION, Counting()) == before


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps({"format": memo.FORMAT, "signature": "another package's", "triton_key": VALUE}),
        "BAD_VALUE",
    ],
    ids=["not-json", "other-signature", "bad-value"],
)
def test_a_bad_entry_is_computed_again_and_filed_over(tmp_path: Path, text: str) -> None:
    pkg, d, fn = _package(tmp_path), tmp_path / "cache", Counting()
    memo.remembered(str(pkg), VERSION, fn, str(d))
    (entry,) = _entries(d)
    if text == "BAD_VALUE":  # filed under the right signature, a value Triton never writes
        text = json.dumps({**json.loads(entry.read_text()), "triton_key": VERSION + "../../etc"})
    entry.write_text(text)
    assert memo.remembered(str(pkg), VERSION, fn, str(d)) == VALUE
    assert fn.calls == 2
    assert json.loads(entry.read_text())["triton_key"] == VALUE  # the next worker reads it
    assert memo.remembered(str(pkg), VERSION, fn, str(d)) == VALUE
    assert fn.calls == 2


def test_a_symlink_at_the_entrys_name_is_never_followed(tmp_path: Path) -> None:
    pkg, d, fn = _package(tmp_path), tmp_path / "cache", Counting()
    memo.remembered(str(pkg), VERSION, fn, str(d))
    (entry,) = _entries(d)
    target = tmp_path / "elsewhere.json"
    target.write_text(entry.read_text())
    entry.unlink()
    entry.symlink_to(target)
    assert memo.remembered(str(pkg), VERSION, fn, str(d)) == VALUE
    assert fn.calls == 2  # not read through the link
    assert not entry.is_symlink()  # replaced by a file of its own, the target untouched
    assert target.read_text() == entry.read_text()


def test_a_directory_that_is_a_file_computes_quietly(tmp_path: Path) -> None:
    pkg, fn = _package(tmp_path), Counting()
    (tmp_path / "cache").write_text("a file")
    assert memo.remembered(str(pkg), VERSION, fn, str(tmp_path / "cache")) == VALUE
    assert memo.remembered(str(pkg), VERSION, fn, str(tmp_path / "cache")) == VALUE
    assert fn.calls == 2 and (tmp_path / "cache").read_text() == "a file"


def test_no_directory_computes_and_files_nothing(tmp_path: Path) -> None:
    pkg, fn = _package(tmp_path), Counting()
    assert memo.remembered(str(pkg), VERSION, fn, None) == VALUE
    assert memo.remembered(str(pkg), VERSION, fn, None) == VALUE
    assert fn.calls == 2


def test_a_value_of_another_shape_is_used_but_never_filed(tmp_path: Path) -> None:
    pkg, d, fn = _package(tmp_path), tmp_path / "cache", Counting("a future Triton's key")
    assert memo.remembered(str(pkg), VERSION, fn, str(d)) == "a future Triton's key"
    assert not _entries(d)


_REAL = """
import json, sys
import triton, triton.runtime.cache as cache, triton.runtime.autotuner as autotuner
own = cache.triton_key()
from kperf_ci.capture.static import triton_key as memo
assert memo.install()
print(json.dumps([own, cache.triton_key(), autotuner.triton_key()]))
"""


def test_the_installed_key_is_tritons_own_in_a_fresh_process_and_the_next(tmp_path: Path) -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "KPERF_METRICS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("KPERF_NO_METRICS_CACHE", None)
    for _ in range(2):  # the first computes and files it, the second reads it
        out = subprocess.run(
            [sys.executable, "-c", _REAL], env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        own, installed, autotuner = json.loads(out.stdout)
        assert own == installed == autotuner
        assert not out.stderr.strip()
    assert len(_entries(tmp_path / "cache")) == 1
