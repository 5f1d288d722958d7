"""The sync process's own program: ``syncfs`` of one folder's file system, once per request byte read on stdin, each
answered on stdout by the call's ``errno`` (four bytes, little-endian; 0 when it succeeded). It ends when stdin
closes, which is also what its parent's death does.

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


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    folder = os.open(argv[1], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    while True:
        try:
            requests = os.read(0, 4096)
        except InterruptedError:
            continue
        if not requests:
            return 0
        code = 0 if syncfs(folder) == 0 else (ctypes.get_errno() or errno.EIO)
        os.write(1, code.to_bytes(ANSWER_BYTES, "little") * len(requests))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
