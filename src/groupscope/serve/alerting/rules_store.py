"""The last valid rules file, kept in the warehouse (``ops.alert_rules_valid``, one row per
file path), so that a bad file dropped in while groupscope runs does not stop alerting: the
evaluation keeps the rules it last found valid and raises the ``rules_invalid`` incident with
the file's error.

The connection is the caller's (its transaction commits the stored text with the rest of the
evaluation) and so is the time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text

from groupscope.serve.alerting.rules import (
    BUILTIN_SOURCE,
    RulesError,
    RuleSet,
    builtin_rules,
    load_rules_text,
    read_rules_file,
    rules_source,
    salvage_channels,
)

_STORE = text("""
INSERT INTO ops.alert_rules_valid (source, rules_text, sha256, loaded_at)
VALUES (:source, :rules_text, :sha256, :loaded_at)
ON CONFLICT (source) DO UPDATE
SET rules_text = EXCLUDED.rules_text, sha256 = EXCLUDED.sha256, loaded_at = EXCLUDED.loaded_at
""")
_STORED = text("""
SELECT rules_text, loaded_at FROM ops.alert_rules_valid WHERE source = :source
""")


@dataclass(frozen=True)
class RulesInUse:
    rules: RuleSet
    # The RulesError text when the file is bad and the stored or built-in rules are used.
    error: str | None
    # Where the rules come from, for messages: "rules file PATH", "rules file PATH as last
    # valid at 2024-05-01T12:00:00Z" (the stored text) or "built-in rules".
    source: str


def rules_in_use(conn: Any, path: Path | None, now: datetime) -> RulesInUse:
    """The rules to evaluate with. No path: the built-ins. A readable, valid file: its rules,
    its text stored as the last valid one (``loaded_at`` = ``now``). A bad or unreadable file:
    the text last stored for that path, if it is still valid (a newer groupscope may refuse
    it), else the built-ins, with the file's error, and the bad file's channels that are
    valid on their own. Never raises for a bad file."""
    if path is None:
        return RulesInUse(builtin_rules(), None, BUILTIN_SOURCE)
    source = rules_source(path)
    rules_text = None
    try:
        rules_text = read_rules_file(path)
        rules = load_rules_text(rules_text, source)
    except RulesError as exc:
        fallback = _last_valid(conn, path, str(exc))
        return _with_channels_of(fallback, rules_text, source)
    conn.execute(_STORE, {"source": str(path), "rules_text": rules_text,
                          "sha256": hashlib.sha256(rules_text.encode()).hexdigest(),
                          "loaded_at": now})
    return RulesInUse(rules, None, source)


def _with_channels_of(fallback: RulesInUse, rules_text: str | None, source: str) -> RulesInUse:
    """The fallback with the invalid file's own channels (those valid on their own) in place of
    the fallback's of the same name, and added to them: on a first deployment the built-ins'
    channels may have no connection, and the file's are where its on-call listens."""
    if rules_text is None:
        return fallback
    salvaged = {c.name: c for c in salvage_channels(rules_text, source)}
    if not salvaged:
        return fallback
    kept = [salvaged.pop(c.name, c) for c in fallback.rules.channels]
    rules = fallback.rules.model_copy(update={"channels": [*kept, *salvaged.values()]})
    return RulesInUse(rules, fallback.error, fallback.source)


def _last_valid(conn: Any, path: Path, error: str) -> RulesInUse:
    stored = conn.execute(_STORED, {"source": str(path)}).one_or_none()
    if stored is not None:
        try:
            rules = load_rules_text(stored.rules_text, rules_source(path))
        except RulesError:
            pass
        else:
            valid_at = stored.loaded_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            return RulesInUse(rules, error, f"{rules_source(path)} as last valid at {valid_at}")
    return RulesInUse(builtin_rules(), error, BUILTIN_SOURCE)
