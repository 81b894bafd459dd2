"""A benchmark script as kernel repositories write them (Liger-Kernel's benchmark/scripts style):
a sweep over sizes, the Triton kernel against a torch reference, each timed with
`triton.testing.do_bench(..., quantiles=[0.5, 0.2, 0.8])`, results printed and written to a CSV.

It knows nothing of kperf. Run it plainly (`python examples/benchmarks/bench_softmax.py`, on a
GPU) or through kperf (`kperf run --bench examples/benchmarks/bench_softmax.py`): each do_bench
call of the Triton kernel then becomes a stored, comparable benchmark.
"""

import argparse
import csv
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # examples/
from kernels.softmax import softmax  # noqa: E402

QUANTILES = [0.5, 0.2, 0.8]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def bench_speed(n_cols: int, provider: str, n_rows: int) -> tuple[float, float, float]:
    x = torch.randn(n_rows, n_cols, device=DEVICE, dtype=torch.float16)
    if provider == "triton":
        ms_50, ms_20, ms_80 = triton.testing.do_bench(lambda: softmax(x), rep=100, quantiles=QUANTILES)
    else:
        ms_50, ms_20, ms_80 = triton.testing.do_bench(
            lambda: torch.softmax(x.float(), dim=-1).to(x.dtype), rep=100, quantiles=QUANTILES
        )
    return ms_50, ms_20, ms_80


def main() -> None:
    parser = argparse.ArgumentParser(description="softmax speed sweep")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--csv", default=None, help="append the results to this CSV file")
    args = parser.parse_args()
    rows = []
    for provider in ("triton", "torch"):
        for n_cols in args.cols:
            ms_50, ms_20, ms_80 = bench_speed(n_cols, provider, args.rows)
            rows.append((provider, n_cols, ms_50, ms_20, ms_80))
            shape = f"{args.rows}x{n_cols}"
            print(f"softmax {provider:>6} {shape}: p50 {ms_50:.4f} ms  p20 {ms_20:.4f}  p80 {ms_80:.4f}")
    if args.csv:
        with open(args.csv, "a", newline="") as f:
            csv.writer(f).writerows(rows)


if __name__ == "__main__":
    main()
