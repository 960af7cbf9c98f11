"""The simulator from Python: miss ratios equal the `ucache sim` command's on the same trace,
from numpy arrays and from trace files alike."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import ucache
from ucache import sim

POLICIES = ["clock", "fifo", "lru", "sieve", "s3fifo", "2q", "arc", "lfu"]


def zipf_trace(n: int = 50_000, universe: int = 5_000, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.2, n), universe)
    # Scatter the ranks over the id space, and mix in a loop and a scan.
    ids = ranks.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    loop = np.tile(np.arange(300, dtype=np.uint64) + np.uint64(1 << 40), 20)
    scan = np.arange(5_000, dtype=np.uint64) + np.uint64(1 << 50)
    return np.concatenate([ids[: n // 2], loop, scan, ids[n // 2 :]])


def cli_miss_ratios(cli: str, trace: Path, policies: list[str], sizes: str, tmp: Path, fmt: str = "text") -> dict:
    out = tmp / "sim.json"
    subprocess.run(
        [cli, "sim", "--trace", str(trace), "--format", fmt, "--policies", ",".join(policies), "--sizes", sizes, "--json", str(out), "--quiet"],
        check=True,
        capture_output=True,
    )
    rows = json.loads(out.read_text())["results"]
    return {(r["policy"], r["cache_size"]): (r["misses"], r["miss_ratio"]) for r in rows}


def test_simulator_equals_the_cli(ucache_cli: str, tmp_path: Path):
    ids = zipf_trace()
    trace = tmp_path / "trace.txt"
    trace.write_text("\n".join(str(int(i)) for i in ids) + "\n")
    cli = cli_miss_ratios(ucache_cli, trace, POLICIES, "1%,5%,10%,500", tmp_path)
    for source in [ids, str(trace)]:
        rows = ucache.simulate(source, POLICIES, ["1%", 0.05, "10%", 500], details=True)
        assert len(rows) == len(POLICIES) * 4
        for r in rows:
            assert (r["misses"], r["miss_ratio"]) == cli[(r["policy"], r["cache_size"])], r


def test_record_format_equals_the_cli(ucache_cli: str, tmp_path: Path):
    ids = zipf_trace(20_000)
    trace = tmp_path / "trace.rec"
    trace.write_bytes(b"UCTRACE1" + ids.astype("<u8").tobytes())
    cli = cli_miss_ratios(ucache_cli, trace, ["lru", "clock"], "100", tmp_path, fmt="record")
    got = ucache.simulate(trace, ["lru", "clock"], 100, format="record")
    assert got == {"lru": [cli[("lru", 100)][1]], "clock": [cli[("clock", 100)][1]]}


def test_shapes_and_libcachesim_style_classes():
    ids = np.arange(1000, dtype=np.uint64) % 100  # a loop of 100 ids
    assert ucache.simulate(ids, "lru", 50) == 1.0  # LRU misses every time on a larger loop
    assert ucache.simulate(ids, "lru", [50, 100]) == [1.0, 0.1]
    assert ucache.simulate(list(range(10)) * 3, ["fifo", "lru"], [10]) == {"fifo": [1 / 3], "lru": [1 / 3]}
    assert ucache.simulate(ids.astype(np.int32), "fifo", 100) == 0.1
    c = sim.LRU(cache_size=100)
    assert c.process_trace(ids) == (0.1, 0.1)
    assert sim.LRU(cache_size=50).process_trace(ids, start_req=0, max_req=100) == (1.0, 1.0)
    assert sim.S3FIFO(0.5).policy == "s3fifo:libcachesim"


def test_bad_simulator_input(tmp_path: Path):
    with pytest.raises(ucache.InvalidArgument, match="unknown policy"):
        ucache.simulate([1, 2], "belady", 1)
    with pytest.raises(ucache.InvalidArgument, match="not a size"):
        ucache.simulate([1, 2], "lru", "big")
    with pytest.raises(ucache.NotFound):
        ucache.simulate(tmp_path / "missing.txt", "lru", 1)
    bad = tmp_path / "bad.txt"
    bad.write_text("1\n2\nthree\n")
    with pytest.raises(ucache.InvalidArgument, match="line 3"):
        ucache.simulate(bad, "lru", 1)
    with pytest.raises(ucache.InvalidArgument, match="no requests"):
        ucache.simulate(np.array([], dtype=np.uint64), "lru", 1)
    with pytest.raises(ucache.InvalidArgument, match="format"):
        ucache.simulate(bad, "lru", 1, format="parquet")
    with pytest.raises(TypeError):
        ucache.simulate(np.array([1.5]), "lru", 1)
