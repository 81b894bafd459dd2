"""The one-line errors a run database raises: file, problem, fix."""

from __future__ import annotations

import os


class StoreError(Exception):
    """A run database cannot be used. ``str(e)`` is one line: file, problem, fix."""

    def __init__(self, path: str | os.PathLike[str], problem: str, fix: str):
        self.path = str(path)
        self.problem = " ".join(problem.split())  # one line, whatever SQLite said
        self.fix = fix
        super().__init__(f"{self.path}: {self.problem}; {fix}")


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
