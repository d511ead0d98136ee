/* text.c — code points as utf8proc reads them, Python's whitespace, and a substring search: the
 * character-level helpers of jinja_impl.h. */
#include "template/jinja_impl.h"

#include <string.h>
#include <utf8proc.h>

uint32_t jv_cp_at(const char *s, size_t n, size_t i, size_t *len) {
    utf8proc_int32_t c;
    utf8proc_ssize_t l =
        utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
    if (l <= 0) {
        *len = 1;
        return (unsigned char)s[i];
    }
    *len = (size_t)l;
    return (uint32_t)c;
}

size_t jv_cp_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n;) {
        size_t l;
        jv_cp_at(s, n, i, &l);
        i += l;
        c++;
    }
    return c;
}

int py_isspace(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

const char *jv_memfind(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && memcmp(h + i, nd, nn) == 0) return h + i;
    return NULL;
}
