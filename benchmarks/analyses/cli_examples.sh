#!/usr/bin/env bash
# Regenerate benchmarks/results/analyses/cli_examples.txt and wave_133.perfetto.json: `kperf analyze`
# on the H100 traces kept in tests/data/traces/ (CPU only). The Proton trace's clock is the one the
# capture stage fitted in the first run (summary of run.py, kept in runs.json).
set -euo pipefail
cd "$(dirname "$0")/../.."
KPERF=${KPERF:-.venv/bin/kperf}
OUT=benchmarks/results/analyses
T=tests/data/traces
CLOCK=$(.venv/bin/python -c "
import json
runs = json.load(open('$OUT/runs.json'))
print(round(next(c['clock_mhz'] for c in runs[0]['cases'] if c['name'] == 'wave_133_capture')))")
run() {
  echo "\$ kperf $*"
  "$KPERF" "$@" | sed "s#$PWD/##g"
  echo
}
{
  run analyze --trace $T/wave_133.json
  run analyze --trace $T/wave_132.json
  run analyze --trace $T/overlap_stages1.json
  run analyze --trace $T/overlap_stages3.json
  run analyze --trace $T/proton_wave_133.json --num-sms 132
  run analyze --trace $T/proton_wave_133.json --num-sms 132 --clock-mhz "$CLOCK"
  run analyze --records $T/launch_chain_64_tiny.json
  run analyze --records $T/launch_chain_64_tiny_profiler.json
  run analyze --grid 133 --num-warps 8 --registers 216 --shared-bytes 196608 --arch 'NVIDIA H100 80GB HBM3'
  echo "\$ kperf analyze --trace $T/wave_133.json --perfetto $OUT/wave_133.perfetto.json > /dev/null"
  "$KPERF" analyze --trace $T/wave_133.json --perfetto $OUT/wave_133.perfetto.json > /dev/null
} > $OUT/cli_examples.txt
echo "wrote $OUT/cli_examples.txt"
