"""The population of kernel variants, in the run database itself (tables ``agent_*``).

The file is opened through :func:`kperf_ci.store.open_db` (validated, migrated, WAL), so an
agent session lives next to the runs that motivated it. The agent's tables carry their own
schema version (``meta.agent_schema_version``); a newer one is refused with one line, like the
store does for its own. Every write is one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kperf_ci import store

AGENT_SCHEMA_VERSION = 1

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS agent_sessions (
        id TEXT PRIMARY KEY, kernel TEXT NOT NULL, module TEXT NOT NULL, trigger TEXT NOT NULL,
        proposer TEXT NOT NULL, device TEXT NOT NULL, started_at TEXT NOT NULL, finished_at TEXT,
        stop_reason TEXT, budget TEXT NOT NULL, context TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS agent_variants (
        id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES agent_sessions(id),
        parent_id INTEGER REFERENCES agent_variants(id), round INTEGER NOT NULL, code TEXT NOT NULL,
        hypothesis TEXT NOT NULL, proposer TEXT NOT NULL, knobs TEXT, verdict TEXT NOT NULL,
        hack TEXT, reason TEXT, checks TEXT, timings TEXT, ratio REAL, ci_low REAL, ci_high REAL,
        profile TEXT, created_at TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS agent_variants_session ON agent_variants(session_id)",
]

# verdicts of a variant
ORIGINAL, REJECTED, VERIFIED, FASTER, NOT_FASTER, PROPOSER_ERROR, DUPLICATE = (
    "original",
    "rejected",
    "verified",
    "faster",
    "not_faster",
    "proposer_error",
    "duplicate",
)


class AgentSchemaError(store.StoreError):
    pass


@dataclass
class VariantRow:
    id: int
    parent_id: int | None
    round: int
    code: str
    hypothesis: str
    proposer: str
    knobs: dict[str, int]
    verdict: str
    hack: str
    reason: str
    checks: dict[str, Any]
    timings: dict[str, Any]
    ratio: float | None
    ci_low: float | None
    ci_high: float | None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Population:
    """Sessions and variants in one database file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        db = store.open_db(self.path, create=True)
        self.conn: sqlite3.Connection = db.conn
        with self._txn():
            row = self.conn.execute("SELECT value FROM meta WHERE key='agent_schema_version'").fetchone()
            version = int(row[0]) if row else 0
            if version > AGENT_SCHEMA_VERSION:
                raise AgentSchemaError(
                    self.path,
                    f"agent tables have schema version {version}, newer than this kperf-ci supports",
                    "upgrade kperf-ci; the file was left untouched",
                )
            for sql in _SCHEMA:
                self.conn.execute(sql)
            self.conn.execute(
                "INSERT INTO meta(key, value) VALUES ('agent_schema_version', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(AGENT_SCHEMA_VERSION),),
            )

    def close(self) -> None:
        self.conn.close()

    @contextlib.contextmanager
    def _txn(self) -> Iterator[None]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    def start_session(
        self,
        *,
        kernel: str,
        module: str,
        trigger: str,
        proposer: str,
        device: str,
        budget: dict[str, Any],
        context: dict[str, Any],
    ) -> str:
        sid = uuid.uuid4().hex[:12]
        with self._txn():
            self.conn.execute(
                "INSERT INTO agent_sessions(id, kernel, module, trigger, proposer, device, started_at, "
                "budget, "
                "context) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    sid,
                    kernel,
                    module,
                    trigger,
                    proposer,
                    device,
                    _now(),
                    json.dumps(budget),
                    json.dumps(context),
                ),
            )
        return sid

    def finish_session(self, sid: str, stop_reason: str) -> None:
        with self._txn():
            self.conn.execute(
                "UPDATE agent_sessions SET finished_at=?, stop_reason=? WHERE id=?",
                (_now(), stop_reason, sid),
            )

    def add_variant(
        self,
        sid: str,
        *,
        parent_id: int | None,
        round: int,
        code: str,
        hypothesis: str,
        proposer: str,
        verdict: str,
        knobs: dict[str, int] | None = None,
        hack: str = "",
        reason: str = "",
        checks: dict[str, Any] | None = None,
        timings: dict[str, Any] | None = None,
        profile: dict[str, Any] | None = None,
    ) -> int:
        t = timings or {}
        with self._txn():
            cur = self.conn.execute(
                "INSERT INTO agent_variants(session_id, parent_id, round, code, hypothesis, proposer, knobs, "
                "verdict, hack, reason, checks, timings, ratio, ci_low, ci_high, profile, created_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    sid,
                    parent_id,
                    round,
                    code,
                    hypothesis,
                    proposer,
                    json.dumps(knobs or {}),
                    verdict,
                    hack,
                    reason,
                    json.dumps(checks or {}),
                    json.dumps(t, default=str),
                    t.get("ratio"),
                    t.get("ci_low"),
                    t.get("ci_high"),
                    json.dumps(profile or {}),
                    _now(),
                ),
            )
            return int(cur.lastrowid or 0)

    def variants(self, sid: str) -> list[VariantRow]:
        rows = self.conn.execute(
            "SELECT id, parent_id, round, code, hypothesis, proposer, knobs, verdict, hack, reason, checks, "
            "timings, ratio, ci_low, ci_high FROM agent_variants WHERE session_id=? ORDER BY id",
            (sid,),
        ).fetchall()
        return [
            VariantRow(
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                json.loads(r[6] or "{}"),
                r[7],
                r[8] or "",
                r[9] or "",
                json.loads(r[10] or "{}"),
                json.loads(r[11] or "{}"),
                r[12],
                r[13],
                r[14],
            )
            for r in rows
        ]

    def best(self, sid: str) -> VariantRow | None:
        """The verified variant with the lowest time ratio to the original, faster with confidence."""
        fast = [v for v in self.variants(sid) if v.verdict == FASTER and v.ratio is not None]
        return min(fast, key=lambda v: v.ratio) if fast else None

    def sessions(self) -> list[dict[str, Any]]:
        cols = ("id", "kernel", "trigger", "proposer", "device", "started_at", "finished_at", "stop_reason")
        rows = self.conn.execute(
            f"SELECT {', '.join(cols)} FROM agent_sessions ORDER BY started_at"
        ).fetchall()
        return [dict(zip(cols, r, strict=True)) for r in rows]
