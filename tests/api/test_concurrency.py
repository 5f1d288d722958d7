"""Concurrent clients (spec 2.4): every request runs on one event loop at once, as under a real server.

The TestClient's portal runs one request at a time, so these tests drive the app with an httpx AsyncClient over
ASGITransport (:func:`tests.api.helpers.serve`), on the file journal, where a write waits for the disk thread and
other requests run meanwhile.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.api.builders import TURN_LENGTH, close_turn, note, open_turn, turn
from tests.api.conftest import AppFactory, ClientFactory
from tests.api.helpers import assert_problem, events_of, serve

Json = dict[str, Any]


async def _events(client: httpx.AsyncClient, session_id: str) -> list[Json]:
    response = await client.get(f"/sessions/{session_id}/events", params={"limit": 10000})
    assert response.status_code == 200, response.text
    events: list[Json] = response.json()["events"]
    return events


def test_concurrent_appenders_get_contiguous_seqs_and_lose_nothing(
    make_app: AppFactory, make_client: ClientFactory
) -> None:
    appenders, batch = 50, 3

    async def main() -> tuple[list[httpx.Response], list[Json]]:
        async with serve(make_app()) as client:
            assert (await client.post("/sessions", json={"id": "s"})).status_code == 201

            async def appender(number: int) -> httpx.Response:
                events = [note(f"{number}.{index}") for index in range(batch)]
                return await client.post("/sessions/s/events", json={"events": events})

            responses = await asyncio.gather(*(appender(number) for number in range(appenders)))
            return list(responses), await _events(client, "s")

    responses, stored = asyncio.run(main())

    assert [response.status_code for response in responses] == [201] * appenders
    for number, response in enumerate(responses):
        events = response.json()["events"]
        first = events[0]["seq"]
        assert [event["seq"] for event in events] == list(range(first, first + batch))  # a batch stays together
        assert [event["data"]["text"] for event in events] == [f"{number}.{index}" for index in range(batch)]
        assert stored[first : first + batch] == events
    assert [event["seq"] for event in stored] == list(range(appenders * batch))
    assert sorted(event["data"]["text"] for event in stored) == sorted(
        f"{number}.{index}" for number in range(appenders) for index in range(batch)
    )
    assert events_of(make_client(), "s") == stored  # and all of it was on disk: a restart finds it


def _check_children(source: list[Json], children: list[Json], child_events: list[list[Json]]) -> None:
    for child, events in zip(children, child_events, strict=True):
        assert child["parentSession"] == "src"
        assert child["eventCount"] == child["seedLength"] == len(events)
        assert events == source[: len(events)]
        if events:
            assert events[-1]["type"] == "turn/end"
            assert child["forkable"] is True


def test_forks_racing_whole_turn_appends_always_find_a_boundary(make_app: AppFactory) -> None:
    writers, turns_each, forkers, forks_each = 4, 4, 5, 12

    async def main() -> tuple[list[Json], list[Json], list[list[Json]], int]:
        async with serve(make_app()) as client:
            assert (await client.post("/sessions", json={"id": "src"})).status_code == 201
            conflicts = 0

            async def writer() -> None:
                nonlocal conflicts
                written = 0
                while written < turns_each:
                    count = (await client.get("/sessions/src")).json()["eventCount"]
                    events = turn(count // TURN_LENGTH + 1)
                    # The other writers read the same count meanwhile: an append that runs to its end at once
                    # (no fsync) would otherwise leave them nothing to race for.
                    await asyncio.sleep(0.001)
                    response = await client.post("/sessions/src/events", json={"events": events, "expectedSeq": count})
                    if response.status_code == 409:
                        assert response.json()["code"] == "SEQ_CONFLICT"
                        assert response.json()["currentSeq"] > count
                        conflicts += 1
                        continue
                    assert response.status_code == 201, response.text
                    written += 1

            async def forker() -> list[Json]:
                children = []
                for _ in range(forks_each):
                    response = await client.post("/sessions/src/fork")
                    # Every append is one whole turn, stored atomically: the log always ends at a turn/end.
                    assert response.status_code == 201, response.text
                    children.append(response.json())
                    await asyncio.sleep(0)
                return children

            results = await asyncio.gather(*(writer() for _ in range(writers)), *(forker() for _ in range(forkers)))
            children = [child for result in results[writers:] if result for child in result]
            child_events = [await _events(client, child["id"]) for child in children]
            return await _events(client, "src"), children, child_events, conflicts

    source, children, child_events, conflicts = asyncio.run(main())

    assert len(source) == writers * turns_each * TURN_LENGTH
    assert [event["data"]["turn"] for event in source if event["type"] == "turn/end"] == list(
        range(1, writers * turns_each + 1)
    )
    assert conflicts > 0  # the writers did race
    assert len(children) == forkers * forks_each
    assert len({len(events) for events in child_events}) > 1  # the forks saw the log at different lengths
    _check_children(source, children, child_events)


def test_forks_racing_a_turn_in_progress_never_cut_it(make_app: AppFactory) -> None:
    turns, forkers = 12, 6

    async def main() -> tuple[list[Json], list[Json], list[Json], list[list[Json]]]:
        async with serve(make_app()) as client:
            assert (await client.post("/sessions", json={"id": "src"})).status_code == 201
            done = asyncio.Event()

            async def writer() -> None:
                for number in range(1, turns + 1):
                    for part in (open_turn(number), close_turn(number)):
                        response = await client.post("/sessions/src/events", json={"events": part})
                        assert response.status_code == 201, response.text
                    # A moment at the boundary: the forks' requests and the writer's may fall in step, each fork
                    # reading the source while a turn is open, and the test must see forks at a boundary too.
                    await asyncio.sleep(0.005)
                done.set()

            async def forker() -> tuple[list[Json], list[Json]]:
                children, refusals = [], []
                while not done.is_set():
                    response = await client.post("/sessions/src/fork", content=b"")
                    if response.status_code == 201:
                        children.append(response.json())
                    else:
                        refusals.append(response.json())
                    await asyncio.sleep(0)
                return children, refusals

            forking = [asyncio.create_task(forker()) for _ in range(forkers)]
            await writer()
            results = await asyncio.gather(*forking)
            children = [child for made, _ in results for child in made]
            refusals = [refusal for _, refused in results for refusal in refused]
            child_events = [await _events(client, child["id"]) for child in children]
            return await _events(client, "src"), children, refusals, child_events

    source, children, refusals, child_events = asyncio.run(main())

    assert len(source) == turns * TURN_LENGTH
    assert children, "no fork found a boundary"
    _check_children(source, children, child_events)
    for refusal in refusals:
        assert (refusal["status"], refusal["code"]) == (409, "NOT_AT_TURN_BOUNDARY")
        assert refusal["lastEventType"] != "turn/end"
        assert isinstance(refusal["openTurn"], int)


def test_exactly_one_of_racing_appends_with_one_expected_seq_wins(make_app: AppFactory) -> None:
    racers, rounds = 20, 4

    async def main() -> list[list[httpx.Response]]:
        async with serve(make_app()) as client:
            assert (await client.post("/sessions", json={"id": "s"})).status_code == 201
            outcomes = []
            for round_ in range(rounds):

                async def racer(number: int, expected: int = round_) -> httpx.Response:
                    events = [note(f"{expected}.{number}")]
                    return await client.post("/sessions/s/events", json={"events": events, "expectedSeq": expected})

                outcomes.append(list(await asyncio.gather(*(racer(number) for number in range(racers)))))
            return outcomes

    outcomes = asyncio.run(main())

    for round_, responses in enumerate(outcomes):
        winners = [response for response in responses if response.status_code == 201]
        assert len(winners) == 1
        assert [event["seq"] for event in winners[0].json()["events"]] == [round_]
        for response in responses:
            if response is not winners[0]:
                assert_problem(response, 409, "SEQ_CONFLICT", currentSeq=round_ + 1)


def test_exactly_one_of_racing_creates_and_forks_of_one_id_wins(make_app: AppFactory) -> None:
    racers = 20

    async def main() -> tuple[list[httpx.Response], list[httpx.Response], list[Json]]:
        async with serve(make_app()) as client:
            assert (await client.post("/sessions", json={"id": "src", "seed": turn(1)})).status_code == 201
            creates = await asyncio.gather(
                *(client.post("/sessions", json={"id": "new", "seed": [note(str(n))]}) for n in range(racers))
            )
            forks = await asyncio.gather(
                *(client.post("/sessions/src/fork", json={"sessionId": "child"}) for _ in range(racers))
            )
            return list(creates), list(forks), await _events(client, "new")

    creates, forks, new_events = asyncio.run(main())

    for responses in (creates, forks):
        assert sorted(response.status_code for response in responses) == [201] + [409] * (racers - 1)
        for response in responses:
            if response.status_code == 409:
                assert_problem(response, 409, "SESSION_ALREADY_EXISTS")
    winner = next(response for response in creates if response.status_code == 201)
    assert new_events[0]["data"] == {"text": str(creates.index(winner))}
