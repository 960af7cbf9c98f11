"""One file object read by many threads, as DuckDB does: it shares a Python file object among
the threads scanning a file and reads each range as ``seek(offset)`` then ``read(n)``, two
calls that take the GIL one after the other, so another thread's seek may come in between
(ucache.filesystem.SharedPositionFile). The interleavings are forced here with events, and
DuckDB runs over a file object whose ``seek`` yields the GIL to make them likely."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from ucache.filesystem import UcacheFile, UcacheFileSystem

from conftest import pattern


def in_thread(f):
    """Runs `f` on a new thread; returns a function that joins it and gives its result."""
    out: dict = {}

    def run():
        try:
            out["value"] = f()
        except BaseException as e:  # noqa: BLE001  (re-raised by the joiner)
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()

    def join():
        t.join(timeout=300)
        assert not t.is_alive(), "thread hung"
        if "error" in out:
            raise out["error"]
        return out["value"]

    return join


def test_a_threads_read_follows_its_own_seek_when_another_thread_seeks_between(data_file: Path):
    data = data_file.read_bytes()
    fs = UcacheFileSystem(memory="1MiB", buffer_size="16KiB")
    f = fs.open(str(data_file))
    a_sought, b_sought = threading.Event(), threading.Event()
    x, y = 1000, len(data) - 500  # B's range ends the file: A would get a short read

    def a():
        f.seek(x)
        a_sought.set()
        assert b_sought.wait(300)
        return f.read(20_000)

    def b():
        assert a_sought.wait(300)
        f.seek(y)
        b_sought.set()
        return f.read(20_000)

    ja = in_thread(a)
    jb = in_thread(b)
    got_a, got_b = ja(), jb()
    assert got_a == data[x : x + 20_000]
    assert got_b == data[y:]


def test_a_file_handed_to_another_thread_reads_on_from_the_shared_position(data_file: Path):
    data = data_file.read_bytes()
    f = UcacheFileSystem(memory="1MiB").open(str(data_file))
    f.seek(300)
    # Another thread reads without seeking: from where this one left the file.
    assert in_thread(lambda: f.read(100))() == data[300:400]
    assert f.tell() == 400
    # This thread's seek was used up by the other thread's read: it goes on from there too.
    assert f.read(50) == data[400:450]
    f.seek(10)
    assert f.read(5) == data[10:15]
    assert f.read(5) == data[15:20]
    assert in_thread(lambda: f.read(5))() == data[20:25]


def test_one_thread_sees_a_plain_file(data_file: Path):
    data = data_file.read_bytes()
    f = UcacheFileSystem(memory="1MiB").open(str(data_file))
    assert f.read(10) == data[:10]
    f.seek(-20, 2)
    assert f.read() == data[-20:]
    assert f.read(5) == b""
    f.seek(5)
    f.seek(7, 1)
    assert f.tell() == 12
    assert f.read(3) == data[12:15]
    with pytest.raises(ValueError):
        f.seek(-1)
    with pytest.raises(ValueError):
        f.seek(0, 3)
    f.close()
    with pytest.raises(ValueError):
        f.read(1)


def test_many_threads_seek_and_read_one_file_object(tmp_path: Path):
    data = pattern(1 << 20)
    p = tmp_path / "d.bin"
    p.write_bytes(data)
    f = UcacheFileSystem(memory="256KiB", buffer_size="16KiB").open(str(p))
    errors: list[str] = []

    def worker(seed: int):
        import random

        r = random.Random(seed)
        for _ in range(300):
            at, n = r.randrange(len(data)), r.randrange(1, 50_000)
            f.seek(at)
            time.sleep(0)  # hand the GIL over between the seek and the read, as DuckDB may
            got = f.read(n)
            if got != data[at : at + n]:
                errors.append(f"thread {seed}: {len(got)} bytes at {at}, wanted {len(data[at:at + n])}")

    joins = [in_thread(lambda s=s: worker(s)) for s in range(6)]
    for j in joins:
        j()
    assert errors == []


duckdb = pytest.importorskip("duckdb")


class YieldingFile(UcacheFile):
    """A ucache file whose seek hands the GIL to another thread before it returns."""

    def seek(self, loc, whence=0):
        at = super().seek(loc, whence)
        time.sleep(0)
        return at


class YieldingFileSystem(UcacheFileSystem):
    protocol = "ucacheyield"

    def _open(self, path, mode="rb", **kwargs):
        path = self._full(path)
        return YieldingFile(self, path, mode, size=self.size(path))

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str) and path.startswith("ucacheyield://"):
            path = path[len("ucacheyield://") :]
        return super()._strip_protocol(path)


def test_duckdb_threads_sharing_a_file_object_read_the_right_bytes(tpch_dir: Path, tmp_path: Path):
    import pyarrow.parquet as pq

    # Many row groups, so that several DuckDB threads scan the one file (object) at once.
    p = tmp_path / "lineitem.parquet"
    pq.write_table(pq.read_table(tpch_dir / "lineitem.parquet"), p, row_group_size=2_000)
    q = (
        "select l_returnflag, count(*), sum(l_quantity), sum(l_extendedprice), max(l_orderkey) "
        "from read_parquet('{}') group by all order by all"
    )
    con = duckdb.connect()
    con.execute("set threads = 4")
    direct = con.sql(q.format(p)).fetchall()
    fs = YieldingFileSystem(memory="1MiB", buffer_size="16KiB", skip_instance_cache=True)
    con.register_filesystem(fs)
    for _ in range(3):
        assert con.sql(q.format(f"ucacheyield://{p}")).fetchall() == direct
