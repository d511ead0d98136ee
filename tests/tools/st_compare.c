/* st_compare — compares two safetensors files tensor by tensor.
 *
 *   st_compare A.safetensors B.safetensors --rtol X [--atol Y] [--verbose]
 *
 * Every tensor of A must be in B with the same shape. Per tensor, with err = max |a - b| and
 * scale = max |b|, the tensor passes when err <= atol + rtol * scale: a norm-relative criterion,
 * so small entries of a large tensor are not held to an elementwise relative bound that float
 * round-off cannot meet. A NaN or Inf anywhere fails. The final line names the tensor closest to
 * (or furthest past) its limit:
 *   st_compare: N tensors, worst <name> err/scale=<x>: PASS|FAIL
 * Exit 0 on pass, 1 on fail, 2 on a usage or read error. */
#include "io/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK ((size_t)1 << 20) /* elements per read, so huge tensors stream in 4 MiB pieces */

static int parse_double(const char *s, double *out) {
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !(v >= 0) || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: st_compare A.safetensors B.safetensors --rtol X [--atol Y] "
                    "[--verbose]\n"
                    "  passes when, for every tensor of A, max|a-b| <= atol + rtol * max|b|\n");
}

static void fmt_shape(char *buf, size_t len, const st_tensor *t) {
    size_t k = (size_t)snprintf(buf, len, "(");
    for (int d = 0; d < t->ndim && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (k < len) snprintf(buf + k, len - k, ")");
}

int main(int argc, char **argv) {
    const char *pa = NULL, *pb = NULL;
    double rtol = -1, atol = 0;
    int verbose = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rtol") == 0 && i + 1 < argc) {
            if (parse_double(argv[++i], &rtol) != 0) {
                fprintf(stderr, "st_compare: --rtol %s is not a non-negative number\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--atol") == 0 && i + 1 < argc) {
            if (parse_double(argv[++i], &atol) != 0) {
                fprintf(stderr, "st_compare: --atol %s is not a non-negative number\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0) {
            verbose = 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage();
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "st_compare: unknown flag %s\n", argv[i]);
            usage();
            return 2;
        } else if (pa == NULL)
            pa = argv[i];
        else if (pb == NULL)
            pb = argv[i];
        else {
            fprintf(stderr, "st_compare: more than two files given\n");
            usage();
            return 2;
        }
    }
    if (pa == NULL || pb == NULL || rtol < 0) {
        usage();
        return 2;
    }

    char err[1024];
    st_file fa, fb;
    if (st_open(&fa, pa, err, sizeof err) != 0) {
        fprintf(stderr, "st_compare: %s\n", err);
        return 2;
    }
    if (st_open(&fb, pb, err, sizeof err) != 0) {
        fprintf(stderr, "st_compare: %s\n", err);
        st_close(&fa);
        return 2;
    }
    float *ba = malloc(CHUNK * sizeof *ba), *bb = malloc(CHUNK * sizeof *bb);
    if (ba == NULL || bb == NULL) {
        fprintf(stderr, "st_compare: out of memory\n");
        return 2;
    }
    int rc = 0, failed = 0;
    double worst_q = -1, worst_rel = 0;
    const char *worst = "-";
    for (int i = 0; i < fa.n && rc == 0; i++) {
        const st_tensor *ta = &fa.tensors[i];
        const st_tensor *tb = st_find(&fb, ta->name);
        char sa[160], sb[160];
        fmt_shape(sa, sizeof sa, ta);
        if (tb == NULL) {
            printf("%s: missing from %s\n", ta->name, pb);
            failed = 1;
            worst = ta->name;
            worst_q = INFINITY;
            worst_rel = INFINITY;
            continue;
        }
        fmt_shape(sb, sizeof sb, tb);
        if (ta->ndim != tb->ndim ||
            memcmp(ta->shape, tb->shape, (size_t)ta->ndim * sizeof ta->shape[0]) != 0) {
            printf("%s: shape %s in A but %s in B\n", ta->name, sa, sb);
            failed = 1;
            worst = ta->name;
            worst_q = INFINITY;
            worst_rel = INFINITY;
            continue;
        }
        size_t n = st_numel(ta);
        double maxdiff = 0, maxb = 0;
        int nonfinite = 0;
        for (size_t off = 0; off < n; off += CHUNK) {
            size_t m = n - off < CHUNK ? n - off : CHUNK;
            if (st_read_f32(&fa, ta, off, m, ba, err, sizeof err) != 0 ||
                st_read_f32(&fb, tb, off, m, bb, err, sizeof err) != 0) {
                fprintf(stderr, "st_compare: %s\n", err);
                rc = 2;
                break;
            }
            for (size_t j = 0; j < m; j++) {
                double a = ba[j], b = bb[j];
                if (!isfinite(a) || !isfinite(b)) {
                    nonfinite++;
                    continue;
                }
                double d = fabs(a - b);
                if (d > maxdiff) maxdiff = d;
                if (fabs(b) > maxb) maxb = fabs(b);
            }
        }
        if (rc != 0) break;
        double limit = atol + rtol * maxb;
        /* q <= 1 passes; 0/0 (identical all-zero tensors with atol 0) counts as a pass */
        double q = nonfinite ? INFINITY : maxdiff == 0 ? 0 : limit > 0 ? maxdiff / limit : INFINITY;
        double rel = nonfinite ? INFINITY : maxdiff == 0 ? 0 : maxb > 0 ? maxdiff / maxb : INFINITY;
        int ok = q <= 1.0;
        if (!ok) failed = 1;
        if (q > worst_q) {
            worst_q = q;
            worst_rel = rel;
            worst = ta->name;
        }
        if (verbose || !ok) {
            if (nonfinite)
                printf("%s %s: %d non-finite values: FAIL\n", ta->name, sa, nonfinite);
            else
                printf("%s %s: max|a-b|=%.3e max|b|=%.3e err/scale=%.3e limit=%.3e: %s\n", ta->name,
                       sa, maxdiff, maxb, rel, limit, ok ? "ok" : "FAIL");
        }
    }
    if (rc == 0) {
        printf("st_compare: %d tensors, worst %s err/scale=%.3e: %s\n", fa.n, worst, worst_rel,
               failed ? "FAIL" : "PASS");
        rc = failed ? 1 : 0;
    }
    free(ba);
    free(bb);
    st_close(&fa);
    st_close(&fb);
    return rc;
}
