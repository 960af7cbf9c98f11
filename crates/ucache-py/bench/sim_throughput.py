"""Simulator throughput from Python: requests per second of `ucache.simulate` on a 10M-request
numpy trace (Zipf 0.99 over 1M ids), for CLOCK and LRU at 10% of the distinct ids.

Prints two rates per policy: the replay loop alone (by its thread's CPU time, as `ucache sim`
reports it) and the whole call measured by the wall clock (converting the array, renumbering
ids in order of first appearance, and the replay). Run with the package installed:
    target/pyenv/bin/python crates/ucache-py/bench/sim_throughput.py
"""

from __future__ import annotations

import time

import numpy as np

import ucache


def zipf(n: int, universe: int, alpha: float, seed: int = 42) -> np.ndarray:
    ranks = np.arange(1, universe + 1, dtype=np.float64)
    cdf = np.cumsum(ranks**-alpha)
    cdf /= cdf[-1]
    u = np.random.default_rng(seed).random(n)
    return (np.searchsorted(cdf, u).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))


def main() -> None:
    ids = zipf(10_000_000, 1_000_000, 0.99)
    for policy in ["clock", "lru"]:
        best_wall = None
        for _ in range(3):
            t = time.perf_counter()
            row = ucache.simulate(ids, policy, 0.1, threads=1, details=True)[0]
            wall = time.perf_counter() - t
            best_wall = wall if best_wall is None else min(best_wall, wall)
        print(
            f"{policy:6} miss ratio {row['miss_ratio']:.4f}  replay {row['requests_per_sec'] / 1e6:6.1f} M req/s (CPU)"
            f"  whole call {len(ids) / best_wall / 1e6:6.1f} M req/s (wall, best of 3)"
        )


if __name__ == "__main__":
    main()
