#!/usr/bin/env node
"use strict"
// A small command line over lib/snapd.js: `mark LABEL [--agent A] [--session S] [-w PATH]`,
// `log [-w PATH] [-n N]`, `events [-w PATH]` (one JSON object per line, notices included).
// Errors print the daemon's message on stderr and exit 1; `--help` prints the usage and exits 0,
// a command it does not know exits 2. Integers beyond 2^53 (`created_ns`) are printed exactly.

const { Client, Events, stringifyJSON } = require("../lib/snapd")

const USAGE = "usage: snapd-node mark LABEL [--agent A] [--session S] [-m MSG] [-w PATH] | log [-w PATH] [-n N] | events [-w ROOT]"

function options(argv) {
  const out = { _: [] }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if (a === "-w" || a === "--workspace") out.workspace = argv[++i]
    else if (a === "--agent" || a === "--session" || a === "-m") out[a.replace(/^-+/, "")] = argv[++i]
    else if (a === "-n") out.limit = Number(argv[++i])
    else out._.push(a)
  }
  return out
}

async function main(argv) {
  if (argv.some((a) => a === "--help" || a === "-h") || argv[0] === "help") {
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
    } else {
      console.error(USAGE)
      return 2
    }
    return 0
  } catch (err) {
    console.error(`snapd-node: ${err.code ? err.code + ": " : ""}${err.message}`)
    return 1
  } finally {
    client.close()
  }
}

main(process.argv.slice(2)).then((code) => { process.exitCode = code })
