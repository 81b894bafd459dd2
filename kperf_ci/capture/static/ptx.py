"""The instruction mix of a PTX module: its instruction statements (directives, labels, braces
and comments dropped), each statement's mnemonic, and the class of each mnemonic.

The classes are :data:`kperf_ci.capture.static.sass.CLASSES`, shared with the SASS mix (the list of
which PTX mnemonics fall in each is in :mod:`kperf_ci.capture.static.sass`' docstring); PTX is read from
the compiled kernel's ``asm["ptx"]``, no tool runs.
"""

from __future__ import annotations

import re
from collections import Counter


def ptx_instructions(ptx: str) -> list[str]:
    """Instruction statements of a PTX module (directives, labels, braces, comments dropped)."""
    # drop comments, then directive lines (.loc/.file/.reg/.section/... , with or without ';')
    text = re.sub(r"/\*.*?\*/", "", ptx, flags=re.S)
    kept = []
    for line in text.splitlines():
        line = line.split("//", 1)[0].strip()
        if not line or line.startswith("."):
            continue
        kept.append(line)
    text = "\n".join(kept)
    insts = []
    for stmt in text.split(";"):
        s = stmt.strip()
        while s and s[0] in "{}()":
            s = s[1:].strip()
        # labels ("$L__BB0_1:" possibly followed by the instruction)
        while True:
            m = re.match(r"^[$\w]+:\s*", s)
            if not m or s.startswith("::"):
                break
            s = s[m.end() :]
        if not s or s.startswith(".") or s.startswith("}") or s.startswith("{"):
            continue
        if s.startswith("@"):
            parts = s.split(None, 1)
            s = parts[1] if len(parts) > 1 else ""
        if not s or not re.match(r"^[a-z]", s):
            continue
        insts.append(s)
    return insts


def ptx_opcode(stmt: str) -> str:
    return stmt.split(None, 1)[0]


def _is_shared(mods: set[str], opcode: str) -> bool:
    """A shared-memory state space: ``.shared``, ``.shared::cta`` or ``.shared::cluster``."""
    return "shared" in mods or "shared::cta" in opcode or "shared::cluster" in opcode


def _classify_load(mods: set[str], opcode: str) -> str:
    """``ld``/``ldu``: shared, else global (a generic address counts as global), else other."""
    if _is_shared(mods, opcode):
        return "shared_load"
    generic_or_global = "global" in mods or not (mods & {"local", "param", "const"})
    return "global_load" if generic_or_global else "other"


def _classify_store(mods: set[str], opcode: str) -> str:
    """``st``: shared, else global (a generic address counts as global), else other."""
    if _is_shared(mods, opcode):
        return "shared_store"
    return "global_store" if ("global" in mods or len(mods & {"local", "param"}) == 0) else "other"


def _classify_copy(mods: set[str]) -> str:
    """``cp``: a bulk copy is TMA, an async one cp.async."""
    if "bulk" in mods:
        return "tma"
    if "async" in mods:
        return "async_copy"
    return "other"


def classify_ptx(opcode: str) -> str:
    parts = opcode.split(".")
    base = parts[0]
    mods = set(parts[1:])
    if base in ("ld", "ldu"):
        return _classify_load(mods, opcode)
    if base == "st":
        return _classify_store(mods, opcode)
    if base == "ldmatrix":
        return "shared_load"
    if base == "stmatrix":
        return "shared_store"
    if base == "mma":
        return "mma"
    if base == "wgmma" or (base == "tcgen05" and "mma" in mods):
        return "wgmma"
    if base == "cp":
        return _classify_copy(mods)
    if base in (
        "fma",
        "add",
        "sub",
        "mul",
        "mad",
        "mul24",
        "mad24",
        "and",
        "or",
        "xor",
        "not",
        "shl",
        "shr",
        "min",
        "max",
        "neg",
        "abs",
        "setp",
        "selp",
        "set",
        "slct",
        "lop3",
        "shf",
        "div",
        "rem",
        "copysign",
        "testp",
        "popc",
        "clz",
        "brev",
        "bfe",
        "bfi",
        "prmt",
        "dp4a",
        "dp2a",
        "addc",
        "subc",
        "madc",
        "fns",
        "bmsk",
        "szext",
    ):
        return "fma_alu"
    if base in ("ex2", "lg2", "rsqrt", "sqrt", "rcp", "sin", "cos", "tanh"):
        return "sfu"
    if base in ("bar", "barrier", "membar", "fence", "mbarrier"):
        return "barrier"
    if base in ("bra", "ret", "exit", "call", "brx", "trap"):
        return "branch"
    if base == "cvt":
        return "convert"
    return "other"


def ptx_mix(ptx: str) -> tuple[int, Counter]:
    insts = ptx_instructions(ptx)
    c: Counter = Counter(classify_ptx(ptx_opcode(s)) for s in insts)
    return len(insts), c
