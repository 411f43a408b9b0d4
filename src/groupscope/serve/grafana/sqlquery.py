"""The PostgreSQL raw-SQL target, as a dataquery the Grafana foundation SDK can carry.

The SDK has no builder for Grafana's SQL datasources: this is the small custom ``Dataquery``
its runtime accepts, registered under the datasource type so that a dashboard read back with
the SDK (``Dashboard.from_json``) gets these targets again rather than untyped bags.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import runtime as cogruntime
from grafana_foundation_sdk.cog import variants as cogvariants

from groupscope.serve.grafana import DATASOURCE_TYPE, DATASOURCE_UID

Format = Literal["table", "time_series"]


class SQLQuery(cogvariants.Dataquery):
    """One raw-SQL target: ``rawSql`` run as written (``rawQuery``, the code editor)."""

    def __init__(self, ref_id: str, raw_sql: str, format_: Format = "table",
                 datasource_uid: str = DATASOURCE_UID, hide: bool = False) -> None:
        self.ref_id = ref_id
        self.raw_sql = raw_sql
        self.format = format_
        self.datasource_uid = datasource_uid
        self.hide = hide

    def to_json(self) -> dict[str, object]:
        payload: dict[str, object] = {
            "refId": self.ref_id,
            "datasource": {"type": DATASOURCE_TYPE, "uid": self.datasource_uid},
            "rawSql": self.raw_sql,
            "format": self.format,
            "rawQuery": True,
            "editorMode": "code",
        }
        if self.hide:
            payload["hide"] = True
        return payload

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        return cls(ref_id=str(data.get("refId", "A")), raw_sql=str(data.get("rawSql", "")),
                   format_="time_series" if data.get("format") == "time_series" else "table",
                   datasource_uid=str((data.get("datasource") or {}).get("uid", DATASOURCE_UID)),
                   hide=bool(data.get("hide", False)))


class SQL(cogbuilder.Builder[cogvariants.Dataquery]):
    """Builder of an :class:`SQLQuery` (``SQL("A", "SELECT ...", "time_series")``)."""

    def __init__(self, ref_id: str, raw_sql: str, format_: Format = "table") -> None:
        self._internal = SQLQuery(ref_id, raw_sql, format_)

    def build(self) -> SQLQuery:
        return self._internal


def _from_json(data: dict[str, Any]) -> cogvariants.Dataquery:
    return SQLQuery.from_json(data)


cogruntime.register_dataquery_variant(
    cogruntime.DataqueryConfig(identifier=DATASOURCE_TYPE, from_json_hook=_from_json))
