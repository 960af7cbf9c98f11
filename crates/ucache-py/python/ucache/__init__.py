"""ucache: a customizable IO cache for Python.

A :class:`Cache` is a memory budget; :meth:`Cache.map` puts a local file or an S3 object
behind it. A mapping is read with :meth:`Mapping.read`, pinned buffer by buffer with
:meth:`Mapping.pin`, or, when ``transparent=True``, used directly as memory through the buffer
protocol (``memoryview(m)``, ``numpy.frombuffer(m, ...)``), zero-copy. :func:`simulate` replays
traces through the same policy code the cache runs, and the ``ucache`` fsspec protocol
(:class:`ucache.filesystem.UcacheFileSystem`) puts the cache under pyarrow, pandas and DuckDB.
"""

from __future__ import annotations

from . import errors, policy
from ._ucache import POLICY_NAMES, Cache, Landing, Mapping, Pin
from .errors import *  # noqa: F401,F403  (the exception classes, listed in errors.__all__)
from .sim import simulate

__all__ = ["Cache", "Landing", "Mapping", "Pin", "POLICY_NAMES", "simulate", "errors", "policy", *errors.__all__]


def _register_fsspec() -> None:
    """Registers the ``ucache`` protocol with fsspec if it is installed (the package's entry
    point does too; this covers environments that skip entry points)."""
    try:
        import fsspec
    except ImportError:
        return
    fsspec.register_implementation("ucache", "ucache.filesystem.UcacheFileSystem", clobber=True)


_register_fsspec()
