/* kernels_ref.c — plain reference twins of the non-attention kernels (the test oracle).
 * Simple loops, double arithmetic, results rounded to float once. Slow on purpose. */
#include "kernels/kernels_ref.h"

#include <math.h>
#include <string.h>

#include "core/check.h"

void ref_matmul_forward(float *out, const float *inp, const float *w, int N, int IC, int OC,
                        int acc) {
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) {
            double s = acc ? (double)out[(size_t)n * OC + o] : 0.0;
            for (int i = 0; i < IC; i++)
                s += (double)inp[(size_t)n * IC + i] * (double)w[(size_t)o * IC + i];
            out[(size_t)n * OC + o] = (float)s;
        }
    }
}

void ref_matmul_backward(float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, int N, int IC, int OC) {
    if (dinp) { // dinp[n, i] += sum_o dout[n, o] w[o, i]
        for (int n = 0; n < N; n++) {
            for (int i = 0; i < IC; i++) {
                double s = dinp[(size_t)n * IC + i];
                for (int o = 0; o < OC; o++)
                    s += (double)dout[(size_t)n * OC + o] * (double)w[(size_t)o * IC + i];
                dinp[(size_t)n * IC + i] = (float)s;
            }
        }
    }
    if (dw) { // dw[o, i] += sum_n dout[n, o] inp[n, i]
        for (int o = 0; o < OC; o++) {
            for (int i = 0; i < IC; i++) {
                double s = dw[(size_t)o * IC + i];
                for (int n = 0; n < N; n++)
                    s += (double)dout[(size_t)n * OC + o] * (double)inp[(size_t)n * IC + i];
                dw[(size_t)o * IC + i] = (float)s;
            }
        }
    }
}

void ref_embedding_forward(float *out, const int32_t *tokens, const float *wte, int N, int C) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = wte[(size_t)tokens[n] * C + c];
}

void ref_embedding_backward(float *dwte, const float *dout, const int32_t *tokens, int N, int C) {
    // float adds in row order: the order the fast kernel uses too, so results match exactly
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            dwte[(size_t)tokens[n] * C + c] += dout[(size_t)n * C + c];
}

void ref_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         float eps) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++)
            ss += (double)x[c] * x[c];
        double r = 1.0 / sqrt(ss / C + (double)eps);
        rstd[n] = (float)r;
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = (float)((double)x[c] * r * w[c]);
    }
}

void ref_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *d = dout + (size_t)n * C;
        double r = rstd[n];
        double dot = 0.0; // sum_c d_c w_c x_c
        for (int c = 0; c < C; c++)
            dot += (double)d[c] * w[c] * x[c];
        for (int c = 0; c < C; c++) {
            double g = (double)d[c] * w[c] * r - (double)x[c] * r * r * r * dot / C;
            dinp[(size_t)n * C + c] = (float)((double)dinp[(size_t)n * C + c] + g);
        }
    }
    if (!dw) return;
    for (int c = 0; c < C; c++) {
        double s = dw[c];
        for (int n = 0; n < N; n++)
            s += (double)dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * (double)rstd[n];
        dw[c] = (float)s;
    }
}

/* Rotation of x (N, nh, HS) with angles computed here in double; sign -1 is the transpose. */
static void ref_rope_apply(float *x, const float *inv_freq, int64_t pos0, int N, int nh, int HS,
                           double sign) {
    int half = HS / 2;
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < half; j++) {
            double a = (double)(pos0 + n) * (double)inv_freq[j];
            double c = cos(a), s = sign * sin(a);
            for (int h = 0; h < nh; h++) {
                float *x1 = x + ((size_t)n * nh + h) * HS;
                double u = x1[j], v = x1[j + half];
                x1[j] = (float)(u * c - v * s);
                x1[j + half] = (float)(v * c + u * s);
            }
        }
    }
}

void ref_rope_forward(float *x, const float *inv_freq, int64_t pos0, int N, int nh, int HS) {
    ref_rope_apply(x, inv_freq, pos0, N, nh, HS, 1.0);
}

void ref_rope_backward(float *dx, const float *inv_freq, int64_t pos0, int N, int nh, int HS) {
    ref_rope_apply(dx, inv_freq, pos0, N, nh, HS, -1.0);
}

void ref_swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double g = gate[i];
        out[i] = (float)(g / (1.0 + exp(-g)) * up[i]);
    }
}

void ref_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double g = gate[i], u = up[i], d = dout[i];
        double s = 1.0 / (1.0 + exp(-g));
        dgate[i] = (float)(d * u * s * (1.0 + g * (1.0 - s)));
        dup[i] = (float)(d * g * s);
    }
}

double ref_cross_entropy_fused(float *logits, const int32_t *targets, int N, int V,
                               float grad_scale) {
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * V;
        int32_t t = targets[n];
        if (t < 0) {
            memset(x, 0, (size_t)V * sizeof(float));
            continue;
        }
        UP_CHECK(t < V, "ref_cross_entropy_fused: target %d >= V=%d", (int)t, V);
        double mx = x[0];
        for (int v = 1; v < V; v++)
            mx = x[v] > mx ? x[v] : mx;
        double sum = 0.0;
        for (int v = 0; v < V; v++)
            sum += exp((double)x[v] - mx);
        double lse = mx + log(sum);
        total += lse - (double)x[t];
        for (int v = 0; v < V; v++) {
            double p = exp((double)x[v] - lse);
            x[v] = (float)(grad_scale * (p - (v == t ? 1.0 : 0.0)));
        }
    }
    return total;
}

void ref_cross_entropy_rows(const float *logits, const int32_t *targets, int N, int V, double *loss,
                            int32_t *pred) {
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (x[v] > x[best]) best = v;
        double sum = 0.0;
        for (int v = 0; v < V; v++)
            sum += exp((double)x[v] - (double)x[best]);
        int32_t t = targets[n];
        if (loss) loss[n] = t < 0 ? 0.0 : (double)x[best] + log(sum) - (double)x[t];
        if (pred) pred[n] = best;
    }
}

void ref_adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                      const adamw_params *hp, int step, float grad_scale, int decay) {
    // the header's formula, literally, in double
    double b1 = hp->beta1, b2 = hp->beta2, lr = hp->lr, eps = hp->eps;
    double wd = decay ? (double)hp->weight_decay : 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = (double)grad[i] * grad_scale;
        double mi = b1 * m[i] + (1.0 - b1) * g;
        double vi = b2 * v[i] + (1.0 - b2) * g * g;
        m[i] = (float)mi;
        v[i] = (float)vi;
        double mhat = mi / (1.0 - pow(b1, step));
        double vhat = vi / (1.0 - pow(b2, step));
        double p = param[i];
        param[i] = (float)(p - lr * (mhat / (sqrt(vhat) + eps) + wd * p));
    }
}
