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
import os
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


MSC = "tests/test_model_rollback.py::test_scenario"  # a fixed model scenario: MSC[name]

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
        "    remove_orphan_files(store, now - int(policy.grace_s * 1e9))\n",
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
        "apply-stops-on-damaged-content",
        "snapd/rollback/engine.py",
        "            self.outcome.damaged.setdefault(op.path, hurt)\n",
        "            raise\n",
        _t("tests/test_bitrot.py"),
        "a content the store cannot read stops the apply part-way: the rest is not restored, the"
        " journal stays and every later rollback is refused",
    ),
    Mutant(
        "kind-change-removed-before-its-content-is-read",
        "snapd/rollback/engine.py",
        "        skip = self.unreadable(ops)\n",
        "        skip: set[int] = set()\n",
        _t("tests/test_bitrot.py", "-k", "changes_kind"),
        "a path that changes kind is removed although its content at the mark cannot be read",
    ),
    Mutant(
        "capture-fails-on-a-damaged-object",
        "snapd/store/objwrite.py",
        "                same = False  # damaged: stored again under the next collision key\n",
        "                raise\n",
        _t("tests/test_bitrot.py", "-k", "captured_again"),
        "a file holding the content of a damaged object makes every capture and mark of its workspace fail",
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
        "snapd/capture/recorder.py",
        "        self._queue_found(self._capturer.recheck_files())\n",
        "        pass\n",
        _t("tests/test_counters.py", "tests/test_model_rollback.py::test_scenario"),
        "a rollback plans from stale bytes after a write through a hard link made outside the watches",
    ),
    Mutant(
        "rollback-recheck-skips-files",
        "snapd/capture/scan.py",
        "                if not seen(rel, packed, st, now):\n                    found.add(rel)\n",
        "",
        _t("tests/test_recheck.py", "tests/test_model_rollback.py::test_scenario"),
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
    Mutant(
        "births-link-untold",
        "snapd/capture/births.py",
        '            out.append(WatchEvent("linked", rel, inode=file))\n',
        "            pass\n",
        _t("tests/test_births.py", "tests/test_fleeting_links.py"),
        "a new name seen as a hard link is not told: written through, gone by the capture, its file is stale",
    ),
    Mutant(
        "births-unseen-ignored",
        "snapd/capture/dirty.py",
        "                    d.recheck = True\n",
        "                    d.recheck = False\n",
        _t("tests/test_births.py", "tests/test_fleeting_links.py"),
        "a name gone before its look re-checks nothing: its directory removed or moved out, a mark is stale",
    ),
    Mutant(
        "linked-name-gone-forgets-others",
        "snapd/capture/capturer.py",
        "            others.update(self.stats.linked(r.rel))  # before the read replaces what was known\n",
        "",
        _t("tests/test_fleeting_links.py", "-k", "after_it_was_captured or renamed_over"),
        "a captured second name written through, then removed or renamed over: its other names stay stale",
    ),
    Mutant(
        "exchange-not-displaced",
        "snapd/capture/translator.py",
        "            watches.displace(rel)\n",
        "",
        _t("tests/test_exchange.py::test_exchanged_directories_report_under_their_new_names"),
        "a rename arriving on a watched directory's name leaves its watches there: after an "
        "exchange the second half moves the arrival's watches back",
    ),
    Mutant(
        "renamed-over-held-open-not-dead",
        "snapd/capture/translator.py",
        "                watches.replaced(wd)",
        "                pass",
        _t("tests/test_exchange.py::test_rename_over_an_empty_directory_then_away_at_once"),
        "a directory renamed over while held open stays set aside: the arrival renamed on at "
        "once leaves its watches behind",
    ),
    Mutant(
        "deleted-dir-keeps-its-name",
        "snapd/capture/translator.py",
        "                watches.deleted(rel)",
        "                watches.forget_refused(rel)",
        _t("tests/test_exchange.py::test_renamed_onto_a_deleted_directory_still_held_open"),
        "a deleted directory held open keeps naming its path, and is set aside for a rename onto it",
    ),
    Mutant(
        "watches-trust-a-disk-ahead",
        "snapd/capture/watches.py",
        "if (old is not None or other is not None) and not self._trust_disk:",
        "if False:",
        _t("tests/test_exchange.py::test_a_burst_of_exchanges_and_renames"),
        "a watch placed by path takes the name the disk gives it while renames are still queued",
    ),
    Mutant(
        "watches-behind-never-resynced",
        "snapd/capture/watches.py",
        "        self.behind = True\n        return -1\n",
        "        return -1\n",
        _t("tests/test_exchange.py::test_a_name_reused_before_its_rename_is_read"),
        "a table found behind the disk is never placed again from it",
    ),
    # -- issue 31, point 13: four mutations no named test caught, and a weak comparison --
    Mutant(
        "journal-of-another-root",
        "snapd/rollback/journal.py",
        "    if journal_root != os.fsencode(root):\n",
        "    if False:\n",
        _t("tests/test_apply.py", "-k", "another_root"),
        "recovery finishes a journal written for another root over this one",
    ),
    Mutant(
        "gc-unlinks-a-file-stored-again",
        "snapd/store/gc.py",
        "                    if not store.holds.spared(key):\n                        safeio.unlink(p)\n",
        "                    if True:\n                        safeio.unlink(p)\n",
        _t("tests/test_store.py", "-k", "between_the_sweeps"),
        "GC deletes the file of a content a capture stored again after the sweep's commit",
    ),
    Mutant(
        "replan-without-token-check",
        "snapd/rollback/live.py",
        "capture_to_now_under_lock(rescan=True))\n        _check(ws, target, prep.plan, prep.held, token)\n",
        "capture_to_now_under_lock(rescan=True))\n",
        _t("tests/test_rollback_replan.py"),
        "a plan re-made after the pre-rollback mark is applied though the user confirmed another",
    ),
    Mutant(
        "pre-rollback-mark-as-history-base",
        "snapd/store/history.py",
        '    plain = [m for m in before if m.kind != "pre-rollback"]\n',
        "    plain = before\n",
        _t("tests/test_history_model.py", "-k", "base_of or legacy"),
        "a time is rebuilt from a pre-rollback mark, whose held extras were never captured",
    ),
    Mutant(
        "apply-judges-files-by-size-and-mode",
        "snapd/rollback/checks.py",
        '        return data == self.get(e.key) if "." in e.key else self.hasher(data) == digest',
        "        return True",
        _t("tests/test_apply.py", "-k", "size_mode"),
        "a file rewritten with the same size, mode and mtime during a rollback is overwritten",
    ),
    Mutant(
        "peer-judged-by-its-gid",
        "snapd/ipc/server.py",
        "    if peer.uid != own_uid:\n",
        "    if peer.gid != own_uid:\n",
        _t("tests/test_server_client.py", "-k", "check_peer"),
        "the daemon compares the peer's gid with its uid: its own user is refused, a group let in",
    ),
    Mutant(
        "peer-judged-by-its-gid-end-to-end",
        "snapd/ipc/server.py",
        "    if peer.uid != own_uid:\n",
        "    if peer.gid != own_uid:\n",
        _t("tests/test_other_user.py", "-k", "refuses_even_root"),
        "the same, caught by a real daemon run as uid 65534 with gid 65533",
    ),
    # -- issue 31, point 14: every promise of docs/reliability.md has a named mutant --
    Mutant(
        "journal-removed-without-sync",
        "snapd/rollback/journal.py",
        "    safeio.remove_durably(journal)\n",
        "    journal.unlink()\n",
        _t("tests/test_apply.py", "-k", "no_journal_for_a_power_cut"),
        "a finished rollback's journal comes back after a power cut and is finished again",
    ),
    Mutant(
        "recovery-does-not-finish",
        "snapd/rollback/apply.py",
        "        engine.run(found.ops, found.temps, lambda phase: None)\n        journals.remove(journal)\n",
        "        journals.remove(journal)\n",
        _t("tests/test_apply.py", "-k", "crash_at_every_apply_step"),
        "a rollback interrupted by a crash is dropped half-done instead of finished",
    ),
    Mutant(
        "ignored-at-the-mark-deleted",
        "snapd/rollback/plan.py",
        "            if why is not None:  # absent at M because its rules ignored it, not because",
        "            if False:  # absent at M because its rules ignored it, not because",
        _t("tests/test_restore.py", "-k", "ignored", f"{MSC}[ignored-at-m-unignored-now]"),
        "a path the mark's rules ignored is deleted by the rollback",
    ),
    Mutant(
        "pre-rollback-holds-no-extras",
        "snapd/rollback/live.py",
        "            hold=prep.touched_extras,\n",
        "            hold=(),\n",
        _t(f"{MSC}[ignored-now-captured-at-m]", f"{MSC}[ignored-dir-captured-at-m]"),
        "the pre-rollback mark lacks what the rollback overwrites outside today's rules: undo loses it",
    ),
    Mutant(
        "pre-rollback-records-no-absent",
        "snapd/rollback/live.py",
        "            absent=prep.created,\n",
        "            absent=(),\n",
        _t(f"{MSC}[recreated-file-untracked-since]"),
        "undo leaves a path the rollback created where the rules now ignore it",
    ),
    Mutant(
        "gc-live-set-without-marks",
        "snapd/store/gcmark.py",
        "    nodes.reachable(store.get_many, sorted(",  # so it still applies once GC holds states too
        "    (lambda *_: None)(sorted(",
        _t("tests/test_store.py", "-k", "gc"),
        "GC deletes the objects of the marks it keeps",
    ),
    Mutant(
        "gc-drops-delta-bases",
        "snapd/store/gcmark.py",
        "    return with_bases(store, held)\n",
        "    return held\n",
        _t("tests/test_store_deltas.py", "-k", "gc_never_deletes_a_base"),
        "GC deletes the base a kept delta needs",
    ),
    Mutant(
        "gc-marks-before-sparing",
        "snapd/store/gc.py",
        "    with store.holds.sweeping():  # from here on, every key a batch holds is spared\n"
        "        found = mark.unreferenced(policy, now, extra)\n",
        "    found = mark.unreferenced(policy, now, extra)\n"
        "    with store.holds.sweeping():  # from here on, every key a batch holds is spared\n",
        _t("tests/test_gc_child.py", "-k", "reuses"),
        "GC deletes an old content a mark reused while the mark phase ran in its own process",
    ),
    Mutant(
        "gc-marks-in-the-daemon",
        "snapd/daemon/maintenance.py",
        "rep = gc.run(store, self.policy, unfinished=unfinished, mark=phase)",
        "rep = gc.run(store, self.policy, unfinished=unfinished)",
        _t("tests/test_gc_child.py", "-k", "daemons_gc"),
        "the daemon's GC holds its whole live set in the daemon's heap again (issue 33's RSS step)",
    ),
    Mutant(
        "gc-repack-plans-in-the-daemon",
        "snapd/store/gc.py",
        "repack(store, mark.repack_plan)",
        "repack(store)",
        _t("tests/test_gc_child.py", "-k", "exactly_what"),
        "the repack's plan (every object's row, every version's name) is made in the daemon's heap again",
    ),
    Mutant(
        "gc-touched-forgets-the-walk",
        "snapd/store/holds.py",
        "        self._kept = {d for i in range(0, len(walk), 8) if (d := walk[i : i + 8].tobytes())"
        " in wanted}\n",
        "        self._kept = set()\n",
        _t("tests/test_regressions.py", "-k", "concurrent_mark_reuses"),
        "a content a mark reused while GC's mark phase walked is deleted once the sweep knows its candidates",
    ),
    Mutant(
        "gc-mark-process-outlives-the-daemon",
        "snapd/store/gcmark.py",
        "        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n",
        "        pass\n",
        _t("tests/test_gc_child.py", "-k", "busy_in_a_step"),
        "GC's mark process, busy walking, outlives a daemon killed -9 and keeps the store's file system busy",
    ),
    Mutant(
        "gc-ignores-journal-holds",
        "snapd/daemon/maintenance.py",
        "unfinished = {k for w in store.workspaces() for k in journal.needs(store.journal_path(w.id))}",
        "unfinished: set[str] = set()",
        _t("tests/test_diskfull.py", "-k", "gc_keeps_what_an_unfinished_rollback"),
        "GC deletes what a rollback stopped part-way still has to write",
    ),
    Mutant(
        "read-without-hash-check",
        "snapd/store/objects.py",
        "    if len(data) != size or hasher(data) != digest:\n",
        "    if len(data) != size:\n",
        _t("tests/test_store.py", "-k", "corruption"),
        "a damaged object of the right size is returned as if it were the content",
    ),
    Mutant(
        "other-uid-let-in",
        "snapd/ipc/server.py",
        "    if peer.uid != own_uid:\n",
        "    if False:\n",
        _t("tests/test_server_client.py", "-k", "refused"),
        "the daemon serves a request from another uid",
    ),
    Mutant(
        "store-files-world-readable",
        "snapd/store/safeio.py",
        "FILE_MODE = 0o600\n",
        "FILE_MODE = 0o644\n",
        _t("tests/test_store.py", "-k", "private_whatever_the_umask"),
        "the store's files are readable by other users",
    ),
    Mutant(
        "stale-token-applied",
        "snapd/rollback/live.py",
        "    if token is None or plan.token == token:\n",
        "    if True:\n",
        _t("tests/test_rollback_e2e.py", "-k", "stale_plan_token"),
        "a rollback applies a plan other than the one the user confirmed",
    ),
    Mutant(
        "relative-minutes-as-seconds",
        "snapd/timeref.py",
        'UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}',
        'UNITS = {"s": 1, "m": 1, "h": 3600, "d": 86_400}',
        _t("tests/test_history_model.py", "-k", "relative"),
        "`@10m` names ten seconds ago",
    ),
]


class _Stop(Exception):
    pass


def _on_term(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def pytest_run(tests: tuple[str, ...], timeout: float) -> tuple[int | None, str, float]:
    """Run ``tests`` (``pytest -x``, under ``CI``: a condition the machine lacks is a failure
    saying so, never a skip); (exit code or None on timeout, output, seconds)."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider", *tests]
    start = time.monotonic()
    try:
        cp = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, timeout=timeout, env={**os.environ, "CI": "1"}
        )
    except subprocess.TimeoutExpired:
        return None, "", time.monotonic() - start
    return cp.returncode, cp.stdout.decode(errors="replace"), time.monotonic() - start


def judge(code: int | None, out: str) -> str:
    """A mutant is killed only when a test *failed* (pytest's exit 1 with a FAILED line): not
    on an error in set-up or collection, a timeout of the whole run, a usage error, or a test
    that could not set up its condition on this machine (``unavailable``) — those say nothing
    about the mutant."""
    if code is None:
        return "TIMED OUT (no verdict: the whole run hung)"
    lines = out.splitlines()
    failed = [ln for ln in lines if ln.startswith("FAILED ")]
    errors = [ln for ln in lines if ln.startswith("ERROR ")]
    if code == 0:
        return "SURVIVED"
    if code == 1 and failed and not errors and "cannot run under CI" not in out:
        return "killed"
    why = (errors or failed or lines[-1:] or ["?"])[0]
    return f"NO VERDICT: pytest exited {code} ({why[:160]})"


def run(m: Mutant, timeout: float) -> tuple[str, float]:
    """(verdict, seconds): killed, SURVIVED, or why no verdict could be given."""
    path = ROOT / m.path
    original = path.read_text()
    if original.count(m.old) != 1:
        return f"NOT APPLIED: the code to mutate occurs {original.count(m.old)} times in {m.path}", 0.0
    path.write_text(original.replace(m.old, m.new))
    try:
        code, out, took = pytest_run(m.tests, timeout)
    finally:
        path.write_text(original)
    return judge(code, out), took


def not_applicable(chosen: list[Mutant]) -> list[str]:
    """The mutants whose code to mutate does not occur exactly once (it moved or changed)."""
    bad = []
    for m in chosen:
        found = (ROOT / m.path).read_text().count(m.old)
        if found != 1:
            bad.append(f"{m.name}: the code to mutate occurs {found} times in {m.path}")
    return bad


def baseline(chosen: list[Mutant], timeout: float) -> dict[tuple[str, ...], str]:
    """Each test selection, unmutated, must pass: otherwise a failure would be the machine's
    or the tests' own, and count as a kill. The selections that did not pass, with why (their
    mutants get no verdict; the others are still judged)."""
    bad = {}
    for tests in dict.fromkeys(m.tests for m in chosen):
        code, out, took = pytest_run(tests, timeout)
        tail = (out.strip().splitlines() or ["(no output)"])[-1]
        print(f"baseline {' '.join(tests)}: exit {code} in {took:.0f}s: {tail}", flush=True)
        if code != 0:
            failed = [ln for ln in out.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
            bad[tests] = f"exit {code}: {(failed or [tail])[0][:300]}"
            print(f"BASELINE FAILED, its mutants get no verdict: {bad[tests]}", flush=True)
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="run only these mutants")
    ap.add_argument("--list", action="store_true", help="list the mutants and their tests")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per test run")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated run (not for a result)")
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
    stale = not_applicable(chosen)
    if stale:
        print("MUTANTS THAT NO LONGER APPLY (fix them in tests/mutants.py):", file=sys.stderr)
        print("\n".join(f"  {s}" for s in stale), file=sys.stderr)
        return 3
    start = time.monotonic()
    broken = {} if args.no_baseline else baseline(chosen, args.timeout)
    bad = 0
    for m in chosen:
        if m.tests in broken:
            verdict, took = f"NO VERDICT: its tests fail unmutated ({broken[m.tests]})", 0.0
        else:
            verdict, took = run(m, args.timeout)
        bad += verdict != "killed"
        print(f"{m.name:<36} {verdict:<10} {took:6.1f}s  {m.why}", flush=True)
    minutes = (time.monotonic() - start) / 60
    print(f"{len(chosen) - bad} of {len(chosen)} mutants killed in {minutes:.1f} min")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
