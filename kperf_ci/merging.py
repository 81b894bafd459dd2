"""`kperf merge a.db b.db ... -o all.db`'s library: one database from several (shards, workers,
history); the command (``kperf_ci.commands.merge``) parses the options and prints; the SQL is
:mod:`kperf_ci.store.merge`.

What merging guarantees:

- nothing is lost: every run of every input is in the output with every row of it; a variant
  measured in two inputs for the same run keeps the measurement of the first input that has it
  (the rule a single session follows for tests that compile to one variant), and the command
  says how many such variants it saw;
- nothing is duplicated and merging is idempotent: rows are keyed by (run, variant, ...), so
  merging a database with itself or with a part of it changes nothing;
- machine classes stay apart: runs are only ever combined with runs of the same machine
  fingerprint (``--shards``), never across GPUs, drivers or software versions;
- inputs are never written: each is copied and the copy opened (validated, and migrated if it is
  of an older schema); a corrupt input or one of a newer schema is exit 2. A new output is
  written to a temporary file and moved into place only when everything succeeded; an existing
  one (a live history database another job may be writing) is merged into in place, in one
  transaction under its write lock, so no transaction another writer commits is lost.

``--shards``: the runs of one commit measured on several runners (``--kperf-shard i/n``) become
one run per machine class, with the id ``shards-<hash of commit, mode, label, fingerprint>``, so
merging more shards in later lands in the same run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from kperf_ci import store
from kperf_ci.errors import KperfError
from kperf_ci.inputs import read_run
from kperf_ci.store.merge import MergeStats, merge_in_place, write_merged


def _open_copy(src: Path, work: Path, n: int) -> Any:
    """Open a copy of ``src`` (with its WAL), so validation and migration never touch the input."""
    if not src.is_file():
        raise KperfError(f"{src}: no such database; check the path")
    copy = work / f"in{n}.db"
    shutil.copyfile(src, copy)
    if Path(f"{src}-wal").is_file():
        shutil.copyfile(f"{src}-wal", f"{copy}-wal")
    try:
        _check_runs(copy)
        return store.open_db(copy)
    except store.StoreError as e:
        fix = e.fix
        if isinstance(e, store.CorruptDatabaseError):  # the store's hint names --db/--baseline
            fix = f"check that {src} is a kperf run database (restore it from its artifact or drop it)"
        raise KperfError(f"{src}: {e.problem.replace(str(copy), str(src))}; {fix}") from None
    except KperfError as e:
        raise KperfError(e.message.replace(str(copy), str(src))) from None


def _check_runs(copy: Path) -> None:
    """Every run decodes as one kperf-ci wrote (``read_run``): a malformed run is refused, never
    merged with exit 0 for the next reader to trip on."""
    for rid in store.run_statuses(copy):
        read_run(copy, rid)


def merge_into_existing(output: Path, inputs: list[Path], *, shards: bool = False) -> MergeStats:
    """Merge ``inputs`` into the database at ``output``, in place and in one transaction under
    its write lock: a process writing it meanwhile keeps every transaction it commits (the
    merged copy that used to be renamed over it took them away). An input that is ``output``
    itself is left out (merging a database with itself adds nothing). A writer that keeps the lock
    past the busy timeout: exit 2, nothing merged."""
    inputs = [p for p in inputs if not store.same_database(output, p)]  # itself: adds nothing
    try:
        _check_runs(output)  # a malformed output is refused, never written
        out = store.open_db(output, create=True)  # validated; an older schema migrated as writers do
    except store.DatabaseLockedError:
        raise _locked(output) from None
    except store.StoreError as e:
        fix = e.fix
        if isinstance(e, store.CorruptDatabaseError):  # the store's hint names --db/--baseline
            fix = f"choose another -o, or restore {output} from its artifact; it was left as it is"
        raise KperfError(f"{output}: {e.problem}; {fix}") from None
    try:
        with tempfile.TemporaryDirectory(prefix="kperf-merge-") as tmp:
            dbs = [_open_copy(p, Path(tmp), i) for i, p in enumerate(inputs)]
            try:
                return merge_in_place(out, output, dbs, shards=shards)
            except store.DatabaseLockedError:
                raise _locked(output) from None
            finally:
                for db in dbs:
                    db.close()
    finally:
        out.close()


def _locked(output: Path) -> KperfError:
    return KperfError(
        f"{output}: another process kept it locked for writing past the wait "
        f"({store.db.BUSY_TIMEOUT_S:.0f} s): nothing merged; run the merge again when that writer is done"
    )


def merge_databases(inputs: list[Path], output: Path, *, shards: bool = False) -> MergeStats:
    """Merge ``inputs`` (in order) into a new database at ``output`` (replaced atomically)."""
    # a directory that takes no file (/proc) said so, not as the merge's temporary directory
    # "No such file or directory"
    store.check_writable(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kperf-merge-", dir=output.parent) as tmp:
        work = Path(tmp)
        dbs = [_open_copy(p, work, i) for i, p in enumerate(inputs)]  # all validated before any work
        out_tmp = work / "out.db"
        try:
            stats = write_merged(dbs, out_tmp, shards=shards)
        finally:
            for db in dbs:
                db.close()
        for stale in (f"{output}-wal", f"{output}-shm"):
            if os.path.exists(stale):
                os.remove(stale)
        os.replace(out_tmp, output)
    return stats
