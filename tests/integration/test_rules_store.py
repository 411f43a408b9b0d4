"""The last valid rules file in the warehouse (groupscope.serve.alerting.rules_store, table
ops.alert_rules_valid) against a real PostgreSQL: a valid file is stored as read; a bad file
written over it, or the file deleted, leaves the stored rules in use with the file's error;
without a stored text a bad file falls back to the built-in rules. Never an exception."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from groupscope.serve.alerting.rules import builtin_rules
from groupscope.serve.alerting.rules_store import RulesInUse, rules_in_use

pytestmark = pytest.mark.integration

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
VALID = """
retry_max: 5m
rules:
  - name: group_err
    threshold: 7
"""
BAD = """
retry_max: 5m
rules:
  - name: group_err
    threshold: seven
"""


def _in_use(engine: Engine, path: Path | None, now: datetime) -> RulesInUse:
    with engine.begin() as conn:
        return rules_in_use(conn, path, now)


def _stored(engine: Engine, path: Path) -> tuple[str, str, datetime] | None:
    with engine.connect() as conn:
        row = conn.execute(text("SELECT rules_text, sha256, loaded_at FROM ops.alert_rules_valid"
                                " WHERE source = :s"), {"s": str(path)}).one_or_none()
    return None if row is None else (row.rules_text, row.sha256, row.loaded_at)


def _the_valid_rules(in_use: RulesInUse) -> bool:
    return (in_use.rules.rule("group_err").threshold == 7
            and in_use.rules.retry_max == timedelta(minutes=5))


def test_a_valid_file_is_stored_and_kept_when_a_bad_one_is_written_over_it(
        warehouse_engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(VALID, encoding="utf-8")
    valid = _in_use(warehouse_engine, path, T0)
    assert _the_valid_rules(valid)
    assert (valid.error, valid.source) == (None, f"rules file {path}")
    # Committed with the caller's transaction, read here on another connection.
    assert _stored(warehouse_engine, path) == (
        VALID, hashlib.sha256(VALID.encode()).hexdigest(), T0)

    path.write_text(BAD, encoding="utf-8")
    kept = _in_use(warehouse_engine, path, T0 + timedelta(minutes=1))
    assert _the_valid_rules(kept)
    assert kept.error == (f"rules file {path}: rule 'group_err': field 'threshold': must be a "
                          "number, not 'seven'")
    assert kept.source == f"rules file {path} as last valid at 2024-05-01T12:00:00Z"
    assert _stored(warehouse_engine, path) == (
        VALID, hashlib.sha256(VALID.encode()).hexdigest(), T0)  # the bad text is not stored

    # Fixed: the new text is stored, and read when it is last found valid.
    fixed = VALID.replace("threshold: 7", "threshold: 8")
    path.write_text(fixed, encoding="utf-8")
    later = T0 + timedelta(minutes=2)
    now_valid = _in_use(warehouse_engine, path, later)
    assert now_valid.rules.rule("group_err").threshold == 8 and now_valid.error is None
    assert _stored(warehouse_engine, path) == (
        fixed, hashlib.sha256(fixed.encode()).hexdigest(), later)


def test_a_deleted_file_leaves_the_stored_rules_in_use(warehouse_engine: Engine,
                                                       tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(VALID, encoding="utf-8")
    _in_use(warehouse_engine, path, T0)
    path.unlink()
    kept = _in_use(warehouse_engine, path, T0 + timedelta(minutes=1))
    assert _the_valid_rules(kept)
    assert kept.error == f"rules file {path}: cannot be read: No such file or directory"
    assert kept.source.startswith(f"rules file {path} as last valid at ")


def test_without_a_stored_text_a_bad_file_gives_the_builtin_rules(
        warehouse_engine: Engine, tmp_path: Path) -> None:
    # Another file's stored text is not this one's.
    other = tmp_path / "other.yaml"
    other.write_text(VALID, encoding="utf-8")
    _in_use(warehouse_engine, other, T0)
    path = tmp_path / "rules.yaml"
    path.write_text(BAD, encoding="utf-8")
    fallen_back = _in_use(warehouse_engine, path, T0)
    assert fallen_back.rules == builtin_rules()
    assert fallen_back.error == (f"rules file {path}: rule 'group_err': field 'threshold': "
                                 "must be a number, not 'seven'")
    assert fallen_back.source == "built-in rules"
    assert _stored(warehouse_engine, path) is None


def test_a_stored_text_no_longer_valid_gives_the_builtin_rules(
        warehouse_engine: Engine, tmp_path: Path) -> None:
    # Stored by an older groupscope that took a field this one refuses.
    path = tmp_path / "rules.yaml"
    stale = "rules:\n  - {name: group_err, window: 5m}\n"
    with warehouse_engine.begin() as conn:
        conn.execute(text("INSERT INTO ops.alert_rules_valid VALUES (:s, :t, :h, :at)"),
                     {"s": str(path), "t": stale, "h": "x", "at": T0})
    path.write_text(BAD, encoding="utf-8")
    fallen_back = _in_use(warehouse_engine, path, T0)
    assert fallen_back.rules == builtin_rules() and fallen_back.source == "built-in rules"
    assert fallen_back.error is not None and "field 'threshold'" in fallen_back.error


def test_no_file_is_the_builtin_rules_without_the_warehouse() -> None:
    in_use = rules_in_use(None, None, T0)  # no connection needed: nothing to read or store
    assert in_use == RulesInUse(builtin_rules(), None, "built-in rules")
