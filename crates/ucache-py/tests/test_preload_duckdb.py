"""DuckDB's own reads of Parquet files served by ucache's LD_PRELOAD shim in read mode
(crates/ucache-preload, ``UCACHE_READS=1``): the route without Python in the read path that
scripts/bench-tpch.sh measures as ``ucache-preload``. Each case runs DuckDB in a child
process, plain and under the shim, and compares what it prints.

The shim is found through ``UCACHE_PRELOAD_LIB`` (scripts/test-python.sh builds it and sets
it), else target/debug/libucache_preload.so; without it the tests skip, unless
``UCACHE_PRELOAD_REQUIRED=1``, which makes them fail.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("duckdb")

from conftest import REPO  # noqa: E402

CHILD = r"""
import sys, duckdb
d = sys.argv[1]
con = duckdb.connect()
con.execute("set threads = 4")
queries = [
    "select l_returnflag, sum(l_quantity), avg(l_extendedprice), count(*) from read_parquet('{d}/lineitem.parquet') "
    "group by l_returnflag order by l_returnflag",
    "select sum(l_extendedprice) from read_parquet('{d}/lineitem.parquet') where l_quantity < 24",
    "select o_orderkey, sum(l_extendedprice) as revenue from read_parquet('{d}/lineitem.parquet') "
    "join read_parquet('{d}/orders.parquet') on l_orderkey = o_orderkey "
    "group by o_orderkey order by revenue desc, o_orderkey limit 10",
]
for _ in range(2):
    for q in queries:
        print(repr(con.sql(q.format(d=d)).fetchall()))
try:
    con.sql("select * from read_parquet('{d}/missing.parquet')".format(d=d)).fetchall()
except duckdb.Error as e:
    print(type(e).__name__, str(e).splitlines()[0])
"""


def shim_lib() -> Path:
    lib = Path(os.environ.get("UCACHE_PRELOAD_LIB") or REPO / "target/debug/libucache_preload.so")
    if not lib.exists():
        msg = f"{lib} missing (cargo build -p ucache-preload)"
        if os.environ.get("UCACHE_PRELOAD_REQUIRED") == "1":
            pytest.fail(msg + ", and UCACHE_PRELOAD_REQUIRED=1")
        pytest.skip(msg)
    return lib


def child(data: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("UCACHE_") and k != "LD_PRELOAD"}
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(data)], env={**clean, **env}, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, f"child failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p


def shim_env(data: Path, **extra: str) -> dict[str, str]:
    return {
        "LD_PRELOAD": str(shim_lib()),
        "UCACHE_FILES": f"{data}/*.parquet",
        "UCACHE_READS": "1",
        # Well under the data: the queries run through evictions.
        "UCACHE_MEMORY": "1MiB",
        "UCACHE_BUFFER_SIZE": "16KiB",
        "UCACHE_STATS": "1",
        **extra,
    }


def counter(stderr: str, pattern: str) -> int:
    m = re.search(pattern, stderr)
    assert m, f"no '{pattern}' in:\n{stderr}"
    return int(m.group(1))


def test_duckdb_under_the_shim_reads_what_it_reads_directly(tpch_dir: Path):
    direct = child(tpch_dir, {})
    assert "IOException" in direct.stdout  # the missing file, as DuckDB reports it
    shim = child(tpch_dir, shim_env(tpch_dir))
    assert shim.stdout == direct.stdout
    # The shim served DuckDB's reads, from its cache on the second round.
    assert counter(shim.stderr, r"read mode: (\d+) preads served") > 0
    assert counter(shim.stderr, r"read mode: \d+ preads served, (\d+) file mappings") >= 2
    assert counter(shim.stderr, r"\bhits: (\d+)") > 0
    assert counter(shim.stderr, r"\bmisses: (\d+)") > 0


def test_a_budget_holding_the_data_misses_each_buffer_once(tpch_dir: Path):
    shim = child(tpch_dir, shim_env(tpch_dir, UCACHE_MEMORY="64MiB"))
    assert shim.stdout == child(tpch_dir, {}).stdout
    assert counter(shim.stderr, r"\bevictions: (\d+)") == 0
    size = sum(p.stat().st_size for p in tpch_dir.glob("*.parquet"))
    assert counter(shim.stderr, r"\bbytes_read: (\d+)") <= size + 16 * 1024 * 8


@pytest.mark.parametrize(
    "var,value",
    [("UCACHE_READS", "yes"), ("UCACHE_MEMORY", "lots"), ("UCACHE_BUFFER_SIZE", "3000"), ("UCACHE_FILES", "")],
)
def test_a_bad_setting_is_named_and_duckdb_reads_from_the_kernel(tpch_dir: Path, var: str, value: str):
    shim = child(tpch_dir, shim_env(tpch_dir, **{var: value}))
    assert shim.stdout == child(tpch_dir, {}).stdout
    lines = [l for l in shim.stderr.splitlines() if l.startswith("ucache-preload:")]
    assert len(lines) == 1 and var in lines[0] and "kernel" in lines[0], shim.stderr
