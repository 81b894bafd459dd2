"""How an exception is told in one message: its type and the start of its text.

Foundation level, importing nothing, so that capture, measure, the agent and the plugin tell a
failure the same way (a warning, a row's reason, a rejected candidate's reason). The text is cut
because an exception from a user's kernel or a compiler can carry pages (a whole IR dump), and the
message it lands in is one line of a terminal, a PR comment or a database row.
"""

from __future__ import annotations

__all__ = ["error_text"]


def error_text(e: BaseException, limit: int = 200) -> str:
    """``"TypeName: text"``, the text cut to its first ``limit`` characters."""
    return f"{type(e).__name__}: {str(e)[:limit]}"
