/* The shim's read mode (UCACHE_READS=1) under test: pread of a matched file is served from the
 * cache, and every answer must be the kernel's. The kernel's answer comes from read() after
 * lseek() on a second descriptor: read mode leaves read() to the kernel.
 *
 *   reads FILE OTHER
 *
 * FILE (matched) holds SIZE bytes of a pattern; OTHER (not matched) is another file. Steps:
 *   1. threads: 4 threads, each 3000 preads at pseudo-random offsets and lengths (some past
 *      the end, some of 0 bytes, some spanning many buffers), each compared with the kernel;
 *   2. reopen: the file closed and opened again 50 times, preads compared after each;
 *   3. reuse: the fd of FILE replaced by OTHER's with dup2 (the shim sees no close): pread
 *      must give OTHER's bytes;
 *   4. write: pwrite through an O_RDWR descriptor, then pread through the read-only one must
 *      give the new bytes; then ftruncate to a shorter length: preads past it return 0 and
 *      across it fewer bytes;
 *   5. errors: pread at a negative offset fails with EINVAL, on a write-only descriptor with
 *      EBADF, as from the kernel.
 * Prints "ok" and exits 0, or names the first difference and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SIZE (3 * 1024 * 1024 + 12345)
#define MAXLEN (600 * 1024)

static const char *file, *other;

static void fail(const char *what, long a, long b) {
    fprintf(stderr, "reads: %s (%ld, %ld)\n", what, a, b);
    exit(1);
}

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The kernel's bytes: read() at `off` on `fd`, looped to `n` or the end. */
static ssize_t kernel_read(int fd, char *buf, size_t n, off_t off) {
    if (lseek(fd, off, SEEK_SET) != off)
        return -1;
    size_t done = 0;
    while (done < n) {
        ssize_t r = read(fd, buf + done, n - done);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* One pread on `fd` compared with the kernel's bytes from `kfd`. */
static void check(int fd, int kfd, size_t n, off_t off, char *a, char *b) {
    memset(a, 0xAA, n + 1);
    ssize_t got = pread(fd, a, n, off);
    ssize_t want = kernel_read(kfd, b, n, off);
    /* A pread may return fewer bytes than asked only at the end of the file. */
    if (got != want)
        fail("pread returned another length than the kernel", (long)got, (long)want);
    if (got > 0 && memcmp(a, b, (size_t)got) != 0)
        fail("pread returned other bytes than the kernel at offset", (long)off, (long)n);
    if ((unsigned char)a[got > 0 ? got : 0] != 0xAA)
        fail("pread wrote past what it returned", (long)off, (long)got);
}

static void *worker(void *arg) {
    uint64_t s = 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)arg;
    int fd = open(file, O_RDONLY), kfd = open(file, O_RDONLY);
    char *a = malloc(MAXLEN + 1), *b = malloc(MAXLEN + 1);
    if (fd < 0 || kfd < 0 || !a || !b)
        fail("open or malloc in a thread", fd, kfd);
    for (int i = 0; i < 3000; i++) {
        uint64_t r = next(&s);
        off_t off = (off_t)(r % (SIZE + 200000));
        size_t n = (size_t)((r >> 32) % 8 == 0 ? 0 : (next(&s) % MAXLEN));
        check(fd, kfd, n, off, a, b);
    }
    free(a);
    free(b);
    close(fd);
    close(kfd);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3)
        fail("usage: reads FILE OTHER", argc, 0);
    file = argv[1];
    other = argv[2];
    char *a = malloc(MAXLEN + 1), *b = malloc(MAXLEN + 1);
    {
        /* The pattern: each 8-byte word holds its offset, mixed. */
        int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644);
        uint64_t *p = malloc(SIZE + 8);
        for (size_t i = 0; i < SIZE / 8 + 1; i++)
            p[i] = (uint64_t)i * 0x9E3779B97F4A7C15ull;
        if (fd < 0 || pwrite(fd, p, SIZE, 0) != SIZE)
            fail("writing the file", fd, 0);
        close(fd);
        int ofd = open(other, O_RDWR | O_CREAT | O_TRUNC, 0644);
        memset(p, 'o', 100000);
        if (ofd < 0 || pwrite(ofd, p, 100000, 0) != 100000)
            fail("writing the other file", ofd, 0);
        close(ofd);
        free(p);
    }
    /* 1. threads */
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    /* 2. reopen */
    int kfd = open(file, O_RDONLY);
    for (int i = 0; i < 50; i++) {
        int fd = open(file, O_RDONLY);
        check(fd, kfd, 70000, (off_t)i * 60001, a, b);
        close(fd);
    }
    /* 3. reuse: fd now names OTHER without a close the shim could see */
    int fd = open(file, O_RDONLY);
    check(fd, kfd, 5000, 0, a, b);
    int ofd = open(other, O_RDONLY);
    if (dup2(ofd, fd) != fd)
        fail("dup2", fd, ofd);
    if (pread(fd, a, 5000, 0) != 5000 || a[0] != 'o' || a[4999] != 'o')
        fail("after dup2, pread did not read the other file", a[0], a[4999]);
    close(fd);
    close(ofd);
    /* 4. write, then truncate */
    fd = open(file, O_RDONLY);
    check(fd, kfd, 100000, 1000000, a, b); /* cached now */
    int wfd = open(file, O_RDWR);
    memset(b, 'w', 3000);
    if (pwrite(wfd, b, 3000, 1010000) != 3000)
        fail("pwrite", wfd, 0);
    if (pread(fd, a, 3000, 1010000) != 3000 || memcmp(a, b, 3000) != 0)
        fail("pread after pwrite did not see the new bytes", 0, 0);
    check(fd, kfd, 100000, 1000000, a, b);
    if (ftruncate(wfd, 2000000) != 0)
        fail("ftruncate", errno, 0);
    check(fd, kfd, 100000, 1950000, a, b); /* 50000 bytes */
    if (pread(fd, a, 100, 2500000) != 0)
        fail("pread past the new end returned bytes", 0, 0);
    /* 5. errors as the kernel's */
    errno = 0;
    if (pread(fd, a, 10, -1) != -1 || errno != EINVAL)
        fail("pread at a negative offset", errno, 0);
    int wo = open(file, O_WRONLY);
    errno = 0;
    if (pread(wo, a, 10, 0) != -1 || errno != EBADF)
        fail("pread on a write-only descriptor", errno, 0);
    close(wo);
    close(wfd);
    close(fd);
    close(kfd);
    free(a);
    free(b);
    printf("ok\n");
    return 0;
}
