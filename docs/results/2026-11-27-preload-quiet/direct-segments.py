"""O_DIRECT reads of a file into a buffer of 4 KiB pages against one in a transparent huge page.

    python3 direct-segments.py FILE

Reads FILE whole with O_DIRECT in 1 MiB and 4 MiB pieces into an 8 MiB buffer, twice each,
page cache dropped before each pass (root), and prints MB/s and the buffer's AnonHugePages
(KiB) per pass. A request's buffer is one device segment per physically contiguous piece:
256 for 1 MiB of 4 KiB pages (the virtio disk here takes 254 per request), 1 in a huge page.
"""
import ctypes
import mmap
import os
import sys
import time

path = sys.argv[1]
size = os.stat(path).st_size


def huge_kib() -> int:
    return sum(int(l.split()[1]) for l in open("/proc/self/smaps") if l.startswith("AnonHugePages"))


def one_pass(huge: bool, chunk: int) -> tuple[int, int]:
    m = mmap.mmap(-1, 16 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    off = (-addr) % (2 << 20)
    m.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
    buf = memoryview(m)[off : off + (8 << 20)]
    for i in range(0, 8 << 20, 4096):
        buf[i] = 1
    kib = huge_kib()
    os.system("sync; echo 3 > /proc/sys/vm/drop_caches")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    t, pos = time.perf_counter(), 0
    while pos < size:
        n = os.preadv(fd, [buf[:chunk]], pos)
        if n <= 0:
            break
        pos += n
    dt = time.perf_counter() - t
    os.close(fd)
    return round(size / dt / 1e6), kib


for _ in range(2):
    for huge in (False, True):
        for chunk in (1 << 20, 4 << 20):
            mbs, kib = one_pass(huge, chunk)
            print(f"{'huge page' if huge else '4 KiB pages'} {chunk >> 20} MiB reads: {mbs} MB/s (AnonHugePages {kib} KiB)")
