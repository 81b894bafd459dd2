"""The timing engine (GPU): samples of a callable within a budget, and base and head in
alternating pairs. Imports no other job in capture; the verdicts it asks for are
:mod:`kperf_ci.judge`'s. Map: :mod:`kperf_ci.capture`'s docstring."""
