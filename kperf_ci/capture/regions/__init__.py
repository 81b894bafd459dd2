"""Proton regions in unmodified Triton kernels (after KPerfIR): the TTGIR pass, its hook in
Triton's compiler, one instrumented launch and its per-region statistics. Imports
:mod:`~kperf_ci.capture.launches` and :mod:`~kperf_ci.capture.timing`. Map:
:mod:`kperf_ci.capture`'s docstring."""
