"""OpenCode: a plugin file calls ``snapctl hook opencode`` on ``chat.message`` (``turn-start``)
and on the ``session.idle`` event (``turn-end``).

OpenCode loads every ``*.js`` in ``~/.config/opencode/plugin/`` (``--project DIR``:
``DIR/.opencode/plugin/``). snapd's plugin is a whole file of its own, ``snapd.js``, so
integrating writes it and removing deletes it — only when it is snapd's (it carries
:data:`MARKER`); a foreign ``snapd.js`` is refused. The plugin passes ``{"hook_event_name",
"session_id", "cwd"}`` on stdin and reads back ``{"additionalContext": ...}``, which it adds to
the user's message as a synthetic text part: the model reads it, the user's text is unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from snapd.integrations.base import Context, Event, EventKind, Scope, named_event
from snapd.integrations.ownfile import OwnFileAgent

MARKER = "// written by `snapctl integrate opencode`"
EVENTS: dict[str, EventKind] = {"chat.message": "start", "session.idle": "end"}

PLUGIN = """\
MARKER: marks OpenCode's turns in snapd (remove with `snapctl integrate opencode --remove`).
import { spawn } from "node:child_process"

const SNAPCTL = ARGV

function hook(event, sessionID, directory) {
  return new Promise((resolve) => {
    let out = ""
    let child
    try {
      child = spawn(SNAPCTL[0], [...SNAPCTL.slice(1)], { cwd: directory, stdio: ["pipe", "pipe", "inherit"] })
    } catch (e) {
      return resolve({})
    }
    const timer = setTimeout(() => { child.kill(); resolve({}) }, TIMEOUT_MS)
    child.stdout.on("data", (d) => { out += d })
    child.on("error", () => { clearTimeout(timer); resolve({}) })
    child.on("close", () => {
      clearTimeout(timer)
      try { resolve(JSON.parse(out || "{}")) } catch (e) { resolve({}) }
    })
    child.stdin.end(JSON.stringify({ hook_event_name: event, session_id: sessionID, cwd: directory }))
  })
}

export const SnapdPlugin = async ({ directory }) => ({
  "chat.message": async (input, output) => {
    const reply = await hook("chat.message", input.sessionID, directory)
    if (reply.additionalContext && output && Array.isArray(output.parts)) {
      const messageID = (output.message && output.message.id) || input.messageID
      output.parts.push({
        id: "prt_snapd" + Date.now().toString(36) + Math.random().toString(36).slice(2, 10),
        sessionID: input.sessionID, messageID, type: "text", synthetic: true,
        text: reply.additionalContext,
      })
    }
  },
  event: async ({ event }) => {
    if (event && event.type === "session.idle") {
      await hook("session.idle", event.properties && event.properties.sessionID, directory)
    }
  },
})
"""


class OpenCode(OwnFileAgent):
    name = "opencode"
    title = "OpenCode"
    marker = MARKER
    what = "snapd's plugin"

    def path(self, scope: Scope, ctx: Context) -> Path:
        base = scope.project / ".opencode" if scope.project is not None else ctx.config_home() / "opencode"
        return base / "plugin" / "snapd.js"

    def text(self, scope: Scope, ctx: Context) -> str:
        return (
            PLUGIN.replace("MARKER", MARKER)
            .replace("ARGV", json.dumps(self.argv(scope, ctx)))
            .replace("TIMEOUT_MS", str(int(self.hook_timeout_s * 1000)))
        )

    def show(self, scope: Scope, ctx: Context) -> str:
        return f"// save as {self.path(scope, ctx)}\n" + self.text(scope, ctx)

    def parse(self, stdin: bytes, argv: Sequence[str]) -> Event:
        return named_event(stdin, EVENTS)

    def reply(self, event: Event, notice: str) -> str:
        return json.dumps({"additionalContext": notice} if notice and event.kind == "start" else {})


AGENT = OpenCode()
