"""The exceptions ucache raises.

Every error is a :class:`ucache.Error`; each kind also derives from the built-in exception a
Python program would catch for it, so ``except FileNotFoundError`` or ``except
PermissionError`` work unchanged around ucache calls. The Rust extension raises these classes
by name (see ``src/errors.rs``), so they are defined once, here.
"""

from __future__ import annotations


class Error(Exception):
    """Base class of every ucache error."""


class InvalidArgument(Error, ValueError):
    """A bad option: buffer size, length, memory budget, policy name, URL, size string."""


class OutOfRange(Error, IndexError, ValueError):
    """A byte range or buffer index outside the mapping (or a mapping past its object)."""


class NotFound(Error, FileNotFoundError):
    """The file, bucket or object does not exist."""


class ReadOnly(Error, PermissionError):
    """A write to a read-only mapping."""


class StoreError(Error, OSError):
    """The store failed: an IO error, a short read, an unreachable server, failed write-backs.
    Dirty data stays in the cache."""


class PermissionDenied(StoreError, PermissionError):
    """The store refused the credentials or the access (wrong S3 keys, file permissions)."""


class ObjectChanged(StoreError):
    """The object was replaced behind the cache; map it again to see the new version."""


class SyncPoisoned(StoreError):
    """An earlier sync failed after write-backs the cache no longer holds; msync refuses until
    :meth:`Mapping.clear_sync_failure`."""


class BudgetExhausted(Error, MemoryError):
    """Every resident buffer is pinned or loading, so nothing can be evicted."""


class WouldDeadlock(Error, RuntimeError):
    """The call would wait for a buffer this thread itself holds (an exclusive pin)."""


class InUse(Error, BufferError):
    """A mapping or pin cannot be released while views of its memory or pins are alive."""


class Closed(Error, ValueError):
    """The mapping was closed (unmapped), or the pin released."""


class PolicyError(Error, RuntimeError):
    """A policy written in Python raised in one of its hooks. The hook's exception is the
    ``__cause__``. The cache never sees the exception: the policy is switched off (the cache's
    fallback picks victims from then on) and the error is reported here, raised by
    :func:`ucache.simulate` and shown by :attr:`Mapping.policy_error`."""


__all__ = [
    "Error",
    "InvalidArgument",
    "OutOfRange",
    "NotFound",
    "ReadOnly",
    "StoreError",
    "PermissionDenied",
    "ObjectChanged",
    "SyncPoisoned",
    "BudgetExhausted",
    "WouldDeadlock",
    "InUse",
    "Closed",
    "PolicyError",
]
