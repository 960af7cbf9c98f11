// Per-4KiB-page cost of installing pages into a userfaultfd (MISSING) range:
// copy: UFFDIO_COPY from a warm staging buffer (ucache today); the staging is rewritten
//       each round as a read would write it.
// move: UFFDIO_MOVE (Linux 6.8+) of freshly faulted source pages (the read's landing pages,
//       zeroed by the kernel when faulted), no copy.
// continue: a memfd-backed range registered for minor faults; the read lands in the memfd's
//       page through a second mapping, and UFFDIO_CONTINUE maps that page: no copy, and
//       eviction punches the pages out of the memfd.
// Each round installs 64 KiB at a new place, and every 64 rounds the range is zapped.
// Build: cc -O2 -o install install.c; run as any user (user-mode-only userfaultfd).
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/userfaultfd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifndef UFFDIO_MOVE
struct uffdio_move { uint64_t dst, src, len, mode; int64_t move; };
#define UFFDIO_MOVE _IOWR(UFFDIO, 0x05, struct uffdio_move)
#define UFFD_FEATURE_MOVE (1 << 10)
#endif
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char **argv) {
  const size_t CH = 64 << 10, RANGE = 64 * CH; const int ROUNDS = 40000;
  int uffd = syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
  struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_MOVE | UFFD_FEATURE_MINOR_SHMEM};
  if (ioctl(uffd, UFFDIO_API, &api)) { api.features = 0; perror("api move"); }
  char *dst = mmap(0, RANGE, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE, -1, 0);
  struct uffdio_register reg = {.range = {(uint64_t)dst, RANGE}, .mode = UFFDIO_REGISTER_MODE_MISSING};
  if (ioctl(uffd, UFFDIO_REGISTER, &reg)) { perror("register"); return 1; }
  char *stage = aligned_alloc(4096, CH); memset(stage, 1, CH);
  char *src = mmap(0, CH, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  int mfd = memfd_create("frames", MFD_CLOEXEC); ftruncate(mfd, RANGE);
  char *dst2 = mmap(0, RANGE, PROT_READ|PROT_WRITE, MAP_SHARED, mfd, 0);
  char *alias = mmap(0, RANGE, PROT_READ|PROT_WRITE, MAP_SHARED, mfd, 0);
  struct uffdio_register reg2 = {.range = {(uint64_t)dst2, RANGE}, .mode = UFFDIO_REGISTER_MODE_MINOR};
  int minor_ok = ioctl(uffd, UFFDIO_REGISTER, &reg2) == 0;
  if (!minor_ok) perror("register minor");
  for (int mode = 0; mode < 3; mode++) {
    if (mode == 2 && !minor_ok) break;
    double t = now();
    for (int r = 0; r < ROUNDS; r++) {
      size_t off = (r % 64) * CH;
      if (mode == 0) {
        for (size_t p = 0; p < CH; p += 64) stage[p] = r;  // the read writes staging
        struct uffdio_copy c = {.dst = (uint64_t)dst + off, .src = (uint64_t)stage, .len = CH};
        if (ioctl(uffd, UFFDIO_COPY, &c)) { perror("copy"); return 1; }
      } else if (mode == 2) {
        for (size_t p = 0; p < CH; p += 64) alias[off + p] = r;  // the read lands in the memfd page
        struct uffdio_continue c = {.range = {(uint64_t)dst2 + off, CH}};
        if (ioctl(uffd, UFFDIO_CONTINUE, &c)) { perror("continue"); return 1; }
      } else {
        for (size_t p = 0; p < CH; p += 64) src[p] = r;   // the read lands in fresh pages
        struct uffdio_move m = {.dst = (uint64_t)dst + off, .src = (uint64_t)src, .len = CH};
        if (ioctl(uffd, UFFDIO_MOVE, &m)) { perror("move"); return 1; }
      }
      if (r % 64 == 63) {
        if (mode == 2) { madvise(dst2, RANGE, MADV_DONTNEED); fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, RANGE); }
        else madvise(dst, RANGE, MADV_DONTNEED);
      }
    }
    double dt = now() - t;
    printf("%s: %.3f us per 4 KiB page\n", mode == 2 ? "continue" : mode ? "move" : "copy", dt * 1e6 / (ROUNDS * (CH / 4096.0)));
  }
  return 0;
}
