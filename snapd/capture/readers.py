"""Reader processes: a baseline's files read, hashed and compressed outside the daemon.

Why processes, not threads: a reader thread returning from each of a file's system calls
(lstat, open, fstat, read, close) waits for the GIL the request thread holds while it builds
the batch and the tree, so on a big tree the readers set the pace, and every byte read passes
through the daemon's heap. A process does that work on its own core and sends back only what
the batch needs: each content's digest, size and fingerprint, and its compressed payload the
first time that process meets it. The daemon holds no raw file bytes.

Invariants:

- Results come back in the order the paths went out, and the batch puts them in that order:
  a content a process sends without its payload, that same process sent with it earlier in
  this capture, so the batch already has it (pending, flushed or stored).
- The processes import only the reader, the counters and the object encoding (no store
  catalog, no SQLite; an import contract), are started for one capture and end with it: their
  stdin closed, they exit; the daemon gone, their stdin reads EOF and they exit (no orphans).
- A process that fails (cannot start, dies, sends something unreadable) loses nothing: the
  paths it had are read in the daemon, as without processes (``fallback``), and the failure is
  listed in ``failures`` for the caller to log.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

from snapd.capture import statcache
from snapd.capture.counters import Counters
from snapd.capture.reader import Read, read_path
from snapd.capture.statcache import Restated, Row
from snapd.store import objects

WORKERS = 2  # the machine's cores are shared with the request thread that consumes the results
WINDOW = 8  # chunks in flight per process
FROM_PATHS = 2000  # fewer paths than this: threads (starting the processes costs ~0.1 s)
# A process's results pipe, in bytes (Linux's default is 64 KiB; an unprivileged process may
# ask up to /proc/sys/fs/pipe-max-size, 1 MiB by default). Results come back in order: a
# process whose result outgrew 64 KiB waited until the daemon's turn came to read it, then
# handed it over 64 KiB at a time, a wake-up each; at django-100k the processes spent 3.0 s of
# a 5.3 s read blocked writing, 0.25 s with 1 MiB (ad hoc, timed inside them).
RESULTS_PIPE = 1 << 20

Chunk = list[bytes]
RESTAT_FROM = 50_000  # cached paths from which a restart's catch-up judges them in the processes


class Restat(NamedTuple):
    """A message asking a process to judge stat-cache rows (:func:`statcache.restat`)."""

    now_ns: int
    rows: list[Row]


_M = TypeVar("_M", Chunk, Restat)  # a message to a process
_A = TypeVar("_A")  # its answer


def digested(r: Read, claimed: set[bytes]) -> Read:
    """``r`` as a process sends it: digest, size and fingerprint; the payload only when this
    process had not met the content (``claimed``: their fingerprints); no raw bytes."""
    if r.kind in ("file", "symlink"):
        r.digest = objects.xxh3_hex(r.data)
        r.sha = objects.fingerprint(r.data)
        if r.sha not in claimed:
            claimed.add(r.sha)
            r.encoded = objects.encode(r.data)
        r.data = b""
    return r


class _Process:
    """One reader process: requests go out through a feeder thread (a pipe never blocks the
    request thread, whatever the sizes), results are read by the caller in order."""

    def __init__(self, root: bytes, size_cap: int, trusted: bool) -> None:
        me = os.fsencode(sys.executable)
        argv: list[bytes] = [me, b"-m", b"snapd.capture.readers", root, b"%d" % size_cap, b"%d" % trusted]
        # cwd "/": ``-m`` puts the cwd first on sys.path, where a "snapd" directory would shadow us
        self.popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/")
        assert self.popen.stdout is not None
        try:
            fcntl.fcntl(self.popen.stdout.fileno(), fcntl.F_SETPIPE_SZ, RESULTS_PIPE)
        except OSError:
            pass  # a lower pipe-max-size, or no such fcntl: slower, not wrong
        self.alive = True
        self._out: queue.SimpleQueue[Chunk | Restat | None] = queue.SimpleQueue()
        self._feeder = threading.Thread(target=self._feed, name="snapd-reader-feed", daemon=True)
        self._feeder.start()

    def _feed(self) -> None:
        stdin = self.popen.stdin
        assert stdin is not None
        while (chunk := self._out.get()) is not None:
            try:
                pickle.dump(chunk, stdin, pickle.HIGHEST_PROTOCOL)
                stdin.flush()
            except (OSError, ValueError):
                break  # the process is gone: the caller finds out reading its results
        try:
            stdin.close()
        except OSError:
            pass

    def send(self, message: Chunk | Restat) -> None:
        self._out.put(message)

    def receive(self) -> Any:
        """The answer to the oldest message not answered yet (what :func:`serve` sends)."""
        assert self.popen.stdout is not None
        return pickle.load(self.popen.stdout)

    def close(self) -> None:
        """Let the process end (stdin closed); one still writing results (a capture that
        failed part-way) gets EPIPE first, so the feeder never waits on it; one that does not
        end within seconds is killed."""
        self._out.put(None)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self._feeder.join(5)
        try:
            self.popen.wait(5)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


class ReaderProcesses:
    """``WORKERS`` reader processes for one capture of ``root``; :meth:`map` reads chunks of
    paths through them, in order."""

    def __init__(
        self,
        root: bytes,
        size_cap: int,
        trusted: bool,
        fallback: Callable[[bytes], Read] | None,
        counters: Counters | None,
        workers: int = WORKERS,
    ) -> None:
        self._args = (root, size_cap, trusted)
        self._fallback, self._counters, self._workers = fallback, counters, workers
        self._procs: list[_Process] = []
        self.failures: list[str] = []

    @property
    def pids(self) -> list[int]:
        return [p.popen.pid for p in self._procs]

    def __enter__(self) -> ReaderProcesses:
        for _ in range(self._workers):
            try:
                self._procs.append(_Process(*self._args))
            except OSError as exc:
                self.failures.append(f"cannot start a reader process: {exc}")
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        for p in self._procs:
            p.close()

    def map(self, chunks: Iterable[Chunk]) -> Iterator[list[Read]]:
        """The reads of each chunk, in order, at most WINDOW chunks in flight per process."""
        return self._ask(chunks, self._reads)

    def restat(self, now_ns: int, chunks: Iterable[list[Row]]) -> Iterator[list[Restated]]:
        """What :func:`statcache.restat` reports of each chunk of rows, in order (a
        :data:`snapd.capture.scan.Restat`): a restart's catch-up on both cores, the ``lstat``
        s and their judgement outside the daemon's GIL."""
        return self._ask((Restat(now_ns, rows) for rows in chunks), self._restated)

    def _ask(self, messages: Iterable[_M], answer: Callable[[_Process | None, _M], _A]) -> Iterator[_A]:
        """Each message's answer, in order: sent to the processes in turn, at most WINDOW in
        flight per process; ``answer`` reads one (from a process, or made here)."""
        pending: deque[tuple[_Process | None, _M]] = deque()
        turn = 0
        for message in messages:
            live = [p for p in self._procs if p.alive]
            proc = live[turn % len(live)] if live else None
            turn += 1
            if proc is not None:
                proc.send(message)
            pending.append((proc, message))
            if len(pending) >= WINDOW * max(1, len(live)):
                yield answer(*pending.popleft())
        while pending:
            yield answer(*pending.popleft())

    def _receive(self, proc: _Process | None) -> Any:
        """``proc``'s next answer; None when there is no process or it failed (then it is
        marked dead, the failure listed, and the caller does the work itself)."""
        if proc is None or not proc.alive:
            return None
        try:
            return proc.receive()
        except Exception as exc:  # died, or sent what does not unpickle: done here instead
            proc.alive = False
            self.failures.append(f"reader process {proc.popen.pid} failed: {exc!r}")
            return None

    def _reads(self, proc: _Process | None, chunk: Chunk) -> list[Read]:
        got = self._receive(proc)
        if got is None:
            assert self._fallback is not None, "reads asked of processes started without a fallback"
            return [self._fallback(rel) for rel in chunk]
        reads: list[Read]
        reads, lstats, files = got
        if self._counters is not None:
            self._counters.stat(lstats)
            self._counters.read(files)
        for r, rel in zip(reads, chunk, strict=True):
            r.rel = rel  # the walk's bytes object, not a copy (10^5 paths stay in the cache)
        return reads

    def _restated(self, proc: _Process | None, message: Restat) -> list[Restated]:
        got: list[Restated] | None = self._receive(proc)
        return got if got is not None else statcache.restat(self._args[0], message.rows, message.now_ns)


def serve(root: bytes, size_cap: int, trusted: bool) -> None:
    """The process side: read chunks of paths from stdin until EOF, answer each on stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C: the daemon decides
    # Buffered files of our own, not sys.stdin.buffer / sys.stdout.buffer: under
    # PYTHONUNBUFFERED=1 (the service unit sets it; we inherit the daemon's environment) or -u,
    # sys.stdout.buffer is a raw FileIO, whose write() is one write(2). A pipe write that a stop
    # (SIGSTOP/SIGCONT, ^Z, a cgroup freezer, a profiler) interrupts returns part of the bytes,
    # and pickle.dump ignores write()'s count: the rest was lost and the stream corrupted. A
    # BufferedWriter writes everything or raises.
    inp = open(0, "rb", closefd=False)
    out = open(1, "wb", closefd=False)
    sys.stdout = sys.stderr  # stdout carries results only
    claimed: set[bytes] = set()
    while True:
        try:
            message: Chunk | Restat = pickle.load(inp)
        except EOFError:
            return
        answer: Any
        if not isinstance(message, list):  # a Restat (this module is __main__ here: not its class)
            answer = statcache.restat(root, message.rows, message.now_ns)
        else:
            counters = Counters()
            reads = [
                digested(read_path(root, rel, size_cap, trusted=trusted, counters=counters), claimed)
                for rel in message
            ]
            answer = (reads, counters.lstats, counters.files_read)
        try:
            pickle.dump(answer, out, pickle.HIGHEST_PROTOCOL)
            out.flush()
        except BrokenPipeError:
            return


if __name__ == "__main__":
    serve(os.fsencode(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1")
