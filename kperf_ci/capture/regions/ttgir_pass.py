"""The region pass: which regions to insert (:class:`RegionConfig`) and the text edit of a
kernel's final TTGIR that inserts them (:func:`insert_regions`, pure: unit-tested on strings).

Regions:

- ``kernel``: function entry to just before ``tt.return``;
- ``prologue``: entry to the first top-level ``scf.for``; ``loop0``, ``loop1``, ...: each
  top-level ``scf.for``; ``epilogue``: after the last top-level loop to ``tt.return``;
- ``body`` instead of prologue/epilogue in a kernel without a top-level loop (its one pair of
  records also serves as ``kernel``, which would span exactly the same code);
- optional (``RegionConfig``): ``loopN.iter`` around each iteration's body, and ``dot<i>``,
  ``copy<i>``, ``wait<i>`` around single tensor-core, async-copy and wait operations.

Every start has its end in the same block (Proton rejects crossing scopes). Scopes the user
wrote with ``triton.profiler.language`` stay; an automatic region that would cross one, or whose
name the user already uses, is left out and named in the warnings.

The configuration's :meth:`RegionConfig.mode_string` tags the compile option
``instrumentation_mode`` (``:kperf_regions=<config key>``): that is how the hook
(:mod:`.hook`) recognises the builds to edit and how each configuration gets its own
cache key.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field

from kperf_ci.model import canonical_json

TAG = "kperf_regions"
TAG_RE = re.compile(r":" + TAG + r"=([0-9a-f]+)")


OP_CLASSES: dict[str, tuple[str, ...]] = {
    "dot": ("tt.dot", "tt.dot_scaled", "ttng.warp_group_dot", "ttng.tc_gen5_mma", "ttng.tc_gen5_mma_scaled"),
    "copy": (
        "ttg.async_copy_global_to_local",
        "ttng.async_tma_copy_global_to_local",
        "ttng.async_tma_gather",
        "ttng.async_tma_copy_local_to_global",
    ),
    "wait": ("ttg.async_wait", "ttng.warp_group_dot_wait", "ttng.wait_barrier", "ttng.async_tma_store_wait"),
}
GRANULARITIES = ("cta", "warp", "warp_group")
WARPS_PER_GROUP = 4
PHASE_REGIONS = re.compile(r"^(prologue|epilogue|body|loop\d+)$")


# --------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class RegionConfig:
    """Which regions to insert and how Proton records them."""

    kernel: bool = True
    phases: bool = True  # prologue / loopN / epilogue, or body
    per_iteration: bool = False  # loopN.iter inside each top-level loop
    ops: tuple[str, ...] = ()  # any of "dot", "copy", "wait"
    granularity: str = "cta"  # "cta" (warp 0 records), "warp" or "warp_group" (all warps record)
    # "global" (default) or "shared". Records go straight to global memory: on an H100 the
    # shared-memory buffer cost the layernorm example +15..17% against +7.8..8.2% (see
    # effective_buffer_size and benchmarks/results/instrumentation_overhead.md)
    buffer_type: str = "global"
    buffer_strategy: str = "circular"
    buffer_size: int | None = None  # bytes per CTA; 0: Proton's default; None: auto (below)
    optimizations: str = ""  # Proton's, e.g. "clock32,time_shift"

    def __post_init__(self):
        unknown = set(self.ops) - set(OP_CLASSES)
        if unknown:
            raise ValueError(f"unknown op classes {sorted(unknown)}; choose from {sorted(OP_CLASSES)}")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}, got {self.granularity!r}")

    def effective_buffer_size(self) -> int:
        """Bytes of Proton's per-CTA buffer. Auto (``buffer_size=None``): 512 when only warp 0
        records the top-level regions (each runs once per CTA: 2 records of 8 bytes per region,
        so 512 bytes hold 32 regions; more are dropped and reported); Proton's default otherwise.

        Why small: Proton's default is 8 KB per CTA (64 KB of shared memory in the matmul
        example with a shared buffer) and the profile scratch is allocated for every CTA of the
        grid (8320 bytes x 65,536 CTAs = 545 MB for the vector-add example; 640 bytes -> 42 MB).
        It does not buy device time: on an H100 the layernorm example cost +15.0% with a 512-byte
        shared buffer and +16.7% with 8 KB; what helped was the global buffer (+8.2%), which
        also drops the end-of-CTA barrier and copy-out of the shared buffer."""
        if self.buffer_size is not None:
            return int(self.buffer_size)
        if self.granularity == "cta" and not self.per_iteration and not self.ops:
            return 512
        return 0

    def key(self) -> str:
        return hashlib.sha256(canonical_json(asdict(self)).encode()).hexdigest()[:16]

    def proton_mode(self):
        """Proton's mode. Always Proton's warp granularity: its 3.6 lowering rejects the others
        ("granularity must be warp for now"). "cta" records in warp 0 only (Proton's selective
        sampling): the records' device cost scales with the number of recording warps, and on
        an H100 all-warp recording cost 7-25% on short-CTA memory-bound kernels. "warp" and
        "warp_group" record in every warp; warp groups are aggregated afterwards (start =
        earliest warp, end = latest warp)."""
        from triton.profiler import mode

        sampling = (
            {"sampling_strategy": "selective", "sampling_options": "0"} if self.granularity == "cta" else {}
        )
        return mode.Default(
            metric_type="cycle",
            granularity="warp",
            **sampling,
            buffer_type=self.buffer_type,
            buffer_strategy=self.buffer_strategy,
            buffer_size=self.effective_buffer_size(),
            optimizations=self.optimizations,
        )

    def mode_string(self) -> str:
        """The compile option ``instrumentation_mode`` for this configuration (cache key)."""
        return f"{self.proton_mode()}:{TAG}={self.key()}"


# --------------------------------------------------------------------------------------------
# the text pass (pure; unit-tested on strings)


@dataclass
class PassReport:
    regions: list[str] = field(default_factory=list)  # in order of their start
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    user_scopes: list[str] = field(default_factory=list)


def _strip_strings(line: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)


def _brace_delta(line: str) -> int:
    s = _strip_strings(line)
    return s.count("{") - s.count("}")


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _op_name(line: str) -> str:
    s = line.strip()
    m = re.match(r"^(?:%[^=]+=\s*)?\"?([A-Za-z_][\w.]*)", s)
    return m.group(1) if m else ""


_RECORD = re.compile(r'^\s*proton\.record\s+(start|end)\s+"((?:[^"\\]|\\.)*)"')


def _record(line: str) -> tuple[str, str] | None:
    m = _RECORD.match(line)
    return (m.group(1), m.group(2)) if m else None


def regions_in_ttgir(text: str) -> list[str]:
    """Scope names recorded in a TTGIR text, in order of first start."""
    out: list[str] = []
    for line in text.splitlines():
        r = _record(line)
        if r and r[0] == "start" and r[1] not in out:
            out.append(r[1])
    return out


def _top_level_ops(lines: list[str], body_start: int, body_end: int) -> list[tuple[int, int]]:
    """(first line, last line) of each op directly in the block lines[body_start:body_end]."""
    ops = []
    i = body_start
    while i < body_end:
        line = lines[i]
        if not line.strip() or line.strip().startswith("//"):
            i += 1
            continue
        depth = _brace_delta(line)
        j = i
        while depth > 0 and j + 1 < body_end:
            j += 1
            depth += _brace_delta(lines[j])
        ops.append((i, j))
        i = j + 1
    return ops


def _find_kernel(lines: list[str]) -> tuple[int, int] | None:
    """(line of `tt.func public @...`, line of its closing brace)."""
    for i, line in enumerate(lines):
        if re.match(r"^\s*tt\.func\s+public\s+@", line):
            depth = _brace_delta(line)
            j = i
            while depth > 0 and j + 1 < len(lines):
                j += 1
                depth += _brace_delta(lines[j])
            return i, j
    return None


def _block_of(lines: list[str], first: int, last: int) -> tuple[int, int]:
    """Body lines (start, end exclusive) of a single-region op spanning lines[first..last]."""
    return first + 1, last  # the op's own `{` line and its closing `}` line


#: Insertion points: line index -> [(sort key, text)], each text inserted before that line.
_Insertions = dict[int, list[tuple[tuple, str]]]


def _add(ins: _Insertions, pos: int, key: tuple, text_: str) -> None:
    ins.setdefault(pos, []).append((key, text_))


def insert_regions(text: str, cfg: RegionConfig) -> tuple[str, PassReport]:
    """Insert the configured `proton.record` pairs into a TTGIR module text."""
    rep = PassReport()
    lines = text.split("\n")
    found = _find_kernel(lines)
    if found is None:
        rep.warnings.append("no public tt.func found: nothing instrumented")
        return text, rep
    f0, f1 = found
    ops = _top_level_ops(lines, f0 + 1, f1)
    if not ops:
        return text, rep
    names = [_op_name(lines[a]) for a, _ in ops]
    if names[-1] != "tt.return":
        rep.warnings.append(
            f"the kernel's last top-level op is {names[-1]!r}, not tt.return: nothing instrumented"
        )
        return text, rep
    ret = len(ops) - 1
    user = _user_scopes(lines, ops)
    user_names = set(regions_in_ttgir(text))
    rep.user_scopes = sorted(user_names)
    loops = [k for k, n in enumerate(names) if n == "scf.for"]

    ins: _Insertions = {}
    accepted = _accepted(_candidates(cfg, loops, ret), user, user_names, rep)
    _add_phase_records(ins, lines, ops, accepted, rep)
    if cfg.per_iteration:
        _add_iteration_records(ins, lines, ops, loops, user_names, rep)
    if cfg.ops:
        _add_op_records(ins, lines, (f0, f1), cfg.ops, user_names, rep)
    if not ins:
        return text, rep
    out: list[str] = []
    for i, line in enumerate(lines):
        for _, t in sorted(ins.get(i, []), key=lambda kv: kv[0]):
            out.append(t)
        out.append(line)
    return "\n".join(out), rep


def _user_scopes(lines: list[str], ops: list[tuple[int, int]]) -> list[tuple[str, int, int]]:
    """The user's own scopes at the top level: (name, start op index, end op index)."""
    user: list[tuple[str, int, int]] = []
    open_: dict[str, int] = {}
    for k, (a, _) in enumerate(ops):
        r = _record(lines[a])
        if r:
            if r[0] == "start":
                open_[r[1]] = k
            elif r[1] in open_:
                user.append((r[1], open_.pop(r[1]), k))
    return user


def _candidates(cfg: RegionConfig, loops: list[int], ret: int) -> list[tuple[str, int, int, int]]:
    """The phase regions the config asks for, over top-level op indices [a, b): (name, a, b, rank)."""
    cands: list[tuple[str, int, int, int]] = []
    if cfg.kernel and (loops or not cfg.phases):
        cands.append(("kernel", 0, ret, 0))
    if cfg.phases:
        if loops:
            if loops[0] > 0:
                cands.append(("prologue", 0, loops[0], 1))
            for n, k in enumerate(loops):
                cands.append((f"loop{n}", k, k + 1, 1))
            if loops[-1] + 1 < ret:
                cands.append(("epilogue", loops[-1] + 1, ret, 1))
        else:
            # a loop-free kernel: `body` spans exactly what `kernel` would; one pair of records
            # serves both names (RegionResult reports `kernel` as an alias of `body`)
            cands.append(("body", 0, ret, 1))
    return cands


def _accepted(
    cands: list[tuple[str, int, int, int]],
    user: list[tuple[str, int, int]],
    user_names: set[str],
    rep: PassReport,
) -> list[tuple[str, int, int, int]]:
    """The candidates that fit around the user's scopes (edges trimmed past a user record whose
    partner lies outside); those that would be empty, repeat a user scope's name or cross a user
    scope are skipped, with a warning for the last two."""

    def crosses(a: int, b: int) -> str | None:
        for name, us, ue in user:
            if (a <= us < b) != (a <= ue < b):
                return name
        return None

    partner: dict[int, int] = {}
    for _, us, ue in user:
        partner[us], partner[ue] = ue, us

    def trim(a: int, b: int) -> tuple[int, int]:
        """Move the region's edges past user records whose partner lies outside it."""
        while a < b and a in partner and not (a <= partner[a] < b):
            a += 1
        while b > a and (b - 1) in partner and not (a <= partner[b - 1] < b):
            b -= 1
        return a, b

    accepted: list[tuple[str, int, int, int]] = []
    for name, a, b, rank in cands:
        a, b = trim(a, b)
        if a >= b:
            rep.skipped.append(name)
            continue
        if name in user_names:
            rep.skipped.append(name)
            rep.warnings.append(f"region {name!r} left out: the kernel already has a scope of that name")
            continue
        if (who := crosses(a, b)) is not None:
            rep.skipped.append(name)
            rep.warnings.append(f"region {name!r} left out: it would cross the user scope {who!r}")
            continue
        accepted.append((name, a, b, rank))
    return accepted


def _add_phase_records(
    ins: _Insertions,
    lines: list[str],
    ops: list[tuple[int, int]],
    accepted: list[tuple[str, int, int, int]],
    rep: PassReport,
) -> None:
    """A start/end record pair around each accepted phase region, at the kernel body's indent."""
    body_indent = _indent(lines[ops[0][0]])
    for name, a, b, rank in accepted:
        start_line = ops[a][0]
        end_line = ops[b - 1][1] + 1  # before the line after the last op of the region
        # ends first (inner before outer), then starts (outer before inner)
        _add(ins, start_line, (1, -(end_line), rank), f'{body_indent}proton.record start "{name}"')
        _add(ins, end_line, (0, -start_line, -rank), f'{body_indent}proton.record end "{name}"')
        rep.regions.append(name)


def _add_iteration_records(
    ins: _Insertions,
    lines: list[str],
    ops: list[tuple[int, int]],
    loops: list[int],
    user_names: set[str],
    rep: PassReport,
) -> None:
    """Per-iteration regions ``loop<n>.iter`` inside each top-level loop body, up to its
    ``scf.yield``."""
    for n, k in enumerate(loops):
        name = f"loop{n}.iter"
        if name in user_names:
            rep.skipped.append(name)
            continue
        a, b = ops[k]
        inner = _top_level_ops(lines, a + 1, b)
        if not inner or _op_name(lines[inner[-1][0]]) != "scf.yield":
            rep.warnings.append(f"{name} left out: loop body does not end in scf.yield")
            continue
        ind = _indent(lines[inner[0][0]])
        _add(ins, inner[0][0], (1, -inner[-1][0], 2), f'{ind}proton.record start "{name}"')
        _add(ins, inner[-1][0], (0, -inner[0][0], -2), f'{ind}proton.record end "{name}"')
        rep.regions.append(name)


def _add_op_records(
    ins: _Insertions,
    lines: list[str],
    kernel: tuple[int, int],
    op_classes: tuple[str, ...],
    user_names: set[str],
    rep: PassReport,
) -> None:
    """Single operations of the configured classes anywhere in the kernel (not inside
    warp-specialized partitions), each its own region ``<class><n>``."""
    f0, f1 = kernel
    counters = {c: 0 for c in op_classes}
    ws_depth: list[int] = []
    depth = 0
    for i in range(f0 + 1, f1):
        line = lines[i]
        op = _op_name(line)
        delta = _brace_delta(line)
        if op == "ttg.warp_specialize":
            ws_depth.append(depth)
        if not ws_depth and delta == 0:
            for cls in op_classes:
                if op in OP_CLASSES[cls]:
                    name = f"{cls}{counters[cls]}"
                    counters[cls] += 1
                    if name in user_names:
                        rep.skipped.append(name)
                        break
                    ind = _indent(line)
                    _add(ins, i, (1, -(i + 1), 3), f'{ind}proton.record start "{name}"')
                    _add(ins, i + 1, (0, -i, -3), f'{ind}proton.record end "{name}"')
                    rep.regions.append(name)
                    break
        depth += delta
        if ws_depth and depth <= ws_depth[-1]:
            ws_depth.pop()
