"""The policy simulator from Python.

:func:`simulate` replays a trace (a numpy array of ids or a trace file) through ucache's
policies with the code of the ``ucache sim`` command: the same readers, renumbering and
:class:`ucache::policy::Simulator`, which runs the very policy code of the live cache. Every id
is one buffer, so miss ratios are object miss ratios.

The classes at the end mirror libCacheSim's Python package for the common calls
(``LRU(cache_size).process_trace(trace) -> (miss_ratio, byte_miss_ratio)``), so a notebook
written against libcachesim can switch by changing its import. They take libCacheSim's
parameter names and run ucache's policies with libCacheSim's presets where ucache has one
(``Clock`` is ``clock:libcachesim``, ``S3FIFO`` is ``s3fifo:libcachesim``, ``LFU`` the exact
``lfu:libcachesim``): LRU, FIFO, Sieve, LFU, TwoQ, Clock and S3FIFO then give libCacheSim
0.3.5's miss ratios exactly (checked by tests/test_libcachesim.py); ARC, LIRS and WTinyLFU are
close variants (see docs/policies.md).

A policy is a name with optional parameters (``"s3fifo"``, ``"s3fifo:libcachesim"``,
``"s3fifo:small_size_ratio=0.2"``, or keyword arguments of :func:`simulate`), or a policy
written in Python: an object, or a class instantiated once per cache size, with the hooks
described in ``ucache.policy`` (``choose_victims(want)``, ``on_insert(i)``, ...).
"""

from __future__ import annotations

import os
from typing import Any, Sequence, Union

from ._ucache import _simulate

Size = Union[int, float, str]


def _trace_arg(trace: Any) -> Any:
    """A path stays a path; anything else becomes a C-contiguous uint64 buffer."""
    if isinstance(trace, (str, os.PathLike)):
        return os.fspath(trace)
    try:
        import numpy as np
    except ImportError:  # a plain sequence of ints still works, without numpy
        from array import array

        return array("Q", trace)
    a = np.asarray(trace)
    if a.dtype != np.uint64:
        if a.dtype.kind not in "iu":
            raise TypeError(f"trace ids must be integers, not {a.dtype}")
        a = a.astype(np.uint64)  # negative ids wrap, as hashed ids would
    return np.ascontiguousarray(a.ravel())


def _size_arg(s: Size) -> str:
    """int: buffers; float in (0, 1]: fraction of the distinct ids; str: as on the command
    line ("10%", "5000")."""
    if isinstance(s, bool):
        raise TypeError("a cache size is an int, a float fraction or a string, not a bool")
    if isinstance(s, int):
        return str(s)
    if isinstance(s, float):
        return f"{s * 100!r}%"
    if isinstance(s, str):
        return s
    raise TypeError(f"a cache size is an int, a float fraction or a string, not {type(s).__name__}")


def simulate(
    trace: Any,
    policy: Any = "clock",
    sizes: Union[Size, Sequence[Size]] = ("1%", "5%", "10%", "25%"),
    *,
    format: str = "text",
    column: int = 1,
    threads: int | None = None,
    details: bool = False,
    **params: Any,
) -> Any:
    """Miss ratios of `policy` (a name or a list of names, see ``ucache.POLICY_NAMES``; a
    name may carry parameters, ``"s3fifo:libcachesim,small_size_ratio=0.2"``, and keyword
    `params` are appended to every named policy; or a Python policy, see the module docs) at each
    cache size of `sizes` (buffers as int, a fraction of the distinct ids as float, or
    "10%"), on `trace`: a numpy array (or sequence) of integer ids, or the path of a trace
    file in `format` (text, csv with `column`, oracle, msr, record), read as ``ucache sim``
    reads it.

    Returns a list of miss ratios aligned with `sizes` for one policy, a dict of such lists
    keyed by policy for several, or with ``details=True`` a list of dicts (policy,
    cache_size, requests, misses, miss_ratio, requests_per_sec) in policy-major order.
    Replays run in parallel on `threads` threads (default: one per CPU), with the GIL
    released; a Python policy's replays run on the calling thread. A Python policy that
    raises in a hook makes this raise :class:`ucache.PolicyError` (``__cause__``: the hook's
    exception).
    """
    single_policy = isinstance(policy, str) or not isinstance(policy, (list, tuple))
    policies = [policy] if single_policy else list(policy)
    single_size = isinstance(sizes, (int, float, str))
    size_list = [sizes] if single_size else list(sizes)
    _, _, rows = _simulate(
        _trace_arg(trace),
        policies,
        [_size_arg(s) for s in size_list],
        format,
        column,
        threads,
        params or None,
    )
    if details:
        return rows
    n = len(size_list)
    by_policy = {p: [r["miss_ratio"] for r in rows[k * n : (k + 1) * n]] for k, p in enumerate(policies)}
    if single_policy:
        ratios = by_policy[policies[0]]
        return ratios[0] if single_size else ratios
    return by_policy


class SimCache:
    """A simulated cache of `cache_size` objects (an int, or a float fraction of the trace's
    distinct ids) run by ucache policy `policy`, with libCacheSim's ``process_trace``."""

    policy = "clock"
    #: libCacheSim's keyword parameters this class takes (the same names in ucache).
    parameters: tuple[str, ...] = ()

    def __init__(self, cache_size: Union[int, float], policy: str | None = None, **params: Any) -> None:
        self.cache_size = cache_size
        if policy is not None:
            self.policy = policy
        unknown = sorted(set(params) - set(self.parameters))
        if unknown:
            raise TypeError(
                f"{type(self).__name__}() got unexpected parameters {unknown}; "
                f"it takes {list(self.parameters) or 'none'}"
            )
        self.params = params

    def process_trace(
        self, trace: Any, start_req: int = 0, max_req: int = -1, *, format: str = "text"
    ) -> tuple[float, float]:
        """(miss_ratio, byte_miss_ratio) over the trace; every object is one buffer, so the
        two are equal. `start_req` and `max_req` slice an in-memory trace."""
        if start_req or max_req >= 0:
            if isinstance(trace, (str, os.PathLike)):
                raise ValueError("start_req and max_req apply to in-memory traces only")
            end = None if max_req < 0 else start_req + max_req
            trace = trace[start_req:end]
        r = simulate(trace, self.policy, self.cache_size, format=format, **self.params)
        return r, r

    def __repr__(self) -> str:
        return f"{type(self).__name__}(cache_size={self.cache_size!r})"


def _policy_class(name: str, policy: str, parameters: tuple[str, ...] = ()) -> type:
    return type(
        name,
        (SimCache,),
        {"policy": policy, "parameters": parameters, "__doc__": f"ucache's {policy} policy."},
    )


# libCacheSim's class names and parameter names for the policies ucache has.
LRU = _policy_class("LRU", "lru")
FIFO = _policy_class("FIFO", "fifo")
Clock = _policy_class("Clock", "clock:libcachesim", ("init_freq", "n_bit_counter"))
Sieve = _policy_class("Sieve", "sieve")
S3FIFO = _policy_class(
    "S3FIFO", "s3fifo:libcachesim", ("small_size_ratio", "ghost_size_ratio", "move_to_main_threshold")
)
LFU = _policy_class("LFU", "lfu:libcachesim")
TwoQ = _policy_class("TwoQ", "2q", ("a_in_size_ratio", "a_out_size_ratio"))
ARC = _policy_class("ARC", "arc")
LIRS = _policy_class("LIRS", "lirs")
WTinyLFU = _policy_class("WTinyLFU", "w-tinylfu", ("window_size",))
LHD = _policy_class("LHD", "lhd")

__all__ = ["simulate", "SimCache", "LRU", "FIFO", "Clock", "Sieve", "S3FIFO", "LFU", "TwoQ", "ARC", "LIRS", "WTinyLFU", "LHD"]
