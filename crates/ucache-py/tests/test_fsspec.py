"""The ``ucache`` fsspec filesystem against fsspec's expectations of a read-only filesystem."""

from __future__ import annotations

import io
import time
from pathlib import Path

import fsspec
import pytest

import ucache
from ucache.filesystem import LOCAL_BUFFER_SIZE, S3_DEFAULT_POLICY, UcacheFileSystem, default_s3_buffer_size, size_weight

# Hang limit for background work (as crates/ucache/tests/common's HANG): never a timing check.
HANG = 300.0


@pytest.fixture
def fs() -> UcacheFileSystem:
    return UcacheFileSystem(cache=ucache.Cache("8MiB"), buffer_size="16KiB")


def test_protocol_is_registered():
    assert fsspec.get_filesystem_class("ucache") is UcacheFileSystem


def test_paths_and_info(fs, data_file: Path):
    n = data_file.stat().st_size
    for spelled in [str(data_file), f"ucache://{data_file}", f"file://{data_file}"]:
        assert fs.info(spelled)["size"] == n
        assert fs.size(spelled) == n
        assert fs.exists(spelled) and fs.isfile(spelled)
    assert fs.isdir(str(data_file.parent))
    assert fs.ls(str(data_file.parent), detail=False) == [str(data_file)]
    assert fs.glob(f"{data_file.parent}/*.bin") == [str(data_file)]
    assert not fs.exists(str(data_file) + ".nope")


def test_cat_file_and_ranges_follow_fsspec_conventions(fs, data_file: Path):
    want = data_file.read_bytes()
    p = str(data_file)
    assert fs.cat_file(p) == want
    assert fs.cat_file(p, 10, 20) == want[10:20]
    assert fs.cat_file(p, -10) == want[-10:]
    assert fs.cat_file(p, 5, -5) == want[5:-5]
    assert fs.cat_file(p, len(want) - 3, len(want) + 100) == want[-3:]
    assert fs.cat_file(p, 50, 10) == b""
    got = fs.cat_ranges([p, p, p], [0, 4090, 100_000], [8, 4200, 100_016])
    assert got == [want[0:8], want[4090:4200], want[100_000:100_016]]
    bad = fs.cat_ranges([p + ".missing"], [0], [1])
    assert isinstance(bad[0], FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        fs.cat_ranges([p + ".missing"], [0], [1], on_error="raise")


def test_file_objects_read_seek_tell(fs, data_file: Path):
    want = data_file.read_bytes()
    with fs.open(str(data_file), "rb") as f:
        assert f.size == len(want) and f.readable() and f.seekable() and not f.writable()
        assert f.read(5) == want[:5] and f.tell() == 5
        assert f.seek(4000) == 4000 and f.read(200) == want[4000:4200]
        assert f.seek(-7, io.SEEK_END) == len(want) - 7 and f.read() == want[-7:]
        assert f.read(10) == b""
        f.seek(-5, io.SEEK_CUR)
        assert f.tell() == len(want) - 5
        buf = bytearray(16)
        f.seek(100)
        assert f.readinto(buf) == 16 and bytes(buf) == want[100:116]
    with fsspec.open(f"ucache://{data_file}", "rb", memory="4MiB") as f:
        assert f.read() == want


def test_reads_go_through_ucache_without_over_reading(fs, data_file: Path):
    """A 10-byte read loads the one 16 KiB buffer that holds it, and nothing else: no block
    cache of fsspec's asks for more."""
    s0 = fs.cache.stats()
    with fs.open(str(data_file)) as f:
        f.seek(20_000)
        f.read(10)
    s = fs.cache.stats()
    assert s["bytes_read"] - s0["bytes_read"] == 16 * 1024
    assert s["misses"] - s0["misses"] == 1
    with fs.open(str(data_file)) as f:
        f.seek(20_004)
        f.read(10)
    assert fs.cache.stats()["hits"] > s["hits"]
    assert fs.cache.stats()["bytes_read"] == s["bytes_read"]


def _read_in_pieces(fs: UcacheFileSystem, path: Path, piece: int, count: int) -> bytes:
    out = b""
    with fs.open(str(path)) as f:
        for _ in range(count):
            out += f.read(piece)
    return out


def test_readahead_option_reaches_the_mappings(data_file: Path):
    """`readahead=False`: a file read in sequential pieces loads exactly the buffers of the
    pieces; the default (on) loads windows ahead of a sequential reader too (in the
    background, so the test waits for them with a hang limit, never for a time)."""
    want = data_file.read_bytes()
    piece, count = 16 << 10, 4
    off = UcacheFileSystem(cache=ucache.Cache("8MiB"), buffer_size="16KiB", readahead=False)
    assert _read_in_pieces(off, data_file, piece, count) == want[: piece * count]
    s = off.cache.stats()
    assert s["bytes_read"] == piece * count and s["misses"] == count

    on = UcacheFileSystem(cache=ucache.Cache("8MiB"), buffer_size="16KiB")
    assert on.readahead is True
    assert _read_in_pieces(on, data_file, piece, count) == want[: piece * count]
    deadline = time.monotonic() + HANG
    while on.cache.stats()["bytes_read"] <= piece * count:
        assert time.monotonic() < deadline, f"no readahead: {on.cache.stats()}"
        time.sleep(0.01)


def test_file_read_after_close_all_maps_again(fs, data_file: Path):
    """A file object keeps its mapping; when the filesystem closes its mappings under it, the
    next read maps the file anew instead of failing."""
    want = data_file.read_bytes()
    with fs.open(str(data_file)) as f:
        assert f.read(100) == want[:100]
        fs.close_all()
        assert f.read(100) == want[100:200] and f.tell() == 200
    assert not fs.mapping(str(data_file)).closed


def test_default_buffer_sizes():
    """S3 buffers: the budget over 64, a power of two within [16 KiB, 64 KiB], so that a small
    budget still holds enough buffers for scattered chunks and a Parquet column chunk is not
    rounded out by much (a GET merges a read's buffers whatever their size). Local: 64 KiB."""
    assert default_s3_buffer_size(2 << 20) == 32 << 10
    assert default_s3_buffer_size(3 << 20) == 32 << 10  # rounded down
    assert default_s3_buffer_size(4 << 20) == 64 << 10
    assert default_s3_buffer_size(256 << 10) == 16 << 10  # floor
    assert default_s3_buffer_size(64 << 20) == 64 << 10
    assert default_s3_buffer_size(8 << 30) == 64 << 10  # ceiling
    assert LOCAL_BUFFER_SIZE == 64 << 10


def test_local_files_get_the_local_default(data_file: Path):
    fs = UcacheFileSystem(cache=ucache.Cache("8MiB"))
    assert fs.mapping(str(data_file)).buffer_size == LOCAL_BUFFER_SIZE
    assert fs.mapping(str(data_file)).policy == ucache.Cache("1MiB").map(str(data_file)).policy


def test_empty_file(fs, tmp_path: Path):
    p = tmp_path / "empty"
    p.write_bytes(b"")
    assert fs.cat_file(str(p)) == b""
    with fs.open(str(p)) as f:
        assert f.read() == b"" and f.size == 0


def test_read_only(fs, data_file: Path):
    for call in [
        lambda: fs.open(str(data_file), "wb"),
        lambda: fs.rm(str(data_file)),
        lambda: fs.pipe_file(str(data_file), b"x"),
        lambda: fs.mkdir(str(data_file.parent / "d")),
    ]:
        with pytest.raises(PermissionError):
            call()
    assert data_file.exists()


def test_s3_objects(s3_env, s3fs_client, s3_prefix, data_file: Path):
    key = f"{s3_prefix}/fsspec/data.bin"
    s3fs_client.put(str(data_file), key)
    want = data_file.read_bytes()
    fs = UcacheFileSystem(cache=ucache.Cache("8MiB"), buffer_size="64KiB", endpoint=s3_env["endpoint"])
    url = f"s3://{key}"
    assert fs.size(url) == len(want) == fs.info(f"ucache://{url}")["size"]
    assert fs.cat_file(url, 70_000, 70_100) == want[70_000:70_100]
    assert fs.cat_ranges([url, url], [0, 200_000], [4, 200_050]) == [want[:4], want[200_000:200_050]]
    assert fs.ls(f"s3://{s3_prefix}/fsspec", detail=False) == [url]
    with fs.open(url) as f:
        f.seek(-100, io.SEEK_END)
        assert f.read() == want[-100:]
    with fsspec.open(f"ucache::{url}", "rb", ucache={"memory": "8MiB"}, s3={"endpoint_url": s3_env["endpoint"]}) as f:
        assert f.read(6) == want[:6]


def test_s3_default_buffer_size_follows_the_budget(s3_env, s3fs_client, s3_prefix, data_file: Path):
    """Without `buffer_size`, an S3 object's buffers are sized from the cache's budget, and a
    small read loads one such buffer."""
    key = f"{s3_prefix}/fsspec/sized.bin"
    s3fs_client.put(str(data_file), key)
    want = data_file.read_bytes()
    fs = UcacheFileSystem(cache=ucache.Cache("8MiB"), endpoint=s3_env["endpoint"])
    url = f"s3://{key}"
    assert fs.mapping(url).buffer_size == 64 << 10
    assert fs.mapping(url).policy == S3_DEFAULT_POLICY == "lfu"
    with fs.open(url) as f:
        f.seek(140_000)
        assert f.read(10) == want[140_000:140_010]
    s = fs.cache.stats()
    assert s["misses"] == 1 and s["bytes_read"] == 64 << 10


def test_s3_gets_read_through_small_gaps(s3_env, s3fs_client, s3_prefix, data_file: Path):
    """Misses of one batch a gap apart share a GET up to `coalesce_gap`; the store counts its
    GETs and their bytes (`store_requests`), which local files do not."""
    key = f"{s3_prefix}/fsspec/gaps.bin"
    s3fs_client.put(str(data_file), key)
    want = data_file.read_bytes()
    url = f"s3://{key}"
    got = {}
    for gap in [0, "64KiB"]:
        # Readahead off: the reads of buffers 2 and 3 continue one another, and the window they
        # start (buffer 4) is a GET of its own that may or may not have ended when they are
        # counted.
        fs = UcacheFileSystem(
            cache=ucache.Cache("8MiB"), buffer_size="64KiB", endpoint=s3_env["endpoint"], coalesce_gap=gap, readahead=False
        )
        m = fs.mapping(url)
        m.ensure_cached_buffers([0, 2, 3])
        for i in [0, 2, 3]:
            assert m.read(i << 16, 1 << 16) == want[i << 16 : (i + 1) << 16]
        assert not m.is_resident(1), "a gap read through is not cached"
        got[gap] = m.store_requests()
    assert got[0] == {"reads": 2, "bytes_read": 3 << 16}
    assert got["64KiB"] == {"reads": 1, "bytes_read": 4 << 16}
    local = UcacheFileSystem(cache=ucache.Cache("8MiB")).mapping(str(data_file))
    assert local.store_requests() is None
    with pytest.raises(ucache.InvalidArgument, match="size"):
        ucache.Cache("8MiB").map(url, endpoint=s3_env["endpoint"], coalesce_gap="lots")


def test_a_prefetching_filesystem_maps_s3_in_small_buffers(s3_env, s3fs_client, s3_prefix, data_file: Path):
    """With the Parquet prefetcher on, S3 objects default to 16 KiB buffers whose GETs read
    through gaps of up to 64 KiB (four buffers), not beyond; given values still win."""
    key = f"{s3_prefix}/fsspec/prefetching.bin"
    s3fs_client.put(str(data_file), key)
    want = data_file.read_bytes()
    url = f"s3://{key}"
    fs = UcacheFileSystem(cache=ucache.Cache("8MiB"), endpoint=s3_env["endpoint"], parquet_prefetch=2, readahead=False)
    m = fs.mapping(url)
    assert m.buffer_size == 16 << 10
    m.ensure_cached_buffers([0, 5])  # a gap of 4 buffers: one GET
    m.ensure_cached_buffers([8, 14])  # a gap of 5: two
    for i in [0, 5, 8, 14]:
        assert m.read(i << 14, 1 << 14) == want[i << 14 : (i + 1) << 14]
    assert m.store_requests() == {"reads": 3, "bytes_read": (6 + 2) << 14}
    given = UcacheFileSystem(
        cache=ucache.Cache("8MiB"),
        endpoint=s3_env["endpoint"],
        parquet_prefetch=2,
        buffer_size="64KiB",
        coalesce_gap=0,
        readahead=False,
    ).mapping(url)
    assert given.buffer_size == 64 << 10
    given.ensure_cached_buffers([0, 2])
    assert given.store_requests() == {"reads": 2, "bytes_read": 2 << 16}


def _scan_misses(
    tmp_path: Path, size_weighted: bool, passes: int = 2, small_kib: int = 256, pieces: int = 4, **cache_kw
) -> list[int]:
    """Reads all of a small file, then the first `pieces` × 224 KiB of a large one `passes`
    times, under a 1 MiB budget of 16 KiB buffers; returns each pass's misses after the first.
    The large file is read in pieces, last first: its earlier pieces are then resident and unpinned while
    it reads the next (one read of it all would pin every buffer it loads at once). Each piece
    reaches one buffer into the next, so no read starts where another ended: nothing is read
    ahead."""
    tmp_path.mkdir()
    small, big = tmp_path / "small.bin", tmp_path / "big.bin"
    small.write_bytes(b"s" * (small_kib << 10))
    big.write_bytes(b"b" * (4 << 20))
    cache = ucache.Cache("1MiB", batch=1, **cache_kw)
    # Readahead off: which buffers a pass misses depends on the eviction's timing, and a run of
    # adjacent misses once set off a readahead window (1 prefetch in a CI run), which changes
    # the misses this test counts.
    fs = UcacheFileSystem(cache=cache, buffer_size="16KiB", size_weighted=size_weighted, readahead=False)
    assert fs.cat_file(str(small)) == small.read_bytes()
    piece = 224 << 10

    def scan() -> None:
        for start in range((pieces - 1) * piece, -1, -piece):
            end = min(start + piece + (16 << 10), pieces * piece)
            assert fs.cat_file(str(big), start, end) == b"b" * (end - start)

    scan()
    misses = []
    for _ in range(passes - 1):
        before = fs.cache.stats()["misses"]
        scan()
        misses.append(fs.cache.stats()["misses"] - before)
    assert fs.cache.stats()["prefetches"] == 0
    return misses


def _scan_twice_misses(tmp_path: Path, size_weighted: bool) -> int:
    return _scan_misses(tmp_path, size_weighted)[0]


def test_size_weights_let_a_large_files_working_set_stay(tmp_path: Path):
    """Eviction takes victims first from the mapping most over its weighted share. With equal
    weights the large file, holding the most, evicts its own buffers while the small file's
    stay, so a working set that fits the budget misses again on the next pass; weighted by
    size (the default), the small file gives way and the second pass hits."""
    assert size_weight(1) == 1 and size_weight(64 << 10) == 1 and size_weight((64 << 10) + 1) == 2
    assert _scan_twice_misses(tmp_path / "weighted", size_weighted=True) == 0
    assert _scan_twice_misses(tmp_path / "equal", size_weighted=False) > 0


def test_an_idle_file_gives_way_unless_shares_are_kept(tmp_path: Path):
    """With equal weights the small file's share protects its buffers only while someone uses
    it: once the cache has evicted half its budget since its last read, it is idle, its
    buffers go first, and the large file's passes stop missing. With `keep_idle_shares` the
    weights are reservations, and every pass misses. The large file's 43 buffers fit the
    budget's 64 with room to spare, but not beside the small file's 24."""
    run = dict(size_weighted=False, passes=40, small_kib=384, pieces=3)
    kept = _scan_misses(tmp_path / "kept", **run, keep_idle_shares=True)
    assert all(m > 0 for m in kept), kept
    idle = _scan_misses(tmp_path / "idle", **run)
    assert idle[-1] == 0, idle


def test_keep_idle_shares_takes_a_bool():
    with pytest.raises(TypeError):
        ucache.Cache("1MiB", keep_idle_shares="yes")
