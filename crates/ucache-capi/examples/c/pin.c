/* Pinning: a file mapped in 4 KiB buffers under a budget of 16, read through shared pins,
 * written through exclusive pins, read optimistically, steered with the explicit
 * primitives, and checked on disk after msync. Exits non-zero on any mismatch. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define BS 4096
#define BUFFERS 64

static int first_byte(const uint8_t *data, size_t len, void *user) {
    (void)user;
    return len == BS ? data[0] : -1;
}

static void visit(uint64_t index, const uint8_t *data, size_t len, void *user) {
    uint64_t *sum = user;
    if (len == BS && data[0] == (uint8_t)index && data[BS - 1] == (uint8_t)index)
        *sum += index;
}

int main(void) {
    char path[] = "/tmp/ucache-pin-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    static uint8_t page[BS];
    for (int i = 0; i < BUFFERS; i++) {
        memset(page, i, BS);
        CHECK(pwrite(fd, page, BS, (off_t)i * BS) == BS);
    }

    ucache_cache_options co;
    OK(ucache_cache_options_init(&co, 16 * BS));
    co.batch_buffers = 4;
    ucache_cache *cache;
    OK(ucache_cache_new(&co, &cache));
    ucache_store *store;
    OK(ucache_store_new("file", &store));

    ucache_map_options mo;
    OK(ucache_map_options_init(&mo));
    mo.writable = true;
    ucache_mapping *m;
    OK(ucache_map(cache, store, path, &mo, &m));
    ucache_mapping_info info;
    OK(ucache_mapping_get_info(m, &info));
    CHECK(info.len == BUFFERS * BS && info.buffers == BUFFERS && info.buffer_size == BS);
    CHECK(info.writable && !info.transparent);

    /* Shared pins: every buffer, twice over a budget of 16, so evictions happen. */
    for (int round = 0; round < 2; round++) {
        for (uint64_t i = 0; i < BUFFERS; i++) {
            ucache_pin *pin;
            const uint8_t *data;
            size_t len;
            OK(ucache_pin_shared(m, i, &pin, &data, &len));
            CHECK(len == BS);
            for (size_t k = 0; k < len; k++)
                CHECK(data[k] == (uint8_t)i);
            OK(ucache_unpin(pin));
        }
    }

    /* Exclusive pins: write a marker into every eighth buffer. */
    for (uint64_t i = 0; i < BUFFERS; i += 8) {
        ucache_pin *pin;
        uint8_t *data;
        size_t len;
        OK(ucache_pin_exclusive(m, i, &pin, &data, &len));
        CHECK(len == BS);
        memset(data, 0xA0 + (int)(i / 8), 16);
        OK(ucache_unpin(pin));
    }

    /* A mapping with pins held cannot be unmapped; the handle stays valid. */
    ucache_pin *held;
    const uint8_t *hd;
    size_t hl;
    OK(ucache_pin_shared(m, 3, &held, &hd, &hl));
    FAILS(UCACHE_ERR_IN_USE, ucache_unmap(m));
    OK(ucache_unpin(held));

    /* Optimistic reads, and copies through the cache. */
    int result = 0;
    OK(ucache_read_optimistic(m, 5, first_byte, NULL, &result));
    CHECK(result == 5);
    OK(ucache_read_optimistic(m, 8, first_byte, NULL, &result));
    CHECK(result == 0xA1);
    uint8_t two[2];
    OK(ucache_read(m, 9 * BS - 1, two, 2));
    CHECK(two[0] == 8 && two[1] == 9);

    /* The explicit primitives. */
    OK(ucache_ensure_cached(m, 0, 4 * BS));
    uint64_t list[] = {40, 41, 50};
    OK(ucache_ensure_cached_buffers(m, list, 3));
    OK(ucache_prefetch(m, 20 * BS, 4 * BS));
    OK(ucache_prefetch_buffers(m, list, 3));
    OK(ucache_evict(m, 0, 2 * BS));
    OK(ucache_writeback(m, 0, info.len));
    OK(ucache_cache_ensure_cached(cache, info.base + 30 * BS, BS));
    uint64_t sum = 0, frontier[] = {3, 60, 7, 3};
    OK(ucache_pin_each(m, frontier, 4, 32, visit, &sum));
    CHECK(sum == 3 + 60 + 7 + 3);
    OK(ucache_msync(m, 0, info.len));
    /* The index-list forms of evict, writeback and msync. */
    OK(ucache_writeback_buffers(m, list, 3));
    OK(ucache_msync_buffers(m, list, 3));
    OK(ucache_evict_buffers(m, list, 3));

    /* The markers are on disk after msync; the rest of each buffer is as it was. */
    for (int i = 0; i < BUFFERS; i++) {
        CHECK(pread(fd, page, BS, (off_t)i * BS) == BS);
        int marked = i % 8 == 0;
        for (int k = 0; k < BS; k++)
            CHECK(page[k] == (marked && k < 16 ? 0xA0 + i / 8 : i));
    }

    ucache_stats st;
    OK(ucache_cache_stats(cache, &st));
    /* Pins in order read ahead: a buffer is loaded by its miss or by a prefetch. */
    CHECK(st.misses + st.prefetches >= BUFFERS && st.evictions > 0 &&
          st.writebacks >= BUFFERS / 8);
    CHECK(st.hits > 0);
    uint64_t budget, used;
    OK(ucache_cache_usage(cache, &budget, &used));
    CHECK(budget == 16 * BS && used <= budget);

    OK(ucache_unmap(m));
    FAILS(UCACHE_ERR_UNMAPPED, ucache_unmap(m));

    /* Every built-in policy by name maps and reads. */
    CHECK(ucache_policy_count() > 1 && ucache_policy_name(ucache_policy_count()) == NULL);
    for (size_t p = 0; p < ucache_policy_count(); p++) {
        mo.writable = false;
        mo.policy_name = ucache_policy_name(p);
        OK(ucache_map(cache, store, path, &mo, &m));
        for (uint64_t i = 0; i < BUFFERS; i += 3) {
            OK(ucache_read_optimistic(m, i, first_byte, NULL, &result));
            CHECK(result == (int)(i % 8 == 0 ? 0xA0 + i / 8 : i));
        }
        OK(ucache_unmap(m));
    }

    OK(ucache_store_free(store));
    OK(ucache_cache_free(cache));
    close(fd);
    unlink(path);
    printf("pin: ok (%llu hits, %llu misses, %llu evictions)\n", (unsigned long long)st.hits,
           (unsigned long long)st.misses, (unsigned long long)st.evictions);
    return 0;
}
