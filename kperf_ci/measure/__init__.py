"""The measurement stage: a measurement assembled from the stages below it, for the plugin.

A request (:class:`~.measure.Request`, plain values from a test's marker and the run's
settings) becomes a :class:`~.measure.Measurement`: what :mod:`kperf_ci.capture` measured
(timing, regions, the launches replayed, base and head interleaved), what
:mod:`kperf_ci.analysis` finds in it and what :mod:`kperf_ci.judge` says of it (plausibility,
the A/B's threshold and its stop rule, handed to capture's timing loop as a callable). Capture
only captures; this stage puts the jobs together (import-linter's contracts in pyproject.toml):

    measure_replay.py   a test's launches replayed and measured (GPU mode, `kperf ab`)
    measure.py          one callable measured: timing, regions, analyses, A/B (``kperf.bench``)

The plugin (:mod:`kperf_ci.plugin.gpu_bench`, :mod:`kperf_ci.plugin.bench_script`) hands them a
``measure.Request`` and keeps the ``measure.Measurement``.
"""
