"""Policies with parameters, and policies written in Python."""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

import ucache

from conftest import pattern


class PyLRU:
    """LRU in Python: an OrderedDict from oldest to newest."""

    def attach(self, buffers: int, capacity: int) -> None:
        self.order: OrderedDict[int, None] = OrderedDict()
        self.calls = 0

    def on_insert(self, i: int) -> None:
        self.order[i] = None

    def on_hit(self, i: int) -> None:
        self.calls += 1
        if i in self.order:  # a hit may race an eviction on a live mapping: ignore it
            self.order.move_to_end(i)

    def on_evict(self, i: int) -> None:
        self.order.pop(i, None)

    def choose_victims(self, want: int) -> list[int]:
        return [i for i, _ in zip(self.order, range(want))]


class RaisesOnEvict(PyLRU):
    def on_evict(self, i: int) -> None:
        raise KeyError(f"no buffer {i}")


def _trace() -> np.ndarray:
    rng = np.random.default_rng(7)
    return (rng.zipf(1.2, 20_000) % 1500).astype(np.uint64)


def test_built_in_policies_take_parameters_and_presets():
    ids = _trace()
    base = ucache.simulate(ids, "s3fifo", [50, 200])
    assert ucache.simulate(ids, "s3fifo:small_size_ratio=0.1", [50, 200]) == base
    bigger = ucache.simulate(ids, "s3fifo", [50, 200], small_size_ratio=0.3)
    assert bigger == ucache.simulate(ids, "s3fifo:small_size_ratio=0.3", [50, 200]) != base
    assert ucache.simulate(ids, ucache.policy.spec("s3fifo", small_size_ratio=0.3), [50, 200]) == bigger
    # Presets, and a preset with an override after it.
    assert ucache.simulate(ids, "clock:libcachesim", 100) != ucache.simulate(ids, "clock", 100)
    assert ucache.simulate(ids, "2q:libcachesim", 100) == ucache.simulate(ids, "2q", 100)
    got = ucache.simulate(ids, ["lru", "s3fifo:libcachesim,small_size_ratio=0.2"], [100])
    assert set(got) == {"lru", "s3fifo:libcachesim,small_size_ratio=0.2"}


@pytest.mark.parametrize(
    "policy,params,match",
    [
        ("s3fifo", {"small_size_ratio": 1.5}, r"small_size_ratio=1.5 is invalid"),
        ("s3fifo", {"small_size_ratio": "lots"}, r"small_size_ratio=lots is invalid"),
        ("s3fifo", {"smal_size_ratio": 0.1}, r"no parameter 'smal_size_ratio'.*small_size_ratio"),
        ("s3fifo", {"move_to_main_threshold": 0}, r"from 1 to 3"),
        ("clock", {"n_bit_counter": 9}, r"n_bit_counter=9"),
        ("lru", {"k": 2}, r"'lru' has no parameter 'k'"),
        ("s3fifo:fast", {}, r"no preset 'fast'.*libcachesim"),
        ("s3fifo", {"rules": "mine"}, r"ucache or libcachesim"),
        ("s3fifo", {"small_size_ratio": True}, r"not a bool"),
    ],
)
def test_bad_parameters_raise_invalid_argument(cache, data_file, policy, params, match):
    with pytest.raises(ucache.InvalidArgument, match=match):
        ucache.simulate([1, 2, 3], policy, 2, **params)
    with pytest.raises(ucache.InvalidArgument, match=match):
        cache.map(data_file, policy=policy, policy_params=params)


def test_mapping_takes_a_policy_with_parameters(cache, data_file):
    m = cache.map(data_file, policy="s3fifo", policy_params={"small_size_ratio": 0.25})
    assert m.policy == "s3fifo" and m.policy_error is None
    assert m.read(100, 5) == pattern(200)[100:105]
    m2 = cache.map(data_file, policy="clock:libcachesim")
    assert m2.read(0, 8) == pattern(8)
    with pytest.raises(ucache.InvalidArgument, match="without a policy"):
        cache.map(data_file, policy_params={"small_size_ratio": 0.2})


def test_python_lru_equals_the_built_in_lru_in_the_simulator():
    ids = _trace()
    sizes = [20, 100, 400]
    assert ucache.simulate(ids, PyLRU, sizes) == ucache.simulate(ids, "lru", sizes)
    # An instance works too; attach resets it for each size.
    assert ucache.simulate(ids, PyLRU(), sizes) == ucache.simulate(ids, "lru", sizes)
    rows = ucache.simulate(ids, [PyLRU, "lru"], 100, details=True)
    assert rows[0]["policy"] == "PyLRU" and rows[0]["misses"] == rows[1]["misses"]


def _pin_sequence(m: ucache.Mapping, seq: list[int]) -> None:
    for i in seq:
        with m.pin(i):
            pass


def test_python_lru_equals_the_built_in_lru_on_a_mapping(data_file: Path):
    """Pins through a 16-buffer budget, one thread, one eviction at a time: the Python LRU
    and the built-in one make the same decisions, so the counters are equal. Without
    readahead, whose loads on the IO threads would interleave with the pins by timing."""
    rng = np.random.default_rng(11)
    seq = [int(x) for x in rng.zipf(1.3, 3000) % 64]
    stats = {}
    for name, policy in [("builtin", "lru"), ("python", PyLRU())]:
        cache = ucache.Cache("64KiB", batch=1, background_eviction=False)
        m = cache.map(data_file, policy=policy, readahead=False)
        _pin_sequence(m, seq)
        s = cache.stats()
        stats[name] = (s["hits"], s["misses"], s["evictions"])
        assert m.policy_error is None
        if name == "python":
            assert policy.calls > 0 and m.policy == "PyLRU"
    assert stats["python"] == stats["builtin"]
    assert stats["builtin"][2] > 100  # the budget was exceeded many times


def test_raising_python_policy_is_reported_and_the_mapping_keeps_working(data_file: Path):
    cache = ucache.Cache("64KiB", batch=1, background_eviction=False)
    m = cache.map(data_file, policy=RaisesOnEvict)
    want = pattern(64 * 4096 + 1000)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for i in range(64):  # 64 buffers through 16 slots: evictions, the first one raises
            with m.pin(i) as view:
                assert bytes(view[:8]) == want[i * 4096 : i * 4096 + 8]
    assert any(issubclass(x.category, RuntimeWarning) and "on_evict" in str(x.message) for x in w)
    err = m.policy_error
    assert isinstance(err, ucache.PolicyError)
    assert "RaisesOnEvict: on_evict raised KeyError" in str(err)
    assert isinstance(err.__cause__, KeyError)
    # The fallback kept the mapping within budget and every byte right.
    assert m.read() == want
    assert cache.used <= 64 * 1024
    assert cache.stats()["evictions"] > 0


def test_raising_python_policy_makes_simulate_raise_policy_error():
    class RaisesOnHit(PyLRU):
        def on_hit(self, i: int) -> None:
            raise ValueError("bad hit")

    class BadVictims(PyLRU):
        def choose_victims(self, want: int):
            return ["not", "an", "index"]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ucache.PolicyError, match="on_hit raised ValueError: bad hit") as e:
            ucache.simulate(_trace(), RaisesOnHit, 50)
        assert isinstance(e.value.__cause__, ValueError)
        with pytest.raises(ucache.PolicyError, match="choose_victims raised TypeError"):
            ucache.simulate(_trace(), BadVictims, 50)


def test_python_policies_are_refused_where_unsafe_or_malformed(cache, data_file):
    with pytest.raises(ucache.InvalidArgument, match="transparent"):
        cache.map(data_file, policy=PyLRU(), transparent=True)
    with pytest.raises(ucache.InvalidArgument, match="choose_victims"):
        cache.map(data_file, policy=object())
    with pytest.raises(ucache.InvalidArgument, match="choose_victims"):
        ucache.simulate([1, 2], object(), 1)
    with pytest.raises(ucache.InvalidArgument, match="built-in policy"):
        cache.map(data_file, policy=PyLRU(), policy_params={"k": 1})


def test_python_policy_under_threads_and_the_background_evictor(data_file: Path):
    """Pins on four threads with the background evictor on: its hooks take the GIL on other
    threads while the pinning threads have released it. Finishes, and the data is right."""
    cache = ucache.Cache("64KiB")
    m = cache.map(data_file, policy=PyLRU())
    want = pattern(64 * 4096 + 1000)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for j in range(300):
                i = (k * 17 + j * 7) % 64
                with m.pin(i) as view:
                    assert bytes(view[:8]) == want[i * 4096 : i * 4096 + 8]
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in ts)
    assert m.policy_error is None


def test_documented_parameters_are_the_defaults():
    """ucache.policy.PARAMETERS names every parameter with its default: spelling them all out
    changes nothing, and each is accepted."""
    ids = _trace()
    for name, params in ucache.policy.PARAMETERS.items():
        assert ucache.simulate(ids, ucache.policy.spec(name, **params), [30, 300]) == ucache.simulate(
            ids, name, [30, 300]
        ), name
