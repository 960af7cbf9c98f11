"""Type stubs of the native module ``ucache._ucache`` (re-exported by ``ucache``)."""

from os import PathLike
from types import TracebackType
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, SupportsIndex

Size = int | str
"""Bytes as an int, or a string such as "1GiB", "256M", "64KiB" (every suffix a power of 1024)."""

POLICY_NAMES: list[str]

class Cache:
    """A memory budget shared by mappings."""

    def __init__(
        self,
        memory: Size = ...,
        *,
        batch: int | None = None,
        batch_bytes: Size | None = None,
        io_threads: int | None = None,
        background_eviction: bool = True,
        budget_wait: float | None = None,
        profile_faults: bool = False,
        keep_idle_shares: bool = False,
    ) -> None: ...
    @property
    def memory(self) -> int:
        """The budget in bytes."""
    @property
    def used(self) -> int:
        """Bytes of buffers resident now."""
    def map(
        self,
        path: str | PathLike[str],
        *,
        buffer_size: Size | None = None,
        writable: bool = False,
        create: bool = False,
        length: Size | None = None,
        offset: int = 0,
        transparent: bool = False,
        policy: str | Any | None = None,
        policy_params: dict[str, Any] | None = None,
        readahead: bool = True,
        readahead_inline: bool = False,
        file_view: bool = False,
        track_access: bool = False,
        weight: int = 1,
        endpoint: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        session_token: str | None = None,
        region: str | None = None,
        allow_http: bool | None = None,
        coalesce_gap: Size | None = None,
        column_chunks: Sequence[Sequence[tuple[int, int]]] | None = None,
        column_chunks_depth: int = 2,
    ) -> Mapping:
        """Maps a local path or an ``s3://bucket/key`` URL.

        `buffer_size`: a power of two from 4 KiB (default for files; 1 MiB for S3; the fsspec
        filesystem picks its own, see `ucache.filesystem`). `writable`
        (default False); `create` makes a missing object of `length` bytes and needs
        ``writable=True`` (``create=True`` alone raises :class:`InvalidArgument`). A writable
        S3 mapping is a key prefix of chunk objects. `transparent`: the mapping's memory is
        usable directly (buffer protocol); `readahead`: sequential misses (pins and faults), and
        :meth:`Mapping.read` calls that continue where an earlier one ended, read ahead in the
        background, unless the policy prefetches itself; `readahead_inline` has the missing
        thread read those windows itself instead (for threads that keep every core busy on a
        device as fast as memory). `file_view` maps a local file itself, read-only, as a view
        whose pages ucache reveals and hides, with no copy (implies `transparent`; buffers of
        64 KiB or more; for scans, see ``MapOptions::file_view``). `policy`: one of :data:`POLICY_NAMES` (default clock), optionally with
        parameters and presets (``"s3fifo:libcachesim,small_size_ratio=0.2"``; `policy_params`
        adds ``key=value`` items, e.g. ``{"small_size_ratio": 0.2}``), or a policy written in
        Python (an object or a class with ``choose_victims(want)`` and optional hooks, see
        ``ucache.policy``; explicit mappings only: :attr:`Mapping.policy_error` reports its
        first exception). A bad name or parameter raises :class:`InvalidArgument`. S3 settings not
        given come from ``AWS_ENDPOINT_URL`` (or ``UCACHE_S3_ENDPOINT``), ``AWS_REGION``,
        ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``. `coalesce_gap`
        (S3): the largest gap between two misses of one batch that a single GET reads through
        (dropping the gap's bytes) rather than split in two (default 1 MiB; 0 merges only
        misses that touch). `column_chunks`: a columnar file's layout, ``column_chunks[r][c]``
        the ``(start, end)`` bytes (from the mapping's start) of column `c` in row group `r`
        (:func:`ucache.parquet.column_chunks` reads a Parquet footer into it): a miss in a chunk
        then prefetches the rest of it and the column's chunks in the next
        `column_chunks_depth` row groups (in place of the sequential readahead), beside the
        policy's choice of victims; on every miss, so under plain loads of a transparent
        mapping too. Blocks with the GIL released.
        """
    def stats(self) -> dict[str, Any]:
        """Counters (hits, misses, evictions, bytes_read, ...), ``miss_latency`` (a list of
        power-of-two nanosecond buckets), ``memory`` and ``used``."""

class Mapping:
    """A mapped object. Transparent mappings export their memory through the buffer protocol
    (``memoryview(m)``, ``numpy.frombuffer(m, ...)``), writable when the mapping is; it
    cannot be closed while such views are alive. Byte ranges default to the whole mapping."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    @property
    def size(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def buffer_size(self) -> int: ...
    @property
    def buffers(self) -> int: ...
    @property
    def resident(self) -> int: ...
    def store_requests(self) -> dict[str, int] | None: ...
    @property
    def writable(self) -> bool: ...
    @property
    def transparent(self) -> bool: ...
    @property
    def policy(self) -> str: ...
    @property
    def policy_error(self) -> BaseException | None:
        """A Python policy's first hook exception as a :class:`ucache.PolicyError` (its
        ``__cause__`` the exception; the mapping runs on the cache's fallback since), or None."""
    @property
    def closed(self) -> bool: ...
    def buffer_of(self, offset: int) -> int: ...
    def is_resident(self, index: int) -> bool: ...
    def ensure_cached(self, offset: int = 0, length: int | None = None) -> None: ...
    def prefetch(self, offset: int = 0, length: int | None = None) -> None: ...
    def evict(self, offset: int = 0, length: int | None = None) -> None: ...
    def writeback(self, offset: int = 0, length: int | None = None) -> None: ...
    def msync(self, offset: int = 0, length: int | None = None) -> None: ...
    def ensure_cached_buffers(self, indices: Iterable[SupportsIndex]) -> None:
        """Brings the listed buffers in (one batch of reads). Indices: any iterable of ints or
        a numpy integer array, each checked first (negative or past the last buffer:
        :class:`ucache.OutOfRange`; not an int: ``TypeError``)."""
    def prefetch_buffers(self, indices: Iterable[SupportsIndex]) -> None:
        """Starts loading the listed buffers in the background."""
    def evict_buffers(self, indices: Iterable[SupportsIndex]) -> None:
        """Evicts the listed unpinned buffers, writing dirty ones back first."""
    def writeback_buffers(self, indices: Iterable[SupportsIndex]) -> None:
        """Starts writing back the listed dirty buffers (nothing on a read-only mapping)."""
    def msync_buffers(self, indices: Iterable[SupportsIndex]) -> None:
        """Writes back the listed dirty buffers and makes them durable (nothing on a
        read-only mapping)."""
    def landing(self, indices: Iterable[SupportsIndex], depth: int = 32) -> Landing:
        """Shared pins of the listed buffers in the order they land, with up to `depth` reads
        in flight ahead of the loop: ``for pin in m.landing(range(n)): with pin as view: ...``.
        Indices are checked as for the ``*_buffers`` calls; ``depth=0`` is
        :class:`ucache.InvalidArgument`."""
    def clear_sync_failure(self) -> str | None: ...
    def read(self, offset: int = 0, n: int | None = None) -> bytes: ...
    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None: ...
    def pin(self, index: int, exclusive: bool = False) -> Pin:
        """Pins buffer `index` now; ``with m.pin(i) as view:`` gives its memoryview."""
    def close(self) -> None:
        """Writes back and unmaps; raises :class:`ucache.InUse` while pins or views live."""
    def __enter__(self) -> Mapping: ...
    def __exit__(
        self,
        ty: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

class Pin:
    """A pinned buffer. The memoryview from ``with`` (or :attr:`view`) is released when the
    block ends; if arrays or slices made from it are still alive, leaving the block raises
    :class:`ucache.InUse` and the buffer stays pinned until they are gone."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    @property
    def index(self) -> int: ...
    @property
    def exclusive(self) -> bool: ...
    @property
    def released(self) -> bool: ...
    @property
    def view(self) -> memoryview: ...
    def release(self) -> None: ...
    def __enter__(self) -> memoryview: ...
    def __exit__(
        self,
        ty: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

class Landing(Iterator[Pin]):
    """Iterator of shared :class:`Pin` objects from :meth:`Mapping.landing`. Leaving it early
    (``break``, ``del``, :meth:`close`, or a ``with`` block around it) unpins every buffer it
    read ahead and waits for its reads in flight; pins already yielded stay valid until
    released. Holds the mapping (``Mapping.close`` raises :class:`ucache.InUse`) until
    exhausted, closed or gone. A ``next`` while another thread's is waiting raises
    :class:`ucache.InUse`."""

    def __iter__(self) -> Landing: ...
    def __next__(self) -> Pin: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Landing: ...
    def __exit__(
        self,
        ty: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

def _simulate(
    trace: Any,
    policies: list[Any],
    sizes: list[str],
    format: str = "text",
    column: int = 1,
    threads: int | None = None,
    params: dict[str, Any] | None = None,
) -> tuple[int, int, list[dict[str, Any]]]: ...
