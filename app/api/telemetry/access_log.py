"""Every request logged as one JSON line: method, path, status, duration, its request id and (when known) its trace
id; never a header, a body or a query string (a stream's ``?access_token=`` is a key), nor a share's token (its path
is written ``/shared/…``)."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.types import Scope

from app.api.edge.auth import KEY_STATE
from app.api.telemetry.request_ids import REQUEST_ID_STATE
from app.api.wire.share_paths import public_path

__all__ = ["log_access"]

logger = logging.getLogger("forklog.access")


def log_access(scope: Scope, status: int, seconds: float) -> None:
    """The request's line, once it is answered (``status``, 500 if it never was) after ``seconds``."""
    if logger.isEnabledFor(logging.INFO):
        record: dict[str, Any] = {
            "method": scope.get("method"),
            "path": public_path(scope.get("path", "")),  # a share's token is a secret: /shared/…
            "status": status,
            "ms": round(seconds * 1000, 3),
        }
        state = scope.get("state", {})
        record["requestId"] = state.get(REQUEST_ID_STATE)
        trace_id = state.get(
            "trace_id"
        )  # app.api.telemetry.per_request.TRACE_ID_STATE, set before this line is written
        if trace_id is not None:
            record["traceId"] = trace_id
        key = state.get(KEY_STATE)
        if key is not None:  # which key (its id and tenant, never the key)
            record["key"] = key.id
            record["tenant"] = key.tenant
        logger.info(orjson.dumps(record).decode())
