/* A store written in C: named objects in memory behind a mutex, served through
 * ucache_store_ops. A mapping creates an object, writes it through exclusive pins and reads
 * it back through shared pins under a budget of 8 buffers; the store's bytes and the calls
 * it got are checked. Exits non-zero on any mismatch. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define BS 4096
#define BUFFERS 32

struct object {
    char name[32];
    uint8_t *data;
    uint64_t len;
};

struct store {
    pthread_mutex_t lock;
    struct object objects[4];
    int count;
    int opens, closes, reads, writes, syncs, destroyed;
    int fail_reads_at; /* buffer whose next reads fail with EIO; -1: none */
    int fail_count;
};

static int st_open(void *user, const char *name, bool write, bool create, void **out) {
    (void)write;
    struct store *s = user;
    pthread_mutex_lock(&s->lock);
    struct object *o = NULL;
    for (int i = 0; i < s->count; i++)
        if (strcmp(s->objects[i].name, name) == 0)
            o = &s->objects[i];
    if (!o && create && s->count < 4 && strlen(name) < sizeof o->name) {
        o = &s->objects[s->count++];
        strcpy(o->name, name);
    }
    if (o)
        s->opens++;
    pthread_mutex_unlock(&s->lock);
    if (!o)
        return ENOENT;
    *out = o;
    return 0;
}

/* Objects live in the store; the store's lock guards them. */
static struct store the_store = {.lock = PTHREAD_MUTEX_INITIALIZER, .fail_reads_at = -1};

static int st_len(void *object, uint64_t *len) {
    pthread_mutex_lock(&the_store.lock);
    *len = ((struct object *)object)->len;
    pthread_mutex_unlock(&the_store.lock);
    return 0;
}

static int st_set_len(void *object, uint64_t len) {
    struct object *o = object;
    pthread_mutex_lock(&the_store.lock);
    uint8_t *d = realloc(o->data, len);
    int rc = d || len == 0 ? 0 : ENOMEM;
    if (rc == 0) {
        if (len > o->len)
            memset(d + o->len, 0, len - o->len);
        o->data = d;
        o->len = len;
    }
    pthread_mutex_unlock(&the_store.lock);
    return rc;
}

static int st_read(void *object, uint8_t *buf, size_t len, uint64_t offset, size_t *got) {
    struct object *o = object;
    pthread_mutex_lock(&the_store.lock);
    if (the_store.fail_count > 0 && offset / BS == (uint64_t)the_store.fail_reads_at) {
        the_store.fail_count--;
        pthread_mutex_unlock(&the_store.lock);
        return EIO;
    }
    size_t n = offset >= o->len ? 0 : (o->len - offset < len ? o->len - offset : len);
    memcpy(buf, o->data + offset, n);
    *got = n;
    the_store.reads++;
    pthread_mutex_unlock(&the_store.lock);
    return 0;
}

static int st_write(void *object, const uint8_t *buf, size_t len, uint64_t offset) {
    struct object *o = object;
    pthread_mutex_lock(&the_store.lock);
    int rc = offset + len > o->len ? ENOSPC : 0;
    if (rc == 0)
        memcpy(o->data + offset, buf, len);
    the_store.writes++;
    pthread_mutex_unlock(&the_store.lock);
    return rc;
}

static int st_sync(void *object) {
    (void)object;
    __atomic_fetch_add(&the_store.syncs, 1, __ATOMIC_RELAXED);
    return 0;
}

static void st_close(void *object) {
    (void)object;
    __atomic_fetch_add(&the_store.closes, 1, __ATOMIC_RELAXED);
}

static void st_destroy(void *user) {
    ((struct store *)user)->destroyed++;
}

/* Called inside the SIGBUS handler when a plain load cannot be served: count and retry. */
static int hook_calls;
static int retry(uintptr_t addr, enum ucache_status status, void *user) {
    (void)addr, (void)user;
    if (status == UCACHE_ERR_IO)
        __atomic_fetch_add(&hook_calls, 1, __ATOMIC_RELAXED);
    return 1;
}

int main(void) {
    ucache_store_ops ops = {
        .open = st_open,
        .len = st_len,
        .set_len = st_set_len,
        .read = st_read,
        .write = st_write,
        .sync = st_sync,
        .close = st_close,
        .destroy = st_destroy,
    };
    ucache_store *store;
    OK(ucache_store_from_ops(&ops, &the_store, &store));
    ucache_cache_options co;
    OK(ucache_cache_options_init(&co, 8 * BS));
    co.batch_buffers = 2;
    ucache_cache *cache;
    OK(ucache_cache_new(&co, &cache));

    /* A missing object is NOT_FOUND (ENOENT from open). */
    ucache_mapping *m;
    FAILS(UCACHE_ERR_NOT_FOUND, ucache_map(cache, store, "missing", NULL, &m));

    ucache_map_options mo;
    OK(ucache_map_options_init(&mo));
    mo.create = true;
    mo.len = BUFFERS * BS;
    /* Creating needs `writable` too: refused, with a message, and nothing is created. */
    FAILS(UCACHE_ERR_BAD_ARGUMENT, ucache_map(cache, store, "table", &mo, &m));
    CHECK(strstr(ucache_last_error(), "writable") != NULL);
    CHECK(the_store.count == 0);
    mo.writable = true;
    OK(ucache_map(cache, store, "table", &mo, &m));
    CHECK(the_store.count == 1 && the_store.objects[0].len == BUFFERS * BS);

    for (uint64_t i = 0; i < BUFFERS; i++) {
        ucache_pin *pin;
        uint8_t *d;
        size_t len;
        OK(ucache_pin_exclusive(m, i, &pin, &d, &len));
        CHECK(len == BS && d[0] == 0);
        for (size_t k = 0; k < len; k++)
            d[k] = (uint8_t)(i * 7 + k);
        OK(ucache_unpin(pin));
    }
    for (uint64_t i = 0; i < BUFFERS; i++) {
        ucache_pin *pin;
        const uint8_t *d;
        size_t len;
        OK(ucache_pin_shared(m, i, &pin, &d, &len));
        for (size_t k = 0; k < len; k++)
            CHECK(d[k] == (uint8_t)(i * 7 + k));
        OK(ucache_unpin(pin));
    }
    OK(ucache_msync(m, 0, BUFFERS * BS));
    CHECK(the_store.syncs > 0);
    for (uint64_t i = 0; i < BUFFERS * BS; i++)
        CHECK(the_store.objects[0].data[i] == (uint8_t)((i / BS) * 7 + i % BS));

    ucache_stats st;
    OK(ucache_cache_stats(cache, &st));
    CHECK(st.evictions > 0 && st.writebacks >= BUFFERS);
    OK(ucache_unmap(m));
    CHECK(the_store.closes == the_store.opens && the_store.destroyed == 0);

    /* A store's user data goes once the handle is freed and no mapping holds the store. */
    mo.create = false;
    mo.writable = false;
    mo.len = 0;
    OK(ucache_map(cache, store, "table", &mo, &m));
    OK(ucache_store_free(store));
    CHECK(the_store.destroyed == 0); /* the mapping holds it */
    uint8_t b[4];
    OK(ucache_read(m, 5 * BS, b, 4));
    CHECK(b[0] == 35 && b[3] == 38);
    OK(ucache_unmap(m));
    CHECK(the_store.destroyed == 1 && the_store.closes == the_store.opens);

    /* A failed read: UCACHE_ERR_IO for a pin; for a plain load on a transparent mapping, the
     * fault hook decides (here: retry, which then succeeds). */
    OK(ucache_store_from_ops(&ops, &the_store, &store));
    OK(ucache_map(cache, store, "table", NULL, &m));
    the_store.fail_reads_at = 3;
    the_store.fail_count = 1;
    ucache_pin *pin;
    const uint8_t *d;
    size_t len;
    FAILS(UCACHE_ERR_IO, ucache_pin_shared(m, 3, &pin, &d, &len));
    OK(ucache_pin_shared(m, 3, &pin, &d, &len));
    CHECK(d[1] == 22);
    OK(ucache_unpin(pin));
    OK(ucache_unmap(m));
    if (getenv("UCACHE_EXAMPLE_NO_USERFAULTFD")) {
        /* valgrind does not implement userfaultfd: the test runs this part under ASan. */
        printf("store: transparent part skipped (no userfaultfd here)\n");
    } else {
        mo.transparent = true;
        mo.on_fault_error = retry;
        OK(ucache_map(cache, store, "table", &mo, &m));
        ucache_mapping_info info;
        OK(ucache_mapping_get_info(m, &info));
        the_store.fail_count = 2;
        CHECK(((volatile uint8_t *)info.base)[3 * BS + 1] == 22);
        CHECK(hook_calls == 2 && the_store.fail_count == 0);
        OK(ucache_unmap(m));
    }
    OK(ucache_store_free(store));
    CHECK(the_store.destroyed == 2);

    /* A table without the required functions is refused. */
    ops.read = NULL;
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_store_from_ops(&ops, &the_store, &store));
    CHECK(the_store.destroyed == 2);

    OK(ucache_cache_free(cache));
    free(the_store.objects[0].data);
    printf("store: ok (%d reads, %d writes, %d syncs)\n", the_store.reads, the_store.writes,
           the_store.syncs);
    return 0;
}
