"""Replay a team's week: the workload trace, its generator, and the one-VM-per-person
baseline it is compared with (docs/replay.md)."""
