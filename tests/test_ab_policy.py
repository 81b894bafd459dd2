"""One typed A/B policy, end to end (issue 38): the A/B verdict's three knobs are one
:class:`kperf_ci.config.ABPolicy`, built once by ``ABPolicy.from_settings`` (marker > the run's
settings, each by its own chain) and carried whole to the judge's stop rule, which the timing loop
is handed as a callable; no module copies a knob by name on the way."""

from __future__ import annotations

import ast
import inspect
import json
from dataclasses import asdict, fields
from pathlib import Path

import pytest
from test_timing import FakeDevice  # the timing module's fake device clock

from kperf_ci.capture.timing.engine import TimingConfig
from kperf_ci.capture.timing.interleaved import adaptive_ab
from kperf_ci.config import ABPolicy, load_settings
from kperf_ci.judge import ab
from kperf_ci.measure import measure

PACKAGE = Path(__file__).resolve().parents[1] / "kperf_ci"
KNOBS = {f.name for f in fields(ABPolicy)}

#: The modules that name a knob, and why. Anywhere else a knob named is a copy of one.
READERS = {
    "config.py": "the settings themselves, and the one builder (ABPolicy.from_settings)",
    "judge/ab.py": "the verdict and its stop rule read the policy they are handed",
    "agent/loop.py": "a new best beats the best so far by the policy's threshold",
    # a stored document is rendered with what it was judged by, the default where it says none
    "report/ab_view.py": "a document's floor and threshold, else the setting's defaults",
}


def _knob_uses(path: Path) -> list[tuple[int, str]]:
    """(line, use) for each knob read as an attribute (``s.ab_floor_ms``) or passed as a keyword
    (``ab_floor_ms=...``) in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in KNOBS:
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.keyword) and node.arg in KNOBS:
            found.append((node.value.lineno, f"{node.arg}="))
    return found


def _lines_of(path: Path, qualname: str) -> range:
    holder, name = qualname.split(".")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.name == holder:
            fn = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == name)
            return range(fn.lineno, (fn.end_lineno or fn.lineno) + 1)
    raise AssertionError(f"{qualname} not in {path}")


def test_every_ab_knob_comes_from_the_one_policy():
    copies = {
        rel: uses
        for p in sorted(PACKAGE.rglob("*.py"))
        if (rel := p.relative_to(PACKAGE).as_posix()) not in READERS and (uses := _knob_uses(p))
    }
    assert not copies, f"carry the ABPolicy whole instead of copying its knobs: {copies}"
    stale = [rel for rel in READERS if not _knob_uses(PACKAGE / rel)]
    assert not stale, f"these name no A/B knob any more: take them off READERS: {stale}"
    # in config.py, the settings' knobs are read by the builder alone
    builder = _lines_of(PACKAGE / "config.py", "ABPolicy.from_settings")
    outside = [u for u in _knob_uses(PACKAGE / "config.py") if u[0] not in builder]
    assert not outside, f"config.py reads an A/B knob outside ABPolicy.from_settings: {outside}"


def test_the_knob_check_sees_a_copy(tmp_path):
    mod = tmp_path / "x.py"
    mod.write_text("req = Request(ab_floor_ms=s.ab_floor_ms)\nf = cfg.ab_precision\n")
    assert sorted(_knob_uses(mod)) == [(1, ".ab_floor_ms"), (1, "ab_floor_ms="), (2, ".ab_precision")]


def test_the_timing_loop_takes_no_knob_only_the_stop_rule():
    params = set(inspect.signature(adaptive_ab).parameters)
    assert "stop_rule" in params
    assert not params & (KNOBS | {"threshold", "floor", "precision", "confidence"})


def _project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.kperf]\nab_threshold = 0.03\nab_floor_ms = 0.002\nab_precision = 0.02\n"
    )
    return tmp_path


@pytest.mark.parametrize(
    "marker, threshold",
    [
        (None, 0.03),
        ({}, 0.03),
        ({"time": 0.07}, 0.07),
        ({"time.median": 0.04, "time": 0.07}, 0.04),
        ({"time": None, "registers": 0}, 0.03),
    ],
)
def test_the_policy_is_the_marker_over_the_settings_chain(tmp_path, monkeypatch, marker, threshold):
    for k in KNOBS:
        monkeypatch.delenv(f"KPERF_{k.upper()}", raising=False)
    monkeypatch.setenv("KPERF_AB_FLOOR_MS", "0.004")  # the environment over [tool.kperf]
    s = load_settings(_project(tmp_path))
    assert ABPolicy.from_settings(s, marker) == ABPolicy(
        ab_threshold=threshold, ab_floor_ms=0.004, ab_precision=0.02
    )


def test_the_policy_reaches_the_stop_rule_unchanged(tmp_path, monkeypatch):
    """From the settings and the marker, through the request and capture's timing loop, to the
    judge's comparison and its settled check: the same three values."""
    for k in KNOBS:
        monkeypatch.delenv(f"KPERF_{k.upper()}", raising=False)
    policy = ABPolicy.from_settings(load_settings(_project(tmp_path)), {"time": 0.07})
    seen: dict[str, float] = {}
    compare, settled = ab.compare_samples, ab.settled

    def spy_compare(b, h, **kw):
        seen.update(threshold=kw["threshold"], floor=kw["floor"])
        return compare(b, h, **kw)

    def spy_settled(comparison, precision):
        seen["precision"] = precision
        return settled(comparison, precision)

    monkeypatch.setattr(ab, "compare_samples", spy_compare)
    monkeypatch.setattr(ab, "settled", spy_settled)
    req = measure.Request(nodeid="t::x", name="x", ab=policy)
    dev = FakeDevice()
    r = adaptive_ab(
        dev.kernel("base", 1.0), dev.kernel("head", 1.0), backend=dev, cfg=TimingConfig(use_graph=False),
        stop_rule=measure.ab_stop_rule(req), max_pairs=40,
    )  # fmt: skip
    assert seen == {"threshold": 0.07, "floor": 0.002, "precision": 0.02}
    assert r.threshold == pytest.approx(0.07)  # the band the verdict used: the marker's


def test_an_ab_without_a_policy_is_refused():
    with pytest.raises(ValueError, match="ABPolicy"):
        measure.ab_stop_rule(measure.Request(nodeid="t::x", name="x"))


def test_the_agents_job_carries_the_policy_whole():
    """The harness runs in another process: the job holds the policy's fields as they are, and
    the harness rebuilds the same policy from them."""
    policy = ABPolicy(ab_threshold=0.02, ab_floor_ms=0.003, ab_precision=0.01)
    job = json.loads(json.dumps({"ab": asdict(policy)}))
    assert ABPolicy(**job["ab"]) == policy
