"""Run one agent turn inside a loopback-only network namespace, with the scripted model beside it.

Started by the harness as ``unshare -n PYTHON netns_run.py SPEC.json``: this process is already in a
fresh network namespace, which has only a loopback device, and down. It brings ``lo`` up, serves
the scripted model on 127.0.0.1 in a thread of its own, runs the agent, and writes the result
(exit code, output, seconds) next to the spec. With ``interrupt_when`` (a path), it sends the
agent SIGINT — a user's Ctrl-C — as soon as that file exists. Nothing the agent sends can leave
the machine: the namespace has no other device. The snapd daemon's ``ipc://`` socket is a path
on the file system, so hooks inside the namespace reach a daemon started outside it.

Standard library only, and no import of the test package: it runs under whatever interpreter the
harness names, as its own script.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_server import Script, serve  # noqa: E402 - after the path above


def main(spec_path: Path) -> int:
    spec = json.loads(spec_path.read_text())
    up = subprocess.run(["ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if up.returncode != 0:
        print(f"cannot bring up lo in the new namespace: {up.stderr.strip()}", file=sys.stderr)
        return 3
    server = serve(spec["port"], Script.from_json(spec["script"]), Path(spec["record"]))
    start = time.monotonic()
    stdin = open(spec["stdin"], "rb") if spec.get("stdin") else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        spec["argv"],
        cwd=spec["cwd"],
        env=spec["env"],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    timed_out = False
    if spec.get("interrupt_when"):  # the user's Ctrl-C once the turn has reached a point
        flag = Path(spec["interrupt_when"])
        while not flag.exists() and proc.poll() is None and time.monotonic() - start < spec["timeout"]:
            time.sleep(0.05)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=max(1.0, spec["timeout"] - (time.monotonic() - start)))
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    seconds = time.monotonic() - start
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever the agent left running (its own servers, shells)
    except ProcessLookupError:
        pass
    server.shutdown()
    result = {
        "returncode": proc.returncode,
        "timed_out": timed_out,
        "seconds": seconds,
        "stdout": out.decode("utf-8", "replace"),
        "stderr": err.decode("utf-8", "replace"),
    }
    Path(spec["result"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
