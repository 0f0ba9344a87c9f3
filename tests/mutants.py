"""Named hand-made mutants: each removes the code that keeps one promise, and the tests meant
to catch it must fail (issue 11, point 7). Outside CI: ``make mutants`` runs it (and mutmut).

``python tests/mutants.py`` applies each mutant to the working tree in turn, runs only its
tests (``pytest -x``), restores the file, and prints killed / SURVIVED per mutant; the exit is
non-zero when one survives or cannot be applied. ``--list`` lists them; names as arguments run
only those. A mutant is a literal replacement that must match exactly once: when the code it
mutates moves, the script says so instead of testing nothing. The file is restored even on
Ctrl-C or SIGTERM.

mutmut covers the pure core (``pyproject.toml`` [tool.mutmut]); these cover the I/O paths,
where a generated mutant would need a daemon, a disk or a crash to be caught.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    why: str


def _t(*args: str) -> tuple[str, ...]:
    return args


MUTANTS = [
    Mutant(
        "full-scan-per-mark",
        "snapd/capture/recorder.py",
        "full = d.full or (for_mark and self.scan_every_mark)",
        "full = d.full or for_mark",
        _t("tests/test_counters.py"),
        "every mark rescans the workspace: O(workspace), not O(changes)",
    ),
    Mutant(
        "reads-uncounted",
        "snapd/capture/reader.py",
        "            if counters is not None:\n                counters.read()\n",
        "",
        _t("tests/test_counters.py"),
        "the counters stop counting file reads (a mark that read everything would look free)",
    ),
    Mutant(
        "racy-window-0",
        "snapd/capture/statcache.py",
        "RACY_NS = 2_000_000_000",
        "RACY_NS = 0",
        _t("tests/test_guarantees.py", "-k", "racy or within_a_second"),
        "a file rewritten in the tick it was read is trusted",
    ),
    Mutant(
        "pre-rollback-unprotected",
        "snapd/store/retention.py",
        'return mark.kind == "pre-rollback" and now - mark.created < policy.max_age_ns',
        "return False",
        _t("tests/test_retention.py", "tests/test_guarantees.py", "-k", "pre_rollback"),
        "retention evicts a young pre-rollback mark under count or budget pressure",
    ),
    Mutant(
        "no-early-flush",
        "snapd/store/objwrite.py",
        "if self._pending_bytes >= self.store.flush_bytes:",
        "if False:",
        _t("tests/test_guarantees.py", "-k", "flush_size"),
        "a batch holds all its new content in memory (unbounded RSS)",
    ),
    Mutant(
        "flushed-content-trusted-by-key",
        "snapd/store/objwrite.py",
        "if seen == sha:",
        "if True:",
        _t("tests/test_guarantees.py", "-k", "flush_size"),
        "content met again after a flush is trusted by its xxh3 key alone (a collision is lost)",
    ),
    Mutant(
        "gc-keeps-orphans",
        "snapd/store/gc.py",
        "    remove_orphan_files(store, young)\n",
        "",
        _t("tests/test_guarantees.py", "-k", "orphan"),
        "object and temp files left by a crash are never removed",
    ),
    Mutant(
        "gc-orphans-without-grace",
        "snapd/store/gc.py",
        "if p.stat().st_mtime_ns < older_than and safeio.unlink(p):",
        "if safeio.unlink(p):",
        _t("tests/test_guarantees.py", "-k", "orphan"),
        "GC deletes a file a batch in flight has written but not committed yet",
    ),
    Mutant(
        "verify-exits-0",
        "snapd/cli/status.py",
        'return 0 if r["clean"] else 1',
        "return 0",
        _t("tests/test_guarantees.py", "-k", "verify"),
        "`snapctl verify` exits 0 on a damaged store",
    ),
    Mutant(
        "barrier-failure-no-rescan",
        "snapd/capture/workspace.py",
        'workspace.barrier_failed", workspace=str(self.root))\n'
        '            self.dirty.request_full("barrier_timeout")\n',
        'workspace.barrier_failed", workspace=str(self.root))\n',
        _t("tests/test_guarantees.py", "-k", "barrier"),
        "a mark whose barrier failed (timeout) does not rescan: it may miss changes",
    ),
    Mutant(
        "log-never-rotates",
        "snapd/daemon/logs.py",
        "maxBytes=MAX_LOG_BYTES",
        "maxBytes=0",
        _t("tests/test_guarantees.py", "-k", "log_file_rotates"),
        "the log file grows without bound",
    ),
    Mutant(
        "watchdog-fed-regardless",
        "snapd/daemon/main.py",
        "if interval is not None and server.alive and",
        "if interval is not None and",
        _t("tests/test_guarantees.py", "-k", "watchdog"),
        "systemd's watchdog is fed although the request loop is dead",
    ),
    Mutant(
        "server-alive-without-its-thread",
        "snapd/ipc/server.py",
        "return self._thread is not None and self._thread.is_alive() and not self._stopping.is_set()",
        "return self._thread is not None and not self._stopping.is_set()",
        _t("tests/test_guarantees.py", "-k", "watchdog"),
        "the server says it is alive after its thread died",
    ),
    Mutant(
        "apply-follows-symlinks",
        "snapd/rollback/dirs.py",
        "DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC",
        "DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC",
        _t("tests/test_apply.py", "-k", "symlink"),
        "a rollback follows a directory swapped for a symlink and writes outside the workspace",
    ),
    Mutant(
        "apply-no-directory-recheck",
        "snapd/rollback/engine.py",
        "if not os.path.samestat(os.fstat(fd), os.fstat(staged_dir)):",
        "if False:",
        _t("tests/test_apply.py", "-k", "during_the_apply"),
        "a temp staged in a directory swapped away during the apply is renamed anyway",
    ),
    Mutant(
        "no-fsync-before-rename",
        "snapd/store/safeio.py",
        '            fsync(fd)\n            step("fsync")\n',
        '            step("fsync")\n',
        _t("tests/test_store.py", "tests/test_powercut.py", "-k", "fsync or power_cuts"),
        "an object file is renamed into place before its bytes are durable (power loss)",
    ),
    Mutant(
        "sqlite-synchronous-off",
        "snapd/store/catalog.py",
        'PRAGMA synchronous=FULL")',
        'PRAGMA synchronous=OFF")',
        _t("tests/test_powercut.py", "-k", "power_cuts"),
        "an acknowledged mark's catalog rows are lost on power loss",
    ),
    Mutant(
        "rollback-without-recheck",
        "snapd/capture/workspace.py",
        "            self.dirty.add_paths(self.capturer.recheck_files())\n",
        "            pass\n",
        _t("tests/test_counters.py", "tests/test_model_rollback.py::test_scenario"),
        "a rollback plans from stale bytes after a write through a hard link made outside the watches",
    ),
    Mutant(
        "rollback-recheck-skips-files",
        "snapd/capture/scan.py",
        "        if not seen(rel, st, now)[0]:\n            found.add(rel)\n",
        "",
        _t("tests/test_model_rollback.py::test_scenario"),
        "the re-check stats every file but never reports one that changed",
    ),
    Mutant(
        "rollback-yes-plans-apart",
        "snapd/cli/rollback.py",
        "        if args.yes and not args.dry_run:\n",
        "        if False:\n",
        _t("tests/test_counters.py"),
        "rollback --yes plans in a request of its own: the whole workspace is re-stat'ed twice",
    ),
    Mutant(
        "failed-flush-goes-on",
        "snapd/store/objwrite.py",
        "        except BaseException:\n            self.ended = True\n            raise\n",
        "        except BaseException:\n            raise\n",
        _t("tests/test_store.py", "-k", "early_flush"),
        "a batch whose early flush failed is committed later: the fsync that failed is retried",
    ),
    Mutant(
        "put-after-the-batch-ended",
        "snapd/store/objwrite.py",
        "        self.ensure_open()\n        base = objects.base_key(digest, size)\n",
        "        base = objects.base_key(digest, size)\n",
        _t("tests/test_store.py", "-k", "early_flush"),
        "a put after a failed flush flushes again: the fsync that failed is retried, the rows written",
    ),
    Mutant(
        "stat-row-never-wide",
        "snapd/statrow.py",
        "    try:\n        return ROW.pack(mode, size, mtime, ctime, ino, read)\n"
        "    except struct.error:\n        pass\n",
        "    return ROW.pack(mode, size, mtime, ctime, ino, read)\n",
        _t("tests/test_far_times.py", "tests/test_statrow.py"),
        "a file dated 2400 (or an inode past 2^63) fails watch and mark with exit 70",
    ),
    Mutant(
        "far-stat-against-a-44-byte-row",
        "snapd/capture/statcache.py",
        "            except struct.error:  # a value past the row's range now: not what a 44-byte row holds\n"
        "                return CHANGED\n",
        "            except struct.error:  # a value past the row's range now: not what a 44-byte row holds\n"
        "                raise\n",
        _t("tests/test_far_times.py"),
        "a file dated 2400 while the daemon is down puts its workspace in [error] at the restart",
    ),
    Mutant(
        "wide-row-taken-as-unchanged",
        "snapd/capture/statcache.py",
        "            if was != (mode, st.st_size, mtime, st.st_ctime_ns, st.st_ino):\n"
        "                return CHANGED\n",
        "",
        _t("tests/test_far_times.py"),
        "an edit of a far-dated path while the daemon is down is missed by the restart's catch-up",
    ),
]


class _Stop(Exception):
    pass


def _on_term(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def run(m: Mutant, timeout: float) -> tuple[str, float]:
    """(verdict, seconds): killed, SURVIVED, or why the mutant could not be tried."""
    path = ROOT / m.path
    original = path.read_text()
    found = original.count(m.old)
    if found != 1:
        return f"NOT APPLIED: the code to mutate occurs {found} times in {m.path}", 0.0
    start = time.monotonic()
    path.write_text(original.replace(m.old, m.new))
    try:
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *m.tests]
        try:
            cp = subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "killed (timeout)", time.monotonic() - start
    finally:
        path.write_text(original)
    took = time.monotonic() - start
    if cp.returncode == 1:
        return "killed", took
    if cp.returncode == 0:
        return "SURVIVED", took
    tail = cp.stdout.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
    return f"ERROR: pytest exited {cp.returncode} ({tail[0]})", took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="run only these mutants")
    ap.add_argument("--list", action="store_true", help="list the mutants and their tests")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per mutant")
    args = ap.parse_args()
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        print(f"unknown mutants: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.why}\n    {m.path}; tests: {' '.join(m.tests)}")
        return 0
    signal.signal(signal.SIGTERM, _on_term)
    bad = 0
    for m in chosen:
        verdict, took = run(m, args.timeout)
        bad += not verdict.startswith("killed")
        print(f"{m.name:<34} {verdict:<10} {took:6.1f}s  {m.why}", flush=True)
    print(f"{len(chosen) - bad} of {len(chosen)} mutants killed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
