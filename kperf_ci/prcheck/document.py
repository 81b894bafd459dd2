"""The A/B document: what `kperf ab` stores (blob ``ab_report``) and renders from."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kperf_ci import store
from kperf_ci.capture.static.repo import ABError
from kperf_ci.judge.group import kernel_groups, launch_text, static_groups
from kperf_ci.judge.verdict import Regression, regression
from kperf_ci.launch_calls import value_labels
from kperf_ci.sample_stats import median

#: the blob that holds the A/B document, on the run labelled "ab"
AB_BLOB = "ab_report"
AB_LABEL = "ab"
DOC_VERSION = 2  # 2: "kernels" (timed rows per Triton kernel), rows with "site" and "launch"


@dataclass
class ABReport:
    base_rev: str
    base_sha: str
    head_sha: str = ""
    static: Any = None  # kperf_ci.judge.launch_diff.StaticDiff (variant level)
    tests: list[Any] = field(default_factory=list)  # kperf_ci.judge.launch_diff.TestDiff, one per test
    timed: list[dict[str, Any]] = field(default_factory=list)  # one per variant with an A/B verdict
    messages: list[str] = field(default_factory=list)
    # tests the head's static pass skipped (pytest.skip in the test): nothing to compare, counted
    skipped: int = 0
    static_regressions: list[dict[str, Any]] = field(default_factory=list)
    # launches not timed whose code got better, or moved without failing (StaticVerdict's)
    static_improved: list[dict[str, Any]] = field(default_factory=list)
    static_changed: list[dict[str, Any]] = field(default_factory=list)
    device: str | None = None
    # why changed launches went untimed: "--no-gpu" (the user asked) or "no GPU" (none found);
    # None when nothing needed timing or it ran. The headline says which (issue 36's third walk)
    untimed: str | None = None
    # the ABPolicy the launches were judged by (kperf_ci.config), stored whole: the reports
    # explain an unchanged row by its floor (a newcomer's walk found the floor never stored, so a
    # configured ab_floor_ms was explained as the default's)
    policy: Any = None
    gpu_seconds: float = 0.0
    wall_s: float = 0.0
    # wall seconds of each stage: "static" (both trees, side by side), "timing" (the A/B pass)
    stage_s: dict[str, float] = field(default_factory=dict)
    db: str | None = None

    def tests_to_time(self) -> list[str]:
        return [t.test for t in self.tests if t.needs_timing]

    @property
    def regression(self) -> Regression:
        """The one answer (:func:`kperf_ci.judge.verdict.regression`) on the rows about to be
        stored: the same function answers for the stored document, so `kperf ab`'s exit code
        and every report of it agree."""
        return regression({"timed": self.timed, "static_regressions": self.static_regressions})

    @property
    def exit_code(self) -> int:
        return self.regression.exit_code

    def to_dict(self) -> dict[str, Any]:
        def keys(rs: list) -> list[dict[str, str]]:
            return [
                {"kernel": r.key.kernel, "arch": r.key.arch, "config": r.key.config, "test": r.key.test}
                for r in rs
            ]

        s = self.static
        timed_by_test: dict[str, list[dict[str, Any]]] = {}
        for t in self.timed:
            timed_by_test.setdefault(t["test"], []).append(t)
        counts: dict[str, int] = {}
        for t in self.tests:
            counts[t.status] = counts.get(t.status, 0) + 1
        for t in self.timed:
            counts[t["verdict"]] = counts.get(t["verdict"], 0) + 1
        if self.skipped:
            counts["skipped"] = self.skipped
        kernels = kernel_groups(self.timed)
        for k in kernels:
            counts[f"kernels_{k['verdict']}"] = counts.get(f"kernels_{k['verdict']}", 0) + 1
        return {
            "version": DOC_VERSION,
            "base": {"rev": self.base_rev, "sha": self.base_sha},
            "head": {"sha": self.head_sha},
            "device": self.device,
            "untimed": self.untimed,
            "ab_policy": dataclasses.asdict(self.policy) if self.policy is not None else None,
            "counts": counts,
            "exit_code": self.exit_code,
            "tests": [{**t.to_dict(), "timed": timed_by_test.get(t.test, [])} for t in self.tests],
            "static": None
            if s is None
            else {
                "identical": keys(s.identical),
                "changed": keys(s.changed),
                "added": keys(s.added),
                "removed": keys(s.removed),
                "unknown": keys(s.unknown),
                "identical_tests": [t.test for t in self.tests if t.status == "identical"],
                "tests_to_time": self.tests_to_time(),
            },
            "timed": self.timed,
            "kernels": kernels,
            "static_regressions": self.static_regressions,
            "static_kernels": static_groups(self.static_regressions),
            "static_improved": self.static_improved,
            "static_changed": self.static_changed,
            "messages": self.messages,
            "gpu_seconds": self.gpu_seconds,
            "wall_s": self.wall_s,
            "stage_s": self.stage_s,
            "db": self.db,
        }


def _region_moves(base: dict[str, dict[str, float]], metrics: dict[str, float], kernel: str) -> list[str]:
    """Region shares of CTA time that moved by 2 points or more, base -> head."""
    b = base.get(kernel) or (next(iter(base.values())) if len(base) == 1 else None)
    if not b:
        return []
    out = []
    for name, bv in sorted(b.items()):
        if not name.endswith(".fraction") or name not in metrics:
            continue
        hv = metrics[name]
        if abs(hv - bv) >= 0.02:
            out.append(f"{name[len('region.') : -len('.fraction')]} {bv:.0%} -> {hv:.0%} of CTA time")
    return out


def identical_elsewhere(results: list[Any], plan_results: list[list[str]]) -> dict[str, list[str]]:
    """Per stored variant id, the other tests whose launch was that same variant (kernel, arch,
    specialization with the shape id, options), read from the timing pass's results file: the
    run stores one variant per id, the last test's, so the others' rows would be missing, and
    their tests would read as never timed."""
    stored = {r.key.id: r.key.test for r in results}
    out: dict[str, list[str]] = {}
    for row in plan_results:
        if len(row) < 5 or row[3] in ("not-timed", "no-base"):
            continue
        test, vid = row[0], row[4]
        if vid in stored and stored[vid] != test and test not in out.get(vid, []):
            out.setdefault(vid, []).append(test)
    return out


def _ab_rows(results: list[Any], identical: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """The timed rows of the document, one per stored variant with an A/B verdict; ``identical``
    (:func:`identical_elsewhere`) names the tests whose identical launch the row stands for."""
    rows = []
    for r in results:
        extra = json.loads(r.artifacts.get("ab") or "{}")
        verdict = extra.get("verdict")
        if verdict is None:  # not timed A/B
            continue
        m = {x.name: x.value for x in r.metrics}
        launch = json.loads(r.artifacts.get("launch") or "{}")
        kernel_name = r.key.kernel.rsplit("/", 1)[-1]
        base_ms, head_ms = extra.get("base_ms") or [], extra.get("head_ms") or []
        rows.append(
            {
                "kernel": r.key.kernel,
                # the Triton kernel ("path::qualname") and the launch timed: a kernel's identity
                # and its work, whatever the test is called
                "site": launch.get("site") or r.key.source,
                "launch": launch_text(*(launch.get(k) for k in ("args", "grid", "config", "arg_order"))),
                "base_launch": launch_text(
                    *(launch.get(f"base_{k}") for k in ("args", "grid", "config", "arg_order"))
                )
                if launch
                else "",
                "changes": list(launch.get("changes") or [])
                + ([launch["note"]] if launch.get("note") else [])
                + ([t] if (t := best_of_configs_text(launch)) else []),
                # the configs each side's autotuner picked for the timed launch (None: no autotuner)
                "base_pick": launch.get("base_pick"),
                "head_pick": launch.get("head_pick"),
                # an autotuned call is timed best against best: each side's fastest surviving
                # config (None: picks compared, or no autotuner), and how many were timed
                "base_best": launch.get("base_best"),
                "head_best": launch.get("head_best"),
                "configs_timed": launch.get("configs_timed"),
                "configs_ranked_us": launch.get("configs_ranked_us"),
                # the losing side timed again with its other good config before a change was
                # called (measure_replay.second_look), where it was
                "second_look": launch.get("second_look"),
                "arch": r.key.arch,
                "config": r.key.config,
                # with the test's shape id: a callable's launch (no launch text) is told by it
                "spec": r.key.spec,
                "test": r.key.test,
                "verdict": verdict,
                "ratio": m.get("ab.ratio"),
                "ci_low": m.get("ab.ci_low"),
                "ci_high": m.get("ab.ci_high"),
                "pairs": m.get("ab.pairs"),
                "seconds": m.get("ab.seconds"),
                # the GPU's other timing work for this launch: both sides' warm-up, and the
                # search for each side's best config of an autotuned call
                "warmup_seconds": m.get("ab.warmup_seconds"),
                "search_seconds": launch.get("search_s"),
                "threshold": m.get("ab.threshold"),
                "method": extra.get("method"),
                # the package's one median (numpy's: an even count averages the middle two), so
                # the document's medians are the ones the timing loop and the judge compute
                "base_median_ms": median(base_ms) if base_ms else None,
                "head_median_ms": median(head_ms) if head_ms else None,
                "regions_moved": _region_moves(extra.get("base_regions") or {}, m, kernel_name),
                "identical_in": list((identical or {}).get(r.key.id, [])),
            }
        )
    return rows


#: a timed row's GPU work, each part's key: the A/B loop, both sides' warm-up, the config search
GPU_PARTS = (("seconds", "A/B"), ("warmup_seconds", "warm-up"), ("search_seconds", "config search"))


def gpu_seconds(t: dict[str, Any]) -> float:
    """Seconds the GPU spent timing one launch: its A/B loop, both sides' warm-up and, for an
    autotuned call, the search for each side's best config (a document older than these keys
    counts its loop)."""
    return sum(float(t.get(k) or 0) for k, _ in GPU_PARTS)


def gpu_seconds_text(rows: list[dict[str, Any]]) -> str:
    """``A/B 40.12 s, warm-up 3.10 s, config search 9.87 s`` over the timed rows (a part no row
    records, in an older document: "not recorded")."""
    return ", ".join(
        f"{label} {sum(float(t.get(k) or 0) for t in rows):.2f} s"
        if not rows or any(k in t for t in rows)
        else f"{label} not recorded"
        for k, label in GPU_PARTS
    )


def timed_line(t: dict[str, Any]) -> str:
    ci = "" if t["ci_low"] is None else f" [{t['ci_low'] - 1:+.2%}, {t['ci_high'] - 1:+.2%}]"
    rel = "" if t["ratio"] is None else f" {t['ratio'] - 1:+.2%}"
    moved = f"; {', '.join(t['regions_moved'])}" if t.get("regions_moved") else ""
    return (
        f"{t['verdict']:<12} {t['kernel']}{rel}{ci} ({int(t['pairs'] or 0)} pairs, {t['seconds'] or 0:.2f} s)"
        f"  {t['test']}{moved}"
    )


_NUM = (int, float, type(None))
#: what the reports read of an A/B document: list fields, each item a dict with these typed keys
_ROWS: dict[str, dict[str, tuple[type, ...]]] = {
    "timed": {"kernel": (str,), "test": (str,), "verdict": (str,), "ratio": _NUM, "ci_low": _NUM,
              "ci_high": _NUM, "pairs": _NUM, "seconds": _NUM,
              "warmup_seconds": _NUM, "search_seconds": _NUM},
    "kernels": {"kernel": (str,), "site": (str,), "verdict": (str,), "launches": (list,), "tests": (list,),
                "changes": (list,), "ratio_min": _NUM, "ratio_max": _NUM},
    "tests": {"test": (str,), "status": (str,), "changes": (list,)},
    "static_regressions": {"kernel": (str,), "arch": (str,), "test": (str,), "reason": (str,)},
    "static_improved": {"kernel": (str,), "arch": (str,), "test": (str,), "reason": (str,)},
    "static_changed": {"kernel": (str,), "arch": (str,), "test": (str,), "reason": (str,)},
    "static_kernels": {"kernel": (str,), "arch": (str,), "site": (str,), "reasons": (list,),
                       "launches": (list,), "tests": (list,)},
}  # fmt: skip
#: the launches inside "kernels" and "static_kernels" rows
_LAUNCHES: dict[str, dict[str, tuple[type, ...]]] = {
    "kernels": {"launch": (str,), "verdict": (str,), "ratio": _NUM, "ci_low": _NUM, "ci_high": _NUM,
                "tests": (list,), "changes": (list,)},
    "static_kernels": {"args": (dict,), "reason": (str,), "tests": (list,), "config": (str, type(None)),
                       "grid": (list, type(None))},
}  # fmt: skip


def _check_rows(rows: Any, fields: dict[str, tuple[type, ...]], name: str, bad: Any) -> None:
    if not isinstance(rows, list):
        raise bad(f"{name} is not a list")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise bad(f"{name}[{i}] is not an object")
        for key, types in fields.items():
            if key not in row:
                if type(None) not in types:  # what the reports read: present in every row kperf writes
                    raise bad(f"{name}[{i}] has no {key}")
                continue
            if not isinstance(row[key], types) or isinstance(row[key], bool):
                raise bad(f"{name}[{i}].{key} is {type(row[key]).__name__}")


def check_ab_document(doc: Any, where: str) -> dict[str, Any]:
    """``doc`` when it has the shape the reports read; else ABError (exit 2) naming what is off.
    A database is data: a crafted or damaged document is bad input, not a crash of the renderer."""

    def bad(what: str) -> ABError:
        return ABError(f"{where}: the A/B document is malformed ({what}); re-run kperf ab to store a new one")

    if not isinstance(doc, dict):
        raise bad("not a JSON object")
    for name, fields in _ROWS.items():
        if doc.get(name) is None:
            continue
        _check_rows(doc[name], fields, name, bad)
        for i, row in enumerate(doc[name]):
            if name in _LAUNCHES and "launches" in row:
                _check_rows(row["launches"], _LAUNCHES[name], f"{name}[{i}].launches", bad)
    for name in ("counts", "base", "head"):
        if name in doc and not isinstance(doc[name], dict):
            raise bad(f"{name} is not an object")
    if not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in (doc.get("counts") or {}).values()
    ):
        raise bad("counts holds a value that is not a number")
    if not isinstance(doc.get("messages") or [], list):
        raise bad("messages is not a list")
    return doc


def load_ab_document(db: str | Path) -> dict[str, Any] | None:
    """The newest A/B document in ``db`` (None when the database holds none)."""
    for info in sorted(store.list_runs(db), key=lambda i: i.started_at, reverse=True):
        data = store.load_blob(db, info.run_id, "", AB_BLOB)
        if data:
            try:
                doc = json.loads(data)
            except ValueError as e:
                raise ABError(f"{db}: the A/B document of run {info.run_id} is not JSON ({e})") from None
            _check_version(doc, f"{db} (run {info.run_id})")
            return check_ab_document(doc, f"{db} (run {info.run_id})")
    return None


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_version(doc: Any, where: str) -> None:
    """A document of a newer kperf-ci is refused by name: its fields may mean other things."""
    version = doc.get("version") if isinstance(doc, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version > DOC_VERSION:
        raise ABError(
            f"{where}: an A/B document of version {version}, written by a newer kperf-ci (this one "
            f"reads up to version {DOC_VERSION}); upgrade kperf-ci to render it"
        )


def read_ab_file(path: str | Path) -> dict[str, Any]:
    """The A/B document in ``path``: the JSON `kperf ab --json` writes, or the database `kperf ab`
    stored it in (the newest document there). Bad input is ABError, one line naming the file."""
    p = Path(path)
    if not p.is_file():
        what = "is a directory" if p.is_dir() else "does not exist"
        raise ABError(f"{p}: {what}; pass the JSON `kperf ab --json` wrote or its database (reports/ab.db)")
    try:
        with p.open("rb") as f:
            magic = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise ABError(f"{p}: cannot read it ({e.strerror})") from None
    if magic == _SQLITE_MAGIC:
        try:
            doc = load_ab_document(p)
        except store.StoreError as e:
            raise ABError(str(e)) from None
        if doc is None:
            raise ABError(f"{p}: holds no A/B document; pass the database `kperf ab` wrote (reports/ab.db)")
        return doc
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ABError(
            f"{p}: neither an A/B database nor JSON ({e}); pass what `kperf ab --json` wrote"
        ) from None
    if not isinstance(doc, dict) or not {"base", "tests", "timed", "kernels"} & doc.keys():
        raise ABError(
            f"{p}: not an A/B document (no base, tests or timed rows); pass what `kperf ab --json` wrote"
        )
    _check_version(doc, str(p))
    return check_ab_document(doc, str(p))


def _config_values(text: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in text.split(",") if "=" in kv)


def best_of_configs_text(launch: dict[str, Any]) -> str | None:
    """How an autotuned call was compared, in the row's cause: "best against best: base
    num_warps=2 vs head num_warps=1 (4 and 3 configs timed; the autotuners picked num_warps=2
    and num_warps=4)". Configs are named by what varies among the four; None for a launch
    compared pick against pick (or without an autotuner)."""
    if launch.get("compare") != "best_of_configs":
        return None
    texts = [launch.get(k) or "" for k in ("base_best", "head_best", "base_pick", "head_pick")]
    values = {i: _config_values(t) for i, t in enumerate(texts)}
    labels = value_labels({i: v for i, v in values.items() if v}, empty="its only config")
    bb, hb, bp, hp = (labels.get(i, "-") for i in range(4))
    timed = launch.get("configs_timed") or {}
    n_base, n_head = timed.get("base", "?"), timed.get("head", "?")
    out = f"best against best: base {bb} vs head {hb} ({n_base} and {n_head} configs timed"
    if launch.get("base_pick") or launch.get("head_pick"):
        out += f"; the autotuners picked {bp} and {hp}"
    return out + ")" + _second_look_text(launch.get("second_look"))


def _pct(ratio: Any) -> str:
    return f"{(ratio - 1) * 100:+.1f}%" if isinstance(ratio, (int, float)) else "?"


def _second_look_text(look: dict[str, Any] | None) -> str:
    """ "; the head's num_warps=4 timed again: -0.4% where num_warps=32 read +8.0%, so the head's
    best is num_warps=4": the second look a called change got, and which look stood."""
    if not look:
        return ""
    side, first, second = look.get("side", "?"), look.get("first") or {}, look.get("second") or {}
    configs = {"first": first.get("config") or "", "second": look.get("config") or ""}
    labels = value_labels({k: _config_values(t) for k, t in configs.items()}, empty="its only config")
    a, b = labels.get("first", "-"), labels.get("second", "-")
    out = f"; the {side}'s {b} timed again: {_pct(second.get('ratio'))}"
    out += f" where {a} read {_pct(first.get('ratio'))}"
    return out + (f", so the {side}'s best is {b}" if look.get("kept") == "second" else f", so {a} stands")
