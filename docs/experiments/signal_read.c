/* What a signal round trip adds to a direct read (README, transparent results).
 *
 * Each thread reads random 4 KiB blocks of FILE with O_DIRECT, either in plain code (mode 0)
 * or from inside a SIGUSR1 handler that the thread raises on itself with pthread_kill
 * (mode 1), the way a transparent miss reads from inside its SIGBUS handler. It prints the
 * time per read and the reads per second per thread; the difference in reads per second is
 * the signal's delivery and return.
 *
 *   gcc -O2 -pthread -o /tmp/signal_read docs/experiments/signal_read.c
 *   /tmp/signal_read /var/tmp/ucache-bench-4GiB.dat 0 2; /tmp/signal_read ... 1 2
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int fd;
static long blocks;
static int mode;
static const double seconds = 3;
static __thread char *buf;
static __thread uint64_t rng;
static __thread double io_time;
static __thread long reads;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void read_one(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  double t0 = now();
  if (pread(fd, buf, 4096, (off_t)(rng % blocks) * 4096) != 4096) {
    perror("pread");
    exit(1);
  }
  io_time += now() - t0;
  reads++;
}

static void on_signal(int sig) {
  (void)sig;
  read_one();
}

static void *run(void *arg) {
  rng = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  buf = aligned_alloc(4096, 4096);
  memset(buf, 0, 4096);
  double end = now() + seconds;
  while (now() < end) {
    if (mode == 0)
      read_one();
    else
      pthread_kill(pthread_self(), SIGUSR1);
  }
  printf("thread %ld: %.2f us per read, %.0f reads/s\n", (long)(uintptr_t)arg,
         io_time / reads * 1e6, reads / seconds);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s FILE MODE(0|1) THREADS\n", argv[0]);
    return 2;
  }
  fd = open(argv[1], O_RDONLY | O_DIRECT);
  if (fd < 0) {
    perror(argv[1]);
    return 1;
  }
  mode = atoi(argv[2]);
  int threads = atoi(argv[3]);
  if (threads < 1 || threads > 64) {
    fprintf(stderr, "THREADS must be 1..64\n");
    return 2;
  }
  blocks = lseek(fd, 0, SEEK_END) / 4096;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGUSR1, &sa, NULL);
  pthread_t t[64];
  for (long i = 0; i < threads; i++)
    pthread_create(&t[i], NULL, run, (void *)(uintptr_t)i);
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  return 0;
}
