"""Hardware facts have one home, kperf_ci/hardware.py: other modules derive from it. Two tables
had drifted apart (the compile worker's stand-in said sm_89 has 142 SMs, hardware.py 58)."""

from __future__ import annotations

import ast
from pathlib import Path

from kperf_ci.capture.static._standins import device_properties
from kperf_ci.hardware import ARCHS, GPUS, MAX_SMS, max_shared_per_block

PACKAGE = Path(__file__).resolve().parents[2] / "kperf_ci"

#: Shared-memory sizes are distinctive numbers: one written anywhere but hardware.py is a copy.
#: 65536 (sm_75's) is left out: it is 64 Ki, written for many other reasons.
SHARED_SIZES = (
    {a.smem_per_block for a in ARCHS.values()} | {a.smem_per_sm for a in ARCHS.values() if a.smem_per_sm}
) - {65536}
#: SM counts are small numbers that occur for other reasons; a copy is one stored under a name
#: that says "SM count".
SM_COUNTS = {a.sm_count for a in ARCHS.values() if a.sm_count} | {g.sm_count for g in GPUS}
SM_COUNT_NAMES = {"multiprocessor_count", "sm_count", "num_sms", "n_sms"}


def _hardcoded_facts(source: str) -> list[str]:
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value in SHARED_SIZES:
            found.append(f"line {node.lineno}: shared-memory size {node.value}")
        pairs: list[tuple[str | None, ast.AST]] = []
        if isinstance(node, ast.Dict):
            pairs = [
                (k.value if isinstance(k, ast.Constant) else None, v)
                for k, v in zip(node.keys, node.values, strict=True)
            ]
        elif isinstance(node, ast.Call):
            pairs = [(kw.arg, kw.value) for kw in node.keywords]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            pairs = [(t.id.lower(), node.value) for t in targets if isinstance(t, ast.Name) and node.value]
        for key, value in pairs:
            if (
                key in SM_COUNT_NAMES
                and isinstance(value, ast.Constant)
                and type(value.value) is int
                and value.value in SM_COUNTS
            ):
                found.append(f"line {value.lineno}: SM count {value.value} as {key}")
    return found


def test_no_module_but_hardware_hardcodes_sm_counts_or_shared_memory():
    found = {
        p.relative_to(PACKAGE).as_posix(): hits
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "hardware.py" and (hits := _hardcoded_facts(p.read_text()))
    }
    assert not found, f"derive these from kperf_ci.hardware: {found}"


def test_the_check_sees_a_copy():
    src = 'P = {89: {"multiprocessor_count": 142, "max_shared_mem": 101376}}\nx = f(sm_count=132)\n'
    assert len(_hardcoded_facts(src)) == 3


def test_standin_device_reports_hardware_py_values():
    for lim in ARCHS.values():
        if lim.sm_count is None:
            continue
        props = device_properties(lim.capability)
        assert props["multiprocessor_count"] == lim.sm_count, lim.arch
        assert props["max_shared_mem"] == lim.smem_per_block == max_shared_per_block(lim.capability)
        assert props["max_num_regs"] == lim.regs_per_sm
    assert device_properties(89)["multiprocessor_count"] == ARCHS["sm_89"].sm_count
    assert device_properties(87) == device_properties(86)  # untabulated: the nearest lower arch
    assert MAX_SMS == 8 * 148
