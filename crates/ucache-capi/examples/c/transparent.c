/* Plain loads and stores on a transparent mapping: a file of 1024 buffers behind a budget of
 * 64, used like an mmap'd array of uint64_t; misses and first writes fault into ucache. The
 * stores are checked on disk after msync. Exits non-zero on any mismatch. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define BS 4096
#define BUFFERS 1024
#define WORDS (BUFFERS * BS / 8)

int main(void) {
    char path[] = "/tmp/ucache-transparent-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    static uint64_t chunk[BS / 8];
    for (uint64_t b = 0; b < BUFFERS; b++) {
        for (uint64_t k = 0; k < BS / 8; k++)
            chunk[k] = b * (BS / 8) + k;
        CHECK(pwrite(fd, chunk, BS, (off_t)(b * BS)) == BS);
    }

    ucache_cache_options co;
    OK(ucache_cache_options_init(&co, 64 * BS));
    ucache_cache *cache;
    OK(ucache_cache_new(&co, &cache));
    ucache_store *store;
    OK(ucache_store_new("file", &store));
    ucache_map_options mo;
    OK(ucache_map_options_init(&mo));
    mo.writable = true;
    mo.transparent = true;
    ucache_mapping *m;
    OK(ucache_map(cache, store, path, &mo, &m));
    ucache_mapping_info info;
    OK(ucache_mapping_get_info(m, &info));
    CHECK(info.transparent && info.len == (uint64_t)BUFFERS * BS);

    volatile uint64_t *words = (volatile uint64_t *)info.base;
    /* Loads: a sequential pass and a strided one, each over 16 times the budget. */
    uint64_t sum = 0;
    for (uint64_t i = 0; i < WORDS; i++)
        sum += words[i];
    CHECK(sum == (uint64_t)WORDS * (WORDS - 1) / 2);
    for (uint64_t i = 7; i < WORDS; i += 997)
        CHECK(words[i] == i);

    /* Stores: add 1 to the first word of every buffer and negate one word in the middle. */
    for (uint64_t b = 0; b < BUFFERS; b++) {
        words[b * (BS / 8)] += 1;
        words[b * (BS / 8) + 100] = ~(b * (BS / 8) + 100);
    }
    for (uint64_t b = 0; b < BUFFERS; b += 5)
        CHECK(words[b * (BS / 8)] == b * (BS / 8) + 1);
    OK(ucache_msync(m, 0, info.len));

    ucache_stats st;
    OK(ucache_cache_stats(cache, &st));
    CHECK(st.faults > 0 && st.write_faults > 0 && st.evictions > 0);
    OK(ucache_unmap(m));

    for (uint64_t b = 0; b < BUFFERS; b++) {
        CHECK(pread(fd, chunk, BS, (off_t)(b * BS)) == BS);
        for (uint64_t k = 0; k < BS / 8; k++) {
            uint64_t w = b * (BS / 8) + k;
            uint64_t want = k == 0 ? w + 1 : k == 100 ? ~w : w;
            CHECK(chunk[k] == want);
        }
    }

    /* The same file as a view (its own page-cache pages, revealed and hidden by ucache):
     * read-only, 64 KiB buffers, four of them in the budget. */
    OK(ucache_map_options_init(&mo));
    mo.file_view = true;
    mo.buffer_size = 16 * BS;
    OK(ucache_map(cache, store, path, &mo, &m));
    OK(ucache_mapping_get_info(m, &info));
    CHECK(info.transparent);
    words = (volatile uint64_t *)info.base;
    for (uint64_t i = 0; i < WORDS; i++) {
        uint64_t k = i % (BS / 8);
        CHECK(words[i] == (k == 0 ? i + 1 : k == 100 ? ~i : i));
    }
    ucache_stats vs;
    OK(ucache_cache_stats(cache, &vs));
    CHECK(vs.evictions > st.evictions && vs.installs == st.installs);
    OK(ucache_unmap(m));
    OK(ucache_store_free(store));
    OK(ucache_cache_free(cache));
    close(fd);
    unlink(path);
    printf("transparent: ok (%llu faults, %llu write faults, %llu evictions)\n",
           (unsigned long long)st.faults, (unsigned long long)st.write_faults,
           (unsigned long long)st.evictions);
    return 0;
}
