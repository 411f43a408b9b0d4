"""How to spark-submit the job entry points (``groupscope.spark_jobs``, shipped in the
package) with the pyspark of this environment: the one place that knows where the entry points
are, the Spark home, the Python the executors run, and extra jars."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path


def job_path(job: str) -> Path:
    """The file of one entry point (``lag_job.py``...). spark-submit takes a file: an installed
    package's resources are files on disk (a zipped install is not supported)."""
    entry = resources.files("groupscope.spark_jobs").joinpath(job)
    path = Path(str(entry))
    if not path.is_file():
        raise FileNotFoundError(f"no Spark job entry point {job!r} in {path.parent}")
    return path


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def environment() -> dict[str, str]:
    """spark-submit's environment: its launcher otherwise looks for pyspark with whatever
    ``python3`` is first on PATH, and executors must run this interpreter (and package)."""
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def command(job: str, args: Sequence[str], master: str = "local[2]",
            jars: Sequence[Path] = (), conf: dict[str, str] | None = None) -> list[str]:
    from groupscope.analyze.io import DRIVER_LAUNCH_CONF

    argv = [str(spark_home() / "bin" / "spark-submit"), "--master", master]
    for key, value in {**DRIVER_LAUNCH_CONF, **(conf or {})}.items():
        argv += ["--conf", f"{key}={value}"]
    if jars:
        argv += ["--jars", ",".join(str(j) for j in jars)]
    return [*argv, str(job_path(job)), *args]
