"""Persistence: the DSH-format JSONL codec and the durable file backend under the domain's store."""
