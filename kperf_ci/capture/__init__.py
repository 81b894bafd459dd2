"""The capture stage: what a test or script launches, measured; nothing here stores or judges.

Four jobs, each in its own modules (docs/ARCHITECTURE.md draws the same map):

- **static** (no GPU needed): :mod:`.record` records each launch while the tests run (under
  Triton's interpreter on a CPU machine, with :mod:`.fake_device` and :mod:`.interp_patches`),
  :mod:`.describe` and :mod:`.launch_spec` say what a launch is, :mod:`.autotune` which autotune
  configs count; :mod:`.static` compiles every unique launch per arch in the worker pool of
  :mod:`.aot` (:mod:`._worker`, :mod:`._standins`) and reads the static metrics with
  :mod:`.sass` (cubin: registers, spills, SASS mix) and :mod:`.ptx` (the PTX mix), cached by
  :mod:`.metrics_cache`; :mod:`.manifest` keeps each test's launches in order for `kperf ab`;
  :mod:`.progress` is the compile step's progress bar.
- **launches and replay** (GPU): :mod:`.gpu` captures the launches a callable makes,
  :mod:`.replay` copies each launch's arguments so a test's launches can be replayed and timed
  without ``kperf.bench``, :mod:`.ab_launch` pairs a changed launch with the base revision's
  own (`kperf ab`), :mod:`.base_tree` checks the base revision out and loads its callables,
  :mod:`.do_bench` intercepts ``triton.testing.do_bench`` calls in an unmodified benchmark
  script (the plugin's :mod:`kperf_ci.plugin.bench_script` measures each).
- **timing** (GPU): :mod:`.timing` is the timing engine (events or CUDA-graph replay, the L2
  flushed before each sample, within a time budget), :mod:`.timing_steps` the steps every timing loop
  shares, :mod:`.backend` the device boundary (a fake one in the unit tests),
  :mod:`.interleaved` base and head timed in alternating pairs for an A/B verdict.
- **regions** (GPU, Proton): :mod:`.region_pass` decides which regions and edits the TTGIR,
  :mod:`.region_hook` applies it inside Triton's compiler, :mod:`.instrument` runs one
  instrumented launch, :mod:`.region_result` turns its trace into per-region statistics.

:mod:`kperf_ci.measure` and :mod:`kperf_ci.measure_replay` (one layer up) put these together
for one callable and for a test's replayed launches.
"""
