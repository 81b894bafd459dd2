"""Judging: turning measurements into verdicts. :mod:`.compare` (a run against a baseline), with
:mod:`.policy` (thresholds and which metrics gate), :mod:`.matching` (pairing variants across
config changes) and :mod:`.comparison` (what a comparison found); :mod:`.stats` (noise-aware
comparison of timing samples), :mod:`.changepoint` (change points in history), :mod:`.gate` (the
release gate), :mod:`.plausibility` (a measurement against the device's peaks), :mod:`.group`
(one compiled kernel however many tests reach it), :mod:`.launch_diff` (what changed between two
revisions' launches), :mod:`.verdict` (the one answer to "is this a regression?" that exit codes,
statuses, comments and pages read). Input is the store's dataclasses (kperf_ci.model); nothing
here measures or renders.
"""
