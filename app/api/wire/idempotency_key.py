"""The ``Idempotency-Key`` header (spec 8): checked as request syntax, and the request it names fingerprinted.

A retry is the same request when its method, path and body bytes are the same: the fingerprint is a SHA-256 of the
three. The service keeps a change's answer as :data:`WIRE_ANSWERS` makes it; the answer of a replay carries
``Idempotent-Replayed: true``.
"""

from __future__ import annotations

import hashlib
import re

from fastapi import Request
from fastapi.responses import Response

from app.api.wire.json_answer import JsonAnswer
from app.api.wire.problems import invalid_request
from app.api.wire.raw_headers import all_values
from app.api.wire.resources import appended_answer, created_answer
from app.domain.session import Session
from app.service.idempotency import Answer, ChangeAnswers, IdempotentRequest
from app.service.sessions import Appended

__all__ = ["HEADER", "REPLAYED", "WIRE_ANSWERS", "answer_response", "idempotent_request"]

HEADER = "Idempotency-Key"
HEADER_NAME = HEADER.lower().encode("latin-1")  # as the server gives it (ASGI: lower case)
REPLAYED = "Idempotent-Replayed"
_REPLAYED_LINE = (REPLAYED.lower().encode("latin-1"), b"true")
_VISIBLE_ASCII = re.compile(r"[!-~]{1,255}")


class _WireAnswers:
    """The answers of the changes as this API sends them (:mod:`app.api.wire.resources`)."""

    def created(self, session: Session) -> Answer:
        return created_answer(session)

    def appended(self, appended: Appended) -> Answer:
        return appended_answer(appended)


# Given to the service when it is built (app.api.app): the answer it keeps with a change is the one it returns.
WIRE_ANSWERS: ChangeAnswers = _WireAnswers()


def idempotent_request(request: Request, tenant: str, body: bytes) -> IdempotentRequest | None:
    """The request's key and fingerprint, or None without the header; INVALID_REQUEST for a malformed key."""
    values = all_values(request.scope["headers"], HEADER_NAME)
    if not values:
        return None
    if len(values) > 1:
        raise invalid_request(HEADER, "is sent more than once", f"send one {HEADER} header, not {len(values)}")
    key = values[0]
    if _VISIBLE_ASCII.fullmatch(key) is None:
        raise invalid_request(
            HEADER, "must be 1 to 255 visible ASCII characters (! to ~)", f"{HEADER} must be 1 to 255 visible ASCII"
        )
    digest = hashlib.sha256()
    for part in (request.method.encode(), request.scope["path"].encode("utf-8", "surrogateescape"), body):
        digest.update(len(part).to_bytes(8, "big") + part)
    return IdempotentRequest(tenant, key, digest.hexdigest())


def answer_response(answer: Answer, replayed: bool) -> Response:
    lines: tuple[tuple[bytes, bytes], ...] = ()
    if answer.location is not None:
        lines = ((b"location", answer.location.encode("latin-1")),)
    if replayed:
        lines = (*lines, _REPLAYED_LINE)
    return JsonAnswer(answer.body, answer.status, lines)
