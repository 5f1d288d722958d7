"""The rounds of appends are written and synced by a small process of their own, so that nothing in this one waits on
the GIL to finish a round, or on the disk.

A thread that writes and syncs needs the GIL back after each system call, to go on and to answer; while the event
loop is busy it gets it only after the interpreter's switch interval (5 ms), so in practice once every client waits
on the round, and the loop and the disk take turns. The process (:mod:`app.backends.files.appends.syncfs_child`) takes a
round through a pipe (each append's file and lines), appends the lines, syncs them (``fdatasync`` of the file for
a round of one append, ``syncfs`` of the data directory's file system for several) and answers through another
pipe, which the event loop watches like a socket: a round is written and synced while the loop serves the next
requests, and the loop never writes to a session file itself: a disk that hangs stalls the process and the appends
waiting on it, not the loop, which goes on answering reads and health checks.

``syncfs`` commits every write made before it began on that file system, and (Linux 5.8 and later) reports a write
error of any of its files: an error fails the whole round. A round with a file on another file system (a mount
inside the data directory), or a process that cannot be started, is written and synced by a
:class:`~app.backends.files.appends.syncers.ThreadSyncer` instead. A process that ends fails the round it had (its
appends are cut back, nothing is acknowledged) and is started again for the next; after three ends in a row the thread
takes the rounds for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import subprocess
import sys
from collections import deque
from pathlib import Path

from app.backends.files.appends import syncfs_child
from app.backends.files.appends.syncers import RoundAppend, SyncDone, ThreadSyncer

__all__ = ["ProcessSyncer"]

logger = logging.getLogger("forklog.storage")

CODE_BYTES = syncfs_child.CODE_BYTES
# A process that ends this many times in a row without answering a round cannot serve here (say, no Python at
# sys.executable): the rounds go to the thread from then on.
ENDS_BEFORE_GIVING_UP = 3


class ProcessSyncer:
    def __init__(self, folder: Path, *, fallback: ThreadSyncer, argv: list[str] | None = None) -> None:
        self.device = os.stat(folder).st_dev
        self._fallback = fallback
        # The child's command; a test names another program that speaks the same protocol.
        self._argv = argv or [sys.executable, "-I", "-S", syncfs_child.__file__, str(folder)]
        self._process: subprocess.Popen[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: deque[tuple[SyncDone, int]] = deque()  # the rounds asked for, in order, with their sizes
        self._answers = b""
        self._ends_in_a_row = 0

    def start(self, appends: list[RoundAppend], done: SyncDone) -> None:
        if self._ends_in_a_row >= ENDS_BEFORE_GIVING_UP or any(target.device != self.device for target, _ in appends):
            self._fallback.start(appends, done)
            return
        try:
            request_fd = self._running()
            request = memoryview(_request(appends))
            while request:
                request = request[os.write(request_fd, request) :]
        except OSError as exc:
            logger.warning("the sync process could not be reached (%s); this round is synced in a thread", exc)
            self._ends_in_a_row += 1
            self._stop()
            self._fallback.start(appends, done)
            return
        self._waiting.append((done, len(appends)))

    def prepare(self) -> None:
        try:
            self._running()
        except OSError as exc:  # the first round tries again, or falls back on the thread
            logger.warning("the sync process could not be started (%s)", exc)

    def close(self) -> None:
        self._stop()
        self._fallback.close()

    def _running(self) -> int:
        """The descriptor requests go to, the process started first if it is not running in this event loop."""
        loop = asyncio.get_running_loop()
        if self._process is not None and self._loop is not loop:
            self._stop()  # started under another event loop (a store used by several asyncio.run): start anew
        if self._process is None:
            process = subprocess.Popen(
                self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True, start_new_session=True
            )
            assert process.stdin is not None and process.stdout is not None
            os.set_blocking(process.stdout.fileno(), False)
            loop.add_reader(process.stdout.fileno(), self._readable)
            self._process, self._loop = process, loop
        assert self._process.stdin is not None
        return self._process.stdin.fileno()

    def _readable(self) -> None:
        process = self._process
        if process is None or process.stdout is None:
            return
        try:
            data = os.read(process.stdout.fileno(), 4096)
        except BlockingIOError:
            return
        except OSError as exc:
            data, ended = b"", exc
        else:
            ended = OSError(errno.EIO, "the sync process ended")
        if not data:
            self._ends_in_a_row += 1
            if self._ends_in_a_row >= ENDS_BEFORE_GIVING_UP:
                logger.error(
                    "the sync process ended (%s), %d times in a row: rounds are synced in a thread from now on",
                    ended,
                    self._ends_in_a_row,
                )
            else:
                logger.error("the sync process ended (%s); its round fails, the next starts it again", ended)
            self._stop(ended)
            return
        self._ends_in_a_row = 0
        self._answers += data
        while self._waiting:
            done, size = self._waiting[0]
            length = CODE_BYTES * (size + 1)
            if len(self._answers) < length:
                return
            answer, self._answers = self._answers[:length], self._answers[length:]
            self._waiting.popleft()
            if answer.count(0) == length:  # the common answer: the round and each append durable
                done(None, {})
                continue
            round_code, *append_codes = [
                int.from_bytes(answer[start : start + CODE_BYTES], "little") for start in range(0, length, CODE_BYTES)
            ]
            done(
                _error(round_code) if round_code else None,
                {place: _error(code) for place, code in enumerate(append_codes) if code},
            )

    def _stop(self, error: OSError | None = None) -> None:
        """End the process (closing its stdin ends it); the rounds it had fail with ``error``."""
        process, loop = self._process, self._loop
        self._process = self._loop = None
        self._answers = b""
        if process is not None:
            assert process.stdin is not None and process.stdout is not None
            if loop is not None and not loop.is_closed() and _running_loop() is loop:
                loop.remove_reader(process.stdout.fileno())
            process.stdin.close()
            process.stdout.close()
            try:
                process.wait(timeout=10)  # it ends once its stdin is closed, after the sync it may be in
            except subprocess.TimeoutExpired:
                process.kill()  # stuck in a sync: a process in the kernel ends when its call returns
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=1)
        waiting, self._waiting = self._waiting, deque()
        failure = error or OSError(errno.EIO, "the sync process was stopped before it answered")
        for done, _ in waiting:
            done(failure, {})


def _request(appends: list[RoundAppend]) -> bytes:
    """A round as the process reads it (see syncfs_child)."""
    length = syncfs_child.LENGTH_BYTES
    parts = [len(appends).to_bytes(length, "little")]
    for target, lines in appends:
        path = target.encoded_path
        parts += [
            len(path).to_bytes(length, "little"),
            path,
            target.inode.to_bytes(syncfs_child.INODE_BYTES, "little"),
            len(lines).to_bytes(length, "little"),
            lines,
        ]
    body = b"".join(parts)
    return len(body).to_bytes(syncfs_child.BODY_BYTES, "little") + body


def _error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
