"""The Session resource's bytes (an append's answer reuses the encoded header members): the same JSON, member for
member and in the same order, as the resource itself, whatever the header and the head."""

from __future__ import annotations

import orjson
import pytest

from app.api.wire.resources import SESSION_MEMBERS, session_json, session_payload
from app.domain.session import LogHead, Session, SessionHeader, SessionKey

HEADERS = [
    SessionHeader("plain", 1_700_000_000_000, "i" * 16),
    SessionHeader(
        "child",
        1_700_000_000_001,
        "j" * 16,
        cwd='/work/é "quoted"',
        parent_session="plain",
        seed_length=4,
        origin="fork",
        delegation_depth=2,
        agent_preset="review",
    ),
]
HEADS = [
    LogHead(),
    LogHead(7, 1_700_000_000_500, "turn/end", 6, None, 1234, "A title", "go"),
    LogHead(3, 1_700_000_000_600, "assistant/chunk", None, 1, 600, None, None),
]


@pytest.mark.parametrize("header", HEADERS, ids=lambda header: header.id)
def test_the_payload_is_the_session_resource_in_its_member_order(header: SessionHeader) -> None:
    for head in HEADS:  # the same header again and again, as a session's appends bring it
        session = Session(SessionKey("default", header.id), header, head, header.created_at)
        payload = session_payload(session)
        assert list(orjson.loads(payload).items()) == list(session_json(session).items())
        assert list(orjson.loads(payload)) == list(SESSION_MEMBERS)


def test_a_header_made_anew_with_other_values_is_not_answered_from_an_older_one() -> None:
    first = Session(SessionKey("default", "s"), SessionHeader("s", 1, "a" * 16), LogHead(), 1)
    assert orjson.loads(session_payload(first))["instance"] == "a" * 16
    again = Session(SessionKey("default", "s"), SessionHeader("s", 2, "b" * 16, cwd="/x"), LogHead(), 2)
    answered = orjson.loads(session_payload(again))
    assert (answered["instance"], answered["createdAt"], answered["cwd"]) == ("b" * 16, 2, "/x")
