"""Parquet-aware prefetching for files read through the ``ucache`` filesystem.

A Parquet file is a sequence of row groups, each holding one chunk per column, with the
chunks' byte ranges in the footer. A reader scanning a few columns touches the chunks of those
columns row group after row group, so once it touches column `c` of row group `r`, the chunks
of `c` in the next row groups are the bytes it will want next, and no chunk of a column it
never touched is. :class:`ParquetPrefetcher` reads the footer once (through the cache) and, on
every read, asks the mapping to prefetch the next `depth` row groups' chunks of the columns
that read touched, each chunk once. (The paper's DuckDB port does the same from DuckDB's own
metadata, section 5.4.)

This runs in Python, per file object of the filesystem. The zero-copy path (a transparent
mapping handed to ``pyarrow.BufferReader``) reads by page faults that no Python code sees, so
there the same rule runs in the cache, on every miss: :func:`column_chunks` reads the footer
into the layout that ``Cache.map(..., column_chunks=...)`` takes (:func:`map_parquet` does
both).
"""

from __future__ import annotations

import bisect
import io
import os
import threading
from typing import Any

from ._ucache import Mapping
from .errors import NotFound


class ParquetPrefetcher:
    """The column-chunk layout of one Parquet file, and what to prefetch after a read.

    A chunk is prefetched once until a read touches it: then a later scan (a repeated query,
    whose chunks may have been evicted since) prefetches it again, and the readers of one scan
    (DuckDB's threads, each on its own row group) do not ask for the same chunks over and
    over. All chunks one read wants are asked for in one call, so that an object store merges
    them into few GETs (its ``coalesce_gap`` reads through the other columns between them
    where that is cheaper than a GET of its own)."""

    def __init__(self, mapping: Mapping, depth: int = 2) -> None:
        self.mapping = mapping
        self.depth = depth
        # chunks[r][c] = (start, end) of column c's chunk in row group r.
        self.chunks = column_chunks(mapping)
        # Every chunk sorted by start, for finding the chunks a read overlaps.
        self._sorted = sorted((s, e, r, c) for r, row in enumerate(self.chunks) for c, (s, e) in enumerate(row))
        self._starts = [s for s, _, _, _ in self._sorted]
        # (row group, column) of the chunks prefetched and not read since.
        self._pending: set[tuple[int, int]] = set()
        self._lock = threading.Lock()

    def touched(self, start: int, end: int) -> list[tuple[int, int]]:
        """(row group, column) of every chunk overlapping ``[start, end)``."""
        k = bisect.bisect_right(self._starts, start) - 1
        out = []
        for s, e, r, c in self._sorted[max(k, 0) :]:
            if s >= end:
                break
            if e > start:
                out.append((r, c))
        return out

    def on_read(self, start: int, end: int) -> None:
        """Prefetches the next row groups' chunks of the columns ``[start, end)`` touched."""
        todo = []
        with self._lock:
            for r, c in self.touched(start, end):
                self._pending.discard((r, c))
                for nr in range(r + 1, min(r + 1 + self.depth, len(self.chunks))):
                    if (nr, c) not in self._pending:
                        self._pending.add((nr, c))
                        todo.append(self.chunks[nr][c])
        if not todo:
            return
        bs = self.mapping.buffer_size
        wanted = sorted({i for s, e in todo for i in range(s // bs, (e + bs - 1) // bs)})
        self.mapping.prefetch_buffers(wanted)


def column_chunks(source: Any) -> list[list[tuple[int, int]]]:
    """The byte range ``(start, end)`` of every column chunk of a Parquet file, by row group
    then column: ``column_chunks(f)[r][c]``. `source` is a :class:`ucache.Mapping` of the file
    (its footer is read through the cache) or a local path. Raises ``ValueError`` for a file
    that is not Parquet and :class:`ucache.NotFound` for a path that does not exist."""
    import pyarrow.parquet as pq

    if isinstance(source, Mapping):
        meta = pq.read_metadata(io.BytesIO(_Tail(source, source.size).bytes()))
    else:
        try:
            meta = pq.read_metadata(source)
        except FileNotFoundError as e:
            raise NotFound(f"{os.fspath(source)}: no such file") from e
    chunks = []
    for r in range(meta.num_row_groups):
        rg = meta.row_group(r)
        row = []
        for c in range(rg.num_columns):
            col = rg.column(c)
            start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
            if col.has_dictionary_page and col.data_page_offset < start:
                start = col.data_page_offset
            row.append((start, start + col.total_compressed_size))
        chunks.append(row)
    return chunks


def map_parquet(cache: Any, path: Any, depth: int = 2, **kwargs: Any) -> Mapping:
    """Maps the Parquet file `path` (a local path or an ``s3://`` URL) into `cache`
    (``cache.map(path, **kwargs)``, e.g. ``transparent=True``) with its column chunks
    prefetched `depth` row groups ahead on every miss (``column_chunks=``). A local file's
    footer is read from the file; an S3 object's through a first mapping, closed before the
    one returned is made."""
    url = os.fspath(path)
    if url.startswith("s3://"):
        probe = cache.map(url, **{k: v for k, v in kwargs.items() if k != "transparent"})
        try:
            chunks = column_chunks(probe)
        finally:
            probe.close()
    else:
        chunks = column_chunks(url)
    # The layout is in file offsets; the mapping's are from its own start.
    offset = kwargs.get("offset", 0)
    chunks = [[(max(s - offset, 0), max(e - offset, 0)) for s, e in row] for row in chunks]
    return cache.map(url, column_chunks=chunks, column_chunks_depth=depth, **kwargs)


class _Tail:
    """The footer of a Parquet file (metadata length, magic, metadata), read once."""

    def __init__(self, mapping: Mapping, size: int) -> None:
        self.mapping, self.size = mapping, size

    def bytes(self) -> bytes:
        if self.size < 12:
            raise ValueError("not a Parquet file: shorter than its header and footer")
        tail = self.mapping.read(self.size - 8, 8)
        if tail[4:] != b"PAR1":
            raise ValueError("not a Parquet file: no PAR1 magic at its end")
        n = int.from_bytes(tail[:4], "little")
        if n + 12 > self.size:
            raise ValueError("not a Parquet file: footer longer than the file")
        # A minimal file pyarrow can parse: the magic, then the real footer.
        return b"PAR1" + self.mapping.read(self.size - 8 - n, n + 8)


def prefetcher_for(mapping: Mapping, depth: int) -> Any:
    """A prefetcher, or None for a file that is not Parquet (its reads are left alone)."""
    try:
        return ParquetPrefetcher(mapping, depth)
    except (ValueError, OSError, ImportError):
        return None
    except Exception as e:  # pyarrow's ArrowInvalid for a corrupt footer
        if type(e).__name__.startswith("Arrow"):
            return None
        raise
