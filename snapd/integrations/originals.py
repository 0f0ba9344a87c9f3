"""What ``integrate`` found in a file before it first wrote snapd's entries there, so that
``--remove`` gives that file back byte for byte.

Taking entries out of a parsed file cannot restore its bytes: JSON re-serialised loses its
indentation (compact becomes pretty), an empty ``"hooks": {}`` of the user's looks like one
snapd made, and a directory or an empty file integrate created looks like the user's. So before
its first write to a file, integrate records here what it found — the file's bytes (or that
there was none) and the directories it is about to make — and after each write, a hash of what
it wrote. ``--remove`` then puts the recorded bytes back (or deletes the file and the
directories it made, when empty) if the file still holds exactly what integrate wrote; if the
user has changed it since, the agent takes snapd's entries out of the current file instead,
keeping the user's formatting (:func:`snapd.integrations.jsonfile.style`) and the containers
that were there before (:meth:`Originals.before`).

A record never holds snapd's own entries: a file that already held them when first seen (an
older snapd wrote them) gets no record, and is edited as above. Records live in the state
directory (``STATE/integrations``, private like it: one JSON file per settings file, mode 0600,
named by a hash of its real path). Keeping them is best effort: a state directory that cannot
be written costs only the byte-for-byte restore, never the integration.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from snapd.config import ensure_private_dir
from snapd.errors import SnapdError


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def missing_dirs(path: Path) -> list[Path]:
    """The directories above ``path`` that do not exist yet, outermost first."""
    out = []
    d = path.parent
    while not d.exists() and d != d.parent:
        out.append(d)
        d = d.parent
    return out[::-1]


class Originals:
    """The records, in ``directory`` (snapd's state directory's ``integrations``)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory  # None: no state directory to keep them in (nothing recorded)

    def _file(self, real: Path) -> Path:
        if self.directory is None:
            raise FileNotFoundError("no state directory")
        return self.directory / (hashlib.sha256(os.fsencode(real)).hexdigest()[:32] + ".json")

    def _load(self, real: Path) -> dict[str, Any] | None:
        try:
            rec = json.loads(self._file(real).read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        return rec if isinstance(rec, dict) and rec.get("path") == str(real) else None

    def _save(self, real: Path, rec: dict[str, Any]) -> None:
        try:
            target = self._file(real)
            ensure_private_dir(target.parent.parent)  # the state directory: integrate may be first
            ensure_private_dir(target.parent)
            tmp = target.with_suffix(".tmp")
            # 0600: a settings file may hold a token of the user's
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(rec))
            os.replace(tmp, target)
        except (OSError, SnapdError):
            pass  # best effort (module docstring)

    def forget(self, path: Path) -> None:
        try:
            self._file(_real(path)).unlink()
        except OSError:
            pass

    def note(self, path: Path, clean: bool) -> None:
        """Before integrate writes ``path``: remember what is there now, when it is the user's
        own (``clean``: none of snapd's entries in it). A record of an earlier integrate stays
        while the file holds what that one wrote: what it found is still the original."""
        real = _real(path)
        now = _read(real)
        rec = self._load(real)
        if rec is not None and now is not None and rec.get("written") == _sha(now):
            return
        if not clean:
            self.forget(path)  # snapd's entries are in it already: no original to give back
            return
        self._save(real, {
            "path": str(real),
            "before": None if now is None else base64.b64encode(now).decode("ascii"),
            "made": [str(d) for d in missing_dirs(real)],
            "written": None,
        })

    def write(self, path: Path, text: str, clean: bool, mode: int | None = None) -> None:
        """Integrate's one way to write a file of the agent's: :meth:`note` what is there
        (``clean``: none of snapd's entries in it), write ``text``, then :meth:`wrote`."""
        from snapd.integrations import jsonfile

        self.note(path, clean)
        jsonfile.write_text(path, text, mode)
        self.wrote(path)

    def gone(self, path: Path) -> None:
        """``--remove`` deleted ``path`` (nothing of the user's was left in it): the
        directories integrate made for it go too when empty, and the record."""
        self.tidy(path)
        self.forget(path)

    def wrote(self, path: Path) -> None:
        """After integrate wrote ``path``: what is there now is what it wrote."""
        real = _real(path)
        rec = self._load(real)
        now = _read(real)
        if rec is not None and now is not None:
            rec["written"] = _sha(now)
            self._save(real, rec)

    def before(self, path: Path) -> tuple[bool, bytes | None]:
        """(known, bytes): what integrate found in ``path`` (None: no file), when recorded."""
        rec = self._load(_real(path))
        if rec is None:
            return False, None
        try:
            raw = rec.get("before")
            return True, None if raw is None else base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            return False, None

    def give_back(self, path: Path) -> bool:
        """If ``path`` holds exactly what integrate last wrote: put back what it found (its bytes,
        mode kept; or no file, and none of the directories integrate made that are empty again).
        True when it did; the record goes either way once the file is given back."""
        real = _real(path)
        rec = self._load(real)
        now = _read(real)
        known, original = self.before(path)
        if rec is None or not known or now is None or rec.get("written") != _sha(now):
            return False
        from snapd.integrations import jsonfile

        if original is None:
            real.unlink()
            self.tidy(path)
        else:
            jsonfile.write_bytes(path, original)
        self.forget(path)
        return True

    def tidy(self, path: Path) -> None:
        """``path`` is gone: remove the directories integrate made for it, innermost first,
        each only when empty (anything the user put there since keeps it)."""
        rec = self._load(_real(path))
        for d in reversed(rec.get("made", []) if rec else []):
            try:
                os.rmdir(d)
            except OSError:
                break
