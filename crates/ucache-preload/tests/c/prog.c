/* A program that uses mmap as programs do, run plain and under the shim by tests/shim.rs.
 * Usage: prog MODE FILE. Exits 0 when every check holds; prints what failed otherwise.
 * With EXPECT_SHIM=1 it also checks that its mappings are the shim's (anonymous in
 * /proc/self/maps), with EXPECT_SHIM=0 that they are the kernel's (the file's path). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <pthread.h>
#include <threads.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (4u << 20) /* 4 MiB: 16x the tests' budget */

static int failed;
#define CHECK(c)                                                                   \
    do {                                                                           \
        if (!(c)) {                                                                \
            fprintf(stderr, "%s:%d: check failed: %s (errno %d)\n", __FILE__,       \
                    __LINE__, #c, errno);                                          \
            failed = 1;                                                            \
        }                                                                          \
    } while (0)

static unsigned char pat(size_t i, unsigned seed) {
    return (unsigned char)(i * 7 + i / 4096 + seed);
}

static void fill(const char *path, unsigned seed) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    unsigned char *b = malloc(SIZE);
    for (size_t i = 0; i < SIZE; i++) b[i] = pat(i, seed);
    CHECK(write(fd, b, SIZE) == (ssize_t)SIZE);
    free(b);
    close(fd);
}

/* Whether the mapping at p is backed by a file in /proc/self/maps. */
static int file_backed(void *p) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int r = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (unsigned long)p >= lo &&
            (unsigned long)p < hi) {
            r = strchr(line, '/') != NULL;
            break;
        }
    }
    fclose(f);
    return r;
}

static void expect_shim(void *p) {
    const char *e = getenv("EXPECT_SHIM");
    if (!e) return;
    int fb = file_backed(p);
    if (strcmp(e, "1") == 0) CHECK(fb == 0);
    if (strcmp(e, "0") == 0) CHECK(fb == 1);
}

static int all_pat(const unsigned char *m, size_t from, size_t to, unsigned seed) {
    for (size_t i = from; i < to; i++)
        if (m[i] != pat(i, seed)) {
            fprintf(stderr, "byte %zu is %u, not %u\n", i, m[i], pat(i, seed));
            return 0;
        }
    return 1;
}

/* Fills the file at `path` with pattern 1, opens it with `oflags` (into *fd) and maps all of
 * it shared with `prot`: a mapping that must be the shim's if EXPECT_SHIM says so. */
static unsigned char *map_filled(const char *path, int oflags, int prot, int *fd) {
    fill(path, 1);
    *fd = open(path, oflags);
    unsigned char *m = mmap(NULL, SIZE, prot, MAP_SHARED, *fd, 0);
    CHECK(m != MAP_FAILED);
    expect_shim(m);
    return m;
}

static void mode_read(const char *path) {
    int fd;
    unsigned char *m = map_filled(path, O_RDONLY, PROT_READ, &fd);
    CHECK(all_pat(m, 0, SIZE, 1));
    /* Random order, twice: misses after evictions read the right bytes again. */
    for (int r = 0; r < 2; r++)
        for (size_t k = 0; k < 4096; k++) {
            size_t i = (k * 2654435761u) % SIZE;
            if (m[i] != pat(i, 1)) { CHECK(!"random read"); break; }
        }
    /* An offset mapping. */
    unsigned char *o = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE, fd, 3 * 4096);
    CHECK(o != MAP_FAILED);
    CHECK(o[0] == pat(3 * 4096, 1) && o[8191] == pat(3 * 4096 + 8191, 1));
    CHECK(munmap(o, 8192) == 0);
    /* A length that is not a multiple of the page, as programs map a file's exact size:
     * munmap with that length unmaps the whole last page too, and leaves nothing behind. */
    size_t odd = SIZE - 100;
    unsigned char *u = mmap(NULL, odd, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(u != MAP_FAILED);
    expect_shim(u);
    CHECK(u[odd - 1] == pat(odd - 1, 1));
    CHECK(munmap(u, odd) == 0);
    void *gone = mmap(u + SIZE - 4096, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK(gone == u + SIZE - 4096);
    if (gone != MAP_FAILED) munmap(gone, 4096);
    CHECK(munmap(m, SIZE) == 0);
    close(fd);
}

static void mode_write(const char *path) {
    int fd;
    unsigned char *m = map_filled(path, O_RDWR, PROT_READ | PROT_WRITE, &fd);
    for (size_t i = 0; i < SIZE; i++) m[i] = pat(i, 2);
    CHECK(msync(m, SIZE, MS_SYNC) == 0);
    unsigned char *b = malloc(SIZE);
    CHECK(pread(fd, b, SIZE, 0) == (ssize_t)SIZE);
    CHECK(all_pat(b, 0, SIZE, 2));
    /* Stores without msync, then munmap: written back. */
    for (size_t i = 0; i < SIZE; i += 3) m[i] = pat(i, 3);
    CHECK(munmap(m, SIZE) == 0);
    CHECK(pread(fd, b, SIZE, 0) == (ssize_t)SIZE);
    for (size_t i = 0; i < SIZE; i++)
        if (b[i] != pat(i, i % 3 == 0 ? 3 : 2)) { CHECK(!"after munmap"); break; }
    free(b);
    close(fd);
}

/* pread/pwrite and map accesses mixed, no msync anywhere: both ways see the same bytes. */
static void mode_mix(const char *path) {
    fill(path, 1);
    int fd = open(path, O_RDWR);
    unsigned char *m = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    unsigned char *r = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED && r != MAP_FAILED);
    expect_shim(m);
    unsigned char buf[10000];
    for (int round = 0; round < 50; round++) {
        size_t off = ((size_t)round * 88211u) % (SIZE - sizeof buf);
        /* Read through both maps (so the buffers are resident), pwrite, read the maps. */
        volatile unsigned char x = m[off] + r[off + 5000];
        (void)x;
        for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(round + i);
        CHECK(pwrite(fd, buf, sizeof buf, off) == (ssize_t)sizeof buf);
        for (size_t i = 0; i < sizeof buf; i++)
            if (m[off + i] != (unsigned char)(round + i) ||
                r[off + i] != (unsigned char)(round + i)) {
                CHECK(!"map after pwrite");
                break;
            }
        /* Store through the map, pread through the fd. */
        for (size_t i = 0; i < 100; i++) m[off + i] = (unsigned char)(0xA0 + round);
        unsigned char got[100];
        CHECK(pread(fd, got, 100, off) == 100);
        for (size_t i = 0; i < 100; i++)
            if (got[i] != (unsigned char)(0xA0 + round)) { CHECK(!"pread after store"); break; }
        /* And read(2) at the file position. */
        CHECK(lseek(fd, off, SEEK_SET) == (off_t)off);
        CHECK(read(fd, got, 100) == 100 && got[99] == (unsigned char)(0xA0 + round));
    }
    /* Two mappings of one file see each other's stores at msync (README). */
    CHECK(msync(m, SIZE, MS_SYNC) == 0);
    /* A mapped pointer handed to the kernel: write(2) from the map into another file. */
    char other[4096];
    snprintf(other, sizeof other, "%s.copy", path);
    int cfd = open(other, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(cfd >= 0);
    CHECK(write(cfd, r, SIZE) == (ssize_t)SIZE);
    unsigned char *c = malloc(SIZE);
    CHECK(pread(cfd, c, SIZE, 0) == (ssize_t)SIZE);
    CHECK(memcmp(c, r, SIZE) == 0);
    /* read(2) from another file into the writable map. */
    for (size_t i = 0; i < SIZE; i++) c[i] = pat(i, 9);
    CHECK(pwrite(cfd, c, SIZE, 0) == (ssize_t)SIZE);
    CHECK(pread(cfd, m, SIZE, 0) == (ssize_t)SIZE);
    CHECK(all_pat(m, 0, SIZE, 9));
    CHECK(msync(m, SIZE, MS_SYNC) == 0);
    CHECK(all_pat(r, 0, SIZE, 9));
    free(c);
    close(cfd);
    unlink(other);
    /* fsync writes the map back. */
    m[12345] = 77;
    CHECK(fsync(fd) == 0);
    unsigned char one;
    CHECK(pread(fd, &one, 1, 12345) == 1 && one == 77);
    /* A grown mremap (SQLite grows its map so) keeps the bytes. */
    unsigned char *h = mmap(NULL, SIZE / 2, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(h != MAP_FAILED && h[7] == pat(7, 9));
    unsigned char *g = mremap(h, SIZE / 2, SIZE, MREMAP_MAYMOVE);
    CHECK(g != MAP_FAILED);
    expect_shim(g);
    CHECK(all_pat(g, 0, 12345, 9) && all_pat(g, 12346, SIZE, 9));
    CHECK(g[12345] == 77);
    munmap(r, SIZE);
    munmap(m, SIZE);
    munmap(g, SIZE);
    close(fd);
}

static void mode_fork(const char *path) {
    int fd;
    unsigned char *m = map_filled(path, O_RDWR, PROT_READ | PROT_WRITE, &fd);
    for (size_t i = 0; i < SIZE; i += 2) m[i] = pat(i, 4);
    pid_t pid = fork();
    if (pid == 0) {
        /* The child reads every byte: what the parent stored and what was never resident. */
        for (size_t i = 0; i < SIZE; i++)
            if (m[i] != pat(i, i % 2 == 0 ? 4 : 1)) {
                fprintf(stderr, "child: byte %zu wrong\n", i);
                _exit(3);
            }
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* The parent's mapping still works. */
    CHECK(m[SIZE - 1] == pat(SIZE - 1, 1) && m[0] == pat(0, 4));
    munmap(m, SIZE);
    close(fd);
}

/* Shrinks the file under the mapping; the access past the new end must get SIGBUS. */
static void mode_truncate(const char *path) {
    int fd;
    unsigned char *m = map_filled(path, O_RDWR, PROT_READ, &fd);
    CHECK(all_pat(m, 0, SIZE, 1));
    CHECK(ftruncate(fd, SIZE / 2 + 100) == 0);
    /* Within the new end: fine; past it within the last page: zeros. */
    CHECK(m[SIZE / 2] == pat(SIZE / 2, 1));
    CHECK(m[SIZE / 2 + 200] == 0);
    if (failed) exit(1);
    fprintf(stderr, "touching past the end\n");
    volatile unsigned char x = m[SIZE / 2 + 8192];
    (void)x;
    fprintf(stderr, "no SIGBUS\n");
    exit(1);
}

/* MAP_PRIVATE: stores stay in the process. */
static void mode_private(const char *path) {
    fill(path, 1);
    int fd = open(path, O_RDONLY);
    unsigned char *m = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    CHECK(m != MAP_FAILED);
    for (size_t i = 0; i < SIZE; i += 4096) m[i] = 0xEE;
    CHECK(m[4096] == 0xEE && m[4097] == pat(4097, 1));
    munmap(m, SIZE);
    unsigned char b;
    CHECK(pread(fd, &b, 1, 4096) == 1 && b == pat(4096, 1));
    /* A read-only private map, made writable later: copy-on-write from there. */
    unsigned char *p = mmap(NULL, SIZE, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(p != MAP_FAILED);
    expect_shim(p);
    CHECK(all_pat(p, 0, SIZE, 1));
    CHECK(mprotect(p, SIZE, PROT_READ | PROT_WRITE) == 0);
    p[5] = 1;
    CHECK(p[5] == 1 && p[6] == pat(6, 1));
    CHECK(pread(fd, &b, 1, 5) == 1 && b == pat(5, 1));
    munmap(p, SIZE);
    close(fd);
}

/* Maps, then execs itself: the new image must hold none of the shim's descriptors. */
static void mode_exec(const char *path, char *self) {
    int fd;
    unsigned char *m = map_filled(path, O_RDONLY | O_CLOEXEC, PROT_READ, &fd);
    CHECK(m[100] == pat(100, 1));
    char *argv[] = {self, "after-exec", (char *)path, NULL};
    if (!failed) execv(self, argv);
    CHECK(!"execv");
}

static void mode_after_exec(const char *path) {
    (void)path;
    char link[64], target[512];
    for (int fd = 0; fd < 1024; fd++) {
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n < 0) continue;
        target[n] = 0;
        if (strstr(target, "userfaultfd") || strstr(target, path)) {
            fprintf(stderr, "fd %d left behind: %s\n", fd, target);
            failed = 1;
        }
    }
}

/* Lines two threads print at once to stdout: with its lock, none is torn. */
#define LINES 20000
static void *print_lines(void *tag) {
    for (int i = 0; i < LINES; i++) printf("%s line %d of the printing threads\n", (char *)tag, i);
    return NULL;
}
static int print_lines_c11(void *tag) {
    print_lines(tag);
    return 0;
}

/* The standard streams and the program's threads (src/stdio.rs): the shim's threads alone
 * leave stdout unlocked as in a one-thread process; the program's first thread of its own
 * (pthread_create, or thrd_create with `c11`) locks it again before it runs, so two threads
 * printing at once tear no line. The test sorts the output and compares it with the plain
 * run's. */
static void mode_stdio(const char *path, int c11) {
    int fd;
    unsigned char *m = map_filled(path, O_RDONLY, PROT_READ, &fd);
    CHECK(all_pat(m, 0, 1 << 20, 1));
    const char *e = getenv("EXPECT_SHIM");
    int locking = __fsetlocking(stdout, FSETLOCKING_QUERY);
    /* Plain, nothing changes stdout's locking; through the shim it is the caller's now. */
    if (e && !strcmp(e, "0")) CHECK(locking == FSETLOCKING_INTERNAL);
    if (e && !strcmp(e, "1")) CHECK(locking == FSETLOCKING_BYCALLER);
    /* Either way putc takes its unlocked path: glibc's _IO_FLAGS2_NEED_LOCK (128), which its
     * first thread sets on every stream, is clear until the program's own first thread. */
    CHECK((stdout->_flags2 & 128) == 0);
    if (c11) {
        thrd_t t;
        CHECK(thrd_create(&t, print_lines_c11, "second") == thrd_success);
        CHECK(__fsetlocking(stdout, FSETLOCKING_QUERY) == FSETLOCKING_INTERNAL);
        CHECK(stdout->_flags2 & 128);
        print_lines("first");
        CHECK(thrd_join(t, NULL) == thrd_success);
    } else {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, print_lines, "second") == 0);
        CHECK(__fsetlocking(stdout, FSETLOCKING_QUERY) == FSETLOCKING_INTERNAL);
        CHECK(stdout->_flags2 & 128);
        print_lines("first");
        CHECK(pthread_join(t, NULL) == 0);
    }
    munmap(m, SIZE);
    close(fd);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: prog MODE FILE\n");
        return 2;
    }
    const char *mode = argv[1], *path = argv[2];
    if (!strcmp(mode, "read")) mode_read(path);
    else if (!strcmp(mode, "write")) mode_write(path);
    else if (!strcmp(mode, "mix")) mode_mix(path);
    else if (!strcmp(mode, "fork")) mode_fork(path);
    else if (!strcmp(mode, "truncate")) mode_truncate(path);
    else if (!strcmp(mode, "private")) mode_private(path);
    else if (!strcmp(mode, "exec")) mode_exec(path, argv[0]);
    else if (!strcmp(mode, "after-exec")) mode_after_exec(path);
    else if (!strcmp(mode, "stdio")) mode_stdio(path, 0);
    else if (!strcmp(mode, "stdio-c11")) mode_stdio(path, 1);
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    if (!failed) printf("ok %s\n", mode);
    return failed;
}
