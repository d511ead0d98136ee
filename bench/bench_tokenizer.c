/* bench_tokenizer.c — encode speed of src/tokenizer: MB/s of one text on 1 thread and on N
 * threads (the text cut at tok_cut_point into 256 KiB parts, one encoder per thread, as
 * `upipe data` cuts its items). The thread counts alternate within each of R rounds (a cold cache
 * each time, the team's cores woken by 20 ms of spinning before the clock starts) and the medians
 * are reported, with the median of each round's ratio to the first count: a ratio taken within one
 * round is what survives a shared, noisy host. The ids of every thread count are checked equal.
 * usage: bench_tokenizer TOKENIZER_DIR TEXT [THREADS ...]   (default: 1 2; UPIPE_BENCH_ROUNDS=R,
 * default 11) */
#include "bench_util.h"
#include "tokenizer/tokenizer.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Cuts text into parts of about `target` bytes at tok_cut_point; returns the count. */
static size_t make_parts(const tokenizer *t, const char *text, size_t n, size_t target,
                         size_t *starts) {
    size_t np = 0, at = 0;
    while (at < n) {
        starts[np++] = at;
        size_t end = at + target < n ? at + target : n;
        if (end < n) {
            size_t c = tok_cut_point(t, text + at, end - at);
            end = c > 0 ? at + c : n;
        }
        at = end;
    }
    starts[np] = n;
    return np;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenizer TOKENIZER_DIR TEXT [THREADS ...]\n");
        return 2;
    }
    char err[1024];
    tokenizer *t = tok_load(argv[1], err, sizeof err);
    if (t == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    FILE *f = fopen(argv[2], "rb");
    if (f == NULL) return 1;
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(n + 1);
    if (text == NULL || fread(text, 1, n, f) != n) return 1;
    fclose(f);
    int nthr_list[16] = {1, 2}, nl = 2;
    if (argc > 3) {
        nl = 0;
        for (int i = 3; i < argc && nl < 16; i++)
            nthr_list[nl++] = atoi(argv[i]);
    }
    const char *pe = getenv("UPIPE_BENCH_PART_KB");
    size_t part = pe != NULL && atoi(pe) > 0 ? (size_t)atoi(pe) << 10
                                             : 256 << 10; /* as upipe data's items: many per thread,
                                                           * so dynamic scheduling balances */
    size_t *starts = malloc((n / 16 + 2) * sizeof *starts);
    size_t np = make_parts(t, text, n, part, starts);
    tok_ids *out = calloc(np, sizeof *out);
    size_t ref_ntok = 0;
    uint64_t ref_sum = 0;
    char cpu[192];
    cpu_model(cpu, sizeof cpu);
    printf("%s: %.2f MB in %zu parts (%s)\ncpu: %s\n", argv[2], (double)n / 1e6, np,
           tok_describe(t), cpu);
    const char *re = getenv("UPIPE_BENCH_ROUNDS");
    int rounds = re != NULL && atoi(re) > 0 ? atoi(re) : 11;
    double *secs = calloc((size_t)(rounds * nl), sizeof *secs);
    int bad = 0;
    for (int r = 0; r < rounds; r++) {
        for (int l = 0; l < nl; l++) {
            int nth = nthr_list[l];
            tok_encoder **enc = calloc((size_t)nth, sizeof *enc);
            tok_cache_reset(t); /* a cold cache each time */
            for (int i = 0; i < nth; i++)
                enc[i] = tok_encoder_new(t);
                /* every thread of the team busy for 20 ms first: a core idle since the last run
                 * (a VM's vCPU descheduled, a core in a sleep state) wakes before the clock starts,
                 * as in a long run */
#pragma omp parallel num_threads(nth)
            {
                double w0 = now_s();
                while (now_s() - w0 < 0.02) {
                }
            }
            double t0 = now_s();
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
            for (size_t p = 0; p < np; p++) {
                out[p].n = 0;
                tok_encode(enc[omp_get_thread_num()], text + starts[p], starts[p + 1] - starts[p],
                           p > 0 ? TOK_CONTINUE : 0, &out[p]);
            }
            secs[r * nl + l] = now_s() - t0;
            for (int i = 0; i < nth; i++)
                tok_encoder_free(enc[i]);
            free(enc);
            size_t ntok = 0;
            uint64_t sum = 0;
            for (size_t p = 0; p < np; p++) {
                ntok += out[p].n;
                for (size_t k = 0; k < out[p].n; k++)
                    sum = sum * 31 + (uint32_t)out[p].ids[k];
            }
            if (r == 0 && l == 0) ref_ntok = ntok, ref_sum = sum;
            bad |= ntok != ref_ntok || sum != ref_sum;
        }
    }
    double *col = malloc((size_t)rounds * sizeof *col);
    for (int l = 0; l < nl; l++) {
        for (int r = 0; r < rounds; r++)
            col[r] = secs[r * nl + l];
        double med = median(col, rounds);
        for (int r = 0; r < rounds; r++)
            col[r] = secs[r * nl] / secs[r * nl + l];
        printf("  %2d thread%s: %7.2f MB/s  (%zu tokens, median %.3f s of %d; %.2fx %d thread%s, "
               "median of the rounds' ratios)%s\n",
               nthr_list[l], nthr_list[l] == 1 ? " " : "s", (double)n / 1e6 / med, ref_ntok, med,
               rounds, median(col, rounds), nthr_list[0], nthr_list[0] == 1 ? "" : "s",
               bad ? "  IDS DIFFER" : "");
    }
    free(col);
    free(secs);
    for (size_t p = 0; p < np; p++)
        free(out[p].ids);
    free(out);
    free(starts);
    free(text);
    tok_free(t);
    return bad;
}
