"""Static metrics of one compiled kernel, read from its cubin and PTX without a GPU.

Uses the NVIDIA binaries shipped inside the Triton wheel (``triton/backends/nvidia/bin``):

- ``cuobjdump -res-usage``: REG, STACK, SHARED (static), LOCAL;
- ``nvdisasm -c``: the SASS, normalized (addresses, encodings, headers and comments stripped;
  nvdisasm numbers branch labels ``.L_x_N`` in code order) and hashed, and its instruction mix;
- ptxas' verbose report ("N bytes spill stores, M bytes spill loads"): taken from the compile
  when the worker captured it (``metadata["kperf_ptxas"]``), otherwise by running
  ``ptxas -v`` on the PTX once more (cheap for Triton-sized kernels).

Metric names, units and directions come from the catalogue (:mod:`kperf_ci.metrics`,
``docs/METRICS.md``). The same input gives byte-identical output.

Instruction classes (SASS opcode without modifiers / PTX mnemonic): global_load (LDG, generic LD;
ld.global), global_store (STG, ST; st.global), shared_load (LDS, LDSM; ld.shared, ldmatrix),
shared_store (STS, STSM; st.shared, stmatrix), mma (HMMA/IMMA/DMMA/...; mma.sync), wgmma
(Hopper HGMMA/IGMMA/QGMMA and Blackwell tcgen05 UTCHMMA/UTCIMMA/UTCQMMA/UTCOMMA; wgmma.*,
tcgen05.mma), tma (UTMALDG/UTMASTG/UBLKCP/...; cp.async.bulk*), async_copy (LDGSTS, LDGDEPBAR;
cp.async), fma_alu (FP and integer arithmetic, compare and logic: FFMA/FADD/FMUL/IMAD/IADD3/
LOP3/ISETP/SEL/...), sfu (MUFU; ex2/lg2/rsqrt/sqrt/rcp/sin/cos/tanh), barrier (BAR, MEMBAR, FENCE,
SYNCS (mbarrier), DEPBAR, WARPSYNC, UTCBAR; bar/barrier/membar/fence/mbarrier), branch (BRA, EXIT,
RET, CALL, BSSY/BSYNC, ...; bra/ret/exit/call), convert (F2F/F2FP/I2F/F2I/...; cvt), other (moves,
constant/param loads, special registers, atomics, ...). NOP padding is not counted.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from functools import cache
from typing import Any

from kperf_ci.capture.static.ptx import ptx_mix
from kperf_ci.hardware import arch_capability
from kperf_ci.metrics import metric
from kperf_ci.model import Metric

CLASSES = (
    "global_load",
    "global_store",
    "shared_load",
    "shared_store",
    "mma",
    "wgmma",
    "tma",
    "async_copy",
    "fma_alu",
    "sfu",
    "barrier",
    "branch",
    "convert",
    "other",
)

#: Every metric :func:`static_metrics` writes, in its order, whatever the kernel: a cache entry
#: that lacks any of them is refused (:mod:`kperf_ci.capture.static.metrics_entry`), since a
#: metric missing from one side of a comparison reads as "not compared", never as a regression.
METRIC_NAMES = (
    "registers",
    "spills",
    "spill_loads",
    "stack_bytes",
    "local_bytes",
    "shared_bytes",
    "num_warps",
    "num_stages",
    "cubin_bytes",
    "ptx.instructions",
    "sass.instructions",
    *(f"sass.{cls}" for cls in CLASSES),
    *(f"ptx.{cls}" for cls in CLASSES),
)


# --------------------------------------------------------------------------------------------
# tools


@cache
def tool(name: str) -> str:
    """Path of an NVIDIA tool: Triton's bundled copy first, then $PATH."""
    env = os.environ.get(f"TRITON_{name.upper().replace('-', '_')}_PATH")
    if env and os.path.exists(env):
        return env
    try:
        import triton

        p = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
        if os.path.exists(p):
            return p
    except ImportError:
        pass
    p = shutil.which(name)
    if p:
        return p
    raise FileNotFoundError(f"{name} not found (install triton, or put it on PATH)")


def _run(cmd: list[str], data: bytes | None = None, suffix: str = ".cubin") -> str:
    with tempfile.TemporaryDirectory(prefix="kperf-") as d:
        args = list(cmd)
        if data is not None:
            path = os.path.join(d, "k" + suffix)
            with open(path, "wb") as f:
                f.write(data)
            args = [a if a != "{}" else path for a in args]
        r = subprocess.run(args, capture_output=True, text=True, cwd=d)
    if r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise RuntimeError(f"{os.path.basename(cmd[0])} failed: {msg[-1] if msg else r.returncode}")
    return r.stdout


# --------------------------------------------------------------------------------------------
# resource usage


_RES_RE = re.compile(r"\b(REG|STACK|SHARED|LOCAL):(\d+)")


def res_usage(cubin: bytes) -> dict[str, int]:
    """``cuobjdump -res-usage``: {"REG", "STACK", "SHARED", "LOCAL"} of the (first) kernel."""
    out = _run([tool("cuobjdump"), "-res-usage", "{}"], cubin)
    return parse_res_usage(out)


def parse_res_usage(text: str) -> dict[str, int]:
    res: dict[str, int] = {}
    for line in text.splitlines():
        if "REG:" in line:
            for k, v in _RES_RE.findall(line):
                res.setdefault(k, int(v))
            break
    return res


_PTXAS_PATTERNS = {
    "stack_frame": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "registers": re.compile(r"Used (\d+) registers"),
    "smem": re.compile(r"(\d+) bytes smem"),
}


def parse_ptxas_log(text: str) -> dict[str, int]:
    """Numbers of ptxas' ``-v`` report (first function)."""
    out: dict[str, int] = {}
    for k, rx in _PTXAS_PATTERNS.items():
        m = rx.search(text)
        if m:
            out[k] = int(m.group(1))
    return out


def ptxas_info(ptx: str, arch: str | int) -> dict[str, int]:
    """Run ``ptxas -v`` on the PTX (only for its report; the binary is thrown away)."""
    cc = arch_capability(arch)
    suffix = "a" if cc >= 90 else ""
    name = "ptxas-blackwell" if cc >= 100 else "ptxas"
    try:
        exe = tool(name)
    except FileNotFoundError:
        exe = tool("ptxas")
    with tempfile.TemporaryDirectory(prefix="kperf-") as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run(
            [exe, "-v", f"--gpu-name=sm_{cc}{suffix}", src, "-o", os.path.join(d, "k.o")],
            capture_output=True,
            text=True,
        )
    if r.returncode != 0:
        raise RuntimeError("ptxas -v failed: " + (r.stderr.strip().splitlines() or ["?"])[-1])
    return parse_ptxas_log(r.stderr + r.stdout)


# --------------------------------------------------------------------------------------------
# SASS


def disassemble(cubin: bytes) -> str:
    """Raw ``nvdisasm -c`` text (code sections only, branch labels resolved)."""
    try:
        return _run([tool("nvdisasm"), "-c", "{}"], cubin)
    except RuntimeError:
        # dataflow analysis can fail on unusual cubins; retry without it
        return _run([tool("nvdisasm"), "-c", "-ndf", "{}"], cubin)


_ADDR_RE = re.compile(r"/\*[0-9a-fA-F]{4,}\*/")
_COMMENT_RE = re.compile(r"/\*.*?\*/|//.*$")


def normalize_sass(raw: str) -> str:
    """Instructions and labels only, one per line, whitespace-normalized.

    Strips: header/section directives, addresses ``/*0040*/``, encodings and comments,
    the function's own symbol labels (kernel names stay visible through the result's key).
    """
    out: list[str] = []
    for line in raw.splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith("//") or s.startswith("."):
            # directives (.section, .headerflags, ...) and labels like .L_x_3:
            if re.match(r"^\.L_x_\d+:$", s):
                out.append(s)
            continue
        if s.endswith(":") and not _ADDR_RE.search(s):
            continue  # symbol labels ("kernel:", ".text.kernel:")
        s = _ADDR_RE.sub("", s)
        s = _COMMENT_RE.sub("", s).strip()
        if not s:
            continue
        s = re.sub(r"\s+", " ", s)
        s = re.sub(r"\s*;\s*$", "", s)
        s = s.replace(" ,", ",")
        if s in ("{", "}"):
            continue
        out.append(s)
    return "\n".join(out) + ("\n" if out else "")


def sass_instructions(normalized: str) -> list[str]:
    """Instruction lines of normalized SASS (labels dropped; NOP padding dropped)."""
    insts = []
    for line in normalized.splitlines():
        if line.endswith(":"):
            continue
        op = sass_opcode(line)
        if op == "NOP":
            continue
        insts.append(line)
    return insts


def sass_opcode(line: str) -> str:
    """Base opcode: predicate and modifiers removed ("@!P0 LDG.E.128 ..." -> "LDG")."""
    toks = line.split()
    if toks and toks[0].startswith("@"):
        toks = toks[1:]
    if not toks:
        return ""
    return toks[0].split(".")[0]


_SASS_CLASS = {}
for _cls, _ops in {
    "global_load": "LDG LD",
    "global_store": "STG ST",
    "shared_load": "LDS LDSM",
    "shared_store": "STS STSM",
    "mma": "HMMA IMMA DMMA BMMA QMMA OMMA",
    "wgmma": "HGMMA IGMMA QGMMA BGMMA GMMA UTCHMMA UTCIMMA UTCQMMA UTCOMMA UTCMMA",
    "tma": "UTMALDG UTMASTG UTMAPF UTMAREDG UTMACCTL UTMACMDFLUSH UBLKCP UBLKRED UBLKPF",
    "async_copy": "LDGSTS LDGDEPBAR",
    "fma_alu": (
        "FFMA FADD FMUL FMNMX FSEL FSET FSETP FCHK FMUL32I FADD32I FFMA32I HFMA2 HADD2 HMUL2 HMNMX2 "
        "HSETP2 HSET2 DFMA DADD DMUL DSETP IMAD IMAD32I IADD3 IADD IADD32I IMUL IMNMX VIMNMX VIMNMX3 "
        "ISETP ISET IABS LOP3 LOP LOP32I SHF SHL SHR LEA LEA_HI SEL IDP IDP4A POPC FLO BREV BMSK "
        "PRMT SGXT VABSDIFF VABSDIFF4 FMNMX3 FADD2 FMUL2 FFMA2 UIADD3 UIMAD ULOP3 USHF ULEA USEL "
        "UISETP ULOP UPRMT UFLO UPOPC UBREV USGXT UBMSK UIMNMX VIADD VIADDMNMX PLOP3 UPLOP3 IADD32I"
    ),
    "sfu": "MUFU",
    "barrier": (
        "BAR MEMBAR FENCE SYNCS WARPSYNC DEPBAR ERRBAR CCTL CCTLL ARRIVES UCGABAR_ARV UCGABAR_WAIT "
        "UCGABAR UTCBAR WARPGROUP WARPGROUPSET"
    ),
    "branch": "BRA BRX BRXU JMP JMX EXIT RET CALL BSSY BSYNC BREAK BPT KILL YIELD",
    "convert": "F2F F2FP F2I I2F I2I I2IP FRND F2IP I2FP UI2F UF2I",
}.items():
    for _op in _ops.split():
        _SASS_CLASS.setdefault(_op, _cls)


def classify_sass(opcode: str) -> str:
    return _SASS_CLASS.get(opcode, "other")


def sass_mix(normalized: str) -> Counter:
    c: Counter = Counter()
    for line in sass_instructions(normalized):
        c[classify_sass(sass_opcode(line))] += 1
    return c


# --------------------------------------------------------------------------------------------
# all together


def _meta(metadata: Any, key: str, default: Any = None) -> Any:
    if metadata is None:
        return default
    if isinstance(metadata, dict):
        return metadata.get(key, default)
    return getattr(metadata, key, default)


def static_metrics(compiled_asm: dict[str, Any], metadata: Any, arch: str) -> tuple[list[Metric], str, str]:
    """(metrics, normalized SASS, sha256 of the normalized SASS) of one compiled kernel.

    ``compiled_asm``: ``CompiledKernel.asm`` (needs "cubin"; "ptx" for PTX metrics and spills).
    ``metadata``: ``CompiledKernel.metadata`` (namedtuple) or a dict (shared, num_warps,
    num_stages, and optionally kperf_ptxas = parsed ptxas -v report).
    """
    cubin = compiled_asm.get("cubin")
    if isinstance(cubin, str):
        cubin = cubin.encode("latin-1")
    if not cubin:
        raise ValueError("no cubin in compiled kernel")
    ptx = compiled_asm.get("ptx") or ""

    res = res_usage(cubin)
    ptxas = _meta(metadata, "kperf_ptxas") or None
    if isinstance(ptxas, (list, tuple)):
        ptxas = dict(ptxas)
    if not ptxas and ptx:
        ptxas = ptxas_info(ptx, arch)
    ptxas = ptxas or {}

    raw = disassemble(cubin)
    normalized = normalize_sass(raw)
    digest = hashlib.sha256(normalized.encode()).hexdigest()
    smix = sass_mix(normalized)
    n_sass = sum(smix.values())
    n_ptx, pmix = ptx_mix(ptx) if ptx else (0, Counter())

    shared = int(_meta(metadata, "shared", 0) or 0) + int(res.get("SHARED", 0))
    regs = res.get("REG", ptxas.get("registers", 0))
    values = {
        "registers": regs,
        "spills": ptxas.get("spill_stores", 0),
        "spill_loads": ptxas.get("spill_loads", 0),
        "stack_bytes": res.get("STACK", ptxas.get("stack_frame", 0)),
        "local_bytes": res.get("LOCAL", 0),
        "shared_bytes": shared,
        "num_warps": _meta(metadata, "num_warps", 0) or 0,
        "num_stages": _meta(metadata, "num_stages", 0) or 0,
        "cubin_bytes": len(cubin),
        "ptx.instructions": n_ptx,
        "sass.instructions": n_sass,
        **{f"sass.{cls}": smix.get(cls, 0) for cls in CLASSES},
        **{f"ptx.{cls}": pmix.get(cls, 0) for cls in CLASSES},
    }
    # written in METRIC_NAMES' order, all of them: what a cache entry is checked against
    return [metric(name, values[name]) for name in METRIC_NAMES], normalized, digest
