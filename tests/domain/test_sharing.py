"""Redaction (spec 18) on DSH's own logs (../shared/fixtures/dsh-logs): what each kind hides is gone from every
event and from the model history, nothing else changes, and a redacted log is still a log (a share's continuation
seeds a session with it)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.domain.limits import BadLimit
from app.domain.sharing import (
    REDACTED,
    Redaction,
    expires_in_ms,
    parse_redactions,
    redact_event,
    redact_line,
    redact_message,
    same_digest,
    token_digest,
)
from tests.domain.builders import make_store
from tests.domain.test_dsh_fixtures import LOGS, expected_path, read_events

ACCEPTED = (
    sorted(
        path.name for path in LOGS.glob("*.jsonl") if json.loads(expected_path(path).read_text())["verdict"] == "accept"
    )
    if LOGS.is_dir()
    else ["(no fixture logs)"]
)
KINDS = [
    frozenset({Redaction.REASONING}),
    frozenset({Redaction.TOOLS}),
    frozenset({Redaction.REASONING, Redaction.TOOLS}),
]
ALL = frozenset(Redaction)
# A secret this long never appears by chance in what is left of a log.
SECRET_LENGTH = 24


def blocks_of(event: dict[str, Any]) -> list[Any]:
    data = event.get("data")
    if not isinstance(data, dict):
        return []
    message = data if event["type"] == "user/message" else data.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    found = list(content) if isinstance(content, list) else []
    chunk = data.get("chunk")
    if event["type"] == "assistant/chunk" and isinstance(chunk, dict) and isinstance(chunk.get("block"), dict):
        found.append(chunk["block"])
    return found


def secrets_of(events: list[dict[str, Any]], redact: frozenset[Redaction]) -> set[str]:
    """The texts ``redact`` must hide that are long enough to be searched for."""
    return {text for text in texts_of(events, redact) if len(text) >= SECRET_LENGTH}


def texts_of(events: list[dict[str, Any]], redact: frozenset[Redaction]) -> set[str]:
    """The texts ``redact`` hides."""
    found: set[str] = set()
    for event in events:
        data = event.get("data") or {}
        for block in blocks_of(event):
            if Redaction.REASONING in redact and block.get("type") == "reasoning":
                found.add(block.get("text", ""))
            if Redaction.TOOLS in redact and block.get("type") == "tool-call":
                found.add(block.get("arguments", ""))
            if Redaction.TOOLS in redact and block.get("type") == "tool-result":
                found |= {part.get("text", "") for part in block.get("content", []) if isinstance(part, dict)}
        if Redaction.TOOLS in redact and event["type"] == "tool/call":
            found.add(data.get("arguments", ""))
    return {text for text in found if isinstance(text, str)}


def check_hidden(event: dict[str, Any], redact: frozenset[Redaction]) -> None:
    """Every member ``redact`` names holds [redacted] (or is gone), structurally."""
    data = event.get("data") or {}
    for block in blocks_of(event):
        if Redaction.REASONING in redact and block.get("type") == "reasoning":
            assert block == {"type": "reasoning", "text": REDACTED}
        if Redaction.TOOLS in redact and block.get("type") == "tool-call" and "arguments" in block:
            assert block["arguments"] == REDACTED
        if Redaction.TOOLS in redact and block.get("type") == "tool-result":
            assert block["content"] == [{"type": "text", "text": REDACTED}]
    chunk = data.get("chunk") if isinstance(data, dict) else None
    if isinstance(chunk, dict) and Redaction.REASONING in redact and chunk.get("type") == "reasoning-delta":
        assert chunk["text"] == REDACTED
    if isinstance(chunk, dict) and Redaction.TOOLS in redact and chunk.get("type") == "tool-call-delta":
        assert chunk["argumentsDelta"] == REDACTED
    if Redaction.TOOLS in redact and event["type"] == "tool/call":
        assert data["arguments"] == REDACTED
    if Redaction.TOOLS in redact and event["type"] == "tool/result":
        assert "meta" not in data


@pytest.mark.parametrize("redact", KINDS, ids=lambda kinds: "+".join(sorted(kinds)))
@pytest.mark.parametrize("name", ACCEPTED)
def test_redaction_of_a_real_dsh_log(dsh_logs_dir: Path, name: str, redact: frozenset[Redaction]) -> None:
    events = read_events(dsh_logs_dir / name)
    untouched = copy.deepcopy(events)
    shown = [redact_event(event, redact) for event in events]

    assert events == untouched  # pure: the stored events are not changed
    assert [(e["type"], e["seq"], e["time"]) for e in shown] == [(e["type"], e["seq"], e["time"]) for e in events]
    for event in shown:
        check_hidden(event, redact)
    text = orjson.dumps(shown).decode()
    others = {Redaction.REASONING, Redaction.TOOLS} - redact
    # A text may also stand where no rule hides it (an assistant quoting a tool's output, a hook's summary of it),
    # or in what another kind would hide: there it stays.
    everywhere_else = orjson.dumps([redact_event(event, ALL) for event in events]).decode()
    everywhere_else += "\n".join(texts_of(events, frozenset(others)))
    for secret in secrets_of(events, redact):
        assert secret not in text or secret in everywhere_else
    if others:  # what is not asked for stays as stored
        assert secrets_of(shown, frozenset(others)) == secrets_of(events, frozenset(others))

    # Still a log DSH's rules accept, whose model history is the original's, redacted alike.
    store = make_store()
    original = store.create("source", events)
    continued = store.create("continued", shown)
    assert [e["seq"] for e in continued.log.events() if e["type"] == "turn/end"] == [
        e["seq"] for e in original.log.events() if e["type"] == "turn/end"
    ]
    assert continued.log.history() == [redact_message(message, redact) for message in original.log.history()]
    # A stored line redacted is the event redacted.
    for line, event in zip(original.log.lines().splitlines()[:200], shown[:200], strict=False):
        assert orjson.loads(redact_line(line, redact)) == event


def test_a_log_with_every_kind_found_in_the_fixtures(dsh_logs_dir: Path) -> None:
    """The fixtures exercise each rule (else the test above could pass on logs that hold nothing to hide)."""
    events = [event for name in ACCEPTED for event in read_events(dsh_logs_dir / name)]
    assert secrets_of(events, frozenset({Redaction.REASONING}))
    assert secrets_of(events, frozenset({Redaction.TOOLS}))
    chunks = [e["data"]["chunk"].get("type") for e in events if e["type"] == "assistant/chunk"]
    assert "reasoning-delta" in chunks and "tool-call-delta" in chunks


def test_cwd_and_meta_leave_the_events_alone() -> None:
    event = {"type": "tool/call", "seq": 3, "time": 1, "data": {"callId": "c", "name": "ls", "arguments": "{}"}}
    assert redact_event(event, frozenset({Redaction.CWD, Redaction.META})) is event
    assert redact_line(b'{"type":"x"}', frozenset({Redaction.CWD})) == b'{"type":"x"}'


def test_the_request_members() -> None:
    assert expires_in_ms("P30D") == 30 * 24 * 3600 * 1000
    assert expires_in_ms("P365D") == 365 * 24 * 3600 * 1000
    for bad in ("P366D", "PT0S", "thirty days", 30):
        with pytest.raises(BadLimit):
            expires_in_ms(bad)
    assert parse_redactions(["tools", "cwd", "tools"]) == {Redaction.TOOLS, Redaction.CWD}
    for bad_list in (["secrets"], "tools", [1]):
        with pytest.raises(ValueError):
            parse_redactions(bad_list)


def test_tokens_are_compared_by_digest() -> None:
    digest = token_digest("abc")
    assert (
        len(digest) == 64 and same_digest(digest, token_digest("abc")) and not same_digest(digest, token_digest("abd"))
    )
