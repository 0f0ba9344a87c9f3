"use strict"
// Run against a real daemon: tests/test_node_client.py starts one (SNAPD_HOME), watches a
// workspace (SNAPD_TEST_WORKSPACE) and runs `node --test` here. Nothing is mocked.

const assert = require("node:assert/strict")
const childProcess = require("node:child_process")
const crypto = require("node:crypto")
const fs = require("node:fs")
const path = require("node:path")
const { test } = require("node:test")
const {
  Client, Events, Sequencer, SnapdError, encodePath, decodePath, findEndpoint, parseJSON, stringifyJSON, shellQuote,
} = require("../lib/snapd")

const WS = process.env.SNAPD_TEST_WORKSPACE
const BIN = path.join(__dirname, "..", "bin", "snapd-node.js")

function needDaemon() {
  if (!process.env.SNAPD_HOME || !WS) {
    assert.fail("SNAPD_HOME and SNAPD_TEST_WORKSPACE must name a running daemon and a watched workspace")
  }
}

/** Reads an async iterator with deadlines; a read that timed out stays pending for the next
 * one, so no item is lost to a timeout. */
class Reader {
  constructor(iterable) {
    this.it = iterable[Symbol.asyncIterator]()
    this.pending = null
  }

  async next(ms, what) {
    if (this.pending === null) this.pending = this.it.next()
    let timer
    const timeout = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`no ${what} within ${ms} ms`)), ms) })
    try {
      const r = await Promise.race([this.pending, timeout])
      this.pending = null
      return r.value
    } finally {
      clearTimeout(timer)
    }
  }
}

test("finds the endpoint the daemon recorded", async () => {
  needDaemon()
  const client = new Client()
  try {
    const st = await client.status()
    assert.equal(findEndpoint(), st.endpoint)
    assert.equal(st.protocol, 1)
    assert.match(st.events.instance, /^[0-9a-f]{32}$/)
  } finally {
    client.close()
  }
})

test("marks and lists marks, newest first, with agent and session", async () => {
  needDaemon()
  const client = new Client()
  try {
    fs.writeFileSync(path.join(WS, "from-node.txt"), "written by node\n")
    const m = await client.mark("node-turn", { workspace: WS, agent: "node", session: "s1", message: "hello" })
    assert.equal(m.label, "node-turn")
    assert.equal(m.agent, "node")
    assert.equal(m.workspace, WS)
    assert.deepEqual(m.summary.examples.added, ["from-node.txt"])
    const page = await client.log({ workspace: WS, limit: 5 })
    assert.equal(page.workspace, WS)
    assert.equal(page.marks[0].id, m.id)
    assert.equal(page.marks[0].session, "s1")
    // From inside the workspace, cwd alone names it (as snapctl does).
    const byCwd = await client.log({ cwd: path.join(WS), limit: 1 })
    assert.equal(byCwd.marks[0].id, m.id)
  } finally {
    client.close()
  }
})

test("an error reply becomes a SnapdError with the daemon's code", async () => {
  needDaemon()
  const client = new Client()
  try {
    await assert.rejects(client.log({ workspace: "/nonexistent/for/sure" }), (err) => {
      assert.ok(err instanceof SnapdError)
      assert.equal(err.code, "not_found")
      return true
    })
    await assert.rejects(client.call("no_such_op"), (err) => err.code === "bad_request")
    // The connection still serves after errors.
    assert.equal((await client.call("ping")).pong, true)
  } finally {
    client.close()
  }
})

test("no daemon: daemon_unavailable at once, not a hang", async () => {
  const client = new Client("ipc:///nonexistent-dir/control.sock", { timeoutMs: 60000 })
  const start = Date.now()
  await assert.rejects(client.status(), (err) => err.code === "daemon_unavailable")
  assert.ok(Date.now() - start < 5000)
})

test("paths that are not UTF-8 travel as b64", () => {
  const odd = Buffer.from([0x63, 0x61, 0x66, 0xe9])
  assert.deepEqual(encodePath(odd), { b64: "Y2Fm6Q==" })
  assert.equal(encodePath(Buffer.from("src/a.py")), "src/a.py")
  assert.ok(decodePath({ b64: "Y2Fm6Q==" }).equals(odd))
})

test("follows events of one workspace in order, every mark, no gap", async () => {
  needDaemon()
  const client = new Client()
  const events = await Events.open(client, { workspace: WS })
  const it = new Reader(events)
  try {
    // Late joiner: the subscription is live once a mark's event comes through.
    let first = null
    for (let i = 0; first === null && i < 50; i++) {
      await client.mark("node-warm-up", { workspace: WS })
      try {
        const item = await it.next(300, "event")
        if (item && item.event === "mark.created") first = item
      } catch { /* not yet subscribed */ }
    }
    assert.ok(first, "no event arrived")
    const made = []
    for (let i = 0; i < 20; i++) made.push((await client.mark(`node-${i}`, { workspace: WS, agent: "node" })).id)
    const got = []
    while (got.length < 20) {
      const item = await it.next(10000, "event")
      assert.equal(item.notice, undefined, `unexpected notice ${stringifyJSON(item)}`)
      if (item.event === "mark.created" && item.mark.label.startsWith("node-") && item.mark.label !== "node-warm-up") got.push(item)
    }
    assert.deepEqual(got.map((e) => e.mark.id), made)
    for (const e of got) {
      assert.equal(e.workspace, WS)
      assert.equal(e.mark.agent, "node")
      assert.equal(typeof e.time, "number")
    }
    const seqs = got.map((e) => e.seq)
    assert.deepEqual(seqs, seqs.map((_, i) => seqs[0] + i))
  } finally {
    events.close()
    client.close()
  }
})

test("integers past 2^53 arrive exactly, as BigInt, and are written back exactly", async () => {
  const text = '{"created_ns": 1796018680169614049, "s": "\\"1796018680169614049", "seq": 3, "f": 0.25, "m": -9007199254740993}'
  const v = parseJSON(text)
  assert.equal(v.created_ns, 1796018680169614049n)
  assert.equal(v.m, -9007199254740993n)
  assert.equal(v.s, '"1796018680169614049')
  assert.equal(v.seq, 3)
  assert.equal(v.f, 0.25)
  assert.equal(stringifyJSON(v), '{"created_ns":1796018680169614049,"s":"\\"1796018680169614049","seq":3,"f":0.25,"m":-9007199254740993}')
  if (process.env.SNAPD_HOME && WS) { // and from the daemon: a mark's created_ns, to the ns
    const client = new Client()
    try {
      const m = await client.mark("node-exact", { workspace: WS, agent: "node" })
      assert.equal(typeof m.created_ns, "bigint")
      assert.ok(Math.abs(Number(m.created_ns) / 1e9 - m.created) < 1e-3, `${m.created_ns} vs ${m.created}`)
    } finally {
      client.close()
    }
  }
})

test("the gap and restart rule", () => {
  const s = new Sequencer("a")
  const ev = (instance, seq, workspace = "/w") => ({ event: "warning", instance, seq, workspace })
  assert.deepEqual(s.check(ev("a", 3)), [])
  assert.deepEqual(s.check(ev("a", 4)), [])
  assert.deepEqual(s.check(ev("a", 7)), [{ notice: "gap", workspace: "/w", lost: 2, first_missing: 5 }])
  assert.deepEqual(s.check(ev("b", 1)), [{ notice: "restart", old_instance: "a", new_instance: "b" }])
  assert.deepEqual(s.check(ev("b", 2)), [])
})

/** Poll `fn` until it returns something truthy, or fail after `ms` saying what was awaited. */
async function until(fn, ms, what) {
  const deadline = Date.now() + ms
  for (;;) {
    const got = await fn()
    if (got) return got
    if (Date.now() > deadline) assert.fail(`no ${what} within ${ms} ms`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

const numbered = (n, edits = {}) => Array.from({ length: n }, (_, i) => edits[i + 1] ?? `line ${i + 1}`).join("\n") + "\n"

test("reverts one turn, after asking, keeping a later edit of the same file (merged)", async () => {
  needDaemon()
  const client = new Client()
  const t = path.join(WS, "turned.txt")
  const made = path.join(WS, "made-in-turn.txt")
  try {
    fs.writeFileSync(t, numbered(10))
    const session = `node-rv-${crypto.randomBytes(3).toString("hex")}`
    const start = await client.mark("turn-start", { workspace: WS, agent: "node-rv", session })
    fs.writeFileSync(t, numbered(10, { 2: "changed by the turn" }))
    fs.writeFileSync(made, "made by the turn\n")
    await client.mark("turn-end", { workspace: WS, agent: "node-rv", session })
    fs.writeFileSync(t, numbered(10, { 2: "changed by the turn", 9: "changed later" }))

    const plan = await client.revertPlan({ workspace: WS, turn: start.id })
    assert.equal(plan.revert.spans[0].from.id, start.id)
    assert.deepEqual(plan.revert.merged, ["turned.txt"])
    assert.match(plan.plan.token, /^[0-9a-f]{32}$/)
    assert.ok(plan.plan.ops.some((op) => op.kind === "remove" && op.path === "made-in-turn.txt"), stringifyJSON(plan.plan.ops))

    const seen = []
    assert.equal(await client.revert({ workspace: WS, turn: start.id, confirm: (p) => { seen.push(p); return false } }), null)
    assert.equal(seen.length, 1)
    assert.deepEqual(seen[0].plan.ops, plan.plan.ops)
    assert.ok(fs.existsSync(made), "refused, yet the revert wrote")

    // What was confirmed is what runs: the file changes again while the plan is shown, so the
    // apply with that plan's token is refused and the new plan is asked about.
    const asked = []
    const res = await client.revert({
      workspace: WS, turn: start.id, confirm: async (p) => {
        asked.push(p)
        if (asked.length === 1) fs.writeFileSync(t, numbered(10, { 2: "changed by the turn", 6: "changed while asked", 9: "changed later" }))
        return true
      },
    })
    assert.equal(asked.length, 2)
    assert.notEqual(asked[1].plan.token, asked[0].plan.token)
    assert.deepEqual(asked[1].revert.merged, ["turned.txt"])
    assert.match(res.pre_rollback, /^[0-9a-z]+$/)
    assert.equal(res.ok, true)
    assert.deepEqual(res.revert.merged, ["turned.txt"])
    assert.equal(fs.readFileSync(t, "utf8"), numbered(10, { 6: "changed while asked", 9: "changed later" }))
    assert.ok(!fs.existsSync(made))
  } finally {
    client.close()
  }
})

test("later overlapping edits: revert_conflict with the hunks, nothing asked or written; --markers writes them", async () => {
  needDaemon()
  const client = new Client()
  const c = path.join(WS, "clash.txt")
  const blob = path.join(WS, "clash.bin")
  try {
    fs.writeFileSync(c, numbered(6))
    fs.writeFileSync(blob, Buffer.from([0, 1, 2]))
    const session = `node-rv-${crypto.randomBytes(3).toString("hex")}`
    const start = await client.mark("turn-start", { workspace: WS, agent: "node-rv", session })
    fs.writeFileSync(c, numbered(6, { 4: "the turn's line 4" }))
    fs.writeFileSync(blob, Buffer.from([0, 1, 2, 3]))
    await client.mark("turn-end", { workspace: WS, agent: "node-rv", session })
    const later = numbered(6, { 4: "the user's line 4" })
    fs.writeFileSync(c, later)
    fs.writeFileSync(blob, Buffer.from([0, 1, 2, 3, 4]))
    const before = (await client.log({ workspace: WS, limit: 1 })).marks[0].id

    await assert.rejects(client.revertPlan({ workspace: WS, turn: start.id }), (err) => {
      assert.ok(err instanceof SnapdError)
      assert.equal(err.code, "revert_conflict")
      assert.deepEqual(err.details.conflicts.map((x) => x.path).sort(), ["clash.bin", "clash.txt"])
      const x = err.details.conflicts.find((x) => x.path === "clash.txt")
      const [h] = x.hunks
      assert.equal(h.line, 4)
      assert.deepEqual([h.base, h.ours, h.theirs].map((lines) => lines.join("")),
        ["the turn's line 4\n", "the user's line 4\n", "line 4\n"])
      assert.deepEqual(err.details.conflicts.find((x) => x.path === "clash.bin").hunks, [])
      return true
    })
    let asked = 0
    await assert.rejects(client.revert({ workspace: WS, turn: start.id, confirm: () => { asked++; return true } }),
      (err) => err.code === "revert_conflict")
    assert.equal(asked, 0)
    const revert = (...flags) => childProcess.spawnSync(process.execPath, [BIN, "revert", "--turn", start.id, "-w", WS, ...flags],
      { encoding: "utf8" })
    const refused = revert("--yes")
    assert.equal(refused.status, 1, refused.stderr)
    assert.match(refused.stderr, /revert_conflict: .*\n {2}conflict: clash\.(bin|txt): /)
    assert.equal(fs.readFileSync(c, "utf8"), later)
    assert.equal((await client.log({ workspace: WS, limit: 1 })).marks[0].id, before) // no pre-rollback mark

    // --markers: the text conflict written with markers, the binary one left (so exit 10).
    const marked = revert("--markers", "--yes")
    assert.equal(marked.status, 10, marked.stderr)
    const done = parseJSON(marked.stdout.trim().split("\n")[1])
    assert.deepEqual(done.revert.markers, ["clash.txt"])
    assert.deepEqual(done.kept.map((k) => k.path), ["clash.bin"])
    assert.match(fs.readFileSync(c, "utf8"), /^<<<<<<< now\nthe user's line 4\n\|{7} .*\nthe turn's line 4\n=======\nline 4\n>>>>>>> /m)
    assert.deepEqual(fs.readFileSync(blob), Buffer.from([0, 1, 2, 3, 4]))
  } finally {
    client.close()
  }
})

test("snapd-node revert: --dry-run prints the plan and changes nothing; --yes applies the plan it printed", async () => {
  needDaemon()
  const client = new Client()
  const f = path.join(WS, "made-for-the-command.txt")
  try {
    const session = `node-rv-${crypto.randomBytes(3).toString("hex")}`
    const start = await client.mark("turn-start", { workspace: WS, agent: "node-rv", session })
    fs.writeFileSync(f, "made\n")
    await client.mark("turn-end", { workspace: WS, agent: "node-rv", session })
    const revert = (...flags) => childProcess.spawnSync(process.execPath, [BIN, "revert", "--turn", start.id, "-w", WS, ...flags],
      { encoding: "utf8" })
    const dry = revert("--dry-run")
    assert.equal(dry.status, 0, dry.stderr)
    assert.deepEqual(parseJSON(dry.stdout).lines, ["delete made-for-the-command.txt"])
    assert.ok(fs.existsSync(f))
    const yes = revert("--yes")
    assert.equal(yes.status, 0, yes.stderr)
    const [shown, done] = yes.stdout.trim().split("\n").map(parseJSON)
    assert.equal(done.plan.token, shown.plan.token)
    assert.match(done.pre_rollback, /^[0-9a-z]+$/)
    assert.ok(!fs.existsSync(f))
  } finally {
    client.close()
  }
})

test("run: a turn around the command, its exit status and argv in the turn-end mark; reverted as a turn", async () => {
  needDaemon()
  const client = new Client()
  const argv = ["sh", "-c", "echo ran > ran-by-node.txt; exit 3", "it's"]
  try {
    const r = await client.run(argv, { workspace: WS, cwd: WS, label: "node-run", stdio: "ignore" })
    assert.equal(r.status, 3)
    assert.equal(r.exit, 3)
    assert.equal(r.signal, null)
    assert.equal(r.start.label, "turn-start")
    assert.equal(r.end.label, "turn-end")
    assert.equal(r.start.agent, "run")
    assert.match(r.start.session, /^run-[0-9a-f]{8}$/)
    assert.equal(r.end.session, r.start.session)
    assert.equal(r.start.message, `node-run: ${shellQuote(argv)}`)
    assert.equal(r.start.message, `node-run: sh -c 'echo ran > ran-by-node.txt; exit 3' 'it'"'"'s'`) // shlex.join's
    assert.deepEqual(r.start.summary.run, { argv, exit: null, signal: null })
    assert.deepEqual(r.end.summary.run, { argv, exit: 3, signal: null })
    assert.deepEqual(r.end.summary.examples.added, ["ran-by-node.txt"])
    const res = await client.revert({ workspace: WS, turn: r.start.id, confirm: () => true })
    assert.ok(res.pre_rollback)
    assert.ok(!fs.existsSync(path.join(WS, "ran-by-node.txt")))
    // A command that cannot start: 127, as a shell says, and the turn is closed all the same.
    const lost = await client.run(["no-such-command-for-node"], { workspace: WS, stdio: "ignore" })
    assert.equal(lost.status, 127)
    assert.deepEqual(lost.end.summary.run, { argv: ["no-such-command-for-node"], exit: 127, signal: null })
  } finally {
    client.close()
  }
})

test("run passes a signal on to the command and exits 128+N; the turn-end mark says which", async () => {
  needDaemon()
  const client = new Client()
  const session = `node-sig-${crypto.randomBytes(3).toString("hex")}`
  const proc = childProcess.spawn(process.execPath, [BIN, "run", "-w", WS, "--session", session, "--", "sleep", "60"],
    { stdio: ["ignore", "ignore", "pipe"] })
  const exited = new Promise((resolve) => proc.once("exit", (code, signal) => resolve({ code, signal })))
  try {
    // The command runs once a child `sleep` of the command's process is there.
    await until(() => fs.readdirSync("/proc").filter((d) => /^[0-9]+$/.test(d)).some((d) => {
      try {
        const stat = fs.readFileSync(`/proc/${d}/stat`, "utf8")
        return stat.includes("(sleep)") && Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === proc.pid
      } catch { return false }
    }), 20000, "sleep started by snapd-node run")
    proc.kill("SIGTERM")
    const { code, signal } = await exited
    assert.equal(signal, null, "snapd-node itself was killed: it did not pass the signal on")
    assert.equal(code, 128 + 15)
    const marks = (await client.log({ workspace: WS, session, limit: 5 })).marks
    assert.deepEqual(marks.map((m) => m.label), ["turn-end", "turn-start"])
    assert.deepEqual(marks[0].summary.run, { argv: ["sleep", "60"], exit: null, signal: "SIGTERM" })
  } finally {
    proc.kill("SIGKILL")
    client.close()
  }
})
