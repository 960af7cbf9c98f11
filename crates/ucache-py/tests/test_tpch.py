"""DuckDB and pyarrow read a small TPC-H (scale factor 0.01) through the ucache filesystem,
local and on the S3 test server; every result equals a direct read."""

from __future__ import annotations

from pathlib import Path

import pytest

duckdb = pytest.importorskip("duckdb")
pq = pytest.importorskip("pyarrow.parquet")

import ucache  # noqa: E402
from ucache.filesystem import UcacheFileSystem  # noqa: E402

# Scans, filters, joins and aggregates in the spirit of TPC-H Q1, Q3 and Q6; written against
# the columns both tpchgen-cli's data and the pyarrow stand-in have.
QUERIES = [
    "select l_returnflag, sum(l_quantity), avg(l_extendedprice), count(*) from {lineitem} "
    "group by l_returnflag order by l_returnflag",
    "select sum(l_extendedprice) from {lineitem} where l_quantity < 24",
    "select o_orderkey, sum(l_extendedprice) as revenue from {lineitem} join {orders} "
    "on l_orderkey = o_orderkey group by o_orderkey order by revenue desc, o_orderkey limit 10",
]


def run_queries(con, path) -> list:
    return [con.sql(q.format(lineitem=f"read_parquet('{path('lineitem')}')", orders=f"read_parquet('{path('orders')}')")).fetchall() for q in QUERIES]


def small_cache_fs(**kw) -> UcacheFileSystem:
    # A budget well under the data (lineitem alone is about 2 MB at SF 0.01), so the queries
    # run through evictions too.
    return UcacheFileSystem(cache=ucache.Cache("1MiB", batch=4), buffer_size="16KiB", **kw)


def test_duckdb_local(tpch_dir: Path):
    con = duckdb.connect()
    direct = run_queries(con, lambda t: tpch_dir / f"{t}.parquet")
    fs = small_cache_fs()
    con.register_filesystem(fs)
    through = run_queries(con, lambda t: f"ucache://{tpch_dir}/{t}.parquet")
    assert through == direct
    assert fs.cache.stats()["misses"] > 0
    # Twice, so the second run is served partly from the cache.
    assert run_queries(con, lambda t: f"ucache://{tpch_dir}/{t}.parquet") == direct
    assert fs.cache.stats()["hits"] > 0


def test_pyarrow_local(tpch_dir: Path):
    fs = small_cache_fs()
    for t in ["lineitem", "orders", "nation"]:
        p = tpch_dir / f"{t}.parquet"
        if not p.exists():
            continue
        assert pq.read_table(str(p), filesystem=fs).equals(pq.read_table(p))
        cols = pq.read_table(str(p)).column_names[:2]
        assert pq.read_table(f"ucache://{p}", filesystem=fs, columns=cols).equals(pq.read_table(p, columns=cols))


def test_duckdb_and_pyarrow_on_s3(tpch_dir: Path, s3_env, s3fs_client, s3_prefix):
    prefix = f"{s3_prefix}/tpch"
    for t in ["lineitem", "orders"]:
        s3fs_client.put(str(tpch_dir / f"{t}.parquet"), f"{prefix}/{t}.parquet")
    con = duckdb.connect()
    direct = run_queries(con, lambda t: tpch_dir / f"{t}.parquet")
    fs = UcacheFileSystem(cache=ucache.Cache("2MiB", batch=2), buffer_size="64KiB", endpoint=s3_env["endpoint"])
    con.register_filesystem(fs)
    assert run_queries(con, lambda t: f"ucache://s3://{prefix}/{t}.parquet") == direct
    assert fs.cache.stats()["bytes_read"] > 0
    url = f"s3://{prefix}/lineitem.parquet"
    assert pq.read_table(url, filesystem=fs).equals(pq.read_table(tpch_dir / "lineitem.parquet"))
    assert con.sql(f"select count(*) from read_parquet('ucache://s3://{prefix}/*.parquet', union_by_name=true)").fetchall()[0][0] > 0
