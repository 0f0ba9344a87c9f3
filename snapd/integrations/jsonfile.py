"""Editing an agent's JSON settings without losing anything of the user's.

A settings file is read whole, changed in memory and written back by temp file + rename (its
mode kept), so an agent never reads half a file. Everything but snapd's own entries is kept
as it was: other settings, other hooks, their order, and the file's formatting as far as JSON
text can carry it (:func:`style`: indentation or one line, spacing, escapes, final newline);
``--remove`` gives back the exact bytes when it can (:mod:`.originals`). A file that holds
comments (JSONC, which some agents accept) cannot be written back without dropping them, so it
is refused, with a pointer to ``--print`` to add the hooks by hand.

The hook layout shared by Claude Code, Codex's ``hooks.json`` and Gemini CLI::

    {"hooks": {"EVENT": [{"matcher": "...", "hooks": [{"type": "command", "command": "...",
                                                     "timeout": N}]}]}}
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from snapd.errors import IntegrationRefused

Doc = dict[str, Any]
_COMMENT = re.compile(r"^\s*(//|/\*)|[,{\[]\s*(//|/\*)", re.MULTILINE)


def load(path: Path, agent: str) -> Doc:
    """The JSON object in ``path`` ({} when the file is missing or empty)."""
    return read(path, agent)[0]


def read(path: Path, agent: str) -> tuple[Doc, str]:
    """The JSON object in ``path`` and the text it was read from ("" for no file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, ""
    except (OSError, UnicodeDecodeError) as exc:
        raise IntegrationRefused(f"{path} cannot be read: {exc}", path=str(path)) from None
    if not text.strip():
        return {}, text
    try:
        doc = json.loads(text)
    except ValueError as exc:
        if _COMMENT.search(text):
            raise IntegrationRefused(
                f"{path} holds comments, which rewriting it would lose; add snapd's hooks by hand: "
                f"`snapctl integrate {agent} --print` shows them",
                path=str(path),
            ) from None
        raise IntegrationRefused(f"{path} is not valid JSON ({exc}); fix it first", path=str(path)) from None
    if not isinstance(doc, dict):
        raise IntegrationRefused(f"{path} does not hold a JSON object; fix it first", path=str(path))
    return doc, text


def style(text: str) -> dict[str, Any]:
    """``json.dumps`` arguments that write a document the way ``text`` is written: its
    indentation (or none: one line), the spacing after ``,`` and ``:``, whether non-ASCII is
    escaped, and a final newline. A new file (``text`` "") gets two spaces and a newline."""
    body = text.strip()
    if not body:
        return {"indent": 2, "ensure_ascii": False, "newline": True}
    after: dict[str, str] = {}
    in_string = escaped = False
    for i, ch in enumerate(body):
        if in_string:
            in_string = escaped or ch != '"'
            escaped = not escaped and ch == "\\"
        elif ch == '"':
            in_string = True
        elif ch in ",:" and ch not in after:
            after[ch] = body[i + 1 : i + 2]
    indent: str | None = None
    if "\n" in body:
        m = re.search(r"\n([ \t]+)\S", body)
        indent = m.group(1) if m else ""
    item = "," if indent is not None or after.get(",", " ") != " " else ", "
    key = ": " if after.get(":", " ") == " " else ":"
    return {"indent": indent, "separators": (item, key), "newline": text.endswith("\n"),
            "ensure_ascii": text.isascii() and "\\u" in text}


def dumps(doc: Doc, like: str = "") -> str:
    """``doc`` as JSON text written the way ``like`` is (:func:`style`)."""
    how = style(like)
    newline = how.pop("newline")
    return json.dumps(doc, **how) + ("\n" if newline else "")


def save(path: Path, doc: Doc, like: str = "") -> None:
    """Write ``doc`` to ``path`` atomically, keeping the file's mode (new files: 0644), in the
    formatting of ``like``, the text it was read from (:func:`style`)."""
    write_text(path, dumps(doc, like))


def write_text(path: Path, text: str, mode: int | None = None) -> None:
    """:func:`write_bytes` of ``text`` in UTF-8."""
    write_bytes(path, text.encode("utf-8"), mode)


def write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``text`` through a temp file beside it (parents created), durably:
    the temp is fsynced (its mode set first) before the rename, the directory after it.
    Without the first fsync a power cut can leave the user's settings file empty (the rename
    reached the disk, the bytes had not). A symlink (a dotfiles manager's) stays: the file it
    points to is replaced. IntegrationRefused, saying why, when it cannot be written."""
    import tempfile  # deferred: the hook imports this module but never writes settings

    real = Path(os.path.realpath(path))
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        try:
            keep = os.stat(real).st_mode & 0o7777
        except FileNotFoundError:
            keep = 0o644
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".snapd-tmp", dir=real.parent)
    except OSError as exc:
        linked = real != path.absolute()
        hint = f" (a link to {real}: for a file a dotfiles manager keeps, change it there)" if linked else ""
        raise IntegrationRefused(
            f"cannot write {path}: {exc.strerror or exc}; nothing was changed{hint}", path=str(path)
        ) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), keep if mode is None else mode)  # before the fsync, which carries it
            os.fsync(f.fileno())
        os.replace(tmp, real)
        dfd = os.open(real.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# -- the shared hook layout ---------------------------------------------------------------------

Ours = Callable[[object], bool]


def _groups(doc: Doc, event: str, path: Path) -> list[Any]:
    hooks = doc.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise IntegrationRefused(f"{path}: 'hooks' is not an object; fix it first", path=str(path))
    groups = hooks.setdefault(event, [])
    if not isinstance(groups, list):
        raise IntegrationRefused(f"{path}: 'hooks.{event}' is not a list; fix it first", path=str(path))
    return groups


def our_hooks(doc: Doc, event: str, ours: Ours) -> list[dict[str, Any]]:
    """snapd's hook entries under ``event`` (without changing ``doc``)."""
    hooks = doc.get("hooks")
    groups = hooks.get(event) if isinstance(hooks, dict) else None
    found = []
    for group in groups if isinstance(groups, list) else []:
        entries = group.get("hooks") if isinstance(group, dict) else None
        for h in entries if isinstance(entries, list) else []:
            if isinstance(h, dict) and ours(h.get("command")):
                found.append(h)
    return found


def put_hook(doc: Doc, event: str, entry: dict[str, Any], ours: Ours, path: Path) -> str:
    """Make ``entry`` snapd's one hook under ``event``: "added", "updated" or "unchanged"."""
    existing = our_hooks(doc, event, ours)
    if existing == [entry]:
        return "unchanged"
    action = "updated" if existing else "added"
    drop_hooks(doc, event, ours)
    _groups(doc, event, path).append({"hooks": [entry]})
    return action


def drop_hooks(doc: Doc, event: str, ours: Ours, before: Doc | None = None) -> int:
    """Remove snapd's entries under ``event``; a group left empty goes, then an empty event,
    then an empty ``hooks`` — unless ``before`` (what integrate found) had that event or that
    ``hooks``: the user's own empty ones stay. Everything else stays where it was. Returns how
    many went."""
    hooks = doc.get("hooks")
    groups = hooks.get(event) if isinstance(hooks, dict) else None
    if not isinstance(hooks, dict) or not isinstance(groups, list):
        return 0
    removed = 0
    kept_groups = []
    for group in groups:
        entries = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(entries, list):
            kept_groups.append(group)
            continue
        kept = [h for h in entries if not (isinstance(h, dict) and ours(h.get("command")))]
        removed += len(entries) - len(kept)
        if kept or not entries:
            group["hooks"] = kept
            kept_groups.append(group)
    had = before.get("hooks") if before is not None else None
    if kept_groups or (isinstance(had, dict) and event in had):
        hooks[event] = kept_groups
    else:
        del hooks[event]
    if not hooks and not isinstance(had, dict):
        del doc["hooks"]
    return removed
