"use strict"
// Run against a real daemon: tests/test_node_client.py starts one (SNAPD_HOME), watches a
// workspace (SNAPD_TEST_WORKSPACE) and runs `node --test` here. Nothing is mocked.

const assert = require("node:assert/strict")
const fs = require("node:fs")
const path = require("node:path")
const { test } = require("node:test")
const {
  Client, Events, Sequencer, SnapdError, encodePath, decodePath, findEndpoint, parseJSON, stringifyJSON,
} = require("../lib/snapd")

const WS = process.env.SNAPD_TEST_WORKSPACE

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
