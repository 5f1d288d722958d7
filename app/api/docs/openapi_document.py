"""The committed OpenAPI document: ``python -m app.api.docs.openapi_document`` rewrites ``openapi/openapi.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from app.api.app import create_app
from app.api.settings import Settings

__all__ = ["COMMITTED", "document", "render"]

COMMITTED = Path(__file__).resolve().parents[3] / "openapi" / "openapi.json"


def document() -> dict[str, Any]:
    """The app's OpenAPI document (built without touching a data directory)."""
    return create_app(Settings(backend="memory")).openapi()


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def main() -> None:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else COMMITTED
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(document()), encoding="utf-8")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
