"""Bytes fetched from S3 by cold TPC-H queries, against the bytes their columns hold.

    python bench/parquet_bytes.py --data DIR --sf 1 [--depths 0,2] [--gaps 0,1MiB]
        [--duckdb-gaps auto,0] [--out DIR]

Each of the 22 queries runs once, cold, on a fresh cache and DuckDB connection, reading the
Parquet files from the S3 server named by ``UCACHE_S3_ENDPOINT`` (scripts/s3-server.sh's env
file) through ``ucache://s3://``, with the budget large enough that nothing is evicted (the
whole data), for every combination of the Parquet prefetcher's depth (`--depths`, 0 = off)
and S3 ``coalesce_gap`` (`--gaps`), with S3 buffers of `--buffer-size`, and for each of
DuckDB's ``parquet_prefetch_column_gap`` values (`--duckdb-gaps`; ``auto`` leaves DuckDB's
cost model to choose: it merges the chunks of a row group across the chunks of columns it
does not need; ``0`` makes it ask for the needed chunks only, leaving merges to the store). For each run it records
the bytes the store's GETs asked for (``Mapping.store_requests``, gaps read through
included), the bytes the cache loaded (``bytes_read``), the GETs, and the bytes DuckDB asked
for (the union of the ranges of its reads), which DuckDB's own read merging makes larger than
the columns' bytes.

"The bytes the queries' columns hold" is the sum, over every row group, of the compressed
chunks of the columns a query names (its SQL's identifiers that are columns of the table:
TPC-H's column names are unique across tables). A reader must fetch at least those (less only
where DuckDB skips row groups by their statistics), plus each file's footer. Writes
``parquet_bytes.json`` and ``parquet_bytes.md`` to `--out`.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import sys
import time
import uuid
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from tpch import store_totals, views  # noqa: E402
from tpch_queries import QUERIES, TABLES  # noqa: E402

import ucache  # noqa: E402
from ucache.filesystem import UcacheFile, UcacheFileSystem  # noqa: E402


def column_bytes(data: Path, sql: str) -> tuple[int, dict[str, list[str]]]:
    """Bytes of the chunks of the columns `sql` names, summed over tables and row groups, and
    the columns per table."""
    words = set(re.findall(r"[a-z_]+", sql.lower()))
    total, named = 0, {}
    for t in TABLES:
        meta = pq.read_metadata(data / f"{t}.parquet")
        names = [meta.schema.column(c).name for c in range(meta.num_columns)]
        cols = [c for c, n in enumerate(names) if n in words]
        if not cols:
            continue
        named[t] = [names[c] for c in cols]
        for r in range(meta.num_row_groups):
            rg = meta.row_group(r)
            total += sum(rg.column(c).total_compressed_size for c in cols)
    return total, named


def union_bytes(ranges: list[tuple[int, int]]) -> int:
    total, end = 0, -1
    for s, e in sorted(ranges):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


# Ranges DuckDB read, per file, in the current run.
ASKED: dict[str, list[tuple[int, int]]] = {}
_plain_read_at = UcacheFile._read_at


def _recording_read_at(self: UcacheFile, start: int, end: int) -> bytes:
    ASKED.setdefault(self.path, []).append((start, end))
    return _plain_read_at(self, start, end)


UcacheFile._read_at = _recording_read_at


def cold_run(
    prefix: str, endpoint: str, budget: int, q: int, duckdb_gap: str, depth: int, gap: str, bs: str | None
) -> dict:
    ASKED.clear()
    fs = UcacheFileSystem(
        cache=ucache.Cache(budget), endpoint=endpoint, buffer_size=bs, parquet_prefetch=depth, coalesce_gap=gap
    )
    con = duckdb.connect()
    con.execute("set enable_external_file_cache = false")
    if duckdb_gap != "auto":
        con.execute(f"set parquet_prefetch_column_gap = {int(duckdb_gap)}")
    con.register_filesystem(fs)
    views(con, lambda t: f"ucache://s3://{prefix}/{t}.parquet")
    t0 = time.perf_counter()
    con.execute(QUERIES[q]).fetchall()
    seconds = time.perf_counter() - t0
    con.close()
    gets, fetched = store_totals(fs) or (0, 0)
    s = fs.cache.stats()
    fs.close_all()
    return {
        "seconds": seconds,
        "gets": gets,
        "bytes_fetched": fetched,
        "bytes_loaded": s["bytes_read"],
        "prefetches": s["prefetches"],
        "bytes_asked": sum(union_bytes(r) for r in ASKED.values()),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", type=float, default=1)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--depths", default="0,2", help="Parquet prefetcher depths (0: off)")
    ap.add_argument("--gaps", default="0,1MiB", help="S3 coalesce_gap values")
    ap.add_argument("--duckdb-gaps", default="auto", help="DuckDB parquet_prefetch_column_gap values")
    ap.add_argument(
        "--configs",
        default=None,
        help="instead of the product of the lists above: DUCKDB_GAP/DEPTH/GAP/BUFFER_SIZE,... "
        "(e.g. auto/0/1MiB/64KiB,0/2/0/16KiB)",
    )
    ap.add_argument("--queries", default=None)
    ap.add_argument("--buffer-size", default=None, help="S3 buffer size (default: the filesystem's)")
    a = ap.parse_args()
    endpoint = os.environ["UCACHE_S3_ENDPOINT"]
    data = a.data / f"sf{a.sf}"
    if not (data / "lineitem.parquet").exists():
        raise SystemExit(f"no TPC-H data in {data} (bench/tpch.py generates it)")
    import s3fs

    key, secret = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
    s3 = s3fs.S3FileSystem(key=key, secret=secret, endpoint_url=endpoint, client_kwargs={"region_name": "us-east-1"})
    prefix = f"{os.environ.get('UCACHE_S3_BUCKET', 'ucache-test')}/bytes-{uuid.uuid4().hex[:8]}"
    for t in TABLES:
        s3.put(str(data / f"{t}.parquet"), f"{prefix}/{t}.parquet")
    # Removed on exit: a throwaway server's volumes fill after a few uploads of SF 1.
    atexit.register(lambda: s3.rm(prefix, recursive=True))
    budget = sum((data / f"{t}.parquet").stat().st_size for t in TABLES) + (64 << 20)
    queries = [int(q) for q in a.queries.split(",")] if a.queries else sorted(QUERIES)
    if a.configs:
        configs = [tuple(c.split("/")) for c in a.configs.split(",")]
        configs = [(dg, int(d), g, bs) for dg, d, g, bs in configs]
    else:
        configs = [
            (dg, int(d), g, a.buffer_size)
            for dg in a.duckdb_gaps.split(",")
            for d in a.depths.split(",")
            for g in a.gaps.split(",")
        ]

    def name(dg: str, d: int, g: str, bs: str | None) -> str:
        return (
            (f"duckdb{dg}-" if dg != "auto" else "") + f"pf{d}-gap{g}" + (f"-{bs}" if a.configs and bs else "")
        )

    rows = {}
    for q in queries:
        need, named = column_bytes(data, QUERIES[q])
        rows[q] = {"column_bytes": need, "columns": named}
        for dg, d, g, bs in configs:
            rows[q][name(dg, d, g, bs)] = cold_run(prefix, endpoint, budget, q, dg, d, g, bs)
        print(q, {name(*c): round(rows[q][name(*c)]["bytes_fetched"] / need, 3) for c in configs}, flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "parquet_bytes.json").write_text(
        json.dumps({"sf": a.sf, "buffer_size": a.buffer_size, "configs": configs, "queries": rows}, indent=1)
    )
    names = [name(*c) for c in configs]
    # DuckDB's asks depend only on its own gap: one column per value, from its first config.
    dgaps = list(dict.fromkeys(c[0] for c in configs))
    first = {dg: next(name(*c) for c in configs if c[0] == dg) for dg in dgaps}
    lines = [
        "| query | column MB | "
        + " | ".join(f"DuckDB gap {dg}: asked ÷ columns" for dg in dgaps)
        + " | "
        + " | ".join(f"{n}: fetched ÷ columns (GETs)" for n in names)
        + " |",
        "|---|---|" + "---|" * (len(dgaps) + len(names)),
    ]
    tot = {n: 0 for n in names}
    asked_all = {dg: 0 for dg in dgaps}
    need_all = 0
    for q in queries:
        r = rows[q]
        need_all += r["column_bytes"]
        asked = []
        for dg in dgaps:
            asked_all[dg] += r[first[dg]]["bytes_asked"]
            asked.append(f"{r[first[dg]]['bytes_asked'] / r['column_bytes']:.3f}")
        cells = []
        for n in names:
            tot[n] += r[n]["bytes_fetched"]
            cells.append(f"{r[n]['bytes_fetched'] / r['column_bytes']:.3f} ({r[n]['gets']})")
        lines.append(f"| q{q} | {r['column_bytes'] / 1e6:.1f} | " + " | ".join(asked + cells) + " |")
    lines.append(
        f"| all | {need_all / 1e6:.1f} | "
        + " | ".join([f"{asked_all[dg] / need_all:.3f}" for dg in dgaps] + [f"{tot[n] / need_all:.3f}" for n in names])
        + " |"
    )
    # The cold queries' time (one run each, on a machine shared with the server: indicative).
    secs = {n: sum(rows[q][n]["seconds"] for q in queries) for n in names}
    gets = {n: sum(rows[q][n]["gets"] for q in queries) for n in names}
    lines.append(
        "| seconds (GETs), all | | "
        + " | ".join([""] * len(dgaps) + [f"{secs[n]:.2f} ({gets[n]})" for n in names])
        + " |"
    )
    md = "\n".join(lines) + "\n"
    (a.out / "parquet_bytes.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
