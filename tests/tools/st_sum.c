/* st_sum — a weighted sum of safetensors files with the same tensors (for tests that combine
 * runs, e.g. the gradients of documents run one by one into the gradient of their packed window).
 *
 *   st_sum OUT.safetensors W1 A1.safetensors [W2 A2.safetensors ...]
 *
 * OUT = sum of Wi * Ai, tensor by tensor in A1's order, accumulated in double, written as F32.
 * Exit 0, or 2 with a message on a usage or read error. */
#include "io/safetensors.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 4 || (argc - 2) % 2) {
        fprintf(stderr, "usage: st_sum OUT.safetensors W1 A1.safetensors [W2 A2 ...]\n");
        return 2;
    }
    int n = (argc - 2) / 2;
    st_file *f = calloc((size_t)n, sizeof *f);
    double *w = calloc((size_t)n, sizeof *w);
    char err[512];
    for (int i = 0; i < n; i++) {
        w[i] = strtod(argv[2 + 2 * i], NULL);
        if (st_open(&f[i], argv[3 + 2 * i], err, sizeof err) != 0) {
            fprintf(stderr, "st_sum: %s\n", err);
            return 2;
        }
    }
    int nt = f[0].n;
    st_entry *e = calloc((size_t)nt, sizeof *e);
    float **data = calloc((size_t)nt, sizeof *data);
    for (int t = 0; t < nt; t++) {
        const st_tensor *a = &f[0].tensors[t];
        size_t numel = st_numel(a);
        double *acc = calloc(numel ? numel : 1, sizeof *acc);
        float *buf = malloc((numel ? numel : 1) * sizeof *buf);
        for (int i = 0; i < n; i++) {
            const st_tensor *b = st_find(&f[i], a->name);
            if (!b || st_numel(b) != numel ||
                st_read_f32(&f[i], b, 0, numel, buf, err, sizeof err)) {
                fprintf(stderr, "st_sum: %s: tensor %s missing, of another size or unreadable\n",
                        argv[3 + 2 * i], a->name);
                return 2;
            }
            for (size_t k = 0; k < numel; k++)
                acc[k] += w[i] * (double)buf[k];
        }
        for (size_t k = 0; k < numel; k++)
            buf[k] = (float)acc[k];
        free(acc);
        data[t] = buf;
        e[t].name = a->name;
        e[t].data = buf;
        e[t].ndim = a->ndim;
        for (int d = 0; d < a->ndim && d < 4; d++)
            e[t].shape[d] = a->shape[d];
    }
    int rc = st_write_f32(argv[1], e, nt, err, sizeof err);
    if (rc != 0) fprintf(stderr, "st_sum: %s\n", err);
    for (int t = 0; t < nt; t++)
        free(data[t]);
    for (int i = 0; i < n; i++)
        st_close(&f[i]);
    free(data);
    free(e);
    free(f);
    free(w);
    return rc ? 2 : 0;
}
