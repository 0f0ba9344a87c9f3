"""What the reader learns of new names (snapd.capture.births), on a real directory: a hard link
is told with its inode; a name the look may have missed is ``unseen`` — gone before the look,
born again while the look could still have been at the newcomer, a directory born again above
names looked at, a new directory gone again, or gone before its watch was placed."""

from __future__ import annotations

import os
from pathlib import Path

from snapd.capture.births import Births
from snapd.capture.dirty import DirtySet
from snapd.capture.events import WatchEvent
from snapd.capture.inotify import READ_SIZE
from snapd.capture.watches import WatchTable


def kinds(events: list[WatchEvent]) -> list[str]:
    return [e.kind for e in events]


def test_a_link_is_told_with_its_inode_and_a_fresh_file_is_not(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    os.link(tmp_path / "a", tmp_path / "b")
    (tmp_path / "c").write_text("c")
    births = Births(os.fsencode(tmp_path))
    births.next_read(100)
    st = os.stat(tmp_path / "a")
    assert births.born(b"b", False) == [WatchEvent("linked", b"b", inode=(st.st_dev, st.st_ino))]
    assert births.born(b"c", False) == []


def test_a_name_gone_before_the_look_is_unseen_unless_renamed_within_the_tree(tmp_path: Path) -> None:
    (tmp_path / "saved").write_text("saved")
    births = Births(os.fsencode(tmp_path))
    births.next_read(100)
    assert births.born(b"deleted", False) == [], "missed: what became of it decides"
    assert kinds(births.died(b"deleted", False)) == ["unseen"]
    assert births.born(b"saved.tmp", False) == []  # an editor's atomic save, looked at late
    assert births.died(b"saved.tmp", False, cookie=7) == []
    assert births.arrived(7, b"saved", False) == []  # renamed over the file it saves: looked at there
    assert births.born(b"out.tmp", False) == []
    assert births.died(b"out.tmp", False, cookie=8) == []
    assert kinds(births.moved_out(8)) == ["unseen"], "moved out of the tree: its file is unknown"
    assert births.moved_out(7) == [], "told once"
    assert births.born(b"d/x", False) == []
    assert births.died(b"d", True, cookie=9) == [], "its directory renamed: the scan of d's new name reads x"
    assert births.arrived(9, b"d2", True) == []
    assert births.born(b"e/x", False) == []
    assert kinds(births.died(b"e", True)) == ["unseen"], "its directory deleted"
    assert births.born(b"lost", False) == []
    assert births.next_read(100) == []
    assert kinds(births.next_read(100)) == ["unseen"], "never accounted for: unseen when its look closes"
    assert births.next_read(100) == []


def test_born_again_while_the_look_may_have_seen_the_newcomer(tmp_path: Path) -> None:
    """``n`` looked at, then born again with a file that look saw (the look came after the
    second birth): in doubt. A newcomer with a file no look saw doubts nothing."""
    (tmp_path / "n").write_text("n")
    births = Births(os.fsencode(tmp_path))
    births.next_read(100)
    assert births.born(b"n", False) == []
    births.died(b"n", False)
    assert kinds(births.born(b"n", False)) == ["unseen"], "again in the same read"
    births.next_read(100)
    births.died(b"n", False)
    assert kinds(births.born(b"n", False)) == ["unseen"], "in the read after: queued before the look"
    births.next_read(100)
    births.next_read(100)
    births.died(b"n", False)
    assert births.born(b"n", False) == [], "two reads later, everything queued before the look was read"
    births.died(b"n", False)
    (tmp_path / "n").rename(tmp_path / "kept")  # alive elsewhere: its inode number is not reused
    (tmp_path / "n").write_text("a new file")
    assert births.born(b"n", False) == [], "another file: the earlier look did not see it"
    births.died(b"n", False)
    (tmp_path / "n").unlink()
    assert kinds(births.born(b"n", False)) == ["unseen"], "missed after a look: that look may have seen it"


def test_atomic_saves_one_after_another_put_no_look_in_doubt(tmp_path: Path) -> None:
    """``f.tmpN`` looked at, renamed over ``f``: ``f``'s file is the one looked at, so the next
    save arriving at ``f`` doubts no look — but a name looked at under its own name is. (One
    temporary name reused within a read or two can doubt a look wrongly: inode numbers are
    reused at once. That costs a re-check, never a change.)"""
    (tmp_path / "f").write_text("f")
    births = Births(os.fsencode(tmp_path))
    births.next_read(100)
    for cookie in (1, 2, 3):
        tmp = f"f.tmp{cookie}"
        (tmp_path / tmp).write_text("saved")
        assert births.born(tmp.encode(), False) == []
        births.died(tmp.encode(), False, cookie)
        (tmp_path / tmp).rename(tmp_path / "f")
        assert births.arrived(cookie, b"f", False) == []
    (tmp_path / "g").write_text("g")
    (tmp_path / "f").rename(tmp_path / "g")  # before g's creation record is read:
    assert births.born(b"g", False) == []  # its look sees f's file, not the one created
    births.died(b"f", False, 4)
    assert kinds(births.arrived(4, b"g", False)) == ["unseen"], "g's look saw f's file"


def test_a_full_read_keeps_the_looks_open_one_read_more(tmp_path: Path) -> None:
    (tmp_path / "n").write_text("n")
    births = Births(os.fsencode(tmp_path))
    births.next_read(100)
    births.born(b"n", False)
    births.next_read(READ_SIZE)  # full: more may have been queued before the look
    births.next_read(100)
    births.died(b"n", False)
    assert kinds(births.born(b"n", False)) == ["unseen"]


def test_a_listed_name_reported_created_after_its_listing_is_one_birth(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("x")
    births = Births(os.fsencode(tmp_path))
    births.next_read(100)
    assert births.born(b"d", True) == []
    assert births.born(b"d/x", False, listed=True) == []
    assert births.born(b"d/x", False) == [], "its creation record, read after the listing"
    assert births.born(b"d/x", False, listed=True) == [], "listed again (its directory's record)"
    births.died(b"d/x", False)
    assert kinds(births.born(b"d/x", False)) == ["unseen"], "but born again after a removal"


def test_a_directory_born_again_above_names_looked_at(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("x")
    births = Births(os.fsencode(tmp_path))
    births.next_read(100)
    assert births.born(b"d/x", False) == []
    assert kinds(births.born(b"d", True)) == ["unseen"], "d/x may have been looked at in the new d"


def test_a_new_directory_gone_again_at_once_is_unseen(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("f")
    births = Births(os.fsencode(tmp_path))
    births.next_read(100)
    births.born(b"d", True)
    births.born(b"f", False)
    assert kinds(births.died(b"d", True)) == ["unseen"]
    assert births.died(b"f", False) == []
    assert births.died(b"old", True) == [], "not born lately: its removal is an ordinary event"
    births.born(b"moved", True)
    assert births.died(b"moved", True, cookie=3) == []
    assert kinds(births.moved_out(3)) == ["unseen"], "moved out of the tree at once"
    births.born(b"renamed", True)
    births.died(b"renamed", True, cookie=4)
    births.arrived(4, b"renamed2", True)
    assert births.moved_out(4) == [], "renamed within the tree: scanned at its new name"


def test_a_directory_gone_before_its_watch_is_told_vanished(tmp_path: Path) -> None:
    table = WatchTable(tmp_path, lambda rel: True, None)
    table.open(whole_tree=True)
    try:
        vanished: list[bytes] = []
        assert table.add_tree(b"never-there", [], vanished=vanished) == set()
        (tmp_path / "file").write_text("not a directory")
        table.add_tree(b"file", [], vanished=vanished)
        assert vanished == [b"never-there", b"file"]
        assert table.failures == 0, "a race, not a refusal"
    finally:
        table.close()


def test_the_dirty_set_keeps_linked_inodes_and_a_due_recheck() -> None:
    dirty = DirtySet()
    dirty.add_events(
        [WatchEvent("linked", b"b", inode=(1, 42)), WatchEvent("unseen", b"gone")],
        lambda rel: False,
        lambda rel: False,
    )
    assert dirty.pending() == 2, "a due re-check alone wakes the capture thread"
    taken = dirty.take()
    assert taken.inodes == {(1, 42)} and taken.recheck and not taken.paths
    assert not dirty.take()
