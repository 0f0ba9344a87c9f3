#!/usr/bin/env bash
# Claude Code hook: mark a turn boundary in snapd.  Usage: snapd-turn.sh turn-start|turn-end
# Claude Code passes the event as JSON on stdin (session_id, cwd). This hook never blocks the
# prompt (always exits 0) and writes nothing to stdout, which Claude Code would add to the
# model's context; a failure is reported on stderr.
label=${1:?usage: snapd-turn.sh LABEL}
input=$(cat)
fields=$(printf '%s' "$input" | python3 -c '
import json, sys
try:
    event = json.load(sys.stdin)
except ValueError:
    event = {}
print(event.get("session_id") or "")
print(event.get("cwd") or "")
')
session=$(printf '%s\n' "$fields" | sed -n 1p)
cwd=$(printf '%s\n' "$fields" | sed -n 2p)
cwd=${cwd:-${CLAUDE_PROJECT_DIR:-$PWD}}
read -r -a snapctl <<< "${SNAPCTL:-snapctl}"
args=(mark "$label" --agent claude-code)
[ -n "$session" ] && args+=(--session "$session")
if ! out=$(cd "$cwd" && "${snapctl[@]}" "${args[@]}" 2>&1); then
    echo "snapd: could not mark $label: $out" >&2
fi
exit 0
