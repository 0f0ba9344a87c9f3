"use strict"
// A snapd client in Node.js, written from docs/protocol.md alone (it never runs snapctl): find
// the endpoint, send requests over a ZeroMQ DEALER socket, follow events on a SUB socket with
// the protocol's gap and restart rule. Every call has a deadline and every socket LINGER=0,
// as the protocol advises: connecting to a path nobody listens on "succeeds" in ZeroMQ.

const childProcess = require("node:child_process")
const crypto = require("node:crypto")
const fs = require("node:fs")
const net = require("node:net")
const os = require("node:os")
const path = require("node:path")
const zmq = require("zeromq")

const PROTOCOL_VERSION = 1
const IPC_PATH_MAX = 107
const DAEMON_TOPIC = Buffer.from([0])
const LONG_MS = 120000 // ops that capture the workspace first (mark, revert_plan, revert_apply)
const FORWARDED = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"] // what run() passes to its command

/** An error reply of the daemon (or a client-side failure named with a protocol code). */
class SnapdError extends Error {
  constructor(code, message, details = {}) {
    super(message)
    this.name = "SnapdError"
    this.code = code
    this.details = details
  }
}

// -- where the daemon is ("Where the endpoint is") ----------------------------------------------

function uid() {
  return typeof process.getuid === "function" ? process.getuid() : 0
}

function dataDir(env) {
  if (env.SNAPD_HOME) return env.SNAPD_HOME
  const home = env.HOME || os.homedir()
  const xdg = env.XDG_DATA_HOME && path.isAbsolute(env.XDG_DATA_HOME) ? env.XDG_DATA_HOME : path.join(home, ".local/share")
  return path.join(xdg, "snapd")
}

function socketDir(env) {
  let dir
  if (env.SNAPD_HOME) dir = path.join(env.SNAPD_HOME, "run")
  else if (env.XDG_RUNTIME_DIR && path.isAbsolute(env.XDG_RUNTIME_DIR)) dir = path.join(env.XDG_RUNTIME_DIR, "snapd")
  else dir = `/tmp/snapd-${uid()}`
  if (Buffer.byteLength(path.join(dir, "control.sock")) > IPC_PATH_MAX) {
    const h = crypto.createHash("sha256").update(Buffer.from(dir)).digest("hex").slice(0, 12)
    dir = `/tmp/snapd-${uid()}-${h}`
  }
  return dir
}

/** The control endpoint: what the running daemon recorded, else the computed one. */
function findEndpoint(env = process.env) {
  try {
    const text = fs.readFileSync(path.join(dataDir(env), "endpoint"), "utf8").trim()
    if (text.startsWith("ipc://")) return text
  } catch (err) {
    if (err.code !== "ENOENT") throw err
  }
  return "ipc://" + path.join(socketDir(env), "control.sock")
}

// -- exact integers ----------------------------------------------------------------------------

/** JSON.parse, except that an integer a JavaScript number cannot hold exactly (beyond 2^53:
 * every `*_ns` time, `created_ns` of a mark) becomes a BigInt, not a rounded number. Number
 * tokens are found outside strings by a scan; each unsafe one is parsed as a string carrying a
 * marker no daemon string can hold (random per call), which the reviver turns into a BigInt. */
function parseJSON(text) {
  const marker = `\u0000int:${crypto.randomBytes(8).toString("hex")}:`
  let out = ""
  let last = 0
  let big = false
  for (let i = 0; i < text.length; i++) {
    const c = text[i]
    if (c === '"') { // skip the string, escapes included
      for (i++; i < text.length && text[i] !== '"'; i++) if (text[i] === "\\") i++
    } else if (c === "-" || (c >= "0" && c <= "9")) {
      let j = i + 1
      while (j < text.length && /[0-9.eE+-]/.test(text[j])) j++
      const token = text.slice(i, j)
      if (/^-?[0-9]+$/.test(token) && !Number.isSafeInteger(Number(token))) {
        out += text.slice(last, i) + JSON.stringify(marker + token)
        last = j
        big = true
      }
      i = j - 1
    }
  }
  if (!big) return JSON.parse(text)
  return JSON.parse(out + text.slice(last), (_, v) => (typeof v === "string" && v.startsWith(marker) ? BigInt(v.slice(marker.length)) : v))
}

/** JSON.stringify that writes a BigInt as the plain integer it is (JSON has no size limit). */
function stringifyJSON(value) {
  const marker = `\u0000int:${crypto.randomBytes(8).toString("hex")}:`
  const text = JSON.stringify(value, (_, v) => (typeof v === "bigint" ? marker + v.toString() : v))
  return text.replace(new RegExp(`"${JSON.stringify(marker).slice(1, -1).replace(/\\/g, "\\\\")}(-?[0-9]+)"`, "g"), "$1")
}

// -- paths ("Paths") ---------------------------------------------------------------------------

/** A path for a request: a string as it is; a Buffer as a string when it is UTF-8, else {b64}. */
function encodePath(p) {
  if (typeof p === "string") return p
  const text = p.toString("utf8")
  return Buffer.from(text, "utf8").equals(p) ? text : { b64: p.toString("base64") }
}

/** A path from a reply, as a Buffer of its exact bytes. */
function decodePath(p) {
  return typeof p === "string" ? Buffer.from(p, "utf8") : Buffer.from(p.b64, "base64")
}

/** Is anything listening at this ipc endpoint? A plain Unix connect answers at once. */
function listening(endpoint) {
  return new Promise((resolve) => {
    const sock = net.connect(endpoint.slice("ipc://".length))
    sock.once("connect", () => { sock.destroy(); resolve(true) })
    sock.once("error", (err) => resolve(err.code === "EACCES" ? "denied" : false))
  })
}

// -- requests ("Requests", "Replies") -----------------------------------------------------------

class Client {
  constructor(endpoint = findEndpoint(), { timeoutMs = 10000 } = {}) {
    this.endpoint = endpoint
    this.timeoutMs = timeoutMs
    this.socket = null
  }

  async _socket() {
    if (this.socket) return this.socket
    const state = await listening(this.endpoint)
    if (state === "denied") throw new SnapdError("permission", `not allowed to connect to ${this.endpoint}: it belongs to another user`)
    if (!state) throw new SnapdError("daemon_unavailable", `no snapd daemon is answering at ${this.endpoint}; start it with \`snapd start\``)
    const sock = new zmq.Dealer({ linger: 0 })
    sock.connect(this.endpoint)
    this.socket = sock
    return sock
  }

  /** One request; its `result`, or a SnapdError with the daemon's code and message. */
  async call(op, args = {}, { timeoutMs = this.timeoutMs } = {}) {
    const id = crypto.randomBytes(16).toString("hex")
    const clean = Object.fromEntries(Object.entries(args).filter(([, v]) => v !== undefined && v !== null))
    const sock = await this._socket()
    await sock.send(JSON.stringify({ op, id, version: PROTOCOL_VERSION, args: clean }))
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const left = deadline - Date.now()
      if (left <= 0) {
        this.close() // a late reply must not be read as the answer to the next call
        throw new SnapdError("timeout", `snapd at ${this.endpoint} did not answer ${op} within ${timeoutMs} ms`)
      }
      sock.receiveTimeout = left
      let frames
      try {
        frames = await sock.receive()
      } catch (err) {
        if (err.code === "EAGAIN") continue
        throw err
      }
      const reply = parseJSON(frames[frames.length - 1].toString("utf8"))
      if (reply.id !== id) continue // a late answer to a call that gave up
      if (!("ok" in reply) && reply.progress) continue // interim progress report
      if (reply.ok === false) {
        const e = reply.error || {}
        throw new SnapdError(e.code || "internal", e.message || "the daemon sent an error without a message", e.details || {})
      }
      if (reply.version !== PROTOCOL_VERSION) {
        throw new SnapdError("protocol_mismatch", `daemon speaks protocol ${reply.version}, this client ${PROTOCOL_VERSION}`)
      }
      return reply.result
    }
  }

  /** Mark the workspace holding `cwd` (default: this process's directory) or `workspace`.
   * `run`: `{argv, exit, signal}`, the command a turn ran (kept in the mark's `summary.run`). */
  mark(label, { workspace, cwd = process.cwd(), message, agent, session, run } = {}) {
    return this.call("mark", {
      label, message, agent, session, run,
      cwd: encodePath(cwd),
      workspace: workspace === undefined ? undefined : encodePath(workspace),
    }, { timeoutMs: Math.max(this.timeoutMs, LONG_MS) })
  }

  /** The plan of a revert (nothing changes): the `rollback_plan` fields plus `revert`. Name
   * the spans one way: `turn` (a turn-start mark), `session` (+ `since`), or `from` (+ `to`;
   * none: up to now). A conflict with later changes is a SnapdError `revert_conflict` whose
   * `details.conflicts` list them with their hunks (unless `conflicts: "markers"`). */
  revertPlan(opts = {}) {
    return this.call("revert_plan", revertArgs(opts), { timeoutMs: Math.max(this.timeoutMs, LONG_MS) })
  }

  /** Plan, ask, apply: `confirm(plan)` (may be async) sees the plan and answers; true applies
   * exactly that plan (its token). If the workspace changed so that the plan differs, the
   * new plan is asked about again. Returns the `revert_apply` result, or null when refused.
   * With `token` (a plan confirmed elsewhere) and no `confirm`: applies that plan or fails
   * with `plan_changed` (the new plan in `details`). */
  async revert({ confirm, token, ...opts } = {}) {
    const args = revertArgs(opts)
    const apply = (t) => this.call("revert_apply", { ...args, token: t }, { timeoutMs: Math.max(this.timeoutMs, LONG_MS) })
    if (confirm === undefined) {
      if (token === undefined) throw new SnapdError("usage", "revert: give a confirm callback, or the token of a plan already confirmed")
      return apply(token)
    }
    let plan = token === undefined ? await this.revertPlan(opts) : null
    for (;;) {
      if (plan !== null) {
        if (!(await confirm(plan))) return null
        token = plan.plan.token
      }
      try {
        return await apply(token)
      } catch (err) {
        if (!(err instanceof SnapdError) || err.code !== "plan_changed") throw err
        plan = err.details // the workspace changed: this plan was not the one confirmed
      }
    }
  }

  /** Run `argv` as a turn, as `snapctl run` does: a `turn-start` mark, the command (stdio
   * inherited; SIGINT, SIGTERM, SIGHUP, SIGQUIT sent to this process passed on to it), a
   * `turn-end` mark; both carry `run: {argv, exit, signal}` (null until it ended), agent "run",
   * session `run-<random>` unless given, and the command line as their message (after
   * `label: `). The pair is a turn `revert({turn: start.id})` takes back. Returns `{start, end,
   * exit, signal, status}`: `status` is the exit status, 128+N when signal N ended it, 127 (not
   * found) or 126 (not runnable) when it could not start. No daemon: the first mark fails and
   * the command is not run. */
  async run(argv, { workspace, cwd = process.cwd(), label, session, agent = "run", stdio = "inherit", env } = {}) {
    if (!Array.isArray(argv) || argv.length === 0) throw new SnapdError("usage", "run: give the command to run")
    session = session ?? `run-${crypto.randomBytes(4).toString("hex")}`
    const line = shellQuote(argv)
    const marks = { workspace, cwd, agent, session, message: label ? `${label}: ${line}` : line }
    const start = await this.mark("turn-start", { ...marks, run: { argv, exit: null, signal: null } })
    const child = childProcess.spawn(argv[0], argv.slice(1), { cwd, stdio, env })
    const pass = Object.fromEntries(FORWARDED.map((sig) => [sig, () => { child.kill(sig) }]))
    for (const [sig, fn] of Object.entries(pass)) process.on(sig, fn)
    let exit, signal
    try {
      ({ exit, signal } = await new Promise((resolve) => {
        child.once("error", (err) => resolve({ exit: err.code === "ENOENT" ? 127 : 126, signal: null }))
        child.once("exit", (code, sig) => resolve({ exit: code, signal: sig }))
      }))
    } finally {
      for (const [sig, fn] of Object.entries(pass)) process.removeListener(sig, fn)
    }
    // The same workspace as the start's, whatever the command did meanwhile.
    const end = await this.mark("turn-end", { ...marks, workspace: decodePath(start.workspace), run: { argv, exit, signal } })
    return { start, end, exit, signal, status: signal ? 128 + os.constants.signals[signal] : exit }
  }

  /** One page of marks, newest first: `{workspace, marks, more, pruned}`. */
  log({ workspace, cwd = process.cwd(), limit, all, agent, session, before } = {}) {
    return this.call("log", {
      limit, all, agent, session, before,
      cwd: encodePath(cwd),
      workspace: workspace === undefined ? undefined : encodePath(workspace),
    })
  }

  status() {
    return this.call("status")
  }

  close() {
    if (this.socket) this.socket.close()
    this.socket = null
  }
}

/** `revert_plan` / `revert_apply` arguments from `revertPlan`'s options. */
function revertArgs({ workspace, cwd = process.cwd(), from, to, turn, session, since, paths, conflicts, force } = {}) {
  return {
    from, to, turn, session, since, conflicts, force,
    paths: paths === undefined ? undefined : paths.map(encodePath),
    cwd: encodePath(cwd),
    workspace: workspace === undefined ? undefined : encodePath(workspace),
  }
}

/** A command line as a POSIX shell reads it back, word for word as Python's `shlex.join` (so
 * as snapctl run) writes it: words of safe characters as they are, the others in single
 * quotes, a single quote inside as '"'"'. */
function shellQuote(argv) {
  return argv.map((w) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, `'"'"'`)}'`)).join(" ")
}

// -- events ("Events") ------------------------------------------------------------------------

/** The gap and restart rule: per workspace, the next event must carry the last seq + 1 of the
 * same instance; another instance means the daemon restarted (every counter starts again). */
class Sequencer {
  constructor(instance = null) {
    this.instance = instance
    this.last = new Map()
  }

  check(event) {
    const notices = []
    if (this.instance !== null && event.instance !== this.instance) {
      notices.push({ notice: "restart", old_instance: this.instance, new_instance: event.instance })
      this.last.clear()
    }
    this.instance = event.instance
    const key = JSON.stringify(event.workspace)
    const last = this.last.get(key)
    if (last !== undefined && event.seq > last + 1) {
      notices.push({ notice: "gap", workspace: event.workspace, lost: event.seq - last - 1, first_missing: last + 1 })
    }
    this.last.set(key, event.seq)
    return notices
  }
}

/** Follow events: `workspace` (a root path) or null for all of them. Yields events, and notices
 * (`{notice: "gap" | "restart", …}`) before the event that revealed them. Close with `close()`. */
class Events {
  constructor(endpoint, { workspace = null, instance = null } = {}) {
    this.sock = new zmq.Subscriber({ linger: 0 })
    if (workspace === null) {
      this.sock.subscribe()
    } else {
      const root = typeof workspace === "string" ? Buffer.from(workspace, "utf8") : workspace
      this.sock.subscribe(DAEMON_TOPIC, Buffer.concat([root, DAEMON_TOPIC]))
    }
    this.sock.connect(endpoint)
    this.sequencer = new Sequencer(instance)
  }

  /** Subscribe using `status` for the endpoint and the instance (the way the protocol advises). */
  static async open(client, { workspace = null } = {}) {
    const st = await client.status()
    if (!st.events || !st.events.endpoint) throw new SnapdError("daemon_unavailable", "this snapd publishes no events")
    return new Events(st.events.endpoint, { workspace, instance: st.events.instance })
  }

  async * [Symbol.asyncIterator]() {
    for await (const [, body] of this.sock) {
      const event = parseJSON(body.toString("utf8"))
      yield * this.sequencer.check(event)
      yield event
    }
  }

  close() {
    this.sock.close()
  }
}

module.exports = {
  Client, Events, Sequencer, SnapdError, findEndpoint, encodePath, decodePath, parseJSON, stringifyJSON, shellQuote,
  PROTOCOL_VERSION,
}
