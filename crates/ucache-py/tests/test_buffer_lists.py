"""The index-list primitives: `ensure_cached_buffers`, `prefetch_buffers`, `evict_buffers`,
`writeback_buffers`, `msync_buffers`, and their bad inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ucache


def test_lists_of_any_iterable_of_ints(cache, data_file):
    m = cache.map(data_file)
    m.ensure_cached_buffers([3, 7, 9, 7])
    assert m.resident == 3 and all(m.is_resident(i) for i in (3, 7, 9))
    s = cache.stats()
    assert s["bytes_read"] == 3 * 4096 and s["misses"] == 3
    m.ensure_cached_buffers(range(10, 14))
    m.ensure_cached_buffers(np.array([20, 21], dtype=np.int64))
    m.ensure_cached_buffers(np.array([22], dtype=np.uint32))
    m.ensure_cached_buffers(i for i in (23, 24))
    assert m.resident == 3 + 4 + 2 + 1 + 2
    m.evict_buffers(np.array([3, 7, 9], dtype=np.int32))
    assert m.resident == 9 and not m.is_resident(7) and m.is_resident(10)
    m.evict_buffers([])  # nothing to do
    m.evict_buffers(range(m.buffers))
    assert m.resident == 0
    # Every byte of what the list loaded.
    want = data_file.read_bytes()
    m.ensure_cached_buffers([64, 0])
    for i in (64, 0):
        with m.pin(i) as v:
            assert bytes(v) == want[i * 4096 : (i + 1) * 4096]


def test_prefetch_then_ensure_reads_each_buffer_once(cache, data_file):
    m = cache.map(data_file)
    m.prefetch_buffers([40, 50, 60])
    m.ensure_cached_buffers([60, 50, 40])  # waits for the prefetch's reads
    assert [m.is_resident(i) for i in (40, 50, 60)] == [True] * 3
    assert cache.stats()["bytes_read"] == 3 * 4096
    assert m.resident == 3


def test_evict_buffers_keeps_pinned_ones(cache, data_file):
    m = cache.map(data_file)
    m.ensure_cached_buffers([2, 3])
    with m.pin(2):
        m.evict_buffers([2, 3])
        assert m.is_resident(2) and not m.is_resident(3)
    m.evict_buffers([2])
    assert m.resident == 0


def test_msync_and_writeback_buffers_write_the_listed_dirty_buffers(tmp_path: Path):
    p = tmp_path / "kv.bin"
    cache = ucache.Cache("4MiB")
    m = cache.map(p, writable=True, create=True, length=8 * 4096)
    for b in (1, 6, 7):
        with m.pin(b, exclusive=True) as v:
            v[:8] = (42 + b).to_bytes(8, "little")
    w0 = cache.stats()["writebacks"]
    m.msync_buffers([6, 1, 6])
    assert cache.stats()["writebacks"] == w0 + 2  # the listed ones only, a repeat once
    data = p.read_bytes()
    assert data[4096:4104] == (43).to_bytes(8, "little")
    assert data[6 * 4096 : 6 * 4096 + 8] == (48).to_bytes(8, "little")
    assert data[7 * 4096 : 7 * 4096 + 8] == bytes(8)  # 7 not listed: still dirty, not written
    m.writeback_buffers([7])
    m.msync_buffers([7])  # waits for the write-back started above, if still running
    assert p.read_bytes()[7 * 4096 : 7 * 4096 + 8] == (49).to_bytes(8, "little")
    m.evict_buffers([1, 6, 7])
    assert m.resident == 0
    assert m.read(6 * 4096, 8) == (48).to_bytes(8, "little")
    m.close()


def test_read_only_mapping_accepts_write_back_lists_as_no_ops(cache, data_file):
    """As the range forms do: nothing of a read-only mapping can be dirty."""
    m = cache.map(data_file)
    m.ensure_cached_buffers([1, 2])
    m.writeback_buffers([1, 2])
    m.msync_buffers([1, 2])
    assert cache.stats()["writebacks"] == 0 and m.resident == 2
    with pytest.raises(ucache.OutOfRange):  # still checked
        m.msync_buffers([m.buffers])


@pytest.mark.parametrize(
    "op", ["ensure_cached_buffers", "prefetch_buffers", "evict_buffers", "writeback_buffers", "msync_buffers"]
)
def test_bad_indices_are_refused_and_nothing_happens(cache, data_file, op):
    m = cache.map(data_file)
    m.ensure_cached_buffers([0, 1])
    call = getattr(m, op)
    n = m.buffers
    cases = [
        ([0, n], ucache.OutOfRange, rf"buffer index {n} \(item 1 of the list\) is past the last buffer: the mapping has {n} buffer\(s\), 0 to {n - 1}"),
        ([1, -1], ucache.OutOfRange, r"buffer index -1 \(item 1 of the list\) is negative"),
        ([2**70], ucache.OutOfRange, r"is past the last buffer"),
        ([-(2**70)], ucache.OutOfRange, r"is negative"),
        (np.array([0, -3]), ucache.OutOfRange, r"buffer index -3 \(item 1 of the list\) is negative"),
        ([0, 1.5], TypeError, r"buffer index \(item 1 of the list\) must be an int, not float"),
        (["3"], TypeError, r"must be an int, not str"),
        ([None], TypeError, r"must be an int, not NoneType"),
        (np.array([1.0]), TypeError, r"must be an int"),
        (3, TypeError, r"must be an iterable of ints .*, not int"),
        (None, TypeError, r"not NoneType"),
    ]
    for bad, exc, match in cases:
        with pytest.raises(exc, match=match):
            call(bad)
    # Out of range is also an IndexError and a ValueError, as for the range forms.
    with pytest.raises(IndexError):
        call([n])
    # Nothing happened: the valid indices before the bad one were not acted on.
    assert m.resident == 2 and cache.stats()["bytes_read"] == 2 * 4096
    m.close()
    with pytest.raises(ucache.Closed, match="closed"):
        call([0])
