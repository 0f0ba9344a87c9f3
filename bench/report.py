"""Print the tables of docs/benchmarks.md from the committed results (docs/bench-results/*.json).

Nothing here measures: it only lays out what the benchmark scripts printed and wrote, with
each run's commit, load and file name, so a reader can check every number against its run.

    python bench/report.py > /tmp/tables.md
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "bench-results"
SIZES = ("1k", "10k", "100k")


def load() -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """Every result file, keyed (script, corpus, size, file name): several runs of one script
    on one tree (an A/B of other commits, say) each keep their own rows."""
    out = {}
    for p in sorted(RESULTS.glob("*.json")):
        if p.name == "corpora.json":
            continue
        r = json.loads(p.read_text())
        r["file"] = p.name
        out[(r["script"], r["corpus"], r["size"], p.name)] = r
    return out


def cell(v: dict[str, Any], unit: str) -> str:
    k = 1000.0 if unit == "ms" else 1.0
    nd = 1 if unit == "ms" else 2
    return f"{v['min'] * k:.{nd}f} / **{v['median'] * k:.{nd}f}** / {v['max'] * k:.{nd}f}"


def run_line(r: dict[str, Any]) -> str:
    src = r["source"]
    return (f"`{r['file']}`: commit `{src['commit'][:10]}`{' (dirty)' if src['dirty'] else ''}, "
            f"{r['started_utc']}, load {r['load_start'][0]} -> {r.get('load_end', ['?'])[0]}"
            + (f", CPU stolen by the host {r['cpu_shares']['steal']}%" if "cpu_shares" in r else ""))


def spreads(r: dict[str, Any]) -> list[str]:
    rows = []
    for key, v in r["figures"].items():
        if isinstance(v, dict) and "median" in v:
            unit = "MB" if key.endswith("_MB") else ("ms" if v["median"] < 2 and "_s" in key else "s")
            name = key.removesuffix("_s").removesuffix("_MB")
            rows.append(f"| {name} | {v['n']} | {cell(v, unit)} {unit} |")
    return rows


def corpora() -> None:
    path = RESULTS / "corpora.json"
    if not path.exists():
        return
    print("| tree | files | MB | directories | deepest | widest directory | largest file | distinct |")
    print("|---|---|---|---|---|---|---|---|")
    for name, c in sorted(json.loads(path.read_text()).items()):
        print(f"| {name} | {c['files']:,} | {c['bytes'] / 1e6:.0f} | {c['dirs']:,} | {c['depth']} | "
              f"{c['widest']:,} | {c['largest'] / 1e6:.1f} MB | {c['distinct']:,} |")
    print()


def main() -> None:
    res = load()
    print("## Corpora\n")
    corpora()
    print("## Verdicts\n")
    print("| target | wanted | verdict | figure | run |\n|---|---|---|---|---|")
    for (script, corpus, size, _), r in sorted(res.items()):
        for v in r["verdicts"]:
            print(f"| {v['target']} | {v['wanted']} | **{v['verdict']}** | {v['figure']} | "
                  f"{script} {corpus}-{size} |")
    print("\n## Every timed figure (min / **median** / max)\n")
    for (script, corpus, size, _), r in sorted(res.items()):
        rows = spreads(r)
        if not rows:
            continue
        print(f"#### {script}, {corpus}-{size}\n\n{run_line(r)}\n")
        print("| figure | n | min / median / max |\n|---|---|---|")
        print("\n".join(rows))
        for key in ("ratio_peer_over_snapd", "ratio_peer_fsync_over_snapd", "ratio_peer_over_cli",
                    "disk_ratio_vs_gc", "disk_ratio_vs_loose", "above_floor_ms", "daemon_mark_p50_ms",
                    "daemon_mark_p99_ms", "daemon_rollback_p50_ms", "daemon_rollback_p99_ms",
                    "counters_per_mark", "counters_per_rollback", "micro_release_growth", "fsyncs_per_mark",
                    "peer_fsync_calls_one_snap", "peer_fsync_all_calls_one_snap", "reads", "rss_watching_MB",
                    "new_over_old"):
            if key in r["figures"]:
                print(f"\n- {key}: {r['figures'][key]}", end="")
        print("\n")
    print("## Profiles (py-spy, all threads; shares of the samples)\n")
    for (_script, corpus, size, _), r in sorted(res.items()):
        for key, prof in r["figures"].items():
            if key.startswith("profile_") and prof.get("samples"):
                total = prof["samples"][0][1]
                importing = prof["samples"][1][1] if len(prof["samples"]) > 1 else "?"
                print(f"**{key.removeprefix('profile_')}**, {corpus}-{size} (`{r['file']}`): "
                      f"{int(total)} samples, {importing}% importing modules.\n")
                print("| all threads: self | % | snapd's own, inclusive | % |\n|---|---|---|---|")
                for a, b in zip(prof["self"][:10], prof.get("snapd", [])[:10], strict=False):
                    print(f"| `{a[0]}` | {a[1]} | `{b[0]}` | {b[1]} |")
                if prof.get("request_samples", [[0, 0]])[0][1]:
                    print(f"\nRequest threads only ({int(prof['request_samples'][0][1])} samples):\n")
                    print("| self | % | snapd's own, inclusive | % |\n|---|---|---|---|")
                    for a, b in zip(prof["request_self"][:10], prof["request_snapd"][:10], strict=False):
                        print(f"| `{a[0]}` | {a[1]} | `{b[0]}` | {b[1]} |")
                print()
    print("## Where a mark's time goes (py-spy over 50 marks, ms of request-thread samples per mark)\n")
    for corpus in ("django", "npm"):
        for size in SIZES:
            r = res.get(("mark", corpus, size, f"mark-{corpus}-{size}.json"))
            b = r["figures"].get("profile_mark_ms") if r else None
            if not b:
                continue
            print(f"**{corpus}-{size}** (`{r['file']}`): {b['ms_per_op']} ms per mark.\n")
            print("| step | ms | its largest callees (ms) |\n|---|---|---|")
            for parent, c in b["callees"].items():
                top = ", ".join(f"`{f}` {v:g}" for f, v in c["top"][:5])
                print(f"| `{parent}` | {c['ms']:g} | {top} |")
            sites = ", ".join(f"`{f}` {v:g}" for f, v in b["sites"][:6])
            print(f"| SQLite (`{b['leaf']}`), by the caller | {b['leaf_ms']:g} | {sites} |\n")
    print("## Mark cost against workspace size\n")
    print("| corpus | size | daemon p50 / p99 (ms, bucket bound) | marks | full scans per mark | "
          "counters that moved, per mark | changed bytes per mark (median) | snapctl mark median | "
          "peer snap median |\n|---|---|---|---|---|---|---|---|---|")
    for corpus in ("django", "npm"):
        for size in SIZES:
            r = res.get(("mark", corpus, size, f"mark-{corpus}-{size}.json"))
            if r is None:
                continue
            f = r["figures"]
            kb = f.get("changed_kB_per_mark")
            changed = f"{kb['median']:.1f} kB" if kb else "not recorded"
            # status --json counters that did not move are left out of counters_per_mark
            scans = (f["counters_per_mark"].get("counters.full_scans", 0)
                     if "counters.full_scans" in f.get("counters_available", []) else "not recorded")
            print(f"| {corpus} | {size} | {f['daemon_mark_p50_ms']:g} / {f['daemon_mark_p99_ms']:g} | "
                  f"{f['daemon_mark_count']} | {scans} | {f['counters_per_mark']} | {changed} | "
                  f"{f['cli_mark_s']['median'] * 1e3:.0f} ms | {f['peer_snap_s']['median'] * 1e3:.0f} ms |")


if __name__ == "__main__":
    main()
