"""Land: raw snapshots as Parquet in the landing zone, append-only."""
