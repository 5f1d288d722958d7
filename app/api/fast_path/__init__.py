"""The server's fast path: uvicorn with its client limits, the one gateway layer, the append shortcut.
Everything here exists for speed and answers exactly as the documented routes would."""
