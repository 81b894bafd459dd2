"""The launches a callable, a test or a benchmark script makes on a GPU: captured, their
arguments copied for replay, paired with the base revision's own launch. Imports only
:mod:`kperf_ci.capture.static` in capture. Map: :mod:`kperf_ci.capture`'s docstring."""
