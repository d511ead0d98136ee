/* svg.c — the line chart and the heat-map of svg.h. */
#include "eval/svg.h"

#include "core/fileio.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { W = 760, H = 460, ML = 80, MR = 170, MT = 56, MB = 64 }; /* size and plot margins */

static const char *const g_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};

static void put(svg_doc *d, const char *fmt, ...) UP_PRINTF(2, 3);
static void put(svg_doc *d, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(d->buf ? d->buf + d->len : NULL, d->buf ? d->cap - d->len : 0, fmt, ap);
        va_end(ap);
        UP_CHECK(n >= 0, "svg: format failed");
        if (d->buf && d->len + (size_t)n < d->cap) {
            d->len += (size_t)n;
            return;
        }
        d->cap = d->cap * 2 + (size_t)n + 4096;
        d->buf = realloc(d->buf, d->cap);
        UP_CHECK(d->buf, "out of memory");
    }
}

/* Text content with &, <, > and quotes escaped. */
static void put_text(svg_doc *d, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&':
            put(d, "&amp;");
            break;
        case '<':
            put(d, "&lt;");
            break;
        case '>':
            put(d, "&gt;");
            break;
        case '"':
            put(d, "&quot;");
            break;
        default:
            put(d, "%c", *s);
        }
    }
}

static void text(svg_doc *d, double x, double y, const char *anchor, int size, const char *extra,
                 const char *s) {
    put(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\"%s%s>", x, y, anchor,
        size, extra ? " " : "", extra ? extra : "");
    put_text(d, s);
    put(d, "</text>\n");
}

static void begin(svg_doc *d, const char *title) {
    d->len = 0;
    put(d,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
        "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
        "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
        W, H, W, H);
    text(d, W / 2.0, 26, "middle", 16, "font-weight=\"bold\"", title);
}

static void axis_labels(svg_doc *d, const char *xlabel, const char *ylabel) {
    text(d, ML + (W - ML - MR) / 2.0, H - 16, "middle", 13, NULL, xlabel);
    char rot[64];
    snprintf(rot, sizeof rot, "transform=\"rotate(-90 18 %.1f)\"", MT + (H - MT - MB) / 2.0);
    text(d, 18, MT + (H - MT - MB) / 2.0, "middle", 13, rot, ylabel);
}

/* ---- line chart ------------------------------------------------------------------------------ */

typedef struct {
    double x0, x1, y0, y1;
    int logx;
} chart_range;

static double px(const chart_range *r, double x) {
    double a = r->logx ? log(x) : x, a0 = r->logx ? log(r->x0) : r->x0;
    double a1 = r->logx ? log(r->x1) : r->x1;
    return ML + (a1 > a0 ? (a - a0) / (a1 - a0) : 0.5) * (W - ML - MR);
}

static double py(const chart_range *r, double y) {
    return H - MB - (r->y1 > r->y0 ? (y - r->y0) / (r->y1 - r->y0) : 0.5) * (H - MT - MB);
}

static int usable(const svg_series *s, int i, int logx) {
    return isfinite(s->x[i]) && isfinite(s->y[i]) && (!logx || s->x[i] > 0);
}

static chart_range range_of(const svg_series *s, int ns, int logx) {
    chart_range r = {INFINITY, -INFINITY, INFINITY, -INFINITY, logx};
    for (int k = 0; k < ns; k++)
        for (int i = 0; i < s[k].n; i++) {
            if (!usable(&s[k], i, logx)) continue;
            r.x0 = fmin(r.x0, s[k].x[i]), r.x1 = fmax(r.x1, s[k].x[i]);
            r.y0 = fmin(r.y0, s[k].y[i]), r.y1 = fmax(r.y1, s[k].y[i]);
        }
    if (!(r.x0 <= r.x1)) r = (chart_range){1, 2, 0, 1, logx};
    double pad = (r.y1 - r.y0) * 0.05 + 1e-9;
    r.y0 -= pad, r.y1 += pad;
    return r;
}

/* Five ticks on y; on x five (linear) or the powers of two in range (log). */
static void ticks(svg_doc *d, const chart_range *r) {
    for (int i = 0; i <= 4; i++) {
        double y = r->y0 + (r->y1 - r->y0) * i / 4.0, Y = py(r, y);
        put(d, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ML, Y,
            W - MR, Y);
        char b[32];
        snprintf(b, sizeof b, "%.3g", y);
        text(d, ML - 6, Y + 4, "end", 11, NULL, b);
    }
    char b[32];
    if (r->logx) {
        for (double x = pow(2, ceil(log2(r->x0))); x <= r->x1 * 1.000001; x *= 2) {
            snprintf(b, sizeof b, "%.4g", x);
            text(d, px(r, x), H - MB + 16, "middle", 11, NULL, b);
        }
        return;
    }
    for (int i = 0; i <= 4; i++) {
        double x = r->x0 + (r->x1 - r->x0) * i / 4.0;
        snprintf(b, sizeof b, "%.4g", x);
        text(d, px(r, x), H - MB + 16, "middle", 11, NULL, b);
    }
}

void svg_line_chart(svg_doc *d, const char *title, const char *xlabel, const char *ylabel,
                    const svg_series *s, int ns, int logx) {
    chart_range r = range_of(s, ns, logx);
    begin(d, title);
    ticks(d, &r);
    put(d, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n",
        ML, MT, W - ML - MR, H - MT - MB);
    for (int k = 0; k < ns; k++) {
        const char *col = g_colors[k % 5];
        put(d, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
        for (int i = 0; i < s[k].n; i++)
            if (usable(&s[k], i, logx)) put(d, "%.1f,%.1f ", px(&r, s[k].x[i]), py(&r, s[k].y[i]));
        put(d, "\"/>\n");
        for (int i = 0; i < s[k].n && s[k].n <= 64; i++) /* points too, when few */
            if (usable(&s[k], i, logx))
                put(d, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(&r, s[k].x[i]),
                    py(&r, s[k].y[i]), col);
        double ly = MT + 14 + 20.0 * k;
        put(d,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"3\"/>\n",
            W - MR + 12, ly - 4, W - MR + 36, ly - 4, col);
        text(d, W - MR + 42, ly, "start", 12, NULL, s[k].name);
    }
    axis_labels(d, xlabel, ylabel);
    put(d, "</svg>\n");
}

/* ---- heat-map -------------------------------------------------------------------------------- */

/* Red (0) -> yellow (0.5) -> green (1). */
static void heat_color(double v, char *out, size_t len) {
    v = v < 0 ? 0 : v > 1 ? 1 : v;
    int rr = v < 0.5 ? 215 : (int)(215 - (v - 0.5) * 2 * 175);
    int gg = v < 0.5 ? (int)(48 + v * 2 * 167) : (int)(215 - (v - 0.5) * 2 * 55);
    snprintf(out, len, "#%02x%02x%02x", rr, gg, 60);
}

void svg_heatmap(svg_doc *d, const char *title, const char *note, const char *xlabel,
                 const char *ylabel, const char *const *xlab, int nx, const char *const *ylab,
                 int ny, const double *v) {
    begin(d, title);
    if (note) text(d, W / 2.0, 44, "middle", 12, NULL, note);
    double cw = (double)(W - ML - MR) / (nx > 0 ? nx : 1),
           ch = (double)(H - MT - MB) / (ny > 0 ? ny : 1);
    for (int r = 0; r < ny; r++) {
        double y = H - MB - (r + 1) * ch;
        text(d, ML - 6, y + ch / 2 + 4, "end", 11, NULL, ylab[r]);
        for (int c = 0; c < nx; c++) {
            double x = ML + c * cw, a = v[(size_t)r * nx + c];
            char col[16] = "#eeeeee";
            if (isfinite(a)) heat_color(a, col, sizeof col);
            put(d,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
                "stroke=\"white\"/>\n",
                x, y, cw, ch, col);
            if (!isfinite(a) || cw < 22 || ch < 12) continue;
            char b[16];
            snprintf(b, sizeof b, "%.2f", a);
            text(d, x + cw / 2, y + ch / 2 + 4, "middle", cw < 40 ? 9 : 11, NULL, b);
        }
    }
    for (int c = 0; c < nx; c++) {
        char rot[96];
        double x = ML + (c + 0.5) * cw, y = H - MB + 12;
        snprintf(rot, sizeof rot, "transform=\"rotate(-30 %.1f %.1f)\"", x, y);
        text(d, x, y, "end", 10, rot, xlab[c]);
    }
    /* the colour scale */
    for (int i = 0; i <= 10; i++) {
        char col[16], b[16];
        heat_color(i / 10.0, col, sizeof col);
        double y = H - MB - (i + 1) * (H - MT - MB) / 11.0;
        put(d, "<rect x=\"%d\" y=\"%.1f\" width=\"18\" height=\"%.1f\" fill=\"%s\"/>\n",
            W - MR + 20, y, (H - MT - MB) / 11.0, col);
        snprintf(b, sizeof b, "%.1f", i / 10.0);
        text(d, W - MR + 44, y + 12, "start", 10, NULL, b);
    }
    text(d, W - MR + 20, MT - 6, "start", 11, NULL, "accuracy");
    axis_labels(d, xlabel, ylabel);
    put(d, "</svg>\n");
}

int svg_write(svg_doc *d, const char *path, char *err, size_t errlen) {
    int rc = up_write_file_atomic(path, d->buf, d->len, err, errlen);
    svg_free(d);
    return rc;
}

void svg_free(svg_doc *d) {
    free(d->buf);
    memset(d, 0, sizeof *d);
}
