"""A hostile or broken static-metrics cache (issue 37, items 3, 7, 12, 13): entries in
KPERF_METRICS_CACHE_DIR are data. A malformed, oversized, poisoned or planted entry is recomputed
with one warning line; it never loses the run, never decides a verdict, and a planted symlink is
never written through. End to end through ``pytest --kperf`` (static mode, compile workers) and
``cached_static_metrics`` in a fresh process; a Hypothesis fuzz over entry contents."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import fuzz_settings, whole_static_metrics
from hypothesis import given
from hypothesis import strategies as st

from kperf_ci.capture.static import metrics_cache, metrics_entry
from kperf_ci.capture.static.metrics_entry import MAX_ENTRY_BYTES

KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
"""
TEST = """
import pytest, torch
from kernels_add import add

@pytest.mark.kperf
@pytest.mark.parametrize("n", [4096, 1000])
def test_add(kperf, n):
    kperf.bench(add, torch.rand(n), torch.rand(n))
"""


def _registers(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(
            "select v.arch, v.spec, m.value from metrics m join variants v on v.id = m.variant_id "
            "where m.name = 'registers' order by v.arch, v.spec"
        ).fetchall()
    finally:
        con.close()


def _edit_first(text: str, value: str) -> str:
    doc = json.loads(text)
    doc["metrics"][0][1] = "VALUE"
    return json.dumps(doc).replace('"VALUE"', value)


def _empty_metrics(p: Path) -> None:
    doc = json.loads(p.read_text())
    doc["metrics"] = []
    p.write_text(json.dumps(doc))


def _huge_sass(p: Path) -> None:  # sparse: 300 MB on paper, nothing on disk
    with p.open("r+b") as f:
        f.truncate(300 * 2**20)


@pytest.fixture(scope="module")
def triton_torch() -> None:
    """Imported before pytester's snapshot of sys.modules: pytester removes what a test imported,
    and triton's C extension cannot be imported a second time in one process."""
    pytest.importorskip("triton")
    pytest.importorskip("torch")


@pytest.fixture
def project(
    triton_torch: None, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    """The kernel and its two marked tests, with a metrics cache of their own in metrics-cache/
    (static mode through its compile workers: Linux only)."""
    if sys.platform != "linux":
        pytest.skip("static mode's compile workers")
    monkeypatch.setenv("KPERF_METRICS_CACHE_DIR", str(pytester.path / "metrics-cache"))
    monkeypatch.delenv("KPERF_NO_METRICS_CACHE", raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(pytester.path / "triton-cache"))  # the 2nd run reuses it
    pytester.makepyfile(kernels_add=KERNEL, test_add=TEST)
    return pytester


def _static_run(project: pytest.Pytester, db: str, arch: str = "sm_80,sm_90") -> tuple[int, str]:
    """(exit status, output) of ``pytest --kperf`` there, through two compile workers."""
    args = ("-p", "no:cacheprovider", "--kperf", "--kperf-arch", arch, "--kperf-jobs", "2")
    r = project.runpytest_subprocess(*args, "--kperf-db", db)
    return r.ret, r.stdout.str() + r.stderr.str()


#: what a clean run leaves in its project: its database, the metrics cache it filled and the
#: Triton cache it compiled into
_CLEAN_RUN_OUTPUTS = ("truth.db", "metrics-cache", "triton-cache")


@pytest.fixture(scope="module")
def _clean_runs() -> dict[str, Path]:
    """arch list -> a copy of what a clean run for it left (see ``truth_run``), this module's."""
    return {}


@pytest.fixture
def truth_run(
    project: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, _clean_runs: dict[str, Path]
):
    """``truth_run(arch)``: a clean ``pytest --kperf`` into truth.db (exit 0), which fills
    metrics-cache/ and triton-cache/. Two tests made the very same run (same kernels, command and
    arch list, an empty cache): it is made once a module per arch list and its outputs copied
    into a later test's project. That project's kernels then hit the copied Triton cache (keyed
    by the kernel's source, not its path), so its run looks up the very entries copied, as it
    would after a run of its own; a copy that did not match would fail the test, not pass it."""

    def run(arch: str = "sm_80,sm_90") -> None:
        saved = _clean_runs.get(arch)
        if saved is None:
            ret, out = _static_run(project, "truth.db", arch)
            assert ret == 0, out
            saved = tmp_path_factory.mktemp("clean-run")
            _copy_outputs(project.path, saved)
            _clean_runs[arch] = saved
        else:
            _copy_outputs(saved, project.path)

    return run


def _copy_outputs(src: Path, dst: Path) -> None:
    for name in _CLEAN_RUN_OUTPUTS:
        if (src / name).is_dir():
            shutil.copytree(src / name, dst / name, symlinks=True)
        else:
            shutil.copy2(src / name, dst / name)


def _cache_warnings(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if "static-metrics cache" in ln]


@pytest.mark.slow
def test_poisoned_entries_are_recomputed_end_to_end(project: pytest.Pytester, truth_run) -> None:
    truth_run()
    truth = _registers(project.path / "truth.db")
    entries = sorted((project.path / "metrics-cache").glob("*.json"))
    assert len(truth) == len(entries) == 4
    # the cases: 26 -> 255 in place, NaN, 10**400, "metrics": []
    poisons = [
        lambda p: p.write_text(_edit_first(p.read_text(), "255")),
        lambda p: p.write_text(_edit_first(p.read_text(), "NaN")),
        lambda p: p.write_text(_edit_first(p.read_text(), "1" + "0" * 400)),
        _empty_metrics,
    ]
    for p, poison in zip(entries, poisons, strict=True):
        poison(p)
    ret, out = _static_run(project, "run.db")
    assert ret == 0, out
    assert "Traceback" not in out
    assert _registers(project.path / "run.db") == truth  # recomputed, never the poisoned value
    assert len(_cache_warnings(out)) == 4, out  # one line per refused entry


@pytest.mark.slow
def test_an_entry_missing_metrics_is_recomputed_end_to_end(project: pytest.Pytester, truth_run) -> None:
    """Found by the fresh walk of issue 37: an entry holding only ``registers`` (sealed again, so
    its hash matched) was used, and the run stored no other static metric for those kernels."""
    truth_run("sm_90")
    entries = sorted((project.path / "metrics-cache").glob("*.json"))
    assert len(entries) == 2
    for p in entries:
        _doc_edit(_registers_only)(p)
    ret, out = _static_run(project, "run.db", "sm_90")
    assert ret == 0, out
    warned = _cache_warnings(out)
    assert len(warned) == 2, out
    assert all("it lacks spills, spill_loads, stack_bytes and " in w for w in warned), out
    assert _static_values(project.path / "run.db") == _static_values(project.path / "truth.db")


@pytest.mark.slow
def test_a_cache_directory_that_is_a_file_is_said_once_end_to_end(project: pytest.Pytester) -> None:
    """Found by the fresh walk of issue 37: one warning per entry (each read failed with "Not a
    directory"); now one line for the session, and the run is whole."""
    (project.path / "metrics-cache").write_text("not a directory")
    ret, out = _static_run(project, "run.db")
    assert ret == 0, out
    warned = _cache_warnings(out)
    assert len(warned) == 1, out
    assert "metrics-cache is a file, not a directory; nothing is cached" in warned[0]
    assert len(_registers(project.path / "run.db")) == 4


@pytest.mark.slow
def test_a_directory_at_an_entrys_name_is_recomputed_end_to_end(project: pytest.Pytester, truth_run) -> None:
    """Found by the second fresh walk of issue 37: a directory planted at an entry's path was
    opened, then refused by os.fdopen with a raw ``IsADirectoryError ... : 4``, and the kernel
    was counted "did not compile" (the run exited 1). It is a bad entry like a FIFO: recomputed,
    one warning line."""
    truth_run("sm_90")
    entry = sorted((project.path / "metrics-cache").glob("*.json"))[0]
    entry.unlink()
    entry.mkdir()
    ret, out = _static_run(project, "run.db", "sm_90")
    assert ret == 0, out
    assert "IsADirectoryError" not in out and "did not compile" not in out, out
    (warned,) = _cache_warnings(out)
    assert f"entry {entry}: not a regular file; recomputed it" in warned, out
    assert _static_values(project.path / "run.db") == _static_values(project.path / "truth.db")


def test_a_cache_directory_that_cannot_be_created_is_said_once_end_to_end(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the second fresh walk of issue 37: KPERF_METRICS_CACHE_DIR=/proc/self/nope turned
    the cache off without a word (every write failed silently)."""
    monkeypatch.setenv("KPERF_METRICS_CACHE_DIR", "/proc/self/nope")
    ret, out = _static_run(project, "run.db")
    assert ret == 0, out
    (warned,) = _cache_warnings(out)
    assert "cache /proc/self/nope: not a writable directory; new metrics are not cached" in warned, out
    assert len(_registers(project.path / "run.db")) == 4


def _static_values(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(
            "select v.arch, v.spec, m.name, m.value from metrics m join variants v on v.id = m.variant_id "
            "where m.kind = 'static' order by v.arch, v.spec, m.name"
        ).fetchall()
    finally:
        con.close()


# ------------------------------------------------------------------ one process, as GPU mode calls it

ASM = {"cubin": b"\x7fELF fake cubin bytes", "ptx": ".version 8.0"}
MD = {"shared": 1024, "num_warps": 4, "num_stages": 2}
SASS = "NORMALIZED SASS"


TRUTH = whole_static_metrics(ASM["cubin"], 26.0)
TRUTH_ROWS = [[m.name, m.value, m.unit, m.kind, m.better] for m in TRUTH]  # for a fresh process


def _truth(asm, md, arch):
    return list(TRUTH), SASS, hashlib.sha256(SASS.encode()).hexdigest()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KPERF_METRICS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KPERF_NO_METRICS_CACHE", raising=False)
    metrics_cache.clear_memory()
    yield tmp_path / "cache"
    metrics_cache.clear_memory()


def _fresh_process(tmp_path: Path, *, pid: int | None = None) -> subprocess.CompletedProcess[str]:
    """cached_static_metrics in a new process (no memory copy); prints the registers it got."""
    code = textwrap.dedent(
        f"""
        import hashlib, os
        from kperf_ci.capture.static import metrics_cache
        from kperf_ci.model import Metric
        if {pid!r} is not None:
            os.getpid = lambda: {pid!r}
        def truth(*a):
            digest = hashlib.sha256({SASS!r}.encode()).hexdigest()
            return [Metric(*row) for row in {TRUTH_ROWS!r}], {SASS!r}, digest
        m = metrics_cache.cached_static_metrics({ASM!r}, {MD!r}, "sm_90", truth)
        print(m[0][0].value, m[3])
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ), timeout=60
    )


def _doc_edit(edit):
    def apply(p: Path) -> None:
        doc = json.loads(p.read_text())
        edit(doc)
        p.write_text(json.dumps(doc))

    return apply


def _registers_only(doc: dict) -> None:
    """The entry cut down to its registers row and sealed again (a hash that matches): whole in
    every check but the one for missing metrics."""
    doc["metrics"] = [row for row in doc["metrics"] if row[0] == "registers"]
    doc["entry_sha256"] = metrics_entry._seal(doc["cubin_sha256"], doc["sass_hash"], doc["metrics"])


def _plant_link(p: Path) -> None:  # at the entry's own name, to a file it must neither read nor write
    target = p.parent.parent / "victim.txt"
    target.write_text("keep me")
    p.unlink()
    p.symlink_to(target)


@pytest.mark.parametrize(
    "edit",
    [
        _doc_edit(lambda doc: doc["metrics"][0].__setitem__(1, "abc")),
        _doc_edit(lambda doc: doc["metrics"][0].__setitem__(1, float("inf"))),
        _doc_edit(lambda doc: doc["metrics"][0].__setitem__(0, "time.median")),  # a name of another kind
        _doc_edit(lambda doc: doc["metrics"][0].__setitem__(3, "time")),  # a kind of its own
        _doc_edit(lambda doc: doc.__setitem__("cubin_sha256", "0" * 64)),  # an entry of another cubin
        _doc_edit(lambda doc: doc.__setitem__("sass", "OTHER SASS")),  # the SASS swapped under its hash
        _doc_edit(_registers_only),
        _huge_sass,
        _plant_link,
    ],
    ids=[
        "text",
        "infinity",
        "unknown-name",
        "unknown-kind",
        "other-cubin",
        "other-sass",
        "registers-only",
        "300MB",
        "symlink",
    ],
)
def test_bad_entry_is_recomputed_with_one_warning(cache_dir: Path, tmp_path: Path, edit) -> None:
    metrics_cache.cached_static_metrics(ASM, MD, "sm_90", _truth)
    (entry,) = cache_dir.glob("*.json")
    edit(entry)
    r = _fresh_process(tmp_path)
    assert r.returncode == 0 and r.stdout.split() == ["26.0", "False"], r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "recomputed" in r.stderr
    r = _fresh_process(tmp_path)  # rewritten: now a hit, without a warning
    assert r.stdout.split() == ["26.0", "True"] and not r.stderr.strip(), r.stderr
    assert entry.is_file() and not entry.is_symlink() and entry.stat().st_size < MAX_ENTRY_BYTES
    victim = tmp_path / "victim.txt"
    assert not victim.exists() or victim.read_text() == "keep me"


def test_planted_symlink_at_the_temporary_name_is_not_followed(cache_dir: Path, tmp_path: Path) -> None:
    """The old writer used ``<entry>.<pid>.tmp``: a link planted there for a guessed pid had its
    target overwritten. mkstemp picks an unpredictable name and creates it itself."""
    metrics_cache.cached_static_metrics(ASM, MD, "sm_90", _truth)
    (entry,) = cache_dir.glob("*.json")
    entry.unlink()  # the entry is missing, so the next process writes it
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    os.symlink(target, f"{entry}.4242.tmp")
    r = _fresh_process(tmp_path, pid=4242)
    assert r.returncode == 0 and r.stdout.split() == ["26.0", "False"], r.stderr
    assert target.read_text() == "keep me"
    assert entry.is_file() and not entry.is_symlink()


# ------------------------------------------------------------------ fuzz: any entry, no crash

json_value = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**400), max_value=10**400),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=20),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=20,
)
row = st.one_of(
    json_value,
    st.tuples(
        st.sampled_from(["registers", "spills", "cubin_bytes", "time.median", "sass.instructions", ""]),
        json_value,
        st.sampled_from(["count", "bytes", "ms"]),
        st.sampled_from(["static", "time"]),
        st.sampled_from(["lower", "higher", "none"]),
    ).map(list),
)
entry_doc = st.fixed_dictionaries(
    {},
    optional={
        "format": st.sampled_from(["kperf-static-metrics/2", "x"]),
        "metrics": st.one_of(json_value, st.lists(row, max_size=4)),
        "sass": st.one_of(st.just(SASS), json_value),
        "sass_hash": st.one_of(st.just(hashlib.sha256(SASS.encode()).hexdigest()), json_value),
        "cubin_sha256": st.one_of(st.just(hashlib.sha256(ASM["cubin"]).hexdigest()), json_value),
        "entry_sha256": json_value,
    },
)
raw_entry = st.one_of(
    entry_doc.map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=200),
    st.just(b"[" * 100_000),  # nesting past the recursion limit
)


@fuzz_settings(150)
@given(raw=raw_entry)
def test_fuzz_cache_entries_never_crash(cache_dir: Path, raw: bytes) -> None:
    cache_dir.mkdir(exist_ok=True)
    key = metrics_cache.cache_key(ASM, MD, "sm_90")
    (cache_dir / f"{key}.json").write_bytes(raw)
    metrics_cache.clear_memory()
    warnings: list[str] = []
    m, sass, digest, cached = metrics_cache.cached_static_metrics(
        ASM, MD, "sm_90", _truth, warn=warnings.append
    )
    if cached:  # only a sound entry is used: what the truth would have given
        assert m == TRUTH and sass == SASS
    else:
        assert m[0].value == 26.0 and len(warnings) == 1 and "\n" not in warnings[0]
