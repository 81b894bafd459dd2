"""`kperf ab`'s output files: checked before the passes (a bad path found after minutes of
compiling and timing made them for nothing), the job summary and JSON copy written after them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kperf_ci import store
from kperf_ci.errors import KperfError, check_output_file
from kperf_ci.report.output_dir import make_output_dir


def check_outputs(db: str, report_dir: str, json_path: str | None) -> None:
    """Every file the job writes can be written: the JSON copy, the report directory and the
    database both passes write into (a reader opens an existing one: nothing is written)."""
    if json_path:
        check_output_file(json_path, "--json")
    try:
        make_output_dir(report_dir)
    except OSError as e:
        raise KperfError(
            f"{report_dir}: cannot create the report directory ({e.strerror}); pass --report-dir"
        ) from None
    store.check_writable(db)
    make_output_dir(Path(db).parent)
    if Path(db).exists():
        store.open_db(db).close()


def publish(doc: dict[str, Any], report_dir: str, json_path: str | None) -> None:
    """The job summary appended to ``$GITHUB_STEP_SUMMARY`` (on Actions) and, with ``--json``,
    the A/B document as JSON; the reports themselves are report/ab.py's ``write_ab_reports``."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(Path(report_dir, "summary.md").read_text(encoding="utf-8") + "\n")
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(doc, indent=2, default=str))
