"""Variant matching across config changes: pair the variants of two runs (:func:`match_variants`)
by exact key, then the same kernel/arch/test, then the same launch site or kernel when
unambiguous, so a launch-option or constexpr change is one "changed" variant; the parsing of
config and specialization strings it compares by (:func:`parse_config`, :func:`parse_spec`), and
the compile target of a GPU run's variant (:func:`arch_class`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..model import DEFAULT_OPTIONS, Fingerprint, RunInfo, VariantKey, VariantResult

__all__ = [
    "GPU_ARCH",
    "MatchStage",
    "VariantMatch",
    "VariantPair",
    "arch_class",
    "describe_key_change",
    "match_variants",
    "parse_config",
    "parse_spec",
    "same_problem",
]


MatchStage = Literal["id", "test", "source", "kernel"]

#: GPU model -> the compile target of its kernels, for runs whose fingerprint lacks the compute
#: capability (fingerprint.extra["capability"] wins). Substrings of the name torch reports; the
#: first that matches is used, so a longer name comes before its substring (A100 before A10).
GPU_ARCH: tuple[tuple[str, str], ...] = (
    ("GB200", "sm_100"),
    ("B200", "sm_100"),
    ("H200", "sm_90"),
    ("H100", "sm_90"),
    ("H800", "sm_90"),
    ("GH200", "sm_90"),
    ("L40", "sm_89"),
    ("L4", "sm_89"),
    ("RTX 4090", "sm_89"),
    ("A100", "sm_80"),
    ("A800", "sm_80"),
    ("A30", "sm_80"),
    ("A10", "sm_86"),
    ("RTX 3090", "sm_86"),
    ("T4", "sm_75"),
)


def arch_class(arch: str, fingerprint: Fingerprint | None = None) -> str:
    """The compile target whose static metrics a variant carries: a static run's "sm_90" as is; a
    GPU run's variant ("NVIDIA H100 80GB HBM3") maps to its GPU's compute capability, from the
    run's fingerprint, else from :data:`GPU_ARCH`; unknown names stay as they are."""
    if not arch or arch == "host" or arch.startswith("sm_"):
        return arch
    cap = str((fingerprint.extra if fingerprint else {}).get("capability") or "")
    major, _, minor = cap.partition(".")
    if major.isdigit():
        return f"sm_{major}{minor if minor.isdigit() else '0'}"
    upper = arch.upper()
    for needle, sm in GPU_ARCH:
        if needle in upper:
            return sm
    return arch


def _split_top(text: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep`` outside parentheses (tuple arguments render as "(a,b)")."""
    if "(" not in text and ")" not in text:  # the usual case: depth stays 0, a plain split
        return [t for t in (t.strip() for t in text.split(sep)) if t]
    out, depth, cur = [], 0, []
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return [t for t in out if t]


def parse_config(config: str) -> dict[str, str]:
    """ "num_warps=4,num_stages=3,num_ctas=1" -> {"num_warps": "4", ...}, with Triton's defaults
    filled in (GPU mode spells only num_warps and num_stages). Anything else (e.g. the
    "callable:..." of a multi-kernel timing) is one item named "config"."""
    items = _split_top(config)
    if not items or not all("=" in t for t in items):
        return {"config": config} if config else {}
    out = dict(t.split("=", 1) for t in items)
    if "num_warps" in out:
        for k, v in DEFAULT_OPTIONS.items():
            out.setdefault(k, str(v))
    return out


def parse_spec(spec: str, *, with_shape: bool = True) -> dict[str, str]:
    """A specialization string (capture.static.record: "x:*fp16:D, n:i32, BLOCK=1024", plus GPU mode's
    " @ <test parameters>") -> {"x": "*fp16:D", "n": "i32", "BLOCK": "1024", "shape": ...}."""
    body, at, shape = spec.partition(" @ ")
    out: dict[str, str] = {}
    for item in _split_top(body):
        eq, colon = item.find("="), item.find(":")
        if eq > 0 and (colon < 0 or eq < colon):  # a constexpr: "BLOCK=1024"
            out[item[:eq]] = item[eq + 1 :]
        elif colon > 0:  # an argument: "x:*fp16:D"
            out[item[:colon]] = item[colon + 1 :]
        else:
            out[item] = ""
    if at and with_shape:
        out["shape"] = shape
    return out


def describe_key_change(base: VariantKey, cur: VariantKey, *, with_shape: bool = True) -> str:
    """What differs between two keys of one matched variant, launch options first:
    "num_warps 4 -> 1; BLOCK 1024 -> 512" ("-" where a side lacks the item); "" when nothing."""
    return "; ".join(_key_diff(base, cur, with_shape=with_shape))


def _key_diff(base: VariantKey, cur: VariantKey, *, with_shape: bool) -> list[str]:
    if base.config == cur.config and base.spec == cur.spec:  # the usual pair: nothing to parse
        return []
    parts = []
    for b, c in (
        (parse_config(base.config), parse_config(cur.config)),
        (parse_spec(base.spec, with_shape=with_shape), parse_spec(cur.spec, with_shape=with_shape)),
    ):
        for name in [*b, *(n for n in c if n not in b)]:
            if b.get(name) != c.get(name):
                # "-": the side lacks the item; "(set)": a bare item without a value
                bv, cv = (("(set)" if v == "" else v) for v in (b.get(name, "-"), c.get(name, "-")))
                parts.append(f"{name} {bv} -> {cv}")
    return parts


def _site(source: str) -> str:
    """The launch site, spelled alike by both modes: static mode stores
    "examples/kernels/add.py::add_kernel", GPU mode "kernels.add::add_kernel"; both -> "add::add_kernel"."""
    path, sep, qual = source.rpartition("::")
    if not sep:
        return source
    stem = path.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".py").rsplit(".", 1)[-1]
    return f"{stem}::{qual}"


def _test_params(test: str) -> str:
    """The parametrization of a pytest node id, which names the problem's sizes:
    "t.py::test_softmax[64-256-fp32]" -> "64-256-fp32"; "" for an unparametrized test."""
    name = test.rpartition("::")[2]
    _, sep, rest = name.partition("[")
    return rest[:-1] if sep and rest.endswith("]") else ""


def same_problem(b: VariantKey, c: VariantKey) -> bool:
    """Whether two variants ran the same problem: the same test parameters, and the same
    argument sizes where both runs recorded them (GPU mode's " @ <test parameters>").

    A variant of another problem is another variant, never a "changed" one: the static
    baseline's interpreter-size softmax (BLOCK_SIZE 256) is no baseline for an H100 run's
    GPU-size launch (BLOCK_SIZE 4096); pairing them made a false regression."""
    if _test_params(b.test) != _test_params(c.test):
        return False
    _, at_b, shape_b = b.spec.partition(" @ ")
    _, at_c, shape_c = c.spec.partition(" @ ")
    return not (at_b and at_c) or shape_b == shape_c


@dataclass(frozen=True)
class VariantPair:
    """A baseline variant and the current variant it was matched with."""

    base: VariantResult
    current: VariantResult
    matched_by: MatchStage  # the stage of match_variants that paired them
    change: str = ""  # what differs in the key: "num_warps 4 -> 1; BLOCK 1024 -> 512"

    @property
    def rematched(self) -> bool:
        """Paired although their ids differ (a key change, or the other mode's arch name)."""
        return self.base.key.id != self.current.key.id


@dataclass
class VariantMatch:
    pairs: list[VariantPair] = field(default_factory=list)
    removed: list[VariantResult] = field(default_factory=list)  # in the baseline only
    added: list[VariantResult] = field(default_factory=list)  # in the current run only


def match_variants(
    base: Sequence[VariantResult],
    cur: Sequence[VariantResult],
    *,
    base_info: RunInfo | None = None,
    cur_info: RunInfo | None = None,
) -> VariantMatch:
    """Pair the variants of two runs, in stages; each stage sees only what earlier ones left.

    1. ``id``: kernel, arch, spec and config all equal.
    Stages 2-4 pair only variants of the same problem (:func:`same_problem`): the same test
    parameters and argument sizes.

    2. ``test``: the same kernel, arch and pytest node id: a constexpr or launch option changed.
       When a test has several such variants on each side, the closest pairs go first (fewest
       differing config/spec items; ties by test, spec, config), so the sorting is deterministic.
    3. ``source``: the same kernel, arch and launch site (``VariantKey.source``; a renamed test),
    4. ``kernel``: the same kernel and arch (the kernel moved and its test was renamed).
       Stages 3 and 4 pair only where exactly one variant is left on each side: across tests
       the problem sizes can differ, and a guess among several would judge unrelated kernels.

    Arch compares by :func:`arch_class`, so with the runs' infos a GPU-mode variant meets the
    static baseline's variant of its compute capability. Across modes the GPU side's " @ <test
    parameters>" suffix of the spec is ignored (static specs have none) and launch options are
    compared with Triton's defaults filled in.
    """
    fb = base_info.fingerprint if base_info else None
    fc = cur_info.fingerprint if cur_info else None
    cross_mode = bool(base_info and cur_info and base_info.mode != cur_info.mode)

    def ident(r: VariantResult, fp: Fingerprint | None) -> tuple:
        k = r.key
        # sorted items: equal exactly when the parsed dicts are (cheaper than their JSON spelling)
        spec = tuple(sorted(parse_spec(k.spec, with_shape=not cross_mode).items()))
        return (k.kernel, arch_class(k.arch, fp), spec, tuple(sorted(parse_config(k.config).items())))

    def order(r: VariantResult) -> tuple[str, str, str, str]:
        return (r.key.test, r.key.spec, r.key.config, r.key.id)

    left_b = sorted(base, key=order)
    left_c = sorted(cur, key=order)
    out = VariantMatch()

    def stage(name: MatchStage, group: Callable[[VariantResult, Fingerprint | None], tuple | None]) -> None:
        nonlocal left_b, left_c
        gb: dict[tuple, list[VariantResult]] = {}
        gc: dict[tuple, list[VariantResult]] = {}
        for r in left_b:
            g = group(r, fb)
            if g is not None:
                gb.setdefault(g, []).append(r)
        for r in left_c:
            g = group(r, fc)
            if g is not None:
                gc.setdefault(g, []).append(r)
        used: set[int] = set()
        for g, cs in gc.items():
            bs = gb.get(g, [])
            if not bs or (name in ("source", "kernel") and (len(bs) != 1 or len(cs) != 1)):
                continue
            for b, c in _closest_pairs(bs, cs, cross_mode, same=name == "id"):
                change = describe_key_change(b.key, c.key, with_shape=not cross_mode)
                if name in ("source", "kernel") and b.key.test != c.key.test and not cross_mode:
                    change = "; ".join(filter(None, [change, f"test {b.key.test} -> {c.key.test}"]))
                out.pairs.append(VariantPair(b, c, name, change))
                used.update((id(b), id(c)))
        left_b = [r for r in left_b if id(r) not in used]
        left_c = [r for r in left_c if id(r) not in used]

    stage("id", ident)
    stage(
        "test", lambda r, fp: (r.key.kernel, arch_class(r.key.arch, fp), r.key.test) if r.key.test else None
    )
    stage(
        "source",
        lambda r, fp: (
            (r.key.kernel, arch_class(r.key.arch, fp), _site(r.key.source)) if r.key.source else None
        ),
    )
    stage("kernel", lambda r, fp: (r.key.kernel, arch_class(r.key.arch, fp)))
    out.removed, out.added = left_b, left_c
    return out


def _closest_pairs(
    bs: list[VariantResult], cs: list[VariantResult], cross_mode: bool, *, same: bool = False
) -> list[tuple[VariantResult, VariantResult]]:
    """Greedy pairing of two sorted groups: fewest differing key items first, then same test,
    then the groups' own order; a variant is paired at most once. Unless ``same`` (the groups
    hold one compiled variant), only pairs of the same problem are candidates."""

    def distance(b: VariantResult, c: VariantResult) -> int:
        return len(_key_diff(b.key, c.key, with_shape=not cross_mode))

    cands = sorted(
        (distance(b, c), b.key.test != c.key.test, i, j)
        for i, b in enumerate(bs)
        for j, c in enumerate(cs)
        if same or same_problem(b.key, c.key)
    )
    taken_b: set[int] = set()
    taken_c: set[int] = set()
    pairs = []
    for _d, _t, i, j in cands:
        if i not in taken_b and j not in taken_c:
            taken_b.add(i)
            taken_c.add(j)
            pairs.append((bs[i], cs[j]))
    return sorted(pairs, key=lambda p: bs.index(p[0]))


def _match(
    base: list[VariantResult], cur: list[VariantResult]
) -> tuple[list[tuple[VariantResult, VariantResult, bool]], list[VariantResult], list[VariantResult]]:
    """Pairs (base, current, rematched), removed, added: :func:`match_variants` in the shape
    ``kperf ab``'s static diff reads."""
    m = match_variants(base, cur)
    return [(p.base, p.current, p.rematched) for p in m.pairs], m.removed, m.added
