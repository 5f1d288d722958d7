"""The domain: events, their rules, session logs, the store with snapshot and fork, model history.

Pure Python: no web framework, no file I/O. Everything here is unit-testable in memory.
"""
