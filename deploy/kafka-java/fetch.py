"""Downloads the jars of Kafka's Java Admin client (share and streams groups,
groupscope.kafka.java_admin) from Maven Central into a folder, each checked by its SHA-256.
Usage: python fetch.py FOLDER  (the image runs it; GROUPSCOPE_KAFKA_JAVA_CLASSPATH=FOLDER)."""

from __future__ import annotations

import hashlib
import sys
import urllib.request
from pathlib import Path

CENTRAL = "https://repo.maven.apache.org/maven2/"
JARS = {
    "org/apache/kafka/kafka-clients/4.3.1/kafka-clients-4.3.1.jar":
        "52501b7b47510c66f898871adaf6d2968ab7246561d44ced43643a8a587f0b36",
    "org/slf4j/slf4j-api/1.7.36/slf4j-api-1.7.36.jar":
        "d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0",
}


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for path, sha256 in JARS.items():
        with urllib.request.urlopen(CENTRAL + path, timeout=60) as answer:
            data = answer.read()
        if hashlib.sha256(data).hexdigest() != sha256:
            sys.exit(f"{path}: SHA-256 mismatch; not installed")
        (folder / path.rsplit("/", 1)[1]).write_bytes(data)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
