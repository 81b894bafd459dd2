#!/usr/bin/env bash
# Create .venv and install kperf-ci with what the examples and the tests need.
# torch is pinned only where it must be installed: on a machine without a GPU an unpinned
# `torch` pulls a multi-GB CUDA build, while a GPU runner keeps the torch it already has.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv ${KPERF_VENV_FLAGS:-} .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
if ! python -c "import torch" 2>/dev/null; then
  # From the default index unless KPERF_TORCH_INDEX names another: PyPI's Linux wheel is the
  # multi-GB CUDA build, so a machine without a GPU wants PyTorch's CPU index
  # (KPERF_TORCH_INDEX=https://download.pytorch.org/whl/cpu); some machines keep a CPU wheel of
  # the pinned version locally and pip takes that. Triton's interpreter needs numpy < 2.4 (below).
  python -m pip install -q ${KPERF_TORCH_INDEX:+--index-url "$KPERF_TORCH_INDEX"} \
    "torch==${KPERF_TORCH_VERSION:-2.13.0}"
fi
# Triton is pinned where this script installs it: static metrics (and baselines/main.db) are
# comparable only within one Triton version. A runner that already has Triton keeps its own.
pins=("numpy<2.4")
if ! python -c "import triton" 2>/dev/null; then
  pins+=("triton==${KPERF_TRITON_VERSION:-3.6.0}")
fi
python -m pip install -q -e ".[test,lint]" "${pins[@]}"
python -c "import kperf_ci, triton, torch; print('kperf-ci', kperf_ci.__version__, '| triton', triton.__version__, '| torch', torch.__version__)"
