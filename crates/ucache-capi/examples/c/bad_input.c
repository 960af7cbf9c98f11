/* Bad input through the C API: NULL pointers, bad sizes, out-of-range indices, released and
 * foreign handles, use after unmap. Each must give its error code and a message, never a
 * crash. Exits non-zero on any other outcome. */
#include <stdint.h>
#include <string.h>

#include "check.h"

#define BS 4096

static int never(const uint8_t *data, size_t len, void *user) {
    (void)data, (void)len, (void)user;
    return 0;
}

static void visit(uint64_t index, const uint8_t *data, size_t len, void *user) {
    (void)index, (void)data, (void)len, (void)user;
}

/* A failure left a message. */
#define MESSAGE() CHECK(ucache_last_error() != NULL && strlen(ucache_last_error()) > 0)

int main(void) {
    static uint8_t data[16 * BS];
    ucache_cache_options co;
    ucache_cache *cache;
    ucache_store *store;
    ucache_map_options mo;
    ucache_mapping *m;
    ucache_pin *pin;
    const uint8_t *d;
    uint8_t *w;
    size_t len;
    int result;
    ucache_stats st;

    /* NULL everywhere it is not allowed. */
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_cache_options_init(NULL, 1 << 20));
    MESSAGE();
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_cache_new(NULL, &cache));
    OK(ucache_cache_options_init(&co, 16 * BS));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_cache_new(&co, NULL));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_cache_free(NULL));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_store_new(NULL, &store));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_store_new("memory", NULL));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_store_from_ops(NULL, NULL, &store));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_map_options_init(NULL));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_unpin(NULL));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_cache_stats(NULL, &st));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_pin_shared(NULL, 0, &pin, &d, &len));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_unmap(NULL));

    /* Bad options and sizes. */
    FAILS(UCACHE_ERR_BUDGET_TOO_SMALL, (co.memory_bytes = 0, ucache_cache_new(&co, &cache)));
    co.memory_bytes = 16 * BS;
    co.batch_buffers = 2;
    co.batch_bytes = 8192;
    FAILS(UCACHE_ERR_BAD_ARGUMENT, ucache_cache_new(&co, &cache));
    co.batch_bytes = 0;
    co.io_threads = 1000;
    FAILS(UCACHE_ERR_BAD_ARGUMENT, ucache_cache_new(&co, &cache));
    co.io_threads = 0;
    OK(ucache_cache_new(&co, &cache));
    FAILS(UCACHE_ERR_BAD_ARGUMENT, ucache_store_new("tape", &store));
    OK(ucache_store_new("memory", &store));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_memory_store_insert(store, "data", NULL, 10));
    OK(ucache_memory_store_insert(store, "empty", NULL, 0));
    OK(ucache_memory_store_insert(store, "data", data, sizeof data));
    OK(ucache_map_options_init(&mo));
    mo.buffer_size = 5000;
    FAILS(UCACHE_ERR_BAD_BUFFER_SIZE, ucache_map(cache, store, "data", &mo, &m));
    mo.buffer_size = BS;
    mo.weight = 0;
    FAILS(UCACHE_ERR_BAD_ARGUMENT, ucache_map(cache, store, "data", &mo, &m));
    mo.weight = 1;
    /* A file view of 4 KiB buffers (it needs 64 KiB ones). */
    mo.file_view = true;
    FAILS(UCACHE_ERR_BAD_ARGUMENT, ucache_map(cache, store, "data", &mo, &m));
    mo.file_view = false;
    mo.policy_name = "no-such-policy";
    FAILS(UCACHE_ERR_BAD_ARGUMENT, ucache_map(cache, store, "data", &mo, &m));
    mo.policy_name = NULL;
    mo.len = 17 * BS;
    FAILS(UCACHE_ERR_BEYOND_OBJECT, ucache_map(cache, store, "data", &mo, &m));
    mo.len = 0;
    FAILS(UCACHE_ERR_BAD_LENGTH, ucache_map(cache, store, "empty", &mo, &m));
    FAILS(UCACHE_ERR_NOT_FOUND, ucache_map(cache, store, "nothing", &mo, &m));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_map(cache, store, NULL, &mo, &m));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_map(cache, store, "data", &mo, NULL));
    OK(ucache_map(cache, store, "data", NULL, &m));

    /* Out-of-range indices and ranges, and writes to a read-only mapping. */
    FAILS(UCACHE_ERR_OUT_OF_RANGE, ucache_pin_shared(m, 16, &pin, &d, &len));
    FAILS(UCACHE_ERR_OUT_OF_RANGE, ucache_pin_shared(m, UINT64_MAX, &pin, &d, &len));
    FAILS(UCACHE_ERR_OUT_OF_RANGE, ucache_read_optimistic(m, 99, never, NULL, &result));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_read_optimistic(m, 0, NULL, NULL, &result));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_read_optimistic(m, 0, never, NULL, NULL));
    FAILS(UCACHE_ERR_OUT_OF_RANGE, ucache_ensure_cached(m, 15 * BS, 2 * BS));
    FAILS(UCACHE_ERR_OUT_OF_RANGE, ucache_evict(m, UINT64_MAX, 2));
    uint64_t far[] = {1, 1000};
    FAILS(UCACHE_ERR_OUT_OF_RANGE, ucache_ensure_cached_buffers(m, far, 2));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_ensure_cached_buffers(m, NULL, 2));
    OK(ucache_ensure_cached_buffers(m, NULL, 0));
    FAILS(UCACHE_ERR_BAD_ARGUMENT, ucache_prefetch_buffers(m, far, SIZE_MAX));
    FAILS(UCACHE_ERR_OUT_OF_RANGE, ucache_evict_buffers(m, far, 2));
    FAILS(UCACHE_ERR_OUT_OF_RANGE, ucache_writeback_buffers(m, far, 2));
    FAILS(UCACHE_ERR_OUT_OF_RANGE, ucache_msync_buffers(m, far, 2));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_evict_buffers(m, NULL, 2));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_msync_buffers(m, NULL, 2));
    OK(ucache_writeback_buffers(m, NULL, 0));
    uint8_t buf[8];
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_read(m, 0, NULL, 8));
    FAILS(UCACHE_ERR_OUT_OF_RANGE, ucache_read(m, 16 * BS - 4, buf, 8));
    FAILS(UCACHE_ERR_READ_ONLY, ucache_pin_exclusive(m, 0, &pin, &w, &len));
    FAILS(UCACHE_ERR_OUT_OF_RANGE, ucache_cache_evict(cache, (void *)16, 4096));
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_pin_each(m, far, 1, 1, NULL, NULL));
    FAILS(UCACHE_ERR_BAD_ARGUMENT, ucache_pin_each(m, far, 1, 0, visit, NULL));

    /* A pin outlives its closed mapping handle: still readable, released normally. */
    OK(ucache_pin_shared(m, 2, &pin, &d, &len));
    OK(ucache_mapping_close(m));
    FAILS(UCACHE_ERR_UNMAPPED, ucache_pin_shared(m, 2, &pin, &d, &len));
    CHECK(len == BS && d[0] == 0);
    OK(ucache_unpin(pin));

    /* Use after unmap: every call on the handle is refused. */
    OK(ucache_map(cache, store, "data", NULL, &m));
    OK(ucache_unmap(m));
    FAILS(UCACHE_ERR_UNMAPPED, ucache_pin_shared(m, 0, &pin, &d, &len));
    FAILS(UCACHE_ERR_UNMAPPED, ucache_read_optimistic(m, 0, never, NULL, &result));
    FAILS(UCACHE_ERR_UNMAPPED, ucache_ensure_cached(m, 0, BS));
    FAILS(UCACHE_ERR_UNMAPPED, ucache_msync(m, 0, BS));
    FAILS(UCACHE_ERR_UNMAPPED, ucache_unmap(m));
    FAILS(UCACHE_ERR_UNMAPPED, ucache_mapping_close(m));
    MESSAGE();

    /* Handles of the wrong type, and garbage, are refused without being dereferenced. */
    FAILS(UCACHE_ERR_BAD_HANDLE, ucache_pin_shared((ucache_mapping *)cache, 0, &pin, &d, &len));
    FAILS(UCACHE_ERR_BAD_HANDLE, ucache_cache_stats((ucache_cache *)store, &st));
    FAILS(UCACHE_ERR_BAD_HANDLE, ucache_cache_stats((ucache_cache *)(uintptr_t)0xdeadbeef1, &st));
    FAILS(UCACHE_ERR_BAD_HANDLE, ucache_unmap((ucache_mapping *)&st));
    FAILS(UCACHE_ERR_BAD_HANDLE, ucache_memory_store_insert((ucache_store *)cache, "x", buf, 1));
    ucache_store *files;
    OK(ucache_store_new("file", &files));
    FAILS(UCACHE_ERR_BAD_ARGUMENT, ucache_memory_store_insert(files, "x", buf, 1));
    OK(ucache_store_free(files));

    /* Released handles. */
    OK(ucache_store_free(store));
    FAILS(UCACHE_ERR_BAD_HANDLE, ucache_store_free(store));
    OK(ucache_cache_stats(cache, &st));
    OK(ucache_cache_free(cache));
    FAILS(UCACHE_ERR_BAD_HANDLE, ucache_cache_stats(cache, &st));
    FAILS(UCACHE_ERR_BAD_HANDLE, ucache_map(cache, store, "data", NULL, &m));

    /* Status names. */
    CHECK(strcmp(ucache_status_name(UCACHE_OK), "UCACHE_OK") == 0);
    CHECK(strcmp(ucache_status_name(UCACHE_ERR_UNMAPPED), "UCACHE_ERR_UNMAPPED") == 0);
    CHECK(strcmp(ucache_status_name(-5), "UCACHE_UNKNOWN_STATUS") == 0);
    printf("bad_input: ok\n");
    return 0;
}
