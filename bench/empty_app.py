"""The framework baseline: an empty FastAPI route that reads and parses the append body, stores nothing.

It is served exactly as ``python -m app`` serves forklog (``uvicorn.run`` with the same options), so the append
rows compare forklog's whole append path with the floor the framework, the server and a JSON parse impose.

    python -m bench.empty_app --port 8001
"""

from __future__ import annotations

import argparse

import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

app = FastAPI(title="empty", telemetry={"tracing": False, "metrics": False, "logs": False})  # as forklog sets it


@app.post("/sessions/{id}/events", status_code=201)
async def append_events(id: str, request: Request) -> Response:
    body = orjson.loads(await request.body())
    answer = {"events": len(body["events"]), "session": {"id": id}}
    return Response(orjson.dumps(answer), status_code=201, media_type="application/json")


@app.get("/readyz")
async def readyz() -> Response:
    return Response(b'{"status":"ready"}', media_type="application/json")


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.empty_app")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args()
    # The same options as app/__main__.py passes to uvicorn.
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False, server_header=False)


if __name__ == "__main__":
    main()
