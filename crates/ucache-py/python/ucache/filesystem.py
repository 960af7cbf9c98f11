"""``ucache://``: an fsspec filesystem whose files read through ucache mappings.

Paths are local paths or ``s3://bucket/key`` URLs behind the protocol:
``ucache:///data/t.parquet`` and ``ucache://s3://bucket/t.parquet`` (or, chained as fsspec
spells it, ``ucache::s3://bucket/t.parquet``). Each file is mapped once, read-only, into the
filesystem's :class:`ucache.Cache`, and every read is a copy out of that mapping: the file
objects keep no block cache of their own (fsspec's ``cache_type="none"``), so the only cache,
its budget and its policy are ucache's, and a reader asking for a range gets that range, no
more. Metadata (``info``, ``ls``, ``glob``) comes from the wrapped filesystem: the local one,
or s3fs where it is installed (without it, ``info`` of an S3 object still works, from its
mapping, but listing does not).

pyarrow (``pq.read_table(path, filesystem=fs)``) and DuckDB (``fs.register(con)``, which is
``con.register_filesystem(fs)`` plus one setting with the Parquet prefetcher on, then
``read_parquet('ucache:///...')``) use it unchanged.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from fsspec.implementations.local import LocalFileSystem, make_path_posix
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

try:  # fsspec >= 2025.10: marks filesystems layered over another ("ucache::s3://...")
    from fsspec.implementations.chained import ChainedFileSystem as _Base
except ImportError:  # older fsspec: chaining still works through target_protocol
    _Base = AbstractFileSystem  # type: ignore[misc,assignment]

from ._ucache import Cache, Mapping
from .errors import NotFound, ReadOnly

_PREFIXES = ("ucache://", "ucache::")

# Default buffer sizes. A local miss is a pread from the page cache, cheap per byte, so local
# files get small buffers. An S3 miss is a GET, costly per request, but the request count does
# not depend on the buffer size much: the misses of one read (DuckDB and pyarrow read whole
# Parquet column chunks) travel as one batch whose buffers the store merges into one GET, gaps
# of up to 1 MiB included (S3Config::coalesce_gap). What the buffer size does set is the bytes
# fetched beyond what was asked (each chunk rounded out to whole buffers; TPC-H's chunks are
# 18 KB-1.5 MB, ~130 KB median) and how many distinct pieces the budget holds. On TPC-H SF 1
# with a quarter budget, 64 KiB buffers loaded 25% fewer bytes than 256 KiB, fetched 8% fewer
# in 5% more GETs, at the same speed (1.02x); cold queries fetched 1.26-1.28x their columns' bytes
# against 1.53-1.56x (docs/results/2026-11-26-s3-gaps). So an S3 buffer is the budget over
# _S3_BUFFERS_PER_BUDGET, rounded down to a power of two, within [16 KiB, 64 KiB]: a small
# budget still holds 64 buffers (with 1 MiB buffers in an 8 MiB budget every chunk read costs
# whole megabytes that evict each other: docs/results/2026-11-26-tpch).
LOCAL_BUFFER_SIZE = 64 << 10
S3_MIN_BUFFER_SIZE = 16 << 10
S3_MAX_BUFFER_SIZE = 64 << 10
_S3_BUFFERS_PER_BUDGET = 64

# With the Parquet prefetcher on, a reader's requests are the chunks of the columns it reads
# (DuckDB's own merging turned off by `UcacheFileSystem.register`), and what the cache adds on
# top of them is each chunk rounded out to whole buffers and the gaps a GET reads through.
# Cold TPC-H SF 1 queries with no gap read through fetched 1.144x their columns' bytes with
# 64 KiB buffers, 1.077x with 32 KiB and 1.046x with 16 KiB; gaps read through cost little
# while they are smaller than most chunks (16 KiB buffers: 1.048x with gaps up to 64 KiB,
# 1.069x 128 KiB, 1.084x 256 KiB; 1.284x with 1 MiB, as the prefetcher's batches span the next
# row groups' chunks with the unread columns' chunks between them). Repeated queries under a
# quarter budget need the gaps: there a chunk's misses lie between its resident buffers, and
# with no gap read through they took 6x the GETs of 64 KiB buffers and 1 MiB gaps (39k
# against 6.5k a round), with gaps up to 64 KiB 2.8x, and half the bytes
# (docs/results/2026-11-27-parquet-exact). So a prefetching filesystem's S3 objects default to
# 16 KiB buffers and gaps of up to four of them.
PREFETCH_S3_BUFFER_SIZE = 16 << 10
PREFETCH_COALESCE_GAP = 64 << 10

# The policy of S3 mappings when none is given. A repeated query whose working set exceeds the
# budget is a loop, under which clock (the cache's default) evicts each buffer just before its
# reuse and hits nothing; a frequency policy keeps a part of the loop. On TPC-H SF 1 with a
# quarter budget, lfu hit 1.9x as often as clock and fetched 19% fewer bytes from S3; at SF 0.1,
# where the loops exceed the budget by less, it was level with clock (3% more bytes, within the
# noise in time) (docs/results/2026-11-26-tpch-sf1). Local files keep the cache's default: a
# local miss is cheap and lfu was not measured to help there.
S3_DEFAULT_POLICY = "lfu"


# A file's weight (its share of the budget when files compete, MapOptions.weight) is its size
# in units of this many bytes; see UcacheFileSystem's `size_weighted`.
WEIGHT_UNIT = 64 << 10
_MAX_WEIGHT = (1 << 32) - 1


def size_weight(size: int) -> int:
    """The mapping weight of a file of `size` bytes: its size in WEIGHT_UNITs, at least 1."""
    return min(max(-(-size // WEIGHT_UNIT), 1), _MAX_WEIGHT)


def default_s3_buffer_size(budget: int) -> int:
    """The buffer size an S3 object gets under a cache of `budget` bytes (see above)."""
    want = max(budget // _S3_BUFFERS_PER_BUDGET, 1)
    pow2 = 1 << (want.bit_length() - 1)
    return min(max(pow2, S3_MIN_BUFFER_SIZE), S3_MAX_BUFFER_SIZE)


def _is_s3(path: str) -> bool:
    return path.startswith("s3://")


class UcacheFileSystem(_Base):  # type: ignore[misc,valid-type]
    """Read-only files, local or on S3, cached by ucache.

    `cache`: the :class:`ucache.Cache` to map into (default: a new one of `memory` bytes).
    `buffer_size`, `policy`, `readahead`: as for :meth:`ucache.Cache.map` (the buffer size
    defaults to 64 KiB for local files and, for S3, to :func:`default_s3_buffer_size` of the
    cache's budget: 64 KiB from 4 MiB on, less below; the policy defaults to the
    cache's for local files and to :data:`S3_DEFAULT_POLICY`, ``lfu``, for S3). Readahead stays on by default,
    S3 included: a file object's `read` calls that continue one another (``f.read()`` in
    pieces, pyarrow streaming a file) get the next window loaded while they copy, and
    DuckDB's Parquet reads, which jump between column chunks, almost never continue a stream,
    so they pay nothing for it: on TPC-H through DuckDB with a quarter-data budget, turning
    it off changed neither the bytes fetched from S3 (within 1.5%) nor the times beyond the
    run-to-run noise (docs/results/2026-11-26-tpch-sf1). `size_weighted` (default on):
    each file's mapping gets a weight proportional to its size (:func:`size_weight`), so that
    the cache's eviction, which takes victims first from the mapping most over its weighted
    share, treats the files as one data set: with equal weights, a query scanning one large
    file (TPC-H's lineitem) would evict its own buffers while the small files keep stale ones,
    and a working set smaller than the budget would still miss on every repetition. `parquet_prefetch`: for ``.parquet``
    files, the row groups ahead whose chunks of the columns being read are prefetched
    (:mod:`ucache.parquet`); 0, the default, turns it off. With it on, S3 objects default to
    buffers of :data:`PREFETCH_S3_BUFFER_SIZE` (16 KiB) whose GETs read through gaps of at
    most :data:`PREFETCH_COALESCE_GAP` (64 KiB): the prefetcher then fetches what the columns
    hold and little more. Register such a filesystem with DuckDB through :meth:`register`. `endpoint`,
    `access_key`, `secret_key`, `region`, `allow_http`: S3 settings, else the ``AWS_*``
    variables; `coalesce_gap`: as :meth:`ucache.Cache.map`'s (S3 only).
    """

    protocol = "ucache"
    root_marker = "/"

    def __init__(
        self,
        memory: int | str = "1GiB",
        *,
        cache: Cache | None = None,
        buffer_size: int | str | None = None,
        policy: str | None = None,
        readahead: bool = True,
        parquet_prefetch: int = 0,
        size_weighted: bool = True,
        endpoint: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str | None = None,
        allow_http: bool | None = None,
        coalesce_gap: int | str | None = None,
        target_protocol: str | None = None,
        target_options: dict | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.cache = cache if cache is not None else Cache(memory)
        self.buffer_size = buffer_size
        self.policy = policy
        self.readahead = readahead
        self.parquet_prefetch = parquet_prefetch
        self.size_weighted = size_weighted
        self._prefetchers: dict[str, Any] = {}
        opts = dict(target_options or {})
        self.s3_options = {
            "endpoint": endpoint or opts.get("endpoint_url"),
            "access_key": access_key or opts.get("key"),
            "secret_key": secret_key or opts.get("secret"),
            "region": region,
            "allow_http": allow_http,
            "coalesce_gap": coalesce_gap,
        }
        self.target_protocol = target_protocol
        self._maps: dict[str, Mapping] = {}
        self._lock = threading.Lock()
        self._local = LocalFileSystem()
        self._s3fs: Any = None

    # ---- paths ----

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]  # type: ignore[return-value]
        path = os.fspath(path)
        for p in _PREFIXES:
            if path.startswith(p):
                path = path[len(p) :]
                break
        if _is_s3(path):
            return path.rstrip("/")
        if not path:  # "ucache::s3://..." names its path in the chained part
            return ""
        if path.startswith("file://"):
            path = path[len("file://") :]
        # Relative paths stay relative here: under a chained "ucache::s3://" they are keys of
        # the target protocol, which only the instance knows (see _full).
        return path.rstrip("/") or "/"

    def _full(self, path: str) -> str:
        """The canonical path: an absolute local path or an s3:// URL. Under a chained
        ``ucache::s3://`` a path without a protocol is a bucket/key of the target."""
        path = self._strip_protocol(path)
        if _is_s3(path):
            return path
        if self.target_protocol in ("s3", "s3a"):
            return "s3://" + path.lstrip("/")
        return make_path_posix(path)

    def register(self, con: Any) -> None:
        """Registers this filesystem with the DuckDB connection `con`
        (``con.register_filesystem``) and, with the Parquet prefetcher on, sets DuckDB's
        ``parquet_prefetch_column_gap`` to 0 (where this DuckDB has the setting).

        By default DuckDB reads the chunks a row group needs as merged ranges that run across
        the chunks of columns it does not need (on cold TPC-H SF 1 queries, 1.16-1.25x the
        needed columns' bytes; Q18 1.66-1.75x). Under the prefetcher those ranges also look
        like reads of the columns passed through, which it then prefetches in the next row
        groups. With the gap at 0, DuckDB asks for the needed chunks only (1.007x), and
        merging them into few requests is the store's work (S3 merges the misses of a batch
        into one GET). The setting is the connection's: it applies to its other files too."""
        con.register_filesystem(self)
        if self.parquet_prefetch:
            known = con.execute(
                "select count(*) from duckdb_settings() where name = 'parquet_prefetch_column_gap'"
            ).fetchone()
            if known and known[0]:
                con.execute("set parquet_prefetch_column_gap = 0")

    # ---- mappings ----

    def mapping(self, path: str) -> Mapping:
        """The ucache mapping of `path` (mapped on first use, kept for the filesystem's life)."""
        path = self._full(path)
        with self._lock:
            m = self._maps.get(path)
            if m is not None and not m.closed:
                return m
        kw: dict[str, Any] = {"policy": self.policy, "readahead": self.readahead}
        if _is_s3(path):
            if self.parquet_prefetch:
                kw.update(buffer_size=PREFETCH_S3_BUFFER_SIZE, coalesce_gap=PREFETCH_COALESCE_GAP)
            else:
                kw["buffer_size"] = default_s3_buffer_size(self.cache.memory)
            kw.update({k: v for k, v in self.s3_options.items() if v is not None})
            kw["buffer_size"] = self.buffer_size or kw["buffer_size"]
            kw["policy"] = self.policy or S3_DEFAULT_POLICY
        else:
            kw["buffer_size"] = self.buffer_size or LOCAL_BUFFER_SIZE
        if self.size_weighted:
            try:
                kw["weight"] = size_weight(self.size(path))
            except Exception:  # noqa: BLE001  (a missing file: map() raises the clear error)
                pass
        m = self.cache.map(path, **kw)
        with self._lock:
            # Another thread may have mapped it meanwhile: keep the first, close ours.
            first = self._maps.setdefault(path, m)
        if first is not m:
            m.close()
        return first

    def _delegate(self, path: str) -> AbstractFileSystem:
        """The filesystem that answers metadata questions for `path`."""
        if not _is_s3(path):
            return self._local
        if self._s3fs is None:
            try:
                import s3fs  # noqa: F401
            except ImportError as e:
                raise NotImplementedError(f"listing S3 through ucache needs s3fs: {e}") from e
            import fsspec

            env = os.environ.get
            o = self.s3_options
            endpoint = o["endpoint"] or env("AWS_ENDPOINT_URL") or env("UCACHE_S3_ENDPOINT")
            client_kwargs = {"region_name": o["region"] or env("AWS_REGION") or "us-east-1"}
            self._s3fs = fsspec.filesystem(
                "s3",
                key=o["access_key"],
                secret=o["secret_key"],
                endpoint_url=endpoint,
                client_kwargs=client_kwargs,
            )
        return self._s3fs

    def _to_ours(self, path: str, entry: dict) -> dict:
        entry = dict(entry)
        if _is_s3(path) and not _is_s3(entry["name"]):
            entry["name"] = "s3://" + entry["name"]
        return entry

    # ---- metadata ----

    def info(self, path: str, **kwargs: Any) -> dict:
        path = self._full(path)
        if _is_s3(path):
            try:
                return self._to_ours(path, self._delegate(path).info(path, **kwargs))
            except NotImplementedError:
                return {"name": path, "size": self.mapping(path).size, "type": "file"}
        return self._local.info(path, **kwargs)

    def modified(self, path: str) -> Any:
        """Last modification time (DuckDB asks, to validate its metadata caches)."""
        path = self._full(path)
        return self._delegate(path).modified(path)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list:
        path = self._full(path)
        entries = self._delegate(path).ls(path, detail=True, **kwargs)
        entries = [self._to_ours(path, e) for e in entries]
        return entries if detail else [e["name"] for e in entries]

    # ---- data ----

    def _range(self, size: int, start: int | None, end: int | None) -> tuple[int, int]:
        """fsspec's byte-range convention: negative offsets count from the end; clamped."""
        start = 0 if start is None else (max(0, size + start) if start < 0 else min(start, size))
        end = size if end is None else (max(0, size + end) if end < 0 else min(end, size))
        return start, max(start, end)

    def prefetcher(self, path: str) -> Any:
        """The Parquet prefetcher of `path`, or None (off, or not a Parquet file)."""
        path = self._full(path)
        if not self.parquet_prefetch or not path.endswith(".parquet"):
            return None
        with self._lock:
            if path in self._prefetchers:
                return self._prefetchers[path]
        from .parquet import prefetcher_for

        p = prefetcher_for(self.mapping(path), self.parquet_prefetch)
        with self._lock:
            return self._prefetchers.setdefault(path, p)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes `[start, end)` of `path` (clamped to the file), through its mapping."""
        size = self.size(path)
        start, end = self._range(size, start, end)
        if start == end:
            return b""
        p = self.prefetcher(path)
        if p is not None:
            p.on_read(start, end)
        return self.mapping(path).read(start, end - start)

    def size(self, path: str) -> int:
        path = self._full(path)
        with self._lock:
            m = self._maps.get(path)
        if m is not None and not m.closed:
            return m.size
        s = self.info(path)["size"]
        return int(s)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        size = self.size(path)
        start, end = self._range(size, start, end)
        return self.read_range(path, start, end)

    def cat_ranges(self, paths: list, starts: Any, ends: Any, max_gap: Any = None, on_error: str = "return", **kwargs: Any) -> list:
        """Every range, read through the mappings; their missing buffers are requested in the
        background first, so that on S3 the GETs of all ranges are in flight at once."""
        n = len(paths)
        starts = starts if isinstance(starts, list) else [starts] * n
        ends = ends if isinstance(ends, list) else [ends] * n
        for p, s, e in zip(paths, starts, ends):
            try:
                size = self.size(p)
                s2, e2 = self._range(size, s, e)
                if e2 > s2:
                    self.mapping(p).prefetch(s2, e2 - s2)
            except Exception:  # reported by the read below
                pass
        return super().cat_ranges(paths, starts, ends, max_gap=max_gap, on_error=on_error, **kwargs)

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, autocommit: bool = True, cache_options: Any = None, **kwargs: Any) -> "UcacheFile":
        if mode != "rb":
            raise ReadOnly(f"the ucache filesystem is read-only: cannot open '{path}' with mode '{mode}'")
        path = self._full(path)
        size = self.size(path)
        return UcacheFile(self, path, mode, size=size)

    # Writes are refused with ucache.ReadOnly (a PermissionError), as a read-only fsspec
    # filesystem should.
    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise ReadOnly("the ucache filesystem is read-only")

    mkdir = makedirs = rm_file = rm = rmdir = mv = cp_file = put_file = pipe_file = touch = _refuse  # type: ignore[assignment]

    def close_all(self) -> None:
        """Closes every mapping this filesystem made (their cached data goes with them)."""
        with self._lock:
            maps, self._maps = list(self._maps.values()), {}
            self._prefetchers = {}  # they hold the mappings closed here
        for m in maps:
            m.close()


class SharedPositionFile(AbstractBufferedFile):
    """An fsspec read-only file whose `seek` followed by `read` in one thread reads where that
    thread sought, even while other threads seek the same file object in between.

    DuckDB (2.0, ``register_filesystem``) shares one Python file object among all the threads
    that scan a file, and reads a range as two calls, ``seek(offset)`` then ``read(n)``, each
    taking the GIL on its own. Between them another thread may seek the same object, and with
    one position per object the first thread reads the other's range: wrong bytes, or a short
    read near the end of the file (DuckDB's ``Failed to read N bytes from Python file at
    offset O: only M bytes returned``, seen once in docs/results/2026-11-26-tpch).

    So each thread's last `seek` is kept as well as the object's position: a `read` by a thread
    whose own `seek` is still pending reads from there; any other `read` reads from the
    object's position (the usual semantics, also for a file handed from one thread to
    another), and makes every pending seek stale: after a read from the shared position, a
    thread reads from its own seek only if it sought again. One thread alone sees a plain
    file. Subclasses implement :meth:`_read_at`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pos_lock = threading.Lock()
        # thread ident -> (its sought position, the generation it was sought in)
        self._sought: dict[int, tuple[int, int]] = {}
        self._generation = 0

    def seek(self, loc: int, whence: int = 0) -> int:
        with self._pos_lock:
            at = super().seek(loc, whence)
            self._sought[threading.get_ident()] = (at, self._generation)
            return at

    def _claim(self, length: int | None) -> tuple[int, int]:
        """The range `[start, end)` a `read(length)` of this thread covers (clamped to the
        size), the position moved past it."""
        with self._pos_lock:
            mine = self._sought.pop(threading.get_ident(), None)
            if mine is not None and mine[1] == self._generation:
                start = mine[0]
            else:
                start = self.loc
                self._generation += 1
            end = self.size if length is None or length < 0 else min(self.size, start + length)
            end = max(start, end)
            self.loc = end
            return start, end

    def read(self, length: int = -1) -> bytes:
        """Up to `length` bytes from the position (all the rest if negative); the position
        moves past them."""
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        start, end = self._claim(length)
        if end <= start:
            return b""
        return self._read_at(start, end)

    def _read_at(self, start: int, end: int) -> bytes:
        """Bytes `[start, end)` of the file, all of them (`end` is within the size)."""
        raise NotImplementedError


class UcacheFile(SharedPositionFile):
    """A read-only file of a :class:`UcacheFileSystem`: `read`, `seek`, `tell` and `size` as
    any fsspec file, with every read served by the file's ucache mapping; safe for DuckDB's
    concurrent `seek`/`read` pairs on one file object (:class:`SharedPositionFile`).

    `read` goes straight to the mapping (and the Parquet prefetcher), both looked up at the
    first read (an empty file is never mapped): DuckDB calls `seek` and `read` once per range
    it wants, under the GIL, from all of its threads, so each layer of fsspec's generic read
    path (path normalization, size and mapping look-ups, its block-cache object) would cost
    every thread time on every read."""

    def __init__(self, fs: UcacheFileSystem, path: str, mode: str = "rb", size: int | None = None) -> None:
        # cache_type "none": no read-ahead block cache of fsspec's over ucache's own.
        super().__init__(fs, path, mode=mode, cache_type="none", size=size)
        self._mapping: Mapping | None = None
        self._prefetcher: Any = None

    def _fetch_range(self, start: int, end: int) -> bytes:
        return self.fs.read_range(self.path, start, end)

    def _read_at(self, loc: int, end: int) -> bytes:
        m = self._mapping
        if m is None or m.closed:  # first read, or the filesystem's close_all ran
            m = self._mapping = self.fs.mapping(self.path)
            self._prefetcher = self.fs.prefetcher(self.path)
        if self._prefetcher is not None:
            self._prefetcher.on_read(loc, end)
        return m.read(loc, end - loc)


__all__ = [
    "UcacheFileSystem",
    "UcacheFile",
    "SharedPositionFile",
    "NotFound",
    "S3_DEFAULT_POLICY",
    "default_s3_buffer_size",
    "size_weight",
]
