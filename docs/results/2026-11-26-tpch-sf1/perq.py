"""Per-query misses, hits and bytes fetched through ucache-s3 at SF 1 (a diagnostic for README.md):

    python perq.py [BUFFER_SIZE [POLICY]]   # from the repository root, the env of scripts/s3-server.sh sourced

uploads target/tpch-data/sf1.0, runs each query 3 times in one DuckDB session through a
ucache://s3:// filesystem with a quarter-data budget, and prints each run's counters."""
import os, sys, time, uuid
sys.path.insert(0, "crates/ucache-py/bench")
import duckdb, s3fs, ucache
from tpch_queries import QUERIES, TABLES
from ucache.filesystem import UcacheFileSystem
ep = os.environ["UCACHE_S3_ENDPOINT"]; key, sec = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
data = "target/tpch-data/sf1.0"; prefix = f"ucache-bench/perq-{uuid.uuid4().hex[:6]}"
s3 = s3fs.S3FileSystem(key=key, secret=sec, endpoint_url=ep, client_kwargs={"region_name": "us-east-1"})
for t in TABLES: s3.put(f"{data}/{t}.parquet", f"{prefix}/{t}.parquet")
budget = sum(os.path.getsize(f"{data}/{t}.parquet") for t in TABLES) // 4
bs = sys.argv[1] if len(sys.argv) > 1 else None
pol = sys.argv[2] if len(sys.argv) > 2 else None
fs = UcacheFileSystem(cache=ucache.Cache(budget), endpoint=ep, buffer_size=bs, policy=pol)
con = duckdb.connect(); con.register_filesystem(fs)
for t in TABLES: con.execute(f"create view {t} as select * from read_parquet('ucache://s3://{prefix}/{t}.parquet')")
print("budget", budget, "buffer", bs, "policy", pol)
for q in sorted(QUERIES):
    row = []
    for r in range(3):
        s0 = fs.cache.stats(); t0 = time.perf_counter(); con.execute(QUERIES[q]).fetchall(); dt = time.perf_counter() - t0; s = fs.cache.stats()
        row.append(f"{dt*1000:6.0f}ms m{s['misses']-s0['misses']:5d} h{s['hits']-s0['hits']:5d} {(s['bytes_read']-s0['bytes_read'])/1e6:6.1f}MB")
    print(f"q{q:2d} " + " | ".join(row), flush=True)
