"""What users see from the committed databases does not change by accident.

`tests/data/golden/` holds what `kperf analyze --db`, `kperf compare` and `kperf report` print and
write for `baselines/main.db` and `tests/data/**/*.db` (scripts/golden_outputs.py). A refactor must
leave it byte-identical; a deliberate change of output regenerates it in the same commit
(`python scripts/golden_outputs.py --out tests/data/golden`) and says why.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _golden_module():
    spec = importlib.util.spec_from_file_location("golden_outputs", ROOT / "scripts/golden_outputs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_outputs_on_committed_databases_are_unchanged(tmp_path: Path) -> None:
    golden = _golden_module()
    golden.produce(ROOT, tmp_path / "new")
    diff = golden.tree_diff(ROOT / "tests/data/golden", tmp_path / "new")
    assert not diff, "outputs changed; if deliberate, regenerate the goldens:\n" + "\n".join(diff[:200])


def test_a_changed_output_is_reported(tmp_path: Path) -> None:
    golden = _golden_module()
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "x.txt").write_text("same\nline\n")
    (b / "x.txt").write_text("same\nother\n")
    (b / "y.txt").write_text("new\n")
    diff = golden.tree_diff(a, b)
    assert any(line.startswith("+other") for line in diff)
    assert "only in new: y.txt" in diff
