"""units.py: one formatter for metric values in the CLI, the reports and the charts."""

from __future__ import annotations

import math

import pytest
from conftest import make_info, make_result

from kperf_ci.judge.compare import compare_runs
from kperf_ci.judge.policy import ThresholdPolicy
from kperf_ci.model import Metric, RunRecord
from kperf_ci.units import MISSING, fmt_ci, fmt_number, fmt_rel, fmt_value


def test_fmt_value_units():
    assert fmt_value(0.0600312, "ms") == "60.03 µs"
    assert fmt_value(7.6e-6, "ms") == "7.6 ns"
    assert fmt_value(17360, "bytes") == "17,360 B"
    assert fmt_value(0.234, "fraction") == "23.4%"
    assert fmt_value(None) == "–"


@pytest.mark.parametrize(
    "ms, shown",
    [
        (2500.0, "2.5 s"),
        (1.25, "1.25 ms"),
        (0.5, "500 µs"),
        (-0.5, "-500 µs"),
        (0.0, "0 ms"),  # zero keeps the unit it was measured in
        (1e-9, "0.001 ns"),  # below a nanosecond: still ns, never an empty unit
    ],
)
def test_times_in_ms_pick_the_unit_that_keeps_the_number_at_one_or_above(ms, shown):
    assert fmt_value(ms, "ms") == shown


def test_counts_bare_other_units_kept_missing_values_a_dash():
    assert fmt_value(32, "count") == fmt_value(32) == "32"
    assert fmt_value(900.0, "cycles") == "900 cycles"
    assert fmt_value(1.5, "ratio") == "1.5 ratio"
    assert fmt_value(math.nan, "ms") == fmt_value(None, "bytes") == MISSING


def test_numbers_keep_four_significant_digits_without_exponent_in_the_usual_ranges():
    assert fmt_number(0.0600312) == "0.06003"
    assert fmt_number(12.5) == "12.5"
    assert fmt_number(123456.7) == "123,457"
    assert fmt_number(1.2e-5) == "1.2e-05" and fmt_number(3e13) == "3e+13"


def test_relative_changes_and_their_intervals():
    assert fmt_rel(0.031) == "+3.1%" and fmt_rel(-0.2) == "-20.0%"
    assert fmt_rel(11.0) == "12.0×" and fmt_rel(math.inf) == "from 0"
    assert fmt_rel(None) == fmt_rel(math.nan) == ""
    assert fmt_ci((0.028, 0.034)) == "[+2.8%, +3.4%]" and fmt_ci(None) == ""


def test_compare_reasons_read_like_the_report():
    base, cur = make_result(), make_result()
    base.metrics = [Metric("spills", 0.0, "bytes")]
    cur.metrics = [Metric("spills", 2048.0, "bytes")]
    c = compare_runs(RunRecord(make_info(), [base]), RunRecord(make_info(), [cur]), ThresholdPolicy())
    (ch,) = c.changes
    assert ch.regression and f"+{fmt_value(2048.0, 'bytes')} > {fmt_value(0.0, 'bytes')} allowed" in ch.reason


def test_bool_metrics_read_yes_or_no():
    assert fmt_value(1.0, "bool") == "yes" and fmt_value(0.0, "bool") == "no"
