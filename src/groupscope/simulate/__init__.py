"""Simulate: the assignment strategies, reproduced, and the what-if comparison of them
on a group's real members."""
