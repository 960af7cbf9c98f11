"""Choosing a policy, built in or written in Python.

A built-in policy is named by a string, ``"s3fifo"``, with optional parameters and presets:
``"s3fifo:libcachesim"`` (libCacheSim 0.3.5's defaults), ``"s3fifo:small_size_ratio=0.2"``,
or the same as keyword arguments (``Cache.map(..., policy="s3fifo",
policy_params={"small_size_ratio": 0.2})``, ``simulate(ids, "s3fifo", sizes,
small_size_ratio=0.2)``). :func:`spec` builds such a string. Parameter names are
libCacheSim's where it has the parameter; :data:`PARAMETERS` lists each policy's, with its
default. A bad name, parameter or value raises :class:`ucache.InvalidArgument` naming it.

A policy written in Python is any object with these methods (all optional but
``choose_victims``), which mirror the hooks of the Rust ``ucache::policy::Policy`` trait:

``attach(buffers, capacity)``
    once before use: the mapping's buffer count and how many can be resident.
``choose_victims(want) -> iterable of int``
    up to `want` resident buffers to evict. The cache checks each (still resident, not
    pinned, not vetoed) and evicts by its own fallback if none qualifies.
``on_miss(i)``, ``on_insert(i)``, ``on_hit(i)``, ``on_evict(i)``
    a demand miss (before the eviction it causes), the buffer became resident, an access
    found it resident, it left the cache.
``admit(i) -> bool``, ``is_evictable(i) -> bool``
    admission control and the application's veto.
``choose_prefetch(i) -> iterable of int``
    buffers to read ahead after a miss on `i`.
``name``
    a string attribute naming the policy (default: the class name).

Each hook runs with the GIL, taken inside the hook. Where it is safe: in :func:`ucache.simulate`
and on explicit mappings (pins, ``read``, ``ensure_cached``...), whose calls release the GIL
before they can reach a hook. Not on transparent mappings, whose hooks run inside the fault
handler of whichever thread touched the memory, where taking the GIL may deadlock:
``Cache.map`` refuses the combination. Each hook call costs a Python call (about a
microsecond), so a Python policy suits experiments, not hot paths.

An exception in a hook never reaches the cache: the policy is switched off for good (every
hook then does nothing, so the cache's own fallback chooses victims), a ``RuntimeWarning`` is
issued, and the error is reported as a :class:`ucache.PolicyError` whose ``__cause__`` is
the hook's exception: raised by :func:`ucache.simulate`, and kept in
:attr:`ucache.Mapping.policy_error`.
"""

from __future__ import annotations

from typing import Any

PARAMETERS: dict[str, dict[str, Any]] = {
    "clock": {"n_bit_counter": 1, "init_freq": 1, "fifo_reinsertion": "false"},
    "s3fifo": {"small_size_ratio": 0.1, "ghost_size_ratio": "main", "move_to_main_threshold": 1, "rules": "ucache"},
    "2q": {"a_in_size_ratio": 0.25, "a_out_size_ratio": 0.5},
    "lfu": {"samples": 16, "exact": "false"},
    "lirs": {"hir_ratio": 0.01},
    "w-tinylfu": {"window_size": 0.01},
}
"""Each parameterized policy's parameters and defaults (the defaults are the policies as they
ran before they had parameters). Presets: ``clock:libcachesim`` (``init_freq=0, fifo_reinsertion=true``),
``s3fifo:libcachesim`` (``ghost_size_ratio=0.9, move_to_main_threshold=2,
rules=libcachesim``), ``lfu:libcachesim`` (``exact=true``), and ``libcachesim`` for every policy whose libCacheSim definition is
ucache's (lru, fifo, mru, sieve, 2q, arc)."""


def spec(name: str, **params: Any) -> str:
    """The policy string for `name` with `params`: ``spec("s3fifo", small_size_ratio=0.2)``
    is ``"s3fifo:small_size_ratio=0.2"``. Checked when used, not here."""
    items = [f"{k}={v}" for k, v in params.items()]
    if not items:
        return name
    return name + ("," if ":" in name else ":") + ",".join(items)


__all__ = ["PARAMETERS", "spec"]
