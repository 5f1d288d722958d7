"""The sync process's own program: it writes and syncs the rounds of appends its parent sends on stdin, and answers
each round on stdout.

A round is its body's length (eight bytes, little-endian) and the body: the number of its appends (four bytes),
then for each the length of its file's path (four bytes), the path, the file's inode number (eight bytes), the
length of the lines to append (four bytes) and the lines (none: the parent wrote them). Each file is opened (never
through a symbolic link; ESTALE if it is not the inode the parent holds), its lines appended, and the round synced:
``fdatasync`` of the file for a round of one append (far cheaper than committing the whole file system), else one
``syncfs`` of the folder's file system (one journal commit for all of them), and an ``fdatasync`` too of each file
whose lines the parent wrote. The answer is the round's ``errno`` (the ``syncfs`` that failed, else 0) then each
append's (its open, write or sync), four bytes each, little-endian. Nothing is cut back here: the parent cuts a
refused append back itself.

It runs as ``python -I -S syncfs_child.py FOLDER`` and imports nothing but the standard library: its start is a few
milliseconds, and nothing of the service is loaded in it. SIGINT and SIGTERM are ignored, so that a Ctrl-C or a
supervisor's stop, which reach the whole process group, do not end it under a service still answering its last
appends; its parent ends it by closing its stdin (:mod:`app.backends.files.appends.sync_process`), which its death does
too.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import sys
from collections.abc import Callable

CODE_BYTES = 4
LENGTH_BYTES = 4
INODE_BYTES = 8
BODY_BYTES = 8
OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    folder = os.open(argv[1], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    syncfs = ctypes.CDLL(None, use_errno=True).syncfs

    def sync_all() -> int:
        return 0 if syncfs(folder) == 0 else (ctypes.get_errno() or errno.EIO)

    pending = bytearray()
    while True:
        try:
            received = os.read(0, 1 << 20)
        except InterruptedError:
            continue
        if not received:
            return 0
        pending += received
        while len(pending) >= BODY_BYTES:
            size = int.from_bytes(pending[:BODY_BYTES], "little")
            if len(pending) < BODY_BYTES + size:
                break
            body = memoryview(bytes(pending[BODY_BYTES : BODY_BYTES + size]))
            del pending[: BODY_BYTES + size]
            answer = serve_round(_appends(body), sync_all)
            view = memoryview(answer)
            while view:
                view = view[os.write(1, view) :]


def _appends(body: memoryview) -> list[tuple[bytes, int, memoryview]]:
    count = int.from_bytes(body[:LENGTH_BYTES], "little")
    offset = LENGTH_BYTES
    appends = []
    for _ in range(count):
        path_size = int.from_bytes(body[offset : offset + LENGTH_BYTES], "little")
        offset += LENGTH_BYTES
        path = bytes(body[offset : offset + path_size])
        offset += path_size
        inode = int.from_bytes(body[offset : offset + INODE_BYTES], "little")
        offset += INODE_BYTES
        data_size = int.from_bytes(body[offset : offset + LENGTH_BYTES], "little")
        offset += LENGTH_BYTES
        appends.append((path, inode, body[offset : offset + data_size]))
        offset += data_size
    return appends


def serve_round(appends: list[tuple[bytes, int, memoryview]], sync_all: Callable[[], int]) -> bytes:
    """Write and sync one round; its answer."""
    codes = [0] * len(appends)
    fds: list[int] = []
    round_code = 0
    try:
        for index, (path, inode, data) in enumerate(appends):
            try:
                fd = os.open(path, OPEN_FLAGS)
            except OSError as exc:
                codes[index] = exc.errno or errno.EIO
                fds.append(-1)
                continue
            fds.append(fd)
            try:
                if os.fstat(fd).st_ino != inode:  # not the file the parent holds (made anew meanwhile)
                    raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))
                while data:
                    data = data[os.write(fd, data) :]
            except OSError as exc:
                codes[index] = exc.errno or errno.EIO
        for index, ((_, _, data), fd) in enumerate(zip(appends, fds, strict=True)):
            # A round of one append, and an append its parent wrote before the round (maybe while a sync that
            # failed ran: syncfs reports an error once), are synced through this fresh look at their own file.
            if fd >= 0 and not codes[index] and (len(appends) == 1 or not data):
                try:
                    os.fdatasync(fd)
                except OSError as exc:
                    codes[index] = exc.errno or errno.EIO
        if len(appends) > 1 and any(fd >= 0 and not code for fd, code in zip(fds, codes, strict=True)):
            round_code = sync_all()
    finally:
        for fd in fds:
            if fd >= 0:
                os.close(fd)
    return b"".join(code.to_bytes(CODE_BYTES, "little") for code in (round_code, *codes))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
