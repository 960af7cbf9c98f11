"""Scanning a mapping from Python buffer by buffer: `m.landing` against a loop of `m.pin(i)`
and against `ensure_cached_buffers` then pins, in one run, interleaved and repeated; reports
buffers per second (median of the repeats) and the ratios to the pin loop.

Each variant starts with the mapping's buffers evicted (the file stays in the OS page cache,
so this measures the per-buffer cost of the Python path and its overlap, not the device).
Run with the package installed (UCACHE_PY_PROFILE=release bash scripts/test-python.sh -k stubs
installs the optimized build):
    target/pyenv/bin/python crates/ucache-py/bench/landing.py [MiB] [repeats]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import ucache


def pins(m: ucache.Mapping) -> int:
    s = 0
    for i in range(m.buffers):
        with m.pin(i) as v:
            s += v[0]
    return s


def landing(m: ucache.Mapping) -> int:
    s = 0
    for p in m.landing(range(m.buffers), depth=32):
        with p as v:
            s += v[0]
    return s


def ensure_then_pins(m: ucache.Mapping) -> int:
    m.ensure_cached_buffers(range(m.buffers))
    return pins(m)


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "scan.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(mib << 20))
        cache = ucache.Cache(f"{2 * mib}MiB")
        m = cache.map(path)
        variants = {"pin loop": pins, "landing": landing, "ensure+pins": ensure_then_pins}
        rates: dict[str, list[float]] = {k: [] for k in variants}
        want = None
        for _ in range(reps):
            for name, f in variants.items():
                m.evict()
                t = time.perf_counter()
                got = f(m)
                rates[name].append(m.buffers / (time.perf_counter() - t))
                assert want is None or got == want, name
                want = got
        base = statistics.median(rates["pin loop"])
        print(f"{mib} MiB, {m.buffers} buffers of {m.buffer_size}, {reps} repeats (median)")
        for name, r in rates.items():
            med = statistics.median(r)
            print(f"  {name:12s} {med:12,.0f} buffers/s  {med / base:5.2f}x the pin loop")


if __name__ == "__main__":
    main()
