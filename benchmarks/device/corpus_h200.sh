#!/usr/bin/env bash
# The corpus evaluation (benchmarks/corpus_ab_eval.py) on the device machine, in parts that fit
# one call of at most 600 s: `bash benchmarks/device/corpus_h200.sh COMMIT PART`, where COMMIT is
# the kperf-ci commit of the tree sent (the device's .git is stale) and PART one of:
#   1: mamba plain,ab,truth; mamba ab again with KPERF_COMPILE_AHEAD=0 (compiling at the end only,
#      as before it was the default; into its own parts); attorch plain
#   2: attorch ab,truth
#   3: flash-linear-attention plain, ab, truth (l2norm_fwd_kernel's truth), one run each
# Parts accumulate in /tmp/device-out/corpus, started from benchmarks/results/corpus_ab_eval_h200/ (what
# earlier calls brought back, committed there) or else from the committed H100 parts, whose
# static (CPU) and A/A steps they keep. Each step's part file and logs are tarred into
# $OUT/corpus.tgz as it ends, so a call cut by its time limit still brings back the steps before.
set -u
COMMIT=$1 PART=$2
export KPERF_EVAL_COMMIT=$COMMIT
source benchmarks/gpu_env.sh
D=/tmp/device-out  # the parts and logs; only their tarball goes under $OUT (few files come back)
mkdir -p "$D/corpus" "$D/ahead"
# -n: a machine kept warm between calls still holds the parts of the calls before (copying the
# seeds over them lost mamba's and attorch's first parts once; they were merged back by hand)
cp -n benchmarks/results/corpus_ab_eval_h200/corpus_ab_eval.part-*.json "$D/corpus/" 2>/dev/null
cp -n benchmarks/results/corpus_ab_eval/corpus_ab_eval.part-*.json "$D/corpus/"
W=/tmp/corpus-work
src="--src attorch=.corpus/attorch --src flash-linear-attention=.corpus/flash-linear-attention --src mamba=.corpus/mamba"
pack() { tar -czf "$OUT/corpus.tgz.tmp" -C "$D" corpus ahead && mv "$OUT/corpus.tgz.tmp" "$OUT/corpus.tgz"; }
run() {  # repo steps [out] [extra args...]
  local repo=$1 steps=$2 out=${3:-$D/corpus}; shift 3 || shift $#
  python3 benchmarks/corpus_ab_eval.py $src --repos "$repo" --steps "$steps" --out "$out" \
    --work "$W/$(basename "$out")" --no-render "$@" 2>&1 | tail -3
  for d in "$W/$(basename "$out")"/*/; do
    mkdir -p "$out/logs-$(basename "$d")"; cp "$d"/*.log "$out/logs-$(basename "$d")/" 2>/dev/null
  done
  pack
}
case $PART in
  1)
    run mamba plain,ab,truth
    KPERF_COMPILE_AHEAD=0 run mamba ab "$D/ahead"
    run attorch plain
    ;;
  2) run attorch ab,truth ;;
  3)  # one step per run, each packed as it ends: the three together ran past 600 s (stop 49)
    run flash-linear-attention plain
    run flash-linear-attention ab
    run flash-linear-attention truth "$D/corpus" --truth-kernels l2norm_fwd_kernel
    ;;
esac
ls -la "$OUT"; grep -h "kperf ab: [0-9]" "$D"/*/logs-*/ab.log
