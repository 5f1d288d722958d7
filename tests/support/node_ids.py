"""Every test has a node id of its own: xdist's file scheduling (``make test``) keys a file's tests by node id, and of
tests that share one it runs only the first, silently.

Schemathesis 4 under pytest 9 gives every operation's test of ``schema.parametrize()`` the node id of the function
(``tests/fuzz/test_schemathesis.py::test_every_operation``, 13 times): pytest 9 builds an item's node id from its
``originalname``, where schemathesis puts the function's name, and the operation is only in the item's ``name``
(``test_every_operation[GET /sessions]``)."""

from __future__ import annotations

from collections import Counter

import pytest


def make_unique(items: list[pytest.Item]) -> None:
    """Gives each item that shares its node id the node id of its own name; refuses the run if some still share one."""
    shared = {nodeid for nodeid, count in Counter(item.nodeid for item in items).items() if count > 1}
    for item in items:
        if item.nodeid in shared and item.parent is not None:
            # pytest's own rule for an item without parameters (nodes.Node.__init__), with the name the item has.
            item._id = item.parent.id.child(item.name)
    still = sorted(nodeid for nodeid, count in Counter(item.nodeid for item in items).items() if count > 1)
    if still:
        raise pytest.UsageError(f"tests share a node id, and xdist would run only one of each: {still}")
