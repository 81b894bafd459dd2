#!/usr/bin/env bash
# Liger-Kernel's PR-check evaluation (benchmarks/realrepo_ab_eval.py) on the device machine, in
# parts that fit one call of at most 600 s: `bash benchmarks/device/liger_h200.sh COMMIT PART`,
# COMMIT being the kperf-ci commit of the tree sent (the device's .git is stale), carrying .whl
# and .liger (`python benchmarks/realrepo_ab_eval.py --export .liger --liger-src CLONE`, here).
#   0: plain, comment_only (beside the gpu-marked tests)   1: launch_option, aa1, aa2
#   2: traffic_8, grid, faster   3: autotune
# Steps (times on an H100 at 8f23256): launch_option 158 s, plain 74, comment_only 59, aa1 111,
# aa2 112, traffic_8 120, grid 90, autotune 289, faster 122. Parts and logs accumulate in
# /tmp/device-out/liger (a machine kept warm between calls keeps them) and are tarred into
# $OUT/liger.tgz after each step, so a call cut by its limit still brings back the steps before.
set -u
COMMIT=$1 PART=$2
export KPERF_EVAL_COMMIT=$COMMIT
source benchmarks/gpu_env.sh
D=/tmp/device-out/liger
mkdir -p "$D"
pack() { tar -czf "$OUT/liger.tgz.tmp" -C "$D" . && mv "$OUT/liger.tgz.tmp" "$OUT/liger.tgz"; }
step() {
  python3 benchmarks/realrepo_ab_eval.py --liger-src .liger --out "$D" --no-render --steps "$1" 2>&1 | tail -4
  pack
}
case $PART in
  0) step plain; step comment_only ;;
  1) step launch_option; step aa1; step aa2 ;;
  2) step traffic_8; step grid; step faster ;;
  3) step autotune ;;
esac
ls "$D"
