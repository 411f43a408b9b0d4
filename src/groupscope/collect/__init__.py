"""Collect: one snapshot of every consumer group of a cluster through the coordinator
APIs."""
