// Floor of a "guarded file mapping" design for read-only shim mappings (#21): the file is
// mapped by the kernel PROT_NONE; a SIGSEGV makes a window readable and populates it from the
// page cache; a FIFO of windows keeps the resident bytes under a budget, evicting with
// mprotect(PROT_NONE) + MADV_DONTNEED + POSIX_FADV_DONTNEED. Against plain mmap in a cgroup.
//
// usage: guard plain|guard LISTFILE THREADS BUDGET_BYTES WINDOW_BYTES
// Each thread takes files from the list, maps each whole, counts "needle" with memmem, unmaps:
// the shape of `rg --mmap -jN`.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

static char **files;
static int nfiles;
static atomic_int next_file;
static int guard;
static size_t budget, window;

// Mappings the handler can find (one per thread at most).
struct map { char *base; size_t len; int fd; };
#define MAXT 64
static struct map maps[MAXT];

// FIFO of resident windows.
struct win { char *at; size_t len; int fd; off_t off; int slot; };
static struct win *fifo;
static size_t fifo_cap, head, tail, resident;
static atomic_flag lock = ATOMIC_FLAG_INIT;
static atomic_long faults, evictions;

static void spin_lock(void) { while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire)) ; }
static void spin_unlock(void) { atomic_flag_clear_explicit(&lock, memory_order_release); }

static void evict_one(void) {
  struct win w = fifo[head++ % fifo_cap];
  resident -= w.len;
  mprotect(w.at, w.len, PROT_NONE);
  madvise(w.at, w.len, MADV_DONTNEED);
  posix_fadvise(w.fd, w.off, w.len, POSIX_FADV_DONTNEED);
  atomic_fetch_add(&evictions, 1);
}

static void on_segv(int sig, siginfo_t *si, void *uc) {
  (void)sig; (void)uc;
  char *a = si->si_addr;
  for (int i = 0; i < MAXT; i++) {
    struct map *m = &maps[i];
    if (m->base && a >= m->base && a < m->base + m->len) {
      size_t off = ((size_t)(a - m->base)) / window * window;
      size_t len = m->len - off < window ? m->len - off : window;
      len = (len + 4095) & ~(size_t)4095;
      char *at = m->base + off;
      mprotect(at, len, PROT_READ);
      madvise(at, len, MADV_POPULATE_READ);
      atomic_fetch_add(&faults, 1);
      spin_lock();
      fifo[tail++ % fifo_cap] = (struct win){at, len, m->fd, (off_t)off, i};
      resident += len;
      while (resident > budget) evict_one();
      spin_unlock();
      return;
    }
  }
  signal(SIGSEGV, SIG_DFL);
}

static void *worker(void *arg) {
  int slot = (int)(intptr_t)arg;
  long found = 0;
  for (;;) {
    int f = atomic_fetch_add(&next_file, 1);
    if (f >= nfiles) break;
    int fd = open(files[f], O_RDONLY);
    struct stat st;
    fstat(fd, &st);
    size_t len = st.st_size;
    char *p = mmap(NULL, len, guard ? PROT_NONE : PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    if (guard) { maps[slot].fd = fd; maps[slot].len = len; atomic_thread_fence(memory_order_seq_cst); maps[slot].base = p; }
    const char *s = p, *end = p + len;
    while ((s = memmem(s, end - s, "needle", 6))) { found++; s += 6; }
    if (guard) {
      // The mapping's windows leave the FIFO (the shim drops a mapping's buffers on munmap).
      spin_lock();
      for (size_t i = head; i < tail; i++) {
        struct win *w = &fifo[i % fifo_cap];
        if (w->slot == slot && w->len) { resident -= w->len; posix_fadvise(fd, w->off, w->len, POSIX_FADV_DONTNEED); w->len = 0; }
      }
      // Drop emptied entries at the head.
      while (head < tail && fifo[head % fifo_cap].len == 0) head++;
      maps[slot].base = NULL;
      spin_unlock();
    }
    munmap(p, len);
    close(fd);
  }
  return (void *)found;
}

int main(int argc, char **argv) {
  if (argc != 6) { fprintf(stderr, "usage: guard plain|guard LIST THREADS BUDGET WINDOW\n"); return 2; }
  guard = !strcmp(argv[1], "guard");
  FILE *l = fopen(argv[2], "r");
  char line[4096];
  files = malloc(sizeof(char *) * 100000);
  while (fgets(line, sizeof line, l)) { line[strcspn(line, "\n")] = 0; files[nfiles++] = strdup(line); }
  int nt = atoi(argv[3]);
  budget = strtoull(argv[4], 0, 0);
  window = strtoull(argv[5], 0, 0);
  fifo_cap = 1 << 20;
  fifo = calloc(fifo_cap, sizeof *fifo);
  struct sigaction sa = {0};
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, NULL);
  pthread_t t[MAXT];
  for (int i = 0; i < nt; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
  long total = 0;
  for (int i = 0; i < nt; i++) { void *r; pthread_join(t[i], &r); total += (long)r; }
  printf("found %ld faults %ld evictions %ld\n", total, (long)faults, (long)evictions);
  return 0;
}
