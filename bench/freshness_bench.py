"""P5, freshness: how long after a snapshot is taken its status rows are queryable in the
warehouse, in steady state of ``./run`` (the demo workload, ``airflow standalone``, snapshots
every 30 s, the live DAG on the Spark Connect server, the analytics DAG on its schedule).

Runs the main job (``dev/stack run``, the code ``./run`` runs) in a state folder of its own on
free ports for ``--minutes``, and polls the warehouse every ``--poll`` seconds: a snapshot's
freshness is the first poll that sees its rows in ``mart.group_status`` minus its
``snapshot_ts`` (the time the collector was started: the snapshot time the marts carry). The
first ``--warmup`` minutes after the first status rows are left out (first runs). Also reports the
``live_marts`` task durations on Spark Connect (from Airflow's metadata database), then, with
the stack kept, the same interval through the spark-submit fallback (the lag job of one
snapshot, a JVM per run).

    .venv/bin/python bench/freshness_bench.py [--minutes 30] [--warmup 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _env(env_file: Path) -> dict[str, str]:
    if not env_file.exists():
        return {}
    return dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)


def _task_durations(db: Path, task_id: str) -> list[tuple[str, float]]:
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return [(r[0], float(r[1])) for r in conn.execute(
                "SELECT start_date, duration FROM task_instance WHERE task_id = ? AND"
                " state = 'success' AND duration IS NOT NULL ORDER BY start_date", (task_id,))]
    except sqlite3.Error:
        return []


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--every", type=float, default=30.0)
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT / "dev"), str(ROOT / "src")]
    from sqlalchemy import text

    from groupscope import warehouse
    from groupscope_dev.ports import free_port_block, free_ports

    state = Path(tempfile.mkdtemp(prefix="freshness-"))
    env_file = state / "stack.env"
    pg, airflow_port, connect_port = free_ports(3)
    total_s = (args.warmup + args.minutes) * 60
    command = [sys.executable, "-m", "groupscope_dev", "--state-dir", str(state / "stack"),
               "--env-file", str(env_file), "run", "--kafka-port", str(free_port_block(1)),
               "--pg-port", str(pg), "--airflow-port", str(airflow_port),
               "--spark-connect-port", str(connect_port), "--every", str(args.every),
               "--duration", str(total_s), "--keep"]
    log = (state / "run.log").open("ab")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'dev'}{os.pathsep}{ROOT / 'src'}"}
    print(f"running the main job for {total_s / 60:.0f} min; log {state / 'run.log'}",
          flush=True)
    run = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    seen: dict[datetime, float] = {}
    engine: Any = None
    durations: list[tuple[str, float]] = []
    db = state / "stack" / "airflow" / "airflow.db"
    started = time.time()
    last_tasks = 0.0
    try:
        while run.poll() is None:
            time.sleep(args.poll)
            if engine is None:
                url = _env(env_file).get("WAREHOUSE_URL")
                if not url:
                    continue
                engine = warehouse.engine_for(url)
            try:
                with engine.connect() as conn:
                    rows = conn.execute(text(
                        "SELECT DISTINCT snapshot_ts FROM mart.group_status"
                        " WHERE snapshot_ts > now() - interval '10 minutes'")).scalars().all()
            except Exception:  # the warehouse is starting or going
                continue
            now = time.time()
            for ts in rows:
                seen.setdefault(ts, now)
            if now - last_tasks > 30:
                durations = _task_durations(db, "live_marts") or durations
                last_tasks = now
        with engine.connect() as conn:
            loaded = conn.execute(text("SELECT snapshot_ts FROM raw.snapshots ORDER BY 1")
                                  ).scalars().all()
        fallback = _fallback(state, env_file, loaded)
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(120)
        subprocess.run([sys.executable, "-m", "groupscope_dev", "--state-dir",
                        str(state / "stack"), "--env-file", str(env_file), "down"],
                       cwd=ROOT, env=env, check=False, capture_output=True)
        if engine is not None:
            engine.dispose()
    # Steady state: from --warmup minutes after the first snapshot had its status rows.
    first = min((ts for ts in seen), default=datetime.fromtimestamp(started, UTC))
    steady_from = first + timedelta(minutes=args.warmup)
    raw = {"seen": {ts.isoformat(): at for ts, at in seen.items()},
           "loaded": [ts.isoformat() for ts in loaded], "live_marts": durations,
           "fallback": fallback}
    (state / "freshness.json").write_text(json.dumps(raw))
    print(f"raw data: {state / 'freshness.json'}")
    lags = [seen[ts] - ts.timestamp() for ts in loaded if ts >= steady_from and ts in seen]
    missing = [ts for ts in loaded if ts >= steady_from and ts not in seen]
    steady = [d for start, d in durations
              if datetime.fromisoformat(start).replace(tzinfo=UTC) >= steady_from]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"{platform.python_version()}, load average now {os.getloadavg()[0]:.1f}")
    print(f"snapshots in steady state: {len(lags) + len(missing)} "
          f"({len(missing)} without status rows at the end)")
    if lags:
        print(f"freshness (status rows queryable after the snapshot): median "
              f"{statistics.median(lags):.1f} s, p95 {_pct(lags, 0.95):.1f} s, "
              f"min {min(lags):.1f} s, max {max(lags):.1f} s; within 60 s: "
              f"{sum(v <= 60 for v in lags)}/{len(lags)}")
    if steady:
        print(f"live_marts on Spark Connect ({len(steady)} runs): median "
              f"{statistics.median(steady):.1f} s, p95 {_pct(steady, 0.95):.1f} s")
    if fallback:
        print(f"the lag job of one snapshot through spark-submit ({len(fallback)} runs): "
              f"median {statistics.median(fallback):.1f} s")
    return 0


def _fallback(state: Path, env_file: Path, loaded: list[datetime], runs: int = 3) -> list[float]:
    """The fallback's work for the newest snapshot, timed: spark-submit of the lag job."""
    from groupscope.analyze import submit

    url = _env(env_file)["WAREHOUSE_URL"]
    landing = state / "stack" / "landing"
    newest = loaded[-1]
    times = []
    for _ in range(runs):
        argv = submit.command("lag_job.py", [
            "--landing", str(landing), "--cluster", "local", "--start", newest.isoformat(),
            "--end", (newest + timedelta(microseconds=1)).isoformat(), "--warehouse", url])
        began = time.monotonic()
        done = subprocess.run(argv, env=submit.environment(), capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            break
        times.append(time.monotonic() - began)
    return times


if __name__ == "__main__":
    sys.exit(main())
