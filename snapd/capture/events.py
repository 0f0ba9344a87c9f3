"""What the watcher delivers: changes below a root as plain values, paths relative to it;
and how a workspace announces what happens in turn (:data:`Notify`).

Nothing here touches the disk or inotify: the workspace (and the tests) consume these without
threads or sockets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

EventKind = Literal["created", "modified", "deleted", "moved", "overflow", "linked", "unseen", "resync"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change below the root, ``path`` relative to it (``b""`` is the root itself).

    * ``created``/``modified``/``deleted``: ``path`` (``modified`` includes mode changes).
      A created directory is followed by ``created`` for every entry found in it when its
      watch was placed (files made before the watch existed are not lost).
    * ``moved``: ``path`` -> ``dest`` inside the root. For a directory, nothing is reported
      for its contents: everything below ``path`` now lies below ``dest``.
    * A move out of the tree is ``deleted``; a move into it is ``created``.
    * ``overflow``: events were lost; rescan everything (watches are already re-synced).
    * ``linked``: a new name at ``path`` was a hard link when the reader looked (``inode``):
      the captured names of that inode are to be read again, whatever becomes of ``path``.
    * ``unseen``: a new name at ``path`` could not be looked at before it was gone or
      replaced (:mod:`snapd.capture.births`): it may have been a link to any captured file,
      written through, so every captured file is to be re-checked.
    * ``resync``: the disk moved on faster than its events were read, so some came under a
      name the directory no longer had; rescan everything (watches are already re-placed).
    * ``deleted`` of ``b""``: the root itself was deleted, moved or unmounted.
    """

    kind: EventKind
    path: bytes
    dest: bytes | None = None
    is_dir: bool = False
    inode: tuple[int, int] | None = None  # (st_dev, st_ino) of a ``linked`` event


OVERFLOW: Final = WatchEvent("overflow", b"", None, True)
RESYNC: Final = WatchEvent("resync", b"", None, True)
OnEvents = Callable[[list[WatchEvent]], None]

#: How a workspace announces what happens (docs/protocol.md, "Events"): an event kind and its
#: fields (plain values, bytes paths, Marks); the daemon puts them on the wire.
Notify = Callable[[str, dict[str, Any]], None]
