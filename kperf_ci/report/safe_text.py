"""Stored text made safe to show: on a terminal (plain or through Rich) and in GitHub markdown.

Everything read from a run database or an imported file (kernel names, configs, error messages,
labels, branch names, finding texts) is data written by whoever produced that file. Shown as it
is, it could move the cursor or retitle the terminal (escape sequences), format or hide itself
(Rich markup such as ``[/]`` or ``[link=...]``), or become a link, an image, an @-mention or
raw HTML in a pull-request comment. Every place that prints or renders stored text goes
through one of the helpers here:

- :func:`terminal_safe`: plain text for ``click.echo`` / pytest's terminal writer;
- :func:`rich_safe`: the same, escaped for embedding in a Rich markup string or table cell;
- :func:`markdown_safe`: one line of GFM that renders literally (tables included).

The HTML report needs none of them: Jinja2 autoescape and ``markupsafe.escape`` in the SVG
plots cover it, and nothing there is a terminal.
"""

from __future__ import annotations

import html
import re
import unicodedata

__all__ = ["terminal_safe", "rich_safe", "markdown_safe", "plain_url"]

# Format characters that reorder or hide text (the "Trojan Source" set): shown escaped like
# control characters, so a name cannot display as something other than what it is.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escape_char(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def _visible(s: str) -> str:
    """Control characters (C0, DEL, C1) and bidi controls as visible ``\\xNN`` / ``\\uNNNN``."""
    if s.isprintable() and not _BIDI.intersection(s):
        return s  # the common case costs one scan
    return "".join(_escape_char(c) if (unicodedata.category(c) == "Cc" or c in _BIDI) else c for c in s)


def terminal_safe(value: object) -> str:
    """``value`` as text that a terminal shows literally and on one line: control characters,
    escape sequences (``\\x1b]0;title\\x07``), carriage returns, newlines and bidi overrides are
    written out as visible escapes (``\\x1b``), so two different names never look the same and
    nothing reaches the terminal as a command. Not escaped for Rich: see :func:`rich_safe`."""
    return _visible("" if value is None else str(value))


def rich_safe(value: object) -> str:
    """:func:`terminal_safe`, with Rich markup escaped: for f-strings printed by a Rich console
    with markup on and for Rich table cells (which are parsed as markup). ``vector_add[old]``
    stays ``vector_add[old]``; ``[/]`` and ``[link=...]`` are shown, not applied."""
    from rich.markup import escape

    return escape(terminal_safe(value))


# Inline markup characters, backslash-escaped. Line-start syntax (#, -, +, 1., >) cannot occur:
# every escaped text is inside a line (a table cell or after other text), and [ ] are escaped,
# so ( ) never form a link. $ starts GitHub's math, ~ strikethrough.
_MD_PUNCT = re.compile(r"([\\`*_\[\]|~$])")
# @user mentions and emails (an autolink) are broken after the @; #123 and owner/repo#123 issue
# references after the #.
_MENTION = re.compile(r"([@#])(?=\w)")
# GFM extended autolinks: scheme:// (http, https, ftp, ...) and www. Breaking the pattern with a
# word joiner keeps the text readable and makes cmark-gfm see no link (a backslash escape would
# not: the autolink pass runs on the text after escapes are resolved).
_SCHEME = re.compile(r"(?<=[A-Za-z0-9])(?=://)")
_WWW = re.compile(r"(?i)\b(www)(?=\.)")
_WJ = "\u2060"  # WORD JOINER: invisible, not whitespace


def markdown_safe(value: object) -> str:
    """``value`` as one line of GitHub-flavoured markdown that renders literally, in a table cell
    too: whitespace (newlines included) collapses to single spaces, control characters are shown
    escaped (as for a terminal), markdown punctuation is backslash-escaped (``|`` too),
    ``& < > "`` become entities (so no raw HTML, no ``<url>`` autolink), and a word joiner breaks
    what GitHub would otherwise link: ``https://...`` and ``www.`` autolinks, ``@user``
    mentions, email addresses and ``#123`` issue references."""
    s = _visible(" ".join(("" if value is None else str(value)).split()))
    s = _MD_PUNCT.sub(r"\\\1", s)
    s = _SCHEME.sub(_WJ, s)
    s = _WWW.sub(r"\1" + _WJ, s)
    s = _MENTION.sub(r"\1" + _WJ, s)
    # Entities last: the # of an entity (&#x27;) must not be taken for an issue reference.
    return html.escape(s, quote=True)


def plain_url(link: str) -> bool:
    """Whether ``link`` may go into a markdown link as is: an http(s) URL with no whitespace and
    none of the characters that end or nest a markdown link (a ``--link`` is the workflow's own
    run or artifact page, never stored text; anything else is refused, not escaped)."""
    return link.startswith(("https://", "http://")) and not any(c.isspace() or c in "()<>[]`" for c in link)
