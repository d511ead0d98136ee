/* heap.h — a binary min-heap in a caller's array, its code written once for every element type.
 *
 * UP_HEAP_DEFINE(prefix, type, less) defines
 *   static void prefix_push(type *h, size_t *n, type x)  x into h[0, *n); h holds *n + 1
 *   static type prefix_pop(type *h, size_t *n)           the least of h[0, *n) out (*n > 0)
 * where less(a, b) is a strict weak order on two values of type. Equal elements leave in an order
 * fixed by the sequence of pushes and pops (the same run gives the same order). */
#ifndef UP_HEAP_H
#define UP_HEAP_H

#include <stddef.h>

#define UP_HEAP_DEFINE(prefix, type, less)                                                         \
    static inline void prefix##_push(type *h, size_t *n, type x) {                                 \
        size_t i = (*n)++;                                                                         \
        while (i > 0 && less(x, h[(i - 1) / 2])) {                                                 \
            h[i] = h[(i - 1) / 2];                                                                 \
            i = (i - 1) / 2;                                                                       \
        }                                                                                          \
        h[i] = x;                                                                                  \
    }                                                                                              \
    static inline type prefix##_pop(type *h, size_t *n) {                                          \
        type top = h[0], last = h[--(*n)];                                                         \
        size_t i = 0;                                                                              \
        for (;;) {                                                                                 \
            size_t c = 2 * i + 1;                                                                  \
            if (c >= *n) break;                                                                    \
            if (c + 1 < *n && less(h[c + 1], h[c])) c++;                                           \
            if (!less(h[c], last)) break;                                                          \
            h[i] = h[c];                                                                           \
            i = c;                                                                                 \
        }                                                                                          \
        if (*n > 0) h[i] = last;                                                                   \
        return top;                                                                                \
    }

#endif
