#!/usr/bin/env node
"use strict"
// A small command line over lib/snapd.js: `mark LABEL [--agent A] [--session S] [-w PATH]`,
// `log [-w PATH] [-n N]`, `events [-w PATH]` (one JSON object per line, notices included),
// `revert (--turn M | --session S [--since R] | FROM..[TO]) [-w PATH] [--markers] [--dry-run | --yes]`
// (the plan as JSON, asked on a terminal, applied with its token; the result as JSON; exit 10
// when it left paths as they were: conflicts --markers cannot show), and
// `run [-w PATH] [--label L] [--session S] -- CMD...` (exits as CMD did; the marks' ids on stderr).
// Errors print the daemon's message on stderr and exit 1 (a revert's conflicts are listed
// there, one a line); `--help` prints the usage and exits 0, a command it does not know exits 2.
// Integers beyond 2^53 (`created_ns`) are printed exactly.

const readline = require("node:readline/promises")
const { Client, Events, decodePath, stringifyJSON } = require("../lib/snapd")

const USAGE = "usage: snapd-node mark LABEL [--agent A] [--session S] [-m MSG] [-w PATH] | log [-w PATH] [-n N] | events [-w ROOT]"
  + " | revert (--turn M | --session S [--since R] | FROM..[TO]) [-w PATH] [--markers] [--dry-run | --yes]"
  + " | run [-w PATH] [--label L] [--session S] -- CMD..."

function options(argv) {
  const out = { _: [] }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if (a === "--") { // run: the command follows, as it is
      out.command = argv.slice(i + 1)
      break
    }
    if (a === "-w" || a === "--workspace") out.workspace = argv[++i]
    else if (["--agent", "--session", "-m", "--turn", "--since", "--label"].includes(a)) out[a.replace(/^-+/, "")] = argv[++i]
    else if (a === "-n") out.limit = Number(argv[++i])
    else if (a === "--markers" || a === "--dry-run" || a === "--yes") out[a.slice(2)] = true
    else out._.push(a)
  }
  return out
}

/** The plan on stdout; asked on a terminal (--yes: applied unseen-by-a-person, but only as
 * printed: its token), then the result. */
async function revert(client, opts) {
  const [span] = opts._
  const [from, to] = span ? span.split("..") : []
  if ([opts.turn, opts.session, from].filter((x) => x).length !== 1) {
    console.error("snapd-node revert: name the changes one way: --turn M, --session S, or FROM..[TO]")
    return 2
  }
  const spans = {
    workspace: opts.workspace, turn: opts.turn, session: opts.session, since: opts.since,
    from: from || undefined, to: to || undefined, conflicts: opts.markers ? "markers" : undefined,
  }
  const confirm = async (plan) => {
    console.log(stringifyJSON(plan))
    if (opts["dry-run"]) return false
    if (opts.yes) return true
    if (!process.stdin.isTTY) throw new Error("no terminal to ask on: --yes applies the plan printed, --dry-run only prints it")
    const rl = readline.createInterface({ input: process.stdin, output: process.stderr })
    try {
      return /^y(es)?$/i.test((await rl.question("apply this revert? [y/N] ")).trim())
    } finally {
      rl.close()
    }
  }
  const res = await client.revert({ ...spans, confirm })
  if (res === null) return opts["dry-run"] ? 0 : 1
  console.log(stringifyJSON(res))
  return res.ok ? 0 : 10
}

async function main(argv) {
  const own = argv.includes("--") ? argv.slice(0, argv.indexOf("--")) : argv // run's command is not ours
  if (own.some((a) => a === "--help" || a === "-h") || argv[0] === "help") {
    console.log(USAGE)
    return 0
  }
  const [command, ...rest] = argv
  const opts = options(rest)
  const client = new Client()
  try {
    if (command === "mark" && opts._.length === 1) {
      const m = await client.mark(opts._[0], { workspace: opts.workspace, agent: opts.agent, session: opts.session, message: opts.m })
      console.log(stringifyJSON(m))
    } else if (command === "log") {
      console.log(stringifyJSON(await client.log({ workspace: opts.workspace, limit: opts.limit })))
    } else if (command === "events") {
      const events = await Events.open(client, { workspace: opts.workspace ?? null })
      for await (const item of events) console.log(stringifyJSON(item))
    } else if (command === "revert" && opts._.length <= 1) {
      return await revert(client, opts)
    } else if (command === "run" && opts.command && opts.command.length > 0 && opts._.length === 0) {
      const r = await client.run(opts.command, { workspace: opts.workspace, label: opts.label, session: opts.session })
      console.error(`snapd-node: turn ${r.start.id}..${r.end.id}`)
      return r.status
    } else {
      console.error(USAGE)
      return 2
    }
    return 0
  } catch (err) {
    console.error(`snapd-node: ${err.code ? err.code + ": " : ""}${err.message}`)
    for (const c of (err.details && err.details.conflicts) || []) {
      console.error(`  conflict: ${decodePath(c.path).toString("utf8")}: ${c.reason}`)
    }
    return 1
  } finally {
    client.close()
  }
}

main(process.argv.slice(2)).then((code) => { process.exitCode = code })
