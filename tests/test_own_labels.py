"""The labels of snapd's own marks, ``pre-rollback`` and ``baseline``, are not a user's to
take (issue 31, point 11): a user's mark so labelled hijacked ``pre-rollback~N``. A store from
before holds such user marks: the label names snapd's own marks only; the user's are reached by
id (as format 3 did for ``@`` labels)."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_helpers import Daemon, describe, write

from snapd.errors import UsageError
from snapd.store.refs import validate_label
from snapd.store.store import Store


@pytest.mark.parametrize("label", ["pre-rollback", "baseline"])
def test_snapds_own_labels_are_refused_as_user_labels(label: str) -> None:
    with pytest.raises(UsageError, match="snapd's own"):
        validate_label(label)
    assert validate_label(f"my-{label}") == f"my-{label}"


def test_a_user_mark_of_an_older_store_does_not_hijack_pre_rollback(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s")
    try:
        ws = store.add_workspace(b"/own/ws")
        with store.batch() as batch:
            tree = batch.apply(None, {})
            batch.add_mark(ws, "baseline", tree, kind="baseline", created=1000)
            batch.add_mark(ws, "pre-rollback", tree, kind="pre-rollback", created=2000)
            batch.add_mark(ws, "mine", tree, kind="user", created=3000)
            base, pre, mine = batch.commit()
        with store.catalog.write() as c:  # labelled before such labels were refused
            c.execute("UPDATE marks SET label='pre-rollback' WHERE id=?", (mine.id,))
        assert store.resolve(ws, "pre-rollback").id == pre.id
        assert store.resolve(ws, "pre-rollback~1").id == base.id
        assert store.resolve(ws, mine.id).label == "pre-rollback"  # the user's: by id
        assert store.resolve(ws, "baseline").id == base.id
    finally:
        store.close()


def test_mark_refuses_snapds_own_labels_and_undo_finds_its_own(daemon: Daemon, ws: Path) -> None:
    write(ws / "a.txt", "1\n")
    for label in ("pre-rollback", "baseline"):
        cp = daemon.ctl("mark", label, cwd=ws, check=False)
        assert cp.returncode == 2 and b"snapd's own" in cp.stderr, describe(cp)
    daemon.ctl("mark", "m", cwd=ws)
    write(ws / "a.txt", "2\n")
    daemon.ctl("rollback", "--to", "m", "--yes", cwd=ws)
    assert (ws / "a.txt").read_text() == "1\n"
    daemon.ctl("rollback", "--to", "pre-rollback", "--yes", cwd=ws)
    assert (ws / "a.txt").read_text() == "2\n"
