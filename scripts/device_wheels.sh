#!/usr/bin/env bash
# The wheels benchmarks/gpu_env.sh installs on the GPU machine (no network there): the pure-Python
# packages its image lacks, plus cmarkgfm (tests/test_hostile_inputs.py imports it) for its
# Python 3.12. Run once here, then carry `.whl` in the device call.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
py=${PYTHON:-.venv/bin/python}
"$py" -m pip download -q --only-binary=:all: --no-deps -d .whl \
  --python-version 3.12 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_28_x86_64 \
  sqlite-utils==4.0 sqlite-fts4==1.0.3 click-default-group==1.2.4 click==8.3.1 github3.py==4.0.1 \
  uritemplate==4.2.0 pyjwt==2.15.1 python-dateutil==2.9.0.post0 six==1.17.0 \
  pytest-xdist==3.8.0 execnet==2.1.1 cmarkgfm==2025.10.22 cffi==2.1.1 pycparser==3.12 \
  einops==0.8.2
ls .whl
