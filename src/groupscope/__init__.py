"""groupscope: monitoring and analytics for Apache Kafka consumer groups."""

__version__ = "0.1.0"
