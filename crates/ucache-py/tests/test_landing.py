"""`Mapping.landing`: shared pins of a list of buffers in the order they land, with reads in
flight ahead of the consumer; every byte, its bounds (through counters), its bad inputs and
early abandonment."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import ucache
from test_policies import PyLRU


def _block(want: bytes, i: int) -> bytes:
    return want[i * 4096 : (i + 1) * 4096]


def test_every_buffer_once_every_byte_right(cache, data_file):
    want = data_file.read_bytes()
    m = cache.map(data_file)
    seen = []
    for p in m.landing(range(m.buffers), depth=8):
        assert isinstance(p, ucache.Pin) and not p.exclusive
        with p as v:
            assert v.readonly and bytes(v) == _block(want, p.index)
        assert p.released
        seen.append(p.index)
    assert sorted(seen) == list(range(m.buffers))
    s = cache.stats()
    assert s["bytes_read"] == m.buffers * 4096  # no buffer read twice (whole buffers counted)
    # Nothing left pinned or in flight: everything can go, and the mapping can close.
    m.evict()
    assert m.resident == 0
    m.close()


def test_cached_buffers_come_in_list_order_with_repeats(cache, data_file):
    want = data_file.read_bytes()
    m = cache.map(data_file)
    order = [5, 3, 9, 3, 64, 0]
    m.ensure_cached_buffers(order)
    read = cache.stats()["bytes_read"]
    got = []
    for p in m.landing(order, depth=4):
        got.append(p.index)
        assert bytes(p.view) == _block(want, p.index)
        p.release()
    assert got == order
    assert cache.stats()["bytes_read"] == read  # all hits


def test_depth_bounds_the_reads_ahead(cache, data_file):
    """At each item, at most `depth` buffers beyond those yielded have been read or are
    resident: counted by the statistics, not timed."""
    m = cache.map(data_file)
    depth = 3
    for k, p in enumerate(m.landing(np.arange(m.buffers), depth=depth)):
        # Yielded so far: k + 1. Read ahead: at most `depth` (landed, or in flight, whose
        # bytes are counted once read).
        assert cache.stats()["bytes_read"] <= (k + 1 + depth) * 4096
        assert m.resident <= k + 1 + depth
        p.release()
    assert m.resident == m.buffers


def test_small_budget_streams_every_byte(data_file):
    want = data_file.read_bytes()
    cache = ucache.Cache("64KiB", batch=4)
    m = cache.map(data_file)
    got = Counter()
    for p in m.landing(list(range(m.buffers)) * 2, depth=32):
        with p as v:
            assert bytes(v) == _block(want, p.index)
        got[p.index] += 1
        assert cache.used <= 64 * 1024
    assert got == Counter({i: 2 for i in range(m.buffers)})
    assert cache.stats()["evictions"] > 0
    m.evict()
    assert m.resident == 0


def test_kept_pins_stay_valid_and_block_close(cache, data_file):
    want = data_file.read_bytes()
    m = cache.map(data_file)
    kept = list(m.landing([4, 8, 12], depth=2))
    assert sorted(p.index for p in kept) == [4, 8, 12]
    m.evict()
    assert m.resident == 3  # still pinned by the kept pins
    for p in kept:
        assert bytes(p.view) == _block(want, p.index)
    with pytest.raises(ucache.InUse):
        m.close()
    for p in kept:
        p.release()
        with pytest.raises(ucache.Closed, match=f"pin of buffer {p.index} .* was released"):
            p.view
    m.evict()
    assert m.resident == 0
    del kept, p
    gc.collect()
    m.close()


@pytest.mark.parametrize("how", ["with", "bare", "del", "close"])
def test_early_break_releases_every_pin(cache, data_file, how):
    want = data_file.read_bytes()
    m = cache.map(data_file)
    it = m.landing(range(m.buffers), depth=16)
    if how == "close":
        with it:
            for p in it:
                with p as v:
                    assert bytes(v) == _block(want, p.index)
                break
        assert it.closed
        with pytest.raises(StopIteration):
            next(it)
        del it
    elif how == "del":
        first = next(it)
        first.release()
        del it
    else:
        for p in it:
            if how == "with":
                with p as v:
                    assert bytes(v) == _block(want, p.index)
            else:
                assert len(p) == 4096
            break
        del it
        if how == "bare":
            # The last pin yielded is the loop variable's: alive, so still pinned.
            m.evict()
            assert m.resident == 1 and m.is_resident(p.index)
            del p
    # The iterator waited for its reads and unpinned what it held: everything can go.
    m.evict()
    assert m.resident == 0
    read = cache.stats()["bytes_read"]
    assert 4096 <= read <= (1 + 16) * 4096  # the window, not the whole list
    assert cache.stats()["bytes_read"] == read  # nothing still in flight lands later
    m.close()


def test_bad_inputs(cache, data_file):
    m = cache.map(data_file)
    n = m.buffers
    with pytest.raises(ucache.InvalidArgument, match="depth must be at least 1"):
        m.landing([0], depth=0)
    with pytest.raises(OverflowError):
        m.landing([0], depth=-1)
    with pytest.raises(ucache.OutOfRange, match=rf"buffer index {n} \(item 2 of the list\) is past the last buffer"):
        m.landing([0, 1, n])
    with pytest.raises(ucache.OutOfRange, match="is negative"):
        m.landing(range(-1, 3))
    with pytest.raises(TypeError, match="must be an int"):
        m.landing([0.0])
    # A refused list started nothing.
    assert m.resident == 0 and cache.stats()["bytes_read"] == 0
    it = m.landing([1, 2])
    with pytest.raises(ucache.InUse, match=r"1 pin\(s\), landing iterator\(s\) or call\(s\)"):
        m.close()  # the iterator holds the mapping
    assert [p.index for p in it] in ([1, 2], [2, 1])
    assert it.closed
    with pytest.raises(StopIteration):
        next(it)
    gc.collect()
    m.close()  # an exhausted iterator no longer holds the mapping
    with pytest.raises(ucache.Closed, match="closed"):
        m.landing([0])


def test_item_errors_are_raised_and_the_iterator_goes_on(tmp_path):
    """A buffer this thread holds exclusively cannot be pinned shared: `WouldDeadlock` for that
    item, and the next item comes after it."""
    p = tmp_path / "w.bin"
    cache = ucache.Cache("4MiB")
    m = cache.map(p, writable=True, create=True, length=4 * 4096)
    with m.pin(1, exclusive=True):
        it = m.landing([1, 2], depth=1)
        got = []
        while True:
            try:
                q = next(it)
            except ucache.WouldDeadlock:
                got.append("deadlock")
                continue
            except StopIteration:
                break
            got.append(q.index)
            q.release()
    assert got == ["deadlock", 2]


def test_gil_is_released_with_a_python_policy_and_threads(data_file):
    """The IO threads run a Python policy's hooks, which need the GIL, while the iterators
    wait for their reads: this finishes only if the waits release it."""
    want = data_file.read_bytes()
    cache = ucache.Cache("128KiB", batch=4)
    m = cache.map(data_file, policy=PyLRU())
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            idx = [(i * (k + 1)) % m.buffers for i in range(m.buffers)]
            for p in m.landing(idx, depth=8):
                with p as v:
                    assert bytes(v) == _block(want, p.index)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    assert not errors and not any(t.is_alive() for t in ts)
    assert m.policy_error is None
    m.evict()
    assert m.resident == 0


def test_iterator_shared_between_threads_yields_each_once(cache, data_file):
    want = data_file.read_bytes()
    m = cache.map(data_file)
    it = m.landing(range(m.buffers), depth=8)
    seen: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        while True:
            try:
                p = next(it)
            except StopIteration:
                return
            except ucache.InUse:
                continue  # another thread is in next(): refused, not blocked
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                return
            with p as v:
                ok = bytes(v) == _block(want, p.index)
            with lock:
                seen.append(p.index if ok else -1)

    ts = [threading.Thread(target=worker) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    assert not errors and not any(t.is_alive() for t in ts)
    assert sorted(seen) == list(range(m.buffers))


def test_stress_iterators_dropped_early_under_evict_all(data_file):
    """Threads run landing iterators over a small budget, some abandoned part-way (the drop
    then runs on that thread), others handing their pins to another thread to release, while
    one thread evicts everything over and over: every byte is checked, and once all are done
    nothing is left pinned or in flight."""
    want = data_file.read_bytes()
    cache = ucache.Cache("128KiB", batch=4)
    m = cache.map(data_file)
    n = m.buffers
    stop = threading.Event()
    errors: list[BaseException] = []
    handed: list[ucache.Pin] = []
    lock = threading.Lock()

    def evictor() -> None:
        while not stop.is_set():
            m.evict()

    def reader(k: int) -> None:
        try:
            rng = np.random.default_rng(k)
            for rnd in range(12):
                idx = rng.integers(0, n, size=48)
                stop_at = int(rng.integers(1, 60))
                for j, p in enumerate(m.landing(idx, depth=int(rng.integers(1, 12)))):
                    assert bytes(p.view) == _block(want, p.index)
                    if rnd % 3 == 0 and j % 5 == 0:
                        with lock:
                            handed.append(p)  # released by another thread below
                    else:
                        p.release()
                    if j == stop_at:
                        break
                with lock:
                    mine = handed[:]
                    handed.clear()
                for q in mine:
                    q.release()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ev = threading.Thread(target=evictor)
    ev.start()
    ts = [threading.Thread(target=reader, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    stop.set()
    ev.join(300)
    assert not errors and not any(t.is_alive() for t in ts + [ev])
    assert not handed
    m.evict()
    assert m.resident == 0
    m.close()


def test_early_drop_with_a_python_policy_does_not_hold_the_gil(data_file):
    """Dropping an iterator waits for its reads in flight, whose completion runs the Python
    policy's hooks on the IO threads: a drop holding the GIL would deadlock. In a child
    interpreter, so a deadlock fails the test by its timeout instead of hanging the run."""
    code = textwrap.dedent(
        f"""
        import sys, ucache
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_policies import PyLRU
        c = ucache.Cache("256KiB", batch=4)
        m = c.map({str(data_file)!r}, policy=PyLRU())
        for r in range(40):
            m.evict()
            for p in m.landing(range(m.buffers), depth=16):
                p.release()
                break
            it = m.landing(range(m.buffers), depth=16)
            next(it).release()
            it.close()
        m.evict()
        assert m.resident == 0 and m.policy_error is None
        print("ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
