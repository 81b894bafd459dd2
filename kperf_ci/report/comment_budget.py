"""The room of a PR comment: lines added while they fit under a character limit, folds always
closed. Both comments (the run's, report/markdown.py, and `kperf ab`'s, report/ab.py) use it."""

from __future__ import annotations


class CommentBudget:
    """Lines of a comment that must stay under ``limit`` characters: the one home of the rule
    for both comments (the run's and `kperf ab`'s).

    ``reserve`` characters are kept back for the notes that close a cut section and for the final
    truncation notice. Every ``<details>`` opened with :meth:`open_fold` is counted: what
    :meth:`fits` allows leaves room to close all open folds, and :meth:`text` closes any left
    open, so a cut never leaves a fold open and a notice that follows is never inside one.
    """

    CLOSE = "</details>"

    def __init__(self, limit: int, reserve: int = 0):
        self.limit = limit
        self.reserve = reserve
        self.used = 0
        self.lines: list[str] = []
        self.depth = 0  # <details> opened and not yet closed

    def _closing(self) -> int:
        return self.depth * (len(self.CLOSE) + 2)

    def fits(self, text: str, reserve: int | None = None) -> bool:
        keep = self.reserve if reserve is None else reserve
        return self.used + len(text) + 1 + keep + self._closing() <= self.limit

    def add(self, text: str) -> None:
        self.lines.append(text)
        self.used += len(text) + 1

    def add_if_fits(self, text: str) -> bool:
        if not self.fits(text):
            return False
        self.add(text)
        return True

    def open_fold(self, opening: str, first: str = "") -> bool:
        """``opening`` (a ``<details>...<summary>`` line) when it, its closing and ``first``
        (its first item, added by the caller) fit: a fold with nothing in it is never opened."""
        if not self.fits(opening + "\n\n" + (first + "\n" if first else "") + self.CLOSE):
            return False
        self.add(opening)
        self.add("")
        self.depth += 1
        return True

    def close_fold(self) -> None:
        self.depth -= 1  # counted before adding: the closing was reserved all along
        self.add(self.CLOSE)
        self.add("")

    def text(self, notice: str | None = None) -> str:
        """The comment: open folds closed, then ``notice`` (one line) after the last fold."""
        while self.depth:
            self.close_fold()
        lines = list(self.lines)
        if notice:
            while lines and not lines[-1]:
                lines.pop()
            lines += ["", notice]
        text = "\n".join(lines).rstrip() + "\n"
        assert len(text) <= self.limit, (len(text), self.limit)
        return text
