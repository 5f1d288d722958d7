"""The spec's operations over a storage backend: checks in the contract's order, one session at a time."""
