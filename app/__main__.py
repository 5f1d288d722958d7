"""``python -m app`` (or ``forklog``): start the service. Flags override FORKLOG_* environment variables."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from pydantic import ValidationError

from app.api.app import create_app
from app.api.http_server import serve
from app.api.settings import Settings
from app.backends.errors import StorageError


def parse_flags(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="forklog", description="Serve forklog's HTTP API.")
    parser.add_argument("--backend", help="files (the default) or memory (FORKLOG_BACKEND)")
    parser.add_argument("--data-dir", help="where the session files live (FORKLOG_DATA_DIR, default ./data)")
    parser.add_argument("--host", help="the address to listen on (FORKLOG_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="the port (FORKLOG_PORT, default 8000)")
    parser.add_argument("--max-body-bytes", type=int, help="request body limit (FORKLOG_MAX_BODY_BYTES, 16 MiB)")
    parser.add_argument(
        "--max-header-bytes", type=int, help="request line + headers limit (FORKLOG_MAX_HEADER_BYTES, 64 KiB)"
    )
    parser.add_argument(
        "--read-timeout", type=float, help="seconds a client may pause mid-request (FORKLOG_READ_TIMEOUT, 30)"
    )
    parser.add_argument(
        "--shutdown-grace", type=int, help="seconds a shutdown waits for requests (FORKLOG_SHUTDOWN_GRACE, 10)"
    )
    parser.add_argument("--allowed-hosts", help="comma-separated Host names served besides loopback")
    parser.add_argument("--cors-origins", help="comma-separated origins allowed to call the API from a browser")
    parser.add_argument("--log-level", help="critical, error, warning, info or debug (FORKLOG_LOG_LEVEL)")
    parser.add_argument(
        "--no-fsync", dest="fsync", action="store_false", default=None, help="do not sync writes (tests only)"
    )
    given = vars(parser.parse_args(argv))
    return {key: value for key, value in given.items() if value is not None}


def main(argv: list[str] | None = None) -> None:
    try:
        settings = Settings(**parse_flags(argv))
    except ValidationError as exc:
        sys.exit(f"forklog: invalid settings:\n{exc}")
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        app = create_app(settings)
    except StorageError as exc:
        sys.exit(f"forklog: {exc}")
    serve(app, settings)


if __name__ == "__main__":
    main()
