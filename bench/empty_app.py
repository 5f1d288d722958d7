"""The framework baselines: an empty FastAPI route that reads and parses the append body, stores nothing.

It is served exactly as ``python -m app`` serves forklog (``uvicorn.run`` with the same options), so the append
rows compare forklog's whole append path with the floor the framework, the server and a JSON parse impose.

Two kinds of route, one a process: by default the raw kind (``orjson.loads`` of the body, the floor of any JSON
route); with ``--validate`` the route an ordinary FastAPI service would write, its body declared as a pydantic model
that FastAPI parses and validates (the events' envelope and bounds as spec 1.4 has them; ``data`` any object).

    python -m bench.empty_app --port 8001 [--validate]
"""

from __future__ import annotations

import argparse
from typing import Annotated, Any, Literal

import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

app = FastAPI(title="empty", telemetry={"tracing": False, "metrics": False, "logs": False})  # as forklog sets it


@app.post("/sessions/{id}/events", status_code=201)
async def append_events(id: str, request: Request) -> Response:
    body = orjson.loads(await request.body())
    answer = {"events": len(body["events"]), "session": {"id": id}}
    return Response(orjson.dumps(answer), status_code=201, media_type="application/json")


class AppendedEvent(BaseModel):
    """Spec 1.1's envelope of an appended event (no ``seq``, no ``time``); ``data`` any JSON value."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(min_length=1, max_length=256)
    data: Any
    ignorable: Literal[True] | None = None
    surfaceOp: Literal["append"] | dict[str, int] | None = None  # the wire's names
    sourceEventSeqs: list[Annotated[int, Field(ge=0)]] | None = None


class AppendBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    events: list[AppendedEvent] = Field(min_length=1, max_length=1000)
    expectedSeq: int | None = Field(default=None, ge=0)
    instance: str | None = None


validated = FastAPI(title="empty, validated", telemetry={"tracing": False, "metrics": False, "logs": False})


@validated.post("/sessions/{id}/events", status_code=201)
async def append_validated(id: str, body: AppendBody) -> Response:
    answer = {"events": len(body.events), "session": {"id": id}}
    return Response(orjson.dumps(answer), status_code=201, media_type="application/json")


@app.get("/readyz")
@validated.get("/readyz")
async def readyz() -> Response:
    return Response(b'{"status":"ready"}', media_type="application/json")


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.empty_app")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--validate", action="store_true", help="the pydantic-validating route")
    args = parser.parse_args()
    # The same options as app/__main__.py passes to uvicorn.
    served = validated if args.validate else app
    uvicorn.run(served, host=args.host, port=args.port, log_level=args.log_level, access_log=False, server_header=False)


if __name__ == "__main__":
    main()
