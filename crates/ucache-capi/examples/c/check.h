/* Shared by the C examples: checks that end the program with a message on failure. */
#ifndef UCACHE_EXAMPLE_CHECK_H
#define UCACHE_EXAMPLE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "ucache.h"

/* A call that must succeed. */
#define OK(call)                                                                      \
    do {                                                                              \
        enum ucache_status s_ = (call);                                               \
        if (s_ != UCACHE_OK) {                                                        \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call, \
                    ucache_status_name(s_), ucache_last_error());                     \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

/* A call that must fail with `want`. */
#define FAILS(want, call)                                                                 \
    do {                                                                                  \
        enum ucache_status s_ = (call);                                                   \
        if (s_ != (want)) {                                                               \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__, \
                    #call, ucache_status_name(s_), ucache_status_name(want),              \
                    ucache_last_error());                                                 \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

/* A condition that must hold. */
#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

#endif
