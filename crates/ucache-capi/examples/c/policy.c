/* A policy written in C: FIFO by insertion order, with an application veto that keeps
 * buffer 0 resident. 64 buffers of a memory store are read three times over a budget of 16;
 * the data, the hook counts and the veto are checked. Exits non-zero on any mismatch. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

#define BS 4096
#define BUFFERS 64

struct fifo {
    pthread_mutex_t lock;
    uint64_t seq[BUFFERS]; /* insertion number of each resident buffer; 0: not resident */
    uint64_t next;
    uint64_t buffers, capacity;
    uint64_t inserts, evicts, misses, hits, evicted_zero;
    int destroyed;
};

static void attach(void *user, uint64_t buffers, uint64_t capacity, size_t buffer_size) {
    struct fifo *f = user;
    f->buffers = buffers;
    f->capacity = capacity;
    CHECK(buffer_size == BS);
}

/* Proposes buffer 0 (which the veto refuses), then the oldest evictable buffers. */
static size_t choose(void *user, const ucache_buffers *b, size_t want, uint64_t *out) {
    struct fifo *f = user;
    size_t n = 0;
    pthread_mutex_lock(&f->lock);
    if (want > 0 && f->seq[0] != 0)
        out[n++] = 0;
    uint64_t after = 0;
    while (n < want) {
        uint64_t best = UINT64_MAX, best_seq = UINT64_MAX;
        for (uint64_t i = 1; i < BUFFERS; i++)
            if (f->seq[i] > after && f->seq[i] < best_seq && ucache_buffers_is_candidate(b, i)) {
                best = i;
                best_seq = f->seq[i];
            }
        if (best == UINT64_MAX)
            break;
        out[n++] = best;
        after = best_seq;
    }
    pthread_mutex_unlock(&f->lock);
    CHECK(ucache_buffers_len(b) == BUFFERS);
    CHECK(!ucache_buffers_is_candidate(b, BUFFERS)); /* out of range: false, not a crash */
    return n;
}

static bool is_evictable(void *user, uint64_t index) {
    (void)user;
    return index != 0;
}

static void on_insert(void *user, uint64_t index) {
    struct fifo *f = user;
    pthread_mutex_lock(&f->lock);
    f->seq[index] = ++f->next;
    f->inserts++;
    pthread_mutex_unlock(&f->lock);
}

static void on_evict(void *user, uint64_t index) {
    struct fifo *f = user;
    pthread_mutex_lock(&f->lock);
    f->seq[index] = 0;
    f->evicts++;
    f->evicted_zero += index == 0;
    pthread_mutex_unlock(&f->lock);
}

static void on_miss(void *user, uint64_t index) {
    (void)index;
    __atomic_fetch_add(&((struct fifo *)user)->misses, 1, __ATOMIC_RELAXED);
}

static void on_hit(void *user, uint64_t index) {
    (void)index;
    __atomic_fetch_add(&((struct fifo *)user)->hits, 1, __ATOMIC_RELAXED);
}

static void destroy(void *user) {
    ((struct fifo *)user)->destroyed++;
}

int main(void) {
    static uint8_t data[BUFFERS * BS];
    for (int i = 0; i < BUFFERS; i++)
        memset(data + i * BS, i, BS);
    ucache_cache_options co;
    OK(ucache_cache_options_init(&co, 16 * BS));
    co.batch_buffers = 4;
    co.background_eviction = false;
    ucache_cache *cache;
    OK(ucache_cache_new(&co, &cache));
    ucache_store *store;
    OK(ucache_store_new("memory", &store));
    OK(ucache_memory_store_insert(store, "data", data, sizeof data));

    static struct fifo f = {.lock = PTHREAD_MUTEX_INITIALIZER};
    ucache_policy_ops ops = {
        .name = "c-fifo",
        .attach = attach,
        .choose_eviction = choose,
        .is_evictable = is_evictable,
        .on_hit = on_hit,
        .on_miss = on_miss,
        .on_insert = on_insert,
        .on_evict = on_evict,
        .destroy = destroy,
    };
    ucache_map_options mo;
    OK(ucache_map_options_init(&mo));
    mo.policy_ops = &ops;
    mo.policy_user = &f;
    /* Every hook call below is one the loop asked for: no readahead beside it. */
    mo.readahead = false;
    ucache_mapping *m;
    OK(ucache_map(cache, store, "data", &mo, &m));
    CHECK(f.buffers == BUFFERS && f.capacity == 16);

    for (int round = 0; round < 3; round++) {
        for (uint64_t i = 0; i < BUFFERS; i++) {
            ucache_pin *pin;
            const uint8_t *d;
            size_t len;
            OK(ucache_pin_shared(m, i, &pin, &d, &len));
            CHECK(len == BS && d[0] == (uint8_t)i && d[BS - 1] == (uint8_t)i);
            OK(ucache_unpin(pin));
        }
    }
    ucache_stats st;
    OK(ucache_cache_stats(cache, &st));
    CHECK(f.evicted_zero == 0);        /* the veto held */
    CHECK(st.eviction_cancels > 0);    /* ... and was asked */
    CHECK(f.misses == st.misses && f.inserts == st.misses);
    CHECK(f.evicts == st.evictions && f.evicts > 0);
    CHECK(f.hits == st.hits && f.hits >= 2); /* buffer 0 stayed: hit in rounds 2 and 3 */
    CHECK(f.destroyed == 0);
    OK(ucache_unmap(m));
    CHECK(f.destroyed == 1);
    CHECK(f.evicted_zero == 1); /* unmap evicts everything, buffer 0 included */

    /* A map that fails still hands the policy back through destroy, once. */
    mo.buffer_size = 1000;
    FAILS(UCACHE_ERR_BAD_BUFFER_SIZE, ucache_map(cache, store, "data", &mo, &m));
    CHECK(f.destroyed == 2);
    mo.buffer_size = BS;
    mo.policy_name = "lru";
    FAILS(UCACHE_ERR_BAD_ARGUMENT, ucache_map(cache, store, "data", &mo, &m));
    CHECK(f.destroyed == 3);
    /* A table without choose_eviction is refused. */
    ops.choose_eviction = NULL;
    mo.policy_name = NULL;
    FAILS(UCACHE_ERR_NULL_POINTER, ucache_map(cache, store, "data", &mo, &m));
    CHECK(f.destroyed == 4);

    OK(ucache_store_free(store));
    OK(ucache_cache_free(cache));
    printf("policy: ok (%llu misses, %llu hits, %llu evictions, %llu vetoed)\n",
           (unsigned long long)st.misses, (unsigned long long)st.hits,
           (unsigned long long)st.evictions, (unsigned long long)st.eviction_cancels);
    return 0;
}
