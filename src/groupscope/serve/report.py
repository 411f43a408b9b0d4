"""What a person reads: a snapshot as JSON and as an operator's table. Pure functions."""

from __future__ import annotations

from typing import Any

from groupscope.contract.model import GroupType, Snapshot, TopicPartition, offset_lag
from groupscope.offsets.timeline import Timeline


def snapshot_json(snapshot: Snapshot) -> dict[str, Any]:
    by_tp = snapshot.partition_offsets()
    groups = []
    for g in snapshot.groups:
        committed = {TopicPartition(o.topic, o.partition): o.offset for o in g.offsets}
        # A share group commits nothing: its position is its share partitions' start offset.
        owned = ({tp for m in g.members for tp in m.assignment}
                 if g.group_type is not GroupType.SHARE else set())
        offsets = []
        for tp in sorted(set(committed) | owned):
            p = by_tp.get(tp)
            hw = p.high_watermark if p else None
            log_start = p.log_start if p else None
            value = committed.get(tp)
            offsets.append(
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "committed": value,
                    "log_start": log_start,
                    "high_watermark": hw,
                    "last_stable": p.last_stable if p else None,
                    "lag": offset_lag(value, hw),
                    # Retention deleted data the group never read: report it, never hide it.
                    "below_log_start": (
                        value is not None and log_start is not None and value < log_start
                    ),
                }
            )
        groups.append(
            {
                "group_id": g.group_id,
                "type": g.group_type.value,
                "state": g.state,
                "protocol_type": g.protocol_type,
                "assignor": g.assignor,
                "coordinator_id": g.coordinator_id,
                "expected_coordinator_id": g.expected_coordinator_id,
                "coordinator_mismatch": g.coordinator_mismatch,
                "members": [
                    {
                        "member_id": m.member_id,
                        "client_id": m.client_id,
                        "host": m.host,
                        "instance_id": m.instance_id,
                        "assignment": [
                            {"topic": tp.topic, "partition": tp.partition} for tp in m.assignment
                        ],
                        "target_assignment": None
                        if m.target_assignment is None
                        else [
                            {"topic": tp.topic, "partition": tp.partition}
                            for tp in m.target_assignment
                        ],
                    }
                    for m in g.members
                ],
                "offsets": offsets,
                "share_partitions": [
                    {"topic": p.topic, "partition": p.partition,
                     "start_offset": p.start_offset, "lag": p.lag}
                    for p in g.share_partitions
                ],
            }
        )
    return {
        "cluster": snapshot.cluster,
        "snapshot_ts": snapshot.snapshot_ts.isoformat(),
        "complete": snapshot.complete,
        "errors": [e.as_record() for e in snapshot.errors],
        "notes": list(snapshot.notes),
        "groups": groups,
    }


def printable(text: str | None, width: int = 48) -> str:
    """A name made safe for a terminal: control characters escaped, long names shortened."""
    if text is None:
        return "-"
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def snapshot_table(snapshot: Snapshot) -> str:
    doc = snapshot_json(snapshot)
    headers = ["GROUP", "TYPE", "STATE", "ASSIGNOR", "MEMBERS", "PARTS", "LAG",
               "WORST PARTITION", "COORD"]
    rows = []
    for g in doc["groups"]:
        lags = [(o["lag"], o["topic"], o["partition"])
                for o in g["offsets"] or g["share_partitions"]]
        known = [entry for entry in lags if entry[0] is not None]
        # A negative lag (committed past the high watermark) is an anomaly, not a credit
        # against other partitions' lag: it is counted apart, never netted or clamped.
        total = sum(lag for lag, _, _ in known if lag > 0) if known else None
        worst = max(known, default=None, key=lambda entry: entry[0])
        notes = []
        if unknown := len(lags) - len(known):
            notes.append(f"+{unknown} uncommitted")
        if negative := sum(1 for lag, _, _ in known if lag < 0):
            notes.append(f"{negative} NEGATIVE")
        total_text = "-" if total is None else f"{total:,}"
        if notes:
            total_text += f" ({', '.join(notes)})"
        coordinator = "-" if g["coordinator_id"] is None else str(g["coordinator_id"])
        if g["coordinator_mismatch"]:
            coordinator += f"≠{g['expected_coordinator_id']}"
        rows.append(
            [
                printable(g["group_id"]),
                _kind(g),
                g["state"],
                g["assignor"] or "-",
                str(len(g["members"])),
                str(len(g["offsets"])),
                total_text,
                "-" if worst is None else f"{printable(worst[1], 32)}[{worst[2]}] {worst[0]:,}",
                coordinator,
            ]
        )
    lines = [
        f"cluster {snapshot.cluster} at {snapshot.snapshot_ts:%Y-%m-%d %H:%M:%S}Z: "
        f"{len(rows)} groups, "
        + ("complete" if snapshot.complete else f"INCOMPLETE ({len(snapshot.errors)} errors)"),
        *_columns(headers, rows),
    ]
    if snapshot.errors:
        lines.append("")
        lines.append("errors:")
        lines += [f"  {printable(e.describe(), 200)}" for e in snapshot.errors]
    if snapshot.notes:
        lines.append("")
        lines.append("notes:")
        lines += [f"  {printable(note, 200)}" for note in snapshot.notes]
    return "\n".join(lines)


def _columns(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    return [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in (headers, *rows)
    ]


def timeline_table(timeline: Timeline, source: str) -> str:
    """A group's rebalance timeline, one line per generation (or KIP-848 assignment epoch)."""
    headers = ["GEN", "TIME (UTC)", "ASSIGNOR", "KIND", "MEMBERS", "JOINED", "LEFT", "MOVED",
               "NOTES"]
    rows = []
    for g in timeline.generations:
        notes = []
        if g.missing_before:
            notes.append(f"{g.missing_before} generation(s) not in the log before this")
        if g.rewrites:
            notes.append(f"rewritten {g.rewrites}x without a rebalance")
        notes += [f"static {printable(r['instance_id'], 32)} restarted in place"
                  for r in g.replaced]
        if g.empty:
            notes.append("group empty")
        rows.append([
            str(g.generation), f"{g.timestamp:%Y-%m-%d %H:%M:%S.%f}"[:-3], g.protocol or "-",
            g.rebalance_type, str(len(g.members)),
            ", ".join(_short_member(m) for m in g.joined) or "-",
            ", ".join(_short_member(m) for m in g.left) or "-",
            str(g.partitions_moved), "; ".join(notes),
        ])
    kind = timeline.type if timeline.protocol_type in ("consumer", None) else \
        f"{timeline.type}/{timeline.protocol_type}"
    lines = [f"group {printable(timeline.group_id, 200)} ({kind}): "
             f"{len(timeline.generations)} generation(s) from {source}"]
    if rows:
        lines += _columns(headers, rows)
    lines += [f"deleted at {d:%Y-%m-%d %H:%M:%S}Z" for d in timeline.deleted_at]
    return "\n".join(lines)


def rebalance_summary(timelines: list[Timeline]) -> str:
    """One line per group: how often it rebalanced, and its last rebalance."""
    headers = ["GROUP", "KIND", "GENERATIONS", "LAST REBALANCE (UTC)", "GEN", "JOINED", "LEFT",
               "MOVED"]
    rows = []
    for t in timelines:
        if not t.generations:
            continue
        last = t.generations[-1]
        rows.append([printable(t.group_id), t.type, str(len(t.generations)),
                     f"{last.timestamp:%Y-%m-%d %H:%M:%S}", str(last.generation),
                     str(len(last.joined)), str(len(last.left)), str(last.partitions_moved)])
    return "\n".join(_columns(headers, rows))


def _short_member(member_id: str) -> str:
    # Member ids are "<client.id>-<uuid>": keep the client id's start and the uuid's end.
    shown = printable(member_id, 10_000)
    return shown if len(shown) <= 28 else f"{shown[:18]}…{shown[-8:]}"


def _kind(group: dict[str, Any]) -> str:
    if group["protocol_type"] == "":
        return "simple"  # commits offsets, has no members: assign()-style consumers
    if group["protocol_type"] not in ("consumer", None):
        return f"{group['type']}/{group['protocol_type']}"
    return str(group["type"])
