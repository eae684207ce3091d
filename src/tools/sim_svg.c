/* SPDX-License-Identifier: Apache-2.0 */
/* sim_svg.c - a small SVG writer for the sweep chart: axes, ticks, labels,
 * a legend, two panels sharing the x axis. */
#include "tools/sim_svg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define W 760
#define H 560
#define LEFT 80
#define RIGHT 90
#define TOP1 60
#define PANEL 170
#define GAP 80
#define TOP2 (TOP1 + PANEL + GAP)
#define NTICKS 5

#define C_CALLS "#1f5fa8"
#define C_OPS "#7fa7d8"
#define C_UTIL "#2a8a3a"
#define C_FALSE "#c0392b"

struct axis {
    double lo, hi; /* data range shown */
    int log;       /* x only: log scale */
};

/* A step of 1, 2 or 5 x 10^k near range / NTICKS. */
static double nice_step(double range)
{
    double raw = range / NTICKS, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/* [0, a nice value above max]; a flat range still gets a height. */
static struct axis y_axis(double lo, double max)
{
    struct axis a = {lo, max, 0};
    if (!(a.hi > a.lo))
        a.hi = a.lo + (a.lo > 0 ? a.lo : 1);
    double step = nice_step(a.hi - a.lo);
    a.hi = a.lo + ceil((a.hi - a.lo) / step - 1e-9) * step;
    return a;
}

static double x_pos(const struct axis *a, double v)
{
    double f =
        a->log ? (log(v) - log(a->lo)) / (log(a->hi) - log(a->lo)) : (v - a->lo) / (a->hi - a->lo);
    if (!isfinite(f))
        f = 0.5;
    return LEFT + f * (W - LEFT - RIGHT);
}

static double y_pos(const struct axis *a, double v, int top)
{
    double f = (v - a->lo) / (a->hi - a->lo);
    if (f < 0)
        f = 0;
    if (f > 1.05)
        f = 1.05;
    return top + PANEL - f * PANEL;
}

static void fmt_num(char *buf, size_t len, double v)
{
    if (v != 0 && (fabs(v) < 0.01 || fabs(v) >= 1e6))
        snprintf(buf, len, "%.1e", v);
    else
        snprintf(buf, len, "%g", round(v * 1e4) / 1e4);
}

/* The frame of one panel, its y ticks on the given side, and the x ticks
 * at the swept values. */
static void panel(FILE *f, int top, const struct axis *xa, const double *x, size_t n)
{
    char b[32];
    fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' fill='none' stroke='#444'/>\n", LEFT,
            top, W - LEFT - RIGHT, PANEL);
    for (size_t i = 0; i < n; i++) {
        double px = x_pos(xa, x[i]);
        fmt_num(b, sizeof(b), x[i]);
        fprintf(f, "<line x1='%.1f' y1='%d' x2='%.1f' y2='%d' stroke='#ddd'/>\n", px, top, px,
                top + PANEL);
        fprintf(f, "<text x='%.1f' y='%d' text-anchor='middle'>%s</text>\n", px, top + PANEL + 16,
                b);
    }
}

static void y_ticks(FILE *f, int top, const struct axis *ya, int right, const char *color,
                    double scale, const char *unit)
{
    char b[32];
    double step = nice_step(ya->hi - ya->lo);
    for (double v = ya->lo; v <= ya->hi + step / 1e6; v += step) {
        double py = y_pos(ya, v, top);
        fmt_num(b, sizeof(b), v * scale);
        if (right)
            fprintf(f, "<text x='%d' y='%.1f' fill='%s'>%s%s</text>\n", W - RIGHT + 6, py + 4,
                    color, b, unit);
        else
            fprintf(f,
                    "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#eee'/>"
                    "<text x='%d' y='%.1f' text-anchor='end' fill='%s'>%s%s</text>\n",
                    LEFT, py, W - RIGHT, py, LEFT - 6, py + 4, color, b, unit);
    }
}

static void series(FILE *f, const struct axis *xa, const struct axis *ya, int top, const double *x,
                   const double *y, size_t n, const char *color, int dashed)
{
    fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2'%s points='", color,
            dashed ? " stroke-dasharray='6,4'" : "");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%.1f,%.1f ", x_pos(xa, x[i]), y_pos(ya, y[i], top));
    fprintf(f, "'/>\n");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "<circle cx='%.1f' cy='%.1f' r='3.5' fill='%s'/>\n", x_pos(xa, x[i]),
                y_pos(ya, y[i], top), color);
}

static void legend(FILE *f, int x, int y, const char *color, int dashed, const char *label)
{
    fprintf(f,
            "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='%s' stroke-width='2'%s/>"
            "<text x='%d' y='%d'>%s</text>\n",
            x, y, x + 24, y, color, dashed ? " stroke-dasharray='6,4'" : "", x + 30, y + 4, label);
}

static void escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else
            fputc(*s, f);
    }
}

int sim_svg_write(const char *path, const char *title, const char *xlabel, const double *x,
                  const struct sim_result *r, size_t n)
{
    double calls[n ? n : 1], ops[n ? n : 1], util[n ? n : 1], fd[n ? n : 1];
    double xmin = x[0], xmax = x[0], cmax = 0, umin = 100, fdmax = 0;
    FILE *f = fopen(path, "w");

    if (!f)
        return -1;
    for (size_t i = 0; i < n; i++) {
        calls[i] = r[i].calls_per_decision;
        ops[i] = r[i].ops_per_decision;
        util[i] = 100 * r[i].utilisation;
        fd[i] = r[i].decisions ? 100.0 * (double)r[i].false_denials / (double)r[i].decisions : 0;
        xmin = fmin(xmin, x[i]);
        xmax = fmax(xmax, x[i]);
        cmax = fmax(cmax, fmax(calls[i], ops[i]));
        umin = fmin(umin, util[i]);
        fdmax = fmax(fdmax, fd[i]);
    }
    struct axis xa = {xmin, xmax, xmin > 0 && xmax / xmin >= 20};
    if (!(xa.hi > xa.lo)) {
        xa.lo -= 1;
        xa.hi += 1;
    } else if (!xa.log) { /* a margin, so that the end points are not on the frame */
        double m = (xa.hi - xa.lo) * 0.05;
        xa.lo -= m;
        xa.hi += m;
    } else {
        xa.lo /= 1.15;
        xa.hi *= 1.15;
    }
    struct axis yc = y_axis(0, cmax);
    /* utilisation: from a round number under its minimum to 100 % */
    double ulo = floor(fmin(umin, 99) / 10) * 10;
    struct axis yu = {ulo, 100, 0}, yf = y_axis(0, fdmax > 0 ? fdmax : 1);

    fprintf(f,
            "<?xml version='1.0' encoding='UTF-8'?>\n"
            "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' "
            "viewBox='0 0 %d %d' font-family='sans-serif' font-size='12'>\n"
            "<rect width='100%%' height='100%%' fill='white'/>\n"
            "<text x='%d' y='24' font-size='15' font-weight='bold'>",
            W, H, W, H, LEFT);
    escape(f, title);
    fprintf(f, "</text>\n");
    /* top: Redis load */
    panel(f, TOP1, &xa, x, n);
    y_ticks(f, TOP1, &yc, 0, "#222", 1, "");
    series(f, &xa, &yc, TOP1, x, ops, n, C_OPS, 1);
    series(f, &xa, &yc, TOP1, x, calls, n, C_CALLS, 0);
    fprintf(f,
            "<text transform='translate(18,%d) rotate(-90)' text-anchor='middle'>"
            "per decision</text>\n",
            TOP1 + PANEL / 2);
    legend(f, LEFT + 10, TOP1 - 12, C_CALLS, 0, "Redis calls per decision (a batch is one)");
    legend(f, LEFT + 330, TOP1 - 12, C_OPS, 1, "script operations per decision");
    /* bottom: accuracy, two scales */
    panel(f, TOP2, &xa, x, n);
    y_ticks(f, TOP2, &yu, 0, C_UTIL, 1, "%");
    y_ticks(f, TOP2, &yf, 1, C_FALSE, 1, "%");
    series(f, &xa, &yu, TOP2, x, util, n, C_UTIL, 0);
    series(f, &xa, &yf, TOP2, x, fd, n, C_FALSE, 1);
    fprintf(f,
            "<text transform='translate(18,%d) rotate(-90)' text-anchor='middle' fill='%s'>"
            "utilisation</text>\n",
            TOP2 + PANEL / 2, C_UTIL);
    fprintf(f,
            "<text transform='translate(%d,%d) rotate(90)' text-anchor='middle' fill='%s'>"
            "false denials</text>\n",
            W - 14, TOP2 + PANEL / 2, C_FALSE);
    legend(f, LEFT + 10, TOP2 - 12, C_UTIL, 0, "utilisation: admitted / exact reference (left)");
    legend(f, LEFT + 330, TOP2 - 12, C_FALSE, 1, "false denials, % of decisions (right)");
    fprintf(f, "<text x='%d' y='%d' text-anchor='middle'>", (LEFT + W - RIGHT) / 2,
            TOP2 + PANEL + 40);
    escape(f, xlabel);
    fprintf(f, "%s</text>\n</svg>\n", xa.log ? " (log scale)" : "");
    return fclose(f) == 0 ? 0 : -1;
}
