"""The sync process's own program: it makes files durable when asked on stdin and answers each request on stdout by
the ``errno`` of its call (four bytes, little-endian; 0 when it succeeded). It ends when stdin closes, which is also
what its parent's death does.

A request is a path's length (four bytes, little-endian) and the path: ``fdatasync`` of that file (a round of one
file: far cheaper than committing the whole file system), or with length 0, ``syncfs`` of the folder's file system
(a round of several files: one journal commit for all of them).

It runs as ``python -I -S syncfs_child.py FOLDER`` and imports nothing but the standard library: its start is a few
milliseconds, and nothing of the service is loaded in it. SIGINT and SIGTERM are ignored, so that a Ctrl-C or a
supervisor's stop, which reach the whole process group, do not end it under a service still answering its last
appends; its parent ends it by closing its stdin (:mod:`app.backends.files.sync_process`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import sys

ANSWER_BYTES = 4
LENGTH_BYTES = 4


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    folder = os.open(argv[1], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    syncfs = ctypes.CDLL(None, use_errno=True).syncfs

    def sync_all() -> int:
        return 0 if syncfs(folder) == 0 else (ctypes.get_errno() or errno.EIO)

    pending = b""
    while True:
        try:
            received = os.read(0, 65536)
        except InterruptedError:
            continue
        if not received:
            return 0
        pending += received
        while len(pending) >= LENGTH_BYTES:
            size = int.from_bytes(pending[:LENGTH_BYTES], "little")
            if len(pending) < LENGTH_BYTES + size:
                break
            path, pending = pending[LENGTH_BYTES : LENGTH_BYTES + size], pending[LENGTH_BYTES + size :]
            code = _sync_file(path) if path else sync_all()
            os.write(1, code.to_bytes(ANSWER_BYTES, "little"))


def _sync_file(path: bytes) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        return exc.errno or errno.EIO
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
