"""The capture stage: what a test or script launches, measured; nothing here stores, analyses,
judges or reports.

Five jobs, one subpackage each (docs/ARCHITECTURE.md draws the same map). A job imports only the
jobs below it (import-linter's ``capture`` contract in pyproject.toml), and no module here imports
:mod:`kperf_ci.store`, :mod:`kperf_ci.judge`, :mod:`kperf_ci.analysis` or :mod:`kperf_ci.report`
(two ``forbidden`` contracts). The stage above, :mod:`kperf_ci.measure`, puts the jobs together
with the analyses and the judge into one measurement:

    regions/            Proton regions in unmodified kernels (GPU)
    launches/ | timing/ the launches a callable makes, replayed; the timing engine (GPU)
    static/ | imported/ recorded launches compiled ahead of time; static metrics (no GPU) |
                        results measured elsewhere: pytest-benchmark, Liger's benchmark CSV

- :mod:`.static` (no GPU needed): :mod:`~.static.record` records each launch while the tests
  run (under Triton's interpreter on a CPU machine, with :mod:`~.static.fake_device` and
  :mod:`~.static.interp_patches`); :mod:`~.static.describe` and :mod:`~.static.launch_spec` say
  what a launch is, :mod:`~.static.autotune` which autotune configs count;
  :mod:`~.static.compile` compiles every unique launch per arch in the worker pool of
  :mod:`~.static.aot` (:mod:`~.static._worker`, :mod:`~.static._standins`; :mod:`~.static.ahead`
  sends the requests as the tests pass) and reads the static metrics with :mod:`~.static.sass`
  (cubin: registers, spills, SASS mix) and :mod:`~.static.ptx`
  (the PTX mix), cached by :mod:`~.static.metrics_cache`; :mod:`~.static.manifest` lists each
  test's launches in order for `kperf ab`; :mod:`~.static.repo` names files from their git work
  tree; :mod:`~.static.progress` is the compile step's progress bar.
- :mod:`.imported`: results measured elsewhere, converted: :mod:`~.imported.pytest_benchmark`
  (one converter for its JSON file and its live ``benchmark`` fixture) and
  :mod:`~.imported.liger_csv` (Liger-Kernel's benchmark CSV, one run per sitting).
- :mod:`.launches` (GPU): :mod:`~.launches.gpu` captures the launches a callable makes,
  :mod:`~.launches.replay` copies each launch's arguments so a test's launches can be replayed
  and timed without ``kperf.bench``, :mod:`~.launches.ab_launch` pairs a changed launch with the
  base revision's own (`kperf ab`), :mod:`~.launches.base_tree` checks the base revision out and
  loads its callables, :mod:`~.launches.do_bench` intercepts ``triton.testing.do_bench`` calls
  in an unmodified benchmark script (the plugin's :mod:`kperf_ci.plugin.bench_script` measures
  each).
- :mod:`.timing` (GPU): :mod:`~.timing.engine` is the timing engine (CUPTI kernel durations, or
  events and CUDA-graph replay where CUPTI is missing, the L2 flushed before each sample, within a
  time budget), :mod:`~.timing.steps` the steps every timing loop shares, :mod:`~.timing.backend`
  the device boundary (a fake one in the unit tests), :mod:`~.timing.cupti` the CUPTI clock
  (records attributed to calls by marker kernels), :mod:`~.timing.interleaved` base and head
  timed in alternating pairs for an A/B verdict, until the stop rule it is handed says settled
  (the rule and the verdict are :mod:`kperf_ci.judge.ab`'s; :mod:`kperf_ci.measure` hands it in).
- :mod:`.regions` (GPU, Proton): :mod:`~.regions.ttgir_pass` decides which regions and edits the
  TTGIR, :mod:`~.regions.hook` applies it inside Triton's compiler, :mod:`~.regions.instrument`
  runs one instrumented launch, :mod:`~.regions.result` turns its trace into per-region
  statistics.

The plain statistics capture needs (a median, its interval) are :mod:`kperf_ci.sample_stats`';
what identifies a launch, :mod:`kperf_ci.launch_calls`'.
"""
