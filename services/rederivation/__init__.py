"""Offline derivation runs started from the CLI: rederive into a named derivation, promote one, retry parked
batches. Each holds the workspace's run lock (projections/run_lock.py) and derives with the deriver's own code."""
