"""Restart reconcile: how long a restarted daemon takes to be ready on an unchanged workspace,
and how many files it reads (target: <= 2 s on 100k files, and no file read at all).

The daemon is stopped cleanly, restarted, and timed from process start until ``status``
reports the workspace ``ready``; the workspace's ``counters.files_read`` says how many files the
reconciliation read from disk. The tree's mtimes are set an hour back first, so nothing is
inside the racy window (a file modified within 2 s of being read is rightly re-read).

    python bench/bench_restart.py --sizes 10k,100k
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer import DATA, copy_tree  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from snapd.config import load_config, resolve_endpoint  # noqa: E402
from snapd.errors import SnapdError  # noqa: E402
from snapd.ipc.client import Client  # noqa: E402


def _start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "snapd", "start"], env=env, stdout=fh, stderr=subprocess.STDOUT, cwd="/"
        )


def _wait_ready(client: Client, root: Path, timeout: float = 600) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            st = client.call("status", timeout_s=2.0)
        except SnapdError:
            time.sleep(0.02)
            continue
        for w in st["workspaces"]:
            if w["root"] == str(root) and w.get("state") == "ready":
                return dict(w)
        time.sleep(0.02)
    raise SystemExit("workspace never became ready")


def run(size: str) -> str:
    tree = DATA / f"tree-{size}"
    ws = copy_tree(tree, f"restart-{size}")
    old = time.time() - 3600
    for dirpath, dirnames, filenames in os.walk(ws):
        for name in filenames + dirnames:
            os.utime(os.path.join(dirpath, name), (old, old), follow_symlinks=False)
    home = Path(tempfile.mkdtemp(prefix="snapd-bench-", dir=DATA))
    env = {**os.environ, "SNAPD_HOME": str(home)}
    endpoint = resolve_endpoint(load_config(env))
    log = home.parent / f"{home.name}.log"
    proc = _start(env, log)
    try:
        with Client(endpoint, timeout_s=3600) as c:
            while True:
                try:
                    c.call("ping", timeout_s=1.0)
                    break
                except SnapdError:
                    time.sleep(0.05)
            t = time.perf_counter()
            c.call("watch", path=os.fsencode(ws))
            baseline_s = time.perf_counter() - t
            c.call("stop")
        proc.wait(60)
        rows = []
        for _ in range(3):
            t = time.perf_counter()
            proc = _start(env, log)
            with Client(endpoint, timeout_s=10) as c:
                w = _wait_ready(c, ws)
                ready_s = time.perf_counter() - t
                rows.append((ready_s, w["counters"]["files_read"], w["files"]))
                c.call("stop")
            proc.wait(60)
        best = min(rows)
        lines = [f"tree-{size}: {rows[0][2]} files; baseline (watch) {baseline_s:.2f} s"]
        for ready_s, reads, _ in rows:
            lines.append(f"  restart to ready: {ready_s:.2f} s, files read: {reads}")
        lines.append(f"  best {best[0]:.2f} s (includes interpreter start-up and store open)")
        return "\n".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(ws.parent, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10k,100k")
    args = ap.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f}")
    for size in args.sizes.split(","):
        print(run(size), flush=True)


if __name__ == "__main__":
    main()
