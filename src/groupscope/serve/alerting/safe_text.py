"""Names made safe to put in a message's text, and texts cut to what a channel accepts.

A name comes from Kafka (a cluster, group id, topic, client id, member id, host) or from
another system, and anyone who can create a consumer group chooses it. In a message's text a
newline in it would forge a line (a group called ``x\\n[RESOLVED] ...``), and a bidi control
(U+202E and the like) would reorder what the reader sees. ``shown`` writes every character
that is not printable (control characters, line and paragraph separators, bidi and other
format characters) as an escape (``\\n``, ``\\u202e``), so the text shows it instead of
obeying it, and cuts the name to a bound, so one long name cannot push a message past what a
channel accepts (Slack refuses, or cuts, a text past 40,000 characters). The structured fields
of the webhook's JSON keep names raw: JSON escapes them itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Kafka's longest topic name: any name longer than that is cut in a text.
NAME_LIMIT = 249
# A free text taken from elsewhere (an error, a cause's evidence that quotes client ids and
# hosts), which may hold names: cut at this many characters.
TEXT_LIMIT = 1000
ELLIPSIS = "\u2026"
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(text: str) -> str:
    """``text`` with every character that is not printable written as an escape."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


def shown(value: Any, limit: int = NAME_LIMIT) -> str:
    """A name (or, with ``TEXT_LIMIT``, a free text) as a message's text shows it: escaped,
    and at most ``limit`` characters (cut with an ellipsis)."""
    return cut(visible(str(value)), limit)


def cut(text: str, limit: int) -> str:
    """``text``, at most ``limit`` characters: cut with an ellipsis when longer."""
    return text if len(text) <= limit else text[:max(limit - 1, 0)] + ELLIPSIS


def shown_values(value: Any, limit: int = TEXT_LIMIT) -> Any:
    """``value`` (a mapping, a list, or a leaf) with each of its strings ``shown``."""
    if isinstance(value, str):
        return shown(value, limit)
    if isinstance(value, Mapping):
        return {key: shown_values(item, limit) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [shown_values(item, limit) for item in value]
    return value


def cut_strings(value: Any, limit: int) -> Any:
    """``value`` with each of its strings ``cut`` to ``limit`` (not escaped: for JSON)."""
    if isinstance(value, str):
        return cut(value, limit)
    if isinstance(value, Mapping):
        return {key: cut_strings(item, limit) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [cut_strings(item, limit) for item in value]
    return value


def cut_text(text: str, limit: int) -> str:
    """A message's text, at most ``limit`` characters: the lines that fit, then a line that
    says it was cut."""
    if len(text) <= limit:
        return text
    note = f"\n{ELLIPSIS} (cut: the message is longer than {limit:,} characters)"
    kept = text[:max(limit - len(note), 0)]
    if "\n" in kept:  # whole lines, when at least one fits
        kept = kept[:kept.rindex("\n")]
    return kept + note
