"""The one-line errors a run database raises: file, problem, fix."""

from __future__ import annotations

import os

#: how a fix names the setting that chose the database's path; an entry point that knows the
#: user's own option puts that in its place (:meth:`StoreError.naming`): `kperf run` has no --db
DB_OPTION = "--db / KPERF_DB"


class StoreError(Exception):
    """A run database cannot be used. ``str(e)`` is one line: file, problem, fix."""

    def __init__(self, path: str | os.PathLike[str], problem: str, fix: str):
        self.path = str(path)
        self.problem = " ".join(problem.split())  # one line, whatever SQLite said
        self.fix = fix
        super().__init__(f"{self.path}: {self.problem}; {fix}")

    def naming(self, option: str) -> str:
        """The one line, its fix naming ``option`` (``--kperf-db / KPERF_DB``, ``-o``) where it
        says :data:`DB_OPTION`."""
        return f"{self.path}: {self.problem}; {self.fix.replace(DB_OPTION, option)}"


class MissingDatabaseError(StoreError):
    pass


class CorruptDatabaseError(StoreError):
    pass


class NewerSchemaError(StoreError):
    pass


class ReadOnlyDatabaseError(StoreError):
    pass


class RunNotFoundError(StoreError):
    pass


class DatabaseLockedError(StoreError):
    """Another process held the write lock for longer than the busy timeout."""


# --------------------------------------------------------------------------- schema
