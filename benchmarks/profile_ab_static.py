"""Where `kperf ab`'s static pass spends its time on a GPU runner (issue 32's cost item): one
realrepo_ab_eval case repository, its head tree's static pass run alone under cProfile (the
plugin's own process; compile workers are separate processes and show as waits), then plain
pytest on the same files for the floor. Writes ``static.prof``, ``static_top.txt`` and
``profile_ab_static.json`` to --out.

    python benchmarks/profile_ab_static.py --liger-src .corpus/liger --out $OUT   # on the GPU
"""

from __future__ import annotations

import argparse
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import realrepo_ab_eval as rr  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--liger-src", default=str(ROOT / ".corpus" / "liger"))
    ap.add_argument("--case", default="launch_option")
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    case = rr.BY_NAME[a.case]
    work = Path(tempfile.mkdtemp(prefix="prof-"))
    liger, _ = rr.liger_checkout(a.liger_src, work)
    repo, _ = rr.case_repo(case, liger, work / "case")
    env = rr._env(repo, False, work / "triton-cache")
    doc: dict = {"case": a.case, "tests": case.tests}
    prof = out / "static.prof"
    runs = {
        "static_profiled": [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "pytest"],
        "static_again_warm_cache": [sys.executable, "-m", "pytest"],
        "plain": [sys.executable, "-m", "pytest"],
    }
    for name, head in runs.items():
        # --kperf: without it the --kperf-* options did nothing, and this profiled plain pytest
        kperf = (
            []
            if name == "plain"
            else ["--kperf", "--kperf-mode", "static", "--kperf-db", str(work / f"{name}.db")]
        )
        cmd = [*head, "-q", "-p", "no:cacheprovider", "--durations=8", *case.tests, "--kperf-all", *kperf]
        if name == "plain":
            cmd.remove("--kperf-all")
        t0 = time.monotonic()
        rc, text, _ = rr.run_cmd(cmd, repo, env, 400)
        doc[name] = {"exit": rc, "wall_s": round(time.monotonic() - t0, 2), "tail": text.splitlines()[-25:]}
        print(name, doc[name]["exit"], doc[name]["wall_s"], flush=True)
    s = io.StringIO()
    st = pstats.Stats(str(prof), stream=s)
    st.sort_stats("cumulative").print_stats(45)
    st.sort_stats("tottime").print_stats(25)
    (out / "static_top.txt").write_text(s.getvalue())
    (out / "profile_ab_static.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
