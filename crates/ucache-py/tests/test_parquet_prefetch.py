"""The Parquet-aware prefetcher prefetches the next row groups of the columns being read, and
never a chunk of a column nobody reads."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import ucache  # noqa: E402
from ucache.filesystem import UcacheFileSystem  # noqa: E402
from ucache.parquet import ParquetPrefetcher  # noqa: E402


@pytest.fixture
def parquet_file(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    n = 8 * 16_384
    p = tmp_path / "t.parquet"
    t = pa.table({c: rng.integers(0, 1 << 62, n) for c in ["a", "b", "c"]})
    pq.write_table(t, p, row_group_size=16_384, compression="none", use_dictionary=False)
    return p


def buffers_of(m, start: int, end: int) -> range:
    """The buffers lying wholly inside ``[start, end)``."""
    bs = m.buffer_size
    return range((start + bs - 1) // bs, end // bs)


def wait_until(cond, what: str) -> None:
    """Waits for background prefetches (a watchdog, not a timing)."""
    deadline = time.monotonic() + 300  # as the Rust tests' HANG: a loaded host is slow, not hung
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_prefetches_only_the_columns_being_read(parquet_file: Path):
    fs = UcacheFileSystem(cache=ucache.Cache("64MiB"), buffer_size="4KiB", parquet_prefetch=2)
    path = str(parquet_file)
    with fs.open(path) as f:
        got = pq.ParquetFile(f).read_row_group(0, columns=["a"])
    assert got.equals(pq.read_table(parquet_file, columns=["a"]).slice(0, 16_384))
    m = fs.mapping(path)
    layout: ParquetPrefetcher = fs.prefetcher(path)
    assert layout is not None and len(layout.chunks) == 8
    # Column a of row groups 1 and 2 arrive in the background...
    for r in (1, 2):
        s, e = layout.chunks[r][0]
        wait_until(lambda: all(m.is_resident(i) for i in buffers_of(m, s, e)), f"row group {r}")
    assert fs.cache.stats()["prefetches"] > 0
    # ...and nothing of b and c, nor of column a further ahead. (pyarrow itself reads the
    # last 64 KiB of the file to find the footer in one request: those buffers are its.)
    tail = (m.size - 65536) // m.buffer_size
    for r in range(8):
        for c in (1, 2):
            s, e = layout.chunks[r][c]
            assert not any(m.is_resident(i) for i in buffers_of(m, s, e) if i < tail), (r, c)
    s, e = layout.chunks[4][0]
    assert not any(m.is_resident(i) for i in buffers_of(m, s, e))


def test_whole_column_scan_reads_about_the_columns_bytes(parquet_file: Path):
    """Reading one column of every row group with the prefetcher on loads about that column's
    bytes: the prefetches are used, not wasted on other columns."""
    fs = UcacheFileSystem(cache=ucache.Cache("64MiB"), buffer_size="4KiB", parquet_prefetch=2)
    path = str(parquet_file)
    with fs.open(path) as f:
        t = pq.read_table(f, columns=["b"])
    assert t.equals(pq.read_table(parquet_file, columns=["b"]))
    meta = pq.read_metadata(parquet_file)
    col_bytes = sum(meta.row_group(r).column(1).total_compressed_size for r in range(meta.num_row_groups))
    s = fs.cache.stats()
    # Chunks are not buffer-aligned (a buffer more at each end), and pyarrow reads the last
    # 64 KiB of the file to find the footer.
    slack = 2 * meta.num_row_groups * 4096 + 65536 + 4096
    assert col_bytes <= s["bytes_read"] <= col_bytes + slack
    assert s["prefetches"] > 0


def test_a_repeated_scan_prefetches_again(parquet_file: Path):
    """A chunk is prefetched again once it was read: a second scan of the column, after its
    buffers were evicted, is prefetched as the first was, not left to miss. (Readahead off:
    only the prefetcher loads ahead.)"""
    fs = UcacheFileSystem(cache=ucache.Cache("64MiB"), buffer_size="4KiB", parquet_prefetch=2, readahead=False)
    path = str(parquet_file)
    m = fs.mapping(path)
    per_scan = []
    for _ in range(2):
        before = fs.cache.stats()["prefetches"]
        with fs.open(path) as f:
            t = pq.ParquetFile(f).read(columns=["b"])
        assert t.equals(pq.read_table(parquet_file, columns=["b"]))
        per_scan.append(fs.cache.stats()["prefetches"] - before)
        m.evict()
    assert per_scan[0] > 0 and per_scan[1] > 0, per_scan


def test_not_parquet_is_left_alone(data_file: Path, tmp_path: Path):
    p = tmp_path / "fake.parquet"
    p.write_bytes(data_file.read_bytes())
    fs = UcacheFileSystem(cache=ucache.Cache("8MiB"), parquet_prefetch=2)
    assert fs.prefetcher(str(p)) is None
    assert fs.cat_file(str(p), 0, 10) == data_file.read_bytes()[:10]


@pytest.fixture
def wide_parquet_file(tmp_path: Path) -> Path:
    """Six columns of 128 KiB chunks (4 row groups), so that a query of columns a and d leaves
    two unread chunks between its own in each row group."""
    rng = np.random.default_rng(2)
    n = 4 * 16_384
    p = tmp_path / "wide.parquet"
    t = pa.table({c: rng.integers(0, 1 << 62, n) for c in "abcdef"})
    pq.write_table(t, p, row_group_size=16_384, compression="none", use_dictionary=False)
    return p


def test_registered_with_duckdb_it_reads_the_columns_chunks_only(wide_parquet_file: Path):
    """`UcacheFileSystem.register` turns DuckDB's merging of a row group's chunks off when the
    prefetcher is on: DuckDB then asks for the chunks of the columns it reads, and the bytes
    loaded are those chunks' and the footer's. Registered the plain way, DuckDB reads across
    the unread columns between them where its cost model picks a gap as large as theirs (it
    did on TPC-H from S3; the test sets that gap, 1 MiB, on both connections: the control
    shows what `register` changes)."""
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    known = con.execute("select count(*) from duckdb_settings() where name = 'parquet_prefetch_column_gap'")
    if not known.fetchone()[0]:
        pytest.skip("this DuckDB has no parquet_prefetch_column_gap")
    meta = pq.read_metadata(wide_parquet_file)
    col_bytes = sum(meta.row_group(r).column(c).total_compressed_size for r in range(4) for c in (0, 3))
    want = con.execute(f"select sum(a), sum(d) from read_parquet('{wide_parquet_file}')").fetchall()
    loaded = {}
    for how in ("register", "register_filesystem"):
        fs = UcacheFileSystem(cache=ucache.Cache("64MiB"), buffer_size="4KiB", parquet_prefetch=2, readahead=False)
        con = duckdb.connect()
        con.execute("set enable_external_file_cache = false")
        con.execute("set parquet_prefetch_column_gap = 1048576")
        if how == "register":
            fs.register(con)
            assert con.execute("select current_setting('parquet_prefetch_column_gap')").fetchone()[0] == 0
        else:
            con.register_filesystem(fs)
        got = con.execute(f"select sum(a), sum(d) from read_parquet('ucache://{wide_parquet_file}')").fetchall()
        assert got == want
        con.close()
        loaded[how] = fs.cache.stats()["bytes_read"]
        fs.close_all()
    # A buffer more at each end of each chunk, and the footer's reads (DuckDB reads the last
    # 8 bytes, then the footer; the file is under 4 MiB, so 64 KiB covers them).
    slack = 2 * 8 * 4096 + 65536
    assert col_bytes <= loaded["register"] <= col_bytes + slack, (loaded, col_bytes)
    assert loaded["register_filesystem"] > col_bytes + slack, (loaded, col_bytes)


def test_register_without_the_prefetcher_leaves_duckdb_as_it_is():
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    before = con.execute("select current_setting('parquet_prefetch_column_gap')").fetchone()
    UcacheFileSystem(cache=ucache.Cache("8MiB")).register(con)
    assert con.execute("select current_setting('parquet_prefetch_column_gap')").fetchone() == before


def test_zero_copy_reads_prefetch_the_columns_being_read(parquet_file: Path):
    """Under plain loads of a transparent mapping (pyarrow reading the file out of its memory,
    no Python in the read path), the cache prefetches by the file's column chunks: reading
    column b of row group 0 prefetches b's chunks in row groups 1 and 2, and a scan of b loads
    no chunk of a or c."""
    from ucache.parquet import column_chunks, map_parquet

    cache = ucache.Cache("64MiB")
    m = map_parquet(cache, parquet_file, depth=2, transparent=True, buffer_size="4KiB")
    bs = m.buffer_size
    chunks = column_chunks(str(parquet_file))
    f = pq.ParquetFile(pa.BufferReader(pa.py_buffer(memoryview(m))))
    got = f.read_row_group(0, columns=["b"])
    assert got.equals(pq.read_table(parquet_file, columns=["b"]).slice(0, 16_384))
    for r in (1, 2):
        s_, e = chunks[r][1]
        # Row group 1's first buffer is the marker, left for the reader's miss.
        first = s_ // bs + 1 if r == 1 else s_ // bs
        wait_until(lambda: all(m.is_resident(i) for i in range(first, e // bs)), f"row group {r}")
    t = f.read(columns=["b"])
    assert t.equals(pq.read_table(parquet_file, columns=["b"]))
    del f, got, t  # their arrays are views of the mapping's memory
    m.close()  # waits for the prefetches in flight: every load is counted below
    s = cache.stats()
    assert s["prefetches"] > 0
    # What was loaded: b's chunks, each rounded out to whole buffers, and the footer's buffers;
    # a chunk of a or c prefetched would add 32 buffers.
    b_bytes = sum(((e + bs - 1) // bs - s_ // bs) * bs for s_, e in (row[1] for row in chunks))
    assert s["bytes_read"] <= b_bytes + 2 * bs, (s["bytes_read"], b_bytes)


def test_column_chunks_reject_what_is_not_parquet(data_file: Path):
    from ucache.parquet import column_chunks

    with pytest.raises(Exception, match="(?i)parquet|magic"):
        column_chunks(str(data_file))
    with pytest.raises(OverflowError):
        ucache.Cache("8MiB").map(str(data_file), column_chunks=[[(-1, 10)]])
    from ucache.parquet import map_parquet

    with pytest.raises(ucache.NotFound):
        map_parquet(ucache.Cache("8MiB"), data_file.parent / "missing.parquet", transparent=True)
