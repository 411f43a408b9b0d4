"""Runs inside a process whose environment configures Airflow (tests/airflowutil.py builds it):
Airflow reads its configuration once, at import, so each test's Airflow lives in its own
process. Prints one JSON document on the last line of stdout.

    python tests/airflow_harness.py parse
    python tests/airflow_harness.py test DAG_ID [START END]   # dag.test(), data interval
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any


def _dagbag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag()


def parse() -> dict[str, Any]:
    bag = _dagbag()
    dags = {}
    for dag_id, dag in bag.dags.items():
        dags[dag_id] = {
            "tags": sorted(dag.tags),
            "doc_md": dag.doc_md or "",
            "max_active_runs": dag.max_active_runs,
            "catchup": dag.catchup,
            "timetable": type(dag.timetable).__name__,
            "tasks": {t.task_id: {"owner": t.owner, "retries": t.retries,
                                  "execution_timeout_s": t.execution_timeout.total_seconds()
                                  if t.execution_timeout else None,
                                  "on_failure_callback": bool(t.on_failure_callback),
                                  "on_success_callback": bool(t.on_success_callback),
                                  "operator": type(t).__name__,
                                  "upstream": sorted(t.upstream_task_ids)}
                      for t in dag.tasks},
        }
    return {"import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
            "dags": dags}


def test(dag_id: str, start: str | None, end: str | None) -> dict[str, Any]:
    bag = _dagbag()
    if dag_id not in bag.dags:
        return {"error": f"no DAG {dag_id}", "import_errors": list(bag.import_errors)}
    dag = bag.dags[dag_id]
    kwargs: dict[str, Any] = {}
    if start and end:
        # A run with this data interval: its logical date is the interval's start.
        kwargs["logical_date"] = datetime.fromisoformat(start)
    run = dag.test(**kwargs)
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    return {"state": str(run.state), "tasks": states,
            "data_interval": [str(run.data_interval_start), str(run.data_interval_end)],
            "xcoms": _xcoms(dag_id, run.run_id)}


def _xcoms(dag_id: str, run_id: str) -> dict[str, str]:
    """What the run's tasks pushed, as stored (task_id/key -> JSON): where a secret must not
    be."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return {f"{x.task_id}/{x.key}": json.dumps(x.value, default=str) for x in
                session.scalars(XComModel.get_many(run_id=run_id, dag_ids=dag_id))}


def main(argv: list[str]) -> int:
    if argv[0] == "parse":
        result = parse()
    else:
        result = test(argv[1], *(argv[2:4] if len(argv) >= 4 else (None, None)))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
