/* svg.h — small SVG pictures for a person to look at: a line chart (loss by position, loss
 * curves) and a heat-map (recall accuracy). The document is built in memory and written
 * atomically; text is escaped, so the file is always well-formed XML. */
#ifndef UP_SVG_H
#define UP_SVG_H

#include "core/check.h"

#include <stddef.h>

typedef struct {
    char *buf;
    size_t len, cap;
} svg_doc;

/* One line of a chart: n points (x[i], y[i]); non-finite y values are gaps. */
typedef struct {
    const char *name; /* in the legend */
    const double *x, *y;
    int n;
} svg_series;

/* A chart of ns series (distinct colours, a legend) with axes, ticks and labels; logx: the x
 * axis is logarithmic (x > 0). Replaces d's content. */
void svg_line_chart(svg_doc *d, const char *title, const char *xlabel, const char *ylabel,
                    const svg_series *s, int ns, int logx);
/* A grid of ny rows (bottom to top) by nx columns: v[r * nx + c] in [0, 1] coloured from red (0)
 * through yellow to green (1) and printed in the cell, NaN: an empty (grey) cell; the labels of
 * the columns and rows below and beside them; note: a line under the title (may be NULL).
 * Replaces d's content. */
void svg_heatmap(svg_doc *d, const char *title, const char *note, const char *xlabel,
                 const char *ylabel, const char *const *xlab, int nx, const char *const *ylab,
                 int ny, const double *v);
/* Writes d to path atomically and frees it. 0, or -1 with a message. */
int svg_write(svg_doc *d, const char *path, char *err, size_t errlen);
void svg_free(svg_doc *d);

#endif
