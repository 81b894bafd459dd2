# Sourced on the GPU machine (device tool) before a benchmark or the gpu-marked tests: the
# Python packages the image lacks travel as wheels in .whl/ (fetched here by
# scripts/device_wheels.sh: sqlite-utils 4, github3.py, cmarkgfm and their needs), and kperf-ci
# itself is installed editable so pytest finds its plugin.
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null
python3 -c "import kperf_ci, torch, triton; print('kperf-ci', kperf_ci.__version__, '| torch', torch.__version__, '| triton', triton.__version__, '|', torch.cuda.get_device_name())"
set +e
