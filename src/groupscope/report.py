"""What a person reads: a snapshot as JSON and as an operator's table. Pure functions."""

from __future__ import annotations

from typing import Any

from groupscope.model import Snapshot, TopicPartition, offset_lag


def snapshot_json(snapshot: Snapshot) -> dict[str, Any]:
    by_tp = snapshot.partition_offsets()
    groups = []
    for g in snapshot.groups:
        committed = {TopicPartition(o.topic, o.partition): o.offset for o in g.offsets}
        owned = {tp for m in g.members for tp in m.assignment}
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
            }
        )
    return {
        "cluster": snapshot.cluster,
        "snapshot_ts": snapshot.snapshot_ts.isoformat(),
        "complete": snapshot.complete,
        "errors": [e.as_record() for e in snapshot.errors],
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
        lags = [(o["lag"], o["topic"], o["partition"]) for o in g["offsets"]]
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
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = [
        f"cluster {snapshot.cluster} at {snapshot.snapshot_ts:%Y-%m-%d %H:%M:%S}Z: "
        f"{len(rows)} groups, "
        + ("complete" if snapshot.complete else f"INCOMPLETE ({len(snapshot.errors)} errors)"),
        "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in rows]
    if snapshot.errors:
        lines.append("")
        lines.append("errors:")
        lines += [f"  {printable(e.describe(), 200)}" for e in snapshot.errors]
    return "\n".join(lines)


def _kind(group: dict[str, Any]) -> str:
    if group["protocol_type"] == "":
        return "simple"  # commits offsets, has no members: assign()-style consumers
    if group["protocol_type"] not in ("consumer", None):
        return f"{group['type']}/{group['protocol_type']}"
    return str(group["type"])
