/* SPDX-License-Identifier: Apache-2.0 */
/* sim_svg.h - the chart of a sweep, as a self-contained SVG file: Redis calls
 * per decision (top panel), utilisation and false denials (bottom panel, two
 * y scales), against the swept setting. Readable in any browser. */
#ifndef SIM_SVG_H
#define SIM_SVG_H

#include <stddef.h>

#include "tools/sim.h"

/* Write the chart of n runs (x[i] gave r[i]) to path. title: one line above
 * the chart; xlabel: the swept setting with its unit. 0, or -1 (errno). */
int sim_svg_write(const char *path, const char *title, const char *xlabel, const double *x,
                  const struct sim_result *r, size_t n);

#endif
