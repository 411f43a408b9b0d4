"""Healthchecks of the Spark services (the groupscope image has no curl): `master` and
`worker` ask their web UI's JSON status (the worker must be registered with a master);
`connect` runs a query on the Spark Connect server, as dev/groupscope_dev/spark_connect.py
does (listening is not serving). Exit 0 when healthy."""

from __future__ import annotations

import json
import sys
import urllib.request


def status(port: int) -> dict[str, object]:
    url = f"http://127.0.0.1:{port}/json/"
    with urllib.request.urlopen(url, timeout=5) as response:
        return dict(json.loads(response.read()))


def main(role: str) -> int:
    if role == "master":
        return 0 if status(8080).get("status") == "ALIVE" else 1
    if role == "worker":
        return 0 if str(status(8081).get("masterurl", "")).startswith("spark://") else 1
    if role == "connect":
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote("sc://127.0.0.1:15002").getOrCreate()
        ok = spark.range(3).count() == 3
        spark.stop()
        return 0 if ok else 1
    raise SystemExit(f"usage: healthcheck.py master|worker|connect, not {role!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
