"""`make bench`: the gateway's speed, measured against floors in the same run (docs/benchmarks.md)."""
