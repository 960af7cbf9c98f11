"""TPC-H on DuckDB: direct local reads against ucache's fsspec filesystem, locally and on S3.

    python bench/tpch.py --sf 0.1 --data DIR [--rounds 2] [--runs 3] [--queries 6,14] [--out DIR]

Generates TPC-H Parquet at scale factor `--sf` with PyPI's ``tpchgen-cli`` (once, into
`--data`), uploads it to the S3 server named by ``UCACHE_S3_ENDPOINT`` and the ``AWS_*``
variables (scripts/s3-server.sh's env file; without one the S3 systems are skipped), and
runs the 22 queries on each system:

- ``local``: DuckDB's ``read_parquet`` on the local files;
- ``ucache-local``: the same files through ``ucache://`` (ucache.filesystem);
- ``fsspec-local`` (only when named in `--systems`): the same files through the same
  filesystem class with every read an ``os.pread`` (no cache): the cost of DuckDB's Python
  filesystem layer alone, the floor under ``ucache-local``;
- ``ucache-preload``: DuckDB's own reads of the local files (its ``pread64`` calls) served by
  ucache's LD_PRELOAD shim in read mode (``UCACHE_READS=1``, crates/ucache-preload), in a
  child process started with the shim (`--preload-lib`); no Python in the read path;
- ``local-proc`` (only when named in `--systems`): ``local`` in the same kind of child process
  without the shim, to see what the child process alone changes;
- ``ucache-arrow`` (only when named in `--systems`): the zero-copy path: each file a
  transparent mapping whose memory pyarrow reads as a ``pyarrow.Buffer`` (a Parquet fragment
  of an Arrow dataset), and DuckDB scanning the datasets (projection and filters pushed into
  pyarrow's scanner);
- ``s3fs``: the S3 objects through s3fs registered with DuckDB (its file objects made safe for
  DuckDB's threads to share, as ucache's are: ``SafeS3File``, one s3fs file object per thread);
- ``s3fs-cached`` (only when named in `--systems`): ``s3fs`` with DuckDB's external file cache
  on whatever `--duckdb-file-cache` says: DuckDB (1.3 and later) then keeps every byte it
  reads from an ``s3://`` file in its own memory, unbounded by ucache's budget, and its
  repeated queries send no GET at all;
- ``s3fs-small`` (only when named in `--systems`): ``s3fs`` with blocks of
  `--s3fs-small-block-mib` (default 2 MiB) instead of s3fs's 50 MiB, which fetch less beyond what DuckDB asks for;
- ``httpfs``: the S3 objects through DuckDB's own httpfs extension, if it loads here: from
  DuckDB's extension repository, else from PyPI's ``duckdb-extension-httpfs`` (with
  ``duckdb-extensions``), which is built for DuckDB releases up to 1.5.5, so it runs under a
  Python environment with ``duckdb==1.5.5`` (docs/results/2026-11-27-httpfs);
- ``ucache-s3``: the S3 objects through ``ucache://s3://``;
- ``ucache-s3-pf`` (only when named in `--systems`): the same with the Parquet prefetcher
  (``parquet_prefetch=--prefetch-depth``), registered through ``UcacheFileSystem.register``
  (DuckDB asks for the needed column chunks only; 16 KiB S3 buffers, no gap read through);
- ``ucache-s3-pf-merged`` (only when named in `--systems`): the prefetcher as it ran before
  ``register`` (DuckDB's merged reads, 64 KiB buffers, gaps up to 1 MiB read through);
- ``ucache-s3-gap`` / ``ucache-s3-pf-gap`` (only when named in `--systems`): ``ucache-s3`` /
  ``ucache-s3-pf`` with S3 ``coalesce_gap`` `--alt-coalesce-gap` (default 0: only misses that
  touch share a GET), against the library's default or `--coalesce-gap`;
- ``ucache-s3-ra`` / ``ucache-s3-nora`` (only when named in `--systems`): ``ucache-s3`` with
  the mappings' sequential readahead forced on / off (``UcacheFileSystem(readahead=...)``;
  ``ucache-s3`` itself takes the filesystem's default);
- ``ucache-s3-alt`` (only when named in `--systems`): ``ucache-s3`` with S3 buffers of
  `--alt-buffer-size`, to compare two buffer sizes in one run;
- ``ucache-s3-lfu`` / ``ucache-s3-clock`` (only when named in `--systems`): ``ucache-s3``
  with the ``lfu`` / ``clock`` policy (the filesystem's S3 default is lfu: a repeated query
  whose working set exceeds the budget evicts all of itself under clock).
- ``ucache-s3-reserved`` (only when named in `--systems`): ``ucache-s3`` with
  ``Cache(keep_idle_shares=True)``: files nobody reads keep their size-weighted shares (the
  rule before idle mappings gave way).

The s3fs system counts the bytes its file objects fetch from the server (``bytes_read`` in
``cache_stats``, as ucache's systems report theirs).

DuckDB's external file cache is off for every system by default (`--duckdb-file-cache`): it
would hold a remote file's bytes in DuckDB's memory with no bound but DuckDB's memory limit
(it ignores ``ucache://`` paths, which DuckDB takes for local files), so the baselines would
cache all the data where ucache gets a quarter of it; the paper's DuckDB had no such cache.

As the paper (ucache-fast26 §6.6) does, each query runs `--runs` times in a row in one DuckDB
session and the reported time is the mean of the runs after the first. ucache gets a budget of
a quarter of the data's bytes by default (`--budget-fraction`; at least 8 MiB; a fresh cache
per system and round). Systems are interleaved:
each round runs every system once, in turn, and `--rounds` rounds are made; the figure per
query is the median over rounds. Every query's result must be identical across systems
(floating-point columns compared to 9 significant digits, as parallel sums may add in another
order). Writes ``tpch.json``, ``tpch.md`` (per-query table and geometric means) and ``tpch.svg``
(a bar chart of each system's time per query) to `--out`.
For ucache's in-process systems, ``cache_stats`` in ``tpch.json`` also holds ``per_query``: each
query's misses and bytes read in each of its runs, to tell a repeat that hits from one that
misses as the first run did. `--queries` runs a subset (e.g. ``6,14``).
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import statistics
import subprocess
import sys
import pickle
import re
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import duckdb

sys.path.insert(0, str(Path(__file__).parent))
from tpch_queries import QUERIES, TABLES  # noqa: E402

import ucache  # noqa: E402
from ucache.filesystem import SharedPositionFile, UcacheFile, UcacheFileSystem, default_s3_buffer_size  # noqa: E402


def generate(sf: float, data: Path) -> None:
    if (data / "lineitem.parquet").exists():
        return
    data.mkdir(parents=True, exist_ok=True)
    exe = Path(sys.executable).with_name("tpchgen-cli")
    subprocess.run([str(exe), "parquet", "-s", str(sf), "--output-dir", str(data)], check=True)


def normalize(rows: list[tuple]) -> list[tuple]:
    def cell(v: Any) -> Any:
        if isinstance(v, float):
            return float(f"{v:.9g}")
        if hasattr(v, "is_finite"):  # Decimal
            return float(f"{float(v):.9g}")
        return v

    return [tuple(cell(v) for v in r) for r in rows]


class System:
    """`setup(con, info)` prepares a DuckDB connection and returns the URL of each table (or
    None where it made the views itself); `child`, where set, runs the whole system in a child
    process instead. `file_cache`: DuckDB's external file cache for this system, where it
    differs from the run's (`--duckdb-file-cache`)."""

    def __init__(
        self,
        name: str,
        setup: Callable[..., Any] | None = None,
        child: Callable[[], Any] | None = None,
        file_cache: bool | None = None,
    ):
        self.name = name
        self.setup = setup
        self.child = child
        self.file_cache = file_cache


def views(con: duckdb.DuckDBPyConnection, url: Callable[[str], str]) -> None:
    for t in TABLES:
        con.execute(f"create or replace view {t} as select * from read_parquet('{url(t)}')")


def store_totals(fs: UcacheFileSystem) -> tuple[int, int] | None:
    """GETs and the bytes they asked for, over the filesystem's mappings whose store counts
    them (S3); None where none does (local files)."""
    reqs = [r for r in (m.store_requests() for m in fs._maps.values()) if r is not None]
    if not reqs:
        return None
    return sum(r["reads"] for r in reqs), sum(r["bytes_read"] for r in reqs)


def run_queries(
    con: duckdb.DuckDBPyConnection, runs: int, queries: dict[int, str], counters: Callable[[], dict] | None = None
) -> tuple[dict[int, float], dict[int, list[tuple]], dict[int, list[dict]]]:
    """Times each query `runs` times; with `counters` (a cache's statistics), also what each
    run of each query added to its misses and bytes read, to tell a repeat that hits from one
    that misses as the first run did."""
    times: dict[int, float] = {}
    results: dict[int, list[tuple]] = {}
    per_run: dict[int, list[dict]] = {}
    for q, sql in queries.items():
        ts = []
        for r in range(runs):
            before = counters() if counters else None
            t0 = time.perf_counter()
            rows = con.execute(sql).fetchall()
            ts.append(time.perf_counter() - t0)
            if before is not None:
                after = counters()
                per_run.setdefault(q, []).append({k: after[k] - before[k] for k in ["misses", "bytes_read"]})
            if r == 0:
                results[q] = normalize(rows)
        times[q] = statistics.mean(ts[1:]) if runs > 1 else ts[0]
    return times, results, per_run


def shim_stats(stderr: str) -> dict:
    """The counters of the shim's ``UCACHE_STATS=1`` lines (cache statistics, read mode)."""
    out: dict = {}
    for key in ["hits", "misses", "evictions", "bytes_read", "prefetches", "prefetch_used"]:
        m = re.search(rf"\b{key}: (\d+)", stderr)
        if m:
            out[key] = int(m.group(1))
    m = re.search(r"read mode: (\d+) preads served, (\d+) file mappings made", stderr)
    if m:
        out["preads_served"], out["file_mappings"] = int(m.group(1)), int(m.group(2))
    return out


def run_child(name: str, a: argparse.Namespace, env: dict[str, str]) -> tuple[dict[int, float], dict[int, list[tuple]], dict]:
    """Runs system `name` (a local one) in a child process of this script with `env` added:
    the way to put the LD_PRELOAD shim under DuckDB's own reads."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.pickle"
        cmd = [sys.executable, __file__, "--data", str(a.data.parent), "--sf", str(a.sf), "--runs", str(a.runs)]
        cmd += ["--queries", ",".join(map(str, a.queries))]
        cmd += ["--worker", name, "--worker-out", str(out)]
        p = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{name} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        with open(out, "rb") as f:
            times, results = pickle.load(f)
    return times, results, shim_stats(p.stderr)


def run_system(
    sys_: System, runs: int, queries: dict[int, str], file_cache: bool
) -> tuple[dict[int, float], dict[int, list[tuple]], dict]:
    if sys_.child is not None:
        return sys_.child()
    con = duckdb.connect()
    on = file_cache if sys_.file_cache is None else sys_.file_cache
    con.execute(f"set enable_external_file_cache = {str(on).lower()}")
    info: dict = {}
    url = sys_.setup(con, info)
    if url is not None:
        views(con, url)
    cache = info["cache"] if "cache" in info else info["fs"].cache if "fs" in info else None
    times, results, per_query = run_queries(con, runs, queries, cache.stats if cache else None)
    if "counter" in info:
        info = {"bytes_read": info["counter"]["bytes"], "gets": info["counter"]["gets"]}
    elif "cache" in info:
        s = info["cache"].stats()
        info = {k: s[k] for k in ["bytes_read", "hits", "misses", "evictions"]}
    elif "fs" in info:
        s = info["fs"].cache.stats()
        maps = list(info["fs"]._maps.values())
        totals = store_totals(info["fs"])
        info = {
            "bytes_read": s["bytes_read"],
            "hits": s["hits"],
            "misses": s["misses"],
            "evictions": s["evictions"],
            "prefetches": s["prefetches"],
            "prefetch_used": s["prefetch_used"],
            "store_reads": s["store_reads"],
            # What the store sent: GETs, and the bytes they asked for (gaps read through
            # included), for S3; None for local files.
            "gets": totals[0] if totals else None,
            "bytes_fetched": totals[1] if totals else None,
            "buffer_sizes": sorted({m.buffer_size for m in maps}),
        }
    if per_query:
        info["per_query"] = per_query
    con.close()
    return times, results, info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--queries", default=None, help="a comma-separated subset of the 22 queries (default: all)")
    ap.add_argument("--systems", default="local,ucache-local,ucache-preload,s3fs,httpfs,ucache-s3")
    ap.add_argument(
        "--buffer-size", default=None, help="ucache's buffer size for S3 (default: the filesystem's, from the budget; local: 64KiB)"
    )
    ap.add_argument("--alt-buffer-size", default="256KiB", help="ucache's S3 buffer size for ucache-s3-alt")
    ap.add_argument(
        "--duckdb-file-cache",
        choices=["off", "on"],
        default="off",
        help="DuckDB's external file cache (unbounded memory) for every system but s3fs-cached",
    )
    ap.add_argument("--s3fs-small-block-mib", type=int, default=2, help="s3fs-small's block size in MiB (s3fs's own: 50)")
    ap.add_argument("--coalesce-gap", default=None, help="ucache's S3 coalesce_gap (default: the library's)")
    ap.add_argument("--alt-coalesce-gap", default="0", help="coalesce_gap of ucache-s3-gap and ucache-s3-pf-gap")
    ap.add_argument("--prefetch-depth", type=int, default=2, help="row groups ahead for ucache-s3-pf")
    ap.add_argument("--budget-fraction", type=float, default=0.25, help="ucache's budget, as a share of the data")
    ap.add_argument(
        "--preload-lib",
        type=Path,
        default=Path(__file__).resolve().parents[3] / "target/release/libucache_preload.so",
        help="the LD_PRELOAD shim for ucache-preload (cargo build --release -p ucache-preload)",
    )
    ap.add_argument(
        "--preload-env",
        action="append",
        default=[],
        metavar="VAR=VALUE",
        help="a shim setting for ucache-preload over the defaults (e.g. UCACHE_BUFFER_SIZE=32KiB, UCACHE_POLICY=lfu)",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # a child process: run this local system only
    ap.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.queries = [int(q) for q in a.queries.split(",")] if a.queries else list(QUERIES)
    if unknown := [q for q in a.queries if q not in QUERIES]:
        ap.error(f"--queries: no query {unknown[0]} (1..22)")
    queries = {q: QUERIES[q] for q in a.queries}

    a.data = a.data / f"sf{a.sf}"
    if a.worker:
        con = duckdb.connect()
        views(con, lambda t: str(a.data / f"{t}.parquet"))
        with open(a.worker_out, "wb") as f:
            pickle.dump(run_queries(con, a.runs, queries)[:2], f)
        con.close()
        return 0
    generate(a.sf, a.data)
    data_bytes = sum((a.data / f"{t}.parquet").stat().st_size for t in TABLES)
    budget = max(int(data_bytes * a.budget_fraction), 8 << 20)
    wanted = a.systems.split(",")
    systems: list[System] = []
    skipped: dict[str, str] = {}

    def local(con, info):
        return lambda t: str(a.data / f"{t}.parquet")

    def ucache_local(con, info):
        fs = UcacheFileSystem(cache=ucache.Cache(budget), buffer_size="64KiB")
        con.register_filesystem(fs)
        info["fs"] = fs
        return lambda t: f"ucache://{a.data.resolve()}/{t}.parquet"

    def fsspec_local(con, info):
        class PreadFile(UcacheFile):
            """ucache's file object with its reads replaced by os.pread: no cache."""

            def _read_at(self, start, end):
                fd = fds.get(self.path) or fds.setdefault(self.path, os.open(self.path, os.O_RDONLY))
                return os.pread(fd, end - start, start)

        class PreadFileSystem(UcacheFileSystem):
            def _open(self, path, mode="rb", **kwargs):
                path = self._full(path)
                return PreadFile(self, path, mode, size=self.size(path))

        fds: dict[str, int] = {}
        con.register_filesystem(PreadFileSystem(memory=8 << 20))
        return lambda t: f"ucache://{a.data.resolve()}/{t}.parquet"

    def ucache_arrow(con, info):
        import pyarrow as pa
        import pyarrow.dataset as ds

        cache = ucache.Cache(budget)
        fmt = ds.ParquetFileFormat()
        for t in TABLES:
            m = cache.map(str(a.data / f"{t}.parquet"), transparent=True, buffer_size="64KiB")
            frag = fmt.make_fragment(pa.py_buffer(memoryview(m)))
            con.register(f"{t}_arrow", ds.FileSystemDataset([frag], frag.physical_schema, fmt))
            con.execute(f"create or replace view {t} as select * from {t}_arrow")
        info["cache"] = cache
        return None

    def preload_env() -> dict[str, str]:
        if not a.preload_lib.exists():
            raise FileNotFoundError(f"{a.preload_lib}: build it with cargo build --release -p ucache-preload")
        return {
            "LD_PRELOAD": str(a.preload_lib),
            "UCACHE_FILES": f"{a.data.resolve()}/*.parquet",
            "UCACHE_READS": "1",
            "UCACHE_MEMORY": str(budget),
            "UCACHE_BUFFER_SIZE": "64KiB",
            "UCACHE_STATS": "1",
            **dict(kv.split("=", 1) for kv in a.preload_env),
        }

    systems += [
        System("local", local),
        System("ucache-local", ucache_local),
        System("fsspec-local", fsspec_local),
        System("ucache-preload", child=lambda: run_child("ucache-preload", a, preload_env())),
        System("local-proc", child=lambda: run_child("local-proc", a, {})),
        System("ucache-arrow", ucache_arrow),
    ]

    endpoint = os.environ.get("UCACHE_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and os.environ.get("AWS_ACCESS_KEY_ID"):
        import s3fs

        key, secret = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
        s3 = s3fs.S3FileSystem(key=key, secret=secret, endpoint_url=endpoint, client_kwargs={"region_name": "us-east-1"})
        prefix = f"ucache-bench/tpch-sf{a.sf}-{uuid.uuid4().hex[:8]}"
        for t in TABLES:
            s3.put(str(a.data / f"{t}.parquet"), f"{prefix}/{t}.parquet")
        # Removed on exit: a throwaway server's volumes fill after a few uploads of SF 1.
        atexit.register(lambda: s3.rm(prefix, recursive=True))

        fetched = {"bytes": 0, "gets": 0}
        plain_fetch = s3fs.core.S3File._fetch_range

        def counting_fetch(self, start, end):
            b = plain_fetch(self, start, end)
            fetched["bytes"] += len(b)
            fetched["gets"] += 1
            return b

        # Every ranged GET of an s3fs file object (its readahead cache's block fetches).
        s3fs.core.S3File._fetch_range = counting_fetch

        class SafeS3File(SharedPositionFile):
            """An s3fs file object that DuckDB's threads can share: each thread's `seek` then
            `read` reads where it sought (as ucache's files do), through an s3fs file object
            of that thread's own (s3fs's block cache is not thread-safe), so threads neither
            wait for each other nor read each other's ranges. Plain s3fs file objects under
            DuckDB read another thread's range now and then (a short read, or Parquet metadata
            decoded from wrong bytes: docs/results/2026-11-26-tpch-sf1)."""

            def __init__(self, fs: Any, path: str, first: Any) -> None:
                super().__init__(fs, path, mode="rb", cache_type="none", size=first.size)
                self.per_thread = {threading.get_ident(): first}

            def _read_at(self, start: int, end: int) -> bytes:
                me = threading.get_ident()
                f = self.per_thread.get(me)
                if f is None:
                    f = self.per_thread[me] = s3fs.S3FileSystem._open(self.fs, self.path, "rb")
                f.seek(start)
                return f.read(end - start)

        class SafeS3FileSystem(s3fs.S3FileSystem):
            def _open(self, path, mode="rb", **kwargs):
                return SafeS3File(self, path, super()._open(path, mode, **kwargs))

        def s3fs_with(**options):
            def setup(con, info):
                con.register_filesystem(
                    SafeS3FileSystem(
                        key=key, secret=secret, endpoint_url=endpoint, client_kwargs={"region_name": "us-east-1"}, **options
                    )
                )
                fetched.update(bytes=0, gets=0)
                info["counter"] = fetched
                return lambda t: f"s3://{prefix}/{t}.parquet"

            return setup

        s3fs_sys = s3fs_with()

        def httpfs(con, info):
            try:
                con.execute("install httpfs")  # fails where the extension cannot be fetched
            except duckdb.IOException:
                # PyPI's build of the extension (duckdb-extension-httpfs, one per DuckDB
                # release; none for 2.0 yet), installed from its wheel.
                import duckdb_extensions

                duckdb_extensions.import_extension("httpfs", con=con)
            con.execute("load httpfs")
            host = endpoint.split("://", 1)[1]
            con.execute(
                f"create secret (type s3, key_id '{key}', secret '{secret}', endpoint '{host}', "
                f"use_ssl {str(endpoint.startswith('https')).lower()}, url_style 'path', region 'us-east-1')"
            )
            return lambda t: f"s3://{prefix}/{t}.parquet"

        def ucache_s3_with(depth, cache_options=None, duckdb_merges=False, **options):
            def setup(con, info):
                kw = {"buffer_size": a.buffer_size, "coalesce_gap": a.coalesce_gap, **options}
                cache = ucache.Cache(budget, **(cache_options or {}))
                fs = UcacheFileSystem(cache=cache, endpoint=endpoint, parquet_prefetch=depth, **kw)
                if duckdb_merges:  # DuckDB's own merging of a row group's chunks left on
                    con.register_filesystem(fs)
                else:
                    fs.register(con)
                info["fs"] = fs
                return lambda t: f"ucache://s3://{prefix}/{t}.parquet"

            return setup

        systems += [
            System("s3fs", s3fs_sys),
            System("s3fs-cached", s3fs_sys, file_cache=True),
            System("s3fs-small", s3fs_with(default_block_size=a.s3fs_small_block_mib << 20)),
            System("httpfs", httpfs),
            System("ucache-s3", ucache_s3_with(0)),
            System("ucache-s3-pf", ucache_s3_with(a.prefetch_depth)),
            System(
                "ucache-s3-pf-merged",
                ucache_s3_with(a.prefetch_depth, duckdb_merges=True, buffer_size="64KiB", coalesce_gap="1MiB"),
            ),
            System("ucache-s3-gap", ucache_s3_with(0, coalesce_gap=a.alt_coalesce_gap)),
            System("ucache-s3-pf-gap", ucache_s3_with(a.prefetch_depth, coalesce_gap=a.alt_coalesce_gap)),
            System("ucache-s3-ra", ucache_s3_with(0, readahead=True)),
            System("ucache-s3-nora", ucache_s3_with(0, readahead=False)),
            System("ucache-s3-alt", ucache_s3_with(0, buffer_size=a.alt_buffer_size)),
            System("ucache-s3-lfu", ucache_s3_with(0, policy="lfu")),
            System("ucache-s3-clock", ucache_s3_with(0, policy="clock")),
            System("ucache-s3-reserved", ucache_s3_with(0, cache_options={"keep_idle_shares": True})),
        ]
    else:
        for n in ["s3fs", "s3fs-cached", "s3fs-small", "httpfs", "ucache-s3", "ucache-s3-pf", "ucache-s3-gap", "ucache-s3-pf-gap", "ucache-s3-ra", "ucache-s3-nora", "ucache-s3-alt", "ucache-s3-lfu", "ucache-s3-clock", "ucache-s3-reserved"]:
            skipped[n] = "no S3 server in the environment (UCACHE_S3_ENDPOINT)"
    systems = [s for s in systems if s.name in wanted]

    per_round: dict[str, list[dict[int, float]]] = {s.name: [] for s in systems}
    stats: dict[str, list[dict]] = {s.name: [] for s in systems}
    reference: dict[int, list[tuple]] | None = None
    mismatches: list[str] = []
    for rnd in range(a.rounds):
        for s in systems:
            if s.name in skipped:
                continue
            try:
                times, results, info = run_system(s, a.runs, queries, a.duckdb_file_cache == "on")
            except Exception as e:  # noqa: BLE001  (httpfs that cannot load)
                if s.name == "httpfs":
                    skipped[s.name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                    continue
                raise
            print(f"round {rnd + 1} {s.name}: total {sum(times.values()):.3f} s", flush=True)
            per_round[s.name].append(times)
            stats[s.name].append(info)
            if reference is None:
                reference = results
            else:
                for q in queries:
                    if results[q] != reference[q]:
                        mismatches.append(f"{s.name} q{q}")
    ran = [s.name for s in systems if s.name not in skipped]
    med = {n: {q: statistics.median(r[q] for r in per_round[n]) for q in queries} for n in ran}

    def geo(n: str, base: str) -> float:
        return math.exp(statistics.mean(math.log(med[base][q] / med[n][q]) for q in queries))

    out = {
        "sf": a.sf,
        "data_bytes": data_bytes,
        "ucache_budget": budget,
        "duckdb_file_cache": a.duckdb_file_cache,
        "buffer_size_s3": a.buffer_size or default_s3_buffer_size(budget),
        "prefetch_depth": a.prefetch_depth,
        "preload_env": a.preload_env,
        "rounds": a.rounds,
        "runs": a.runs,
        "queries": a.queries,
        "systems": ran,
        "skipped": skipped,
        "seconds": med,
        "cache_stats": stats,
        "results_identical": not mismatches,
        "mismatches": mismatches,
        "speedup_geomean": {
            f"{n} vs {b}": geo(n, b)
            for n, b in [
                ("ucache-local", "local"),
                ("fsspec-local", "local"),
                ("ucache-local", "fsspec-local"),
                ("ucache-preload", "local"),
                ("ucache-preload", "local-proc"),
                ("local-proc", "local"),
                ("ucache-arrow", "local"),
                ("ucache-preload", "s3fs"),
                ("local", "s3fs"),
                ("ucache-s3", "s3fs"),
                ("ucache-s3", "s3fs-cached"),
                ("s3fs-cached", "s3fs"),
                ("ucache-s3", "s3fs-small"),
                ("s3fs-small", "s3fs"),
                ("ucache-s3-gap", "s3fs"),
                ("ucache-s3", "ucache-s3-gap"),
                ("ucache-s3-pf", "s3fs"),
                ("ucache-s3-pf", "ucache-s3"),
                ("ucache-s3-ra", "s3fs"),
                ("ucache-s3-nora", "s3fs"),
                ("ucache-s3-nora", "ucache-s3-ra"),
                ("ucache-s3-nora", "ucache-s3"),
                ("ucache-s3-alt", "s3fs"),
                ("ucache-s3-alt", "ucache-s3"),
                ("ucache-s3-lfu", "s3fs"),
                ("ucache-s3-lfu", "ucache-s3"),
                ("ucache-s3-clock", "s3fs"),
                ("ucache-s3", "ucache-s3-clock"),
                ("ucache-s3-reserved", "s3fs"),
                ("ucache-s3", "ucache-s3-reserved"),
                ("ucache-s3", "httpfs"),
            ]
            if n in med and b in med
        },
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "tpch.json").write_text(json.dumps(out, indent=1))
    lines = ["| query | " + " | ".join(ran) + " |", "|---|" + "---|" * len(ran)]
    for q in queries:
        lines.append(f"| q{q} | " + " | ".join(f"{med[n][q] * 1000:.1f}" for n in ran) + " |")
    lines.append("| total | " + " | ".join(f"{sum(med[n].values()) * 1000:.1f}" for n in ran) + " |")
    md = "\n".join(lines)
    md += "\n\nmilliseconds per query (mean of runs 2..%d, median of %d rounds)\n" % (a.runs, a.rounds)
    md += f"\nDuckDB's external file cache: {a.duckdb_file_cache} (s3fs-cached: on)\n"
    for k, v in out["speedup_geomean"].items():
        md += f"\n- {k}: {v:.3f}x (geometric mean over {len(queries)} queries)"
    for k, v in skipped.items():
        md += f"\n- {k}: not run: {v}"
    md += f"\n- results identical across systems: {not mismatches} {mismatches or ''}\n"
    (a.out / "tpch.md").write_text(md)
    write_svg(a.out / "tpch.svg", {n: med[n] for n in ran}, queries, f"TPC-H SF {a.sf}: ms per query")
    print(md)
    return 1 if mismatches else 0


def write_svg(path: Path, seconds: dict[str, dict[int, float]], queries: list[int], title: str) -> None:
    """A grouped bar chart of each system's milliseconds per query, as plain SVG (no plotting
    library in the bench's environment). The y axis is logarithmic: the queries span 30x."""
    systems = list(seconds)
    colors = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]
    ms = [seconds[n][q] * 1000 for n in systems for q in queries if seconds[n].get(q)]
    if not ms:
        return
    lo = 10 ** math.floor(math.log10(min(ms)))
    hi = 10 ** math.ceil(math.log10(max(ms)))
    left, top, plot_h, group_w, bar_w = 60, 40, 300, 14 + 10 * len(systems), 10
    width = left + group_w * len(queries) + 180
    height = top + plot_h + 50

    def y(v: float) -> float:
        return top + plot_h * (1 - math.log10(max(v, lo) / lo) / math.log10(hi / lo))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="20" font-size="14">{title} (log scale; lower is faster)</text>',
    ]
    decade = lo
    while decade <= hi:
        out.append(f'<line x1="{left}" x2="{left + group_w * len(queries)}" y1="{y(decade):.1f}" y2="{y(decade):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y(decade) + 4:.1f}" text-anchor="end">{decade:g}</text>')
        decade *= 10
    for k, q in enumerate(queries):
        x0 = left + k * group_w + 7
        for j, n in enumerate(systems):
            v = seconds[n].get(q)
            if v:
                top_y = y(v * 1000)
                out.append(
                    f'<rect x="{x0 + j * bar_w}" y="{top_y:.1f}" width="{bar_w - 1}" height="{top + plot_h - top_y:.1f}" '
                    f'fill="{colors[j % len(colors)]}"><title>{n} q{q}: {v * 1000:.1f} ms</title></rect>'
                )
        out.append(f'<text x="{x0 + len(systems) * bar_w / 2:.1f}" y="{top + plot_h + 16}" text-anchor="middle">q{q}</text>')
    for j, n in enumerate(systems):
        ly = top + 10 + j * 18
        lx = left + group_w * len(queries) + 20
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="12" fill="{colors[j % len(colors)]}"/>')
        out.append(f'<text x="{lx + 18}" y="{ly + 1}">{n}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    sys.exit(main())
