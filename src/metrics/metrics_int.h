/*
 * metrics_int.h: what the metrics module's files share and nobody else
 * includes: the one-hour ring of one-second samples behind the monitoring
 * page (series.c) and the page's files embedded at build time (page/, turned
 * into monitor_assets.c by cmake/embed.cmake).
 *
 * What must stay true: the ring is written and read on the metrics thread
 * only (its timer and its HTTP handlers share one loop), so it has no lock,
 * and it costs nothing on the request path: a sample reads the same atomics
 * serverStatus reads.
 */
#ifndef SBL_METRICS_INT_H
#define SBL_METRICS_INT_H

#include <stddef.h>
#include <uv.h>

#include "metrics/metrics.h"

/* One hour at one sample a second. */
#define SBL_SERIES_CAPACITY 3600
#define SBL_SERIES_INTERVAL_MS 1000

/* Allocate the ring and start sampling every second on loop (the metrics
 * thread's).  Returns 0 or an errno (ENOMEM).  src stays owned by the caller
 * and must outlive sampling. */
int sbl_series_start(uv_loop_t *loop, const sbl_metrics_sources_t *src);
/* Stop the timer (before the loop is walked closed) and free the ring. */
void sbl_series_stop(void);
/* Take one sample now (the timer does this every second; tests call it). */
void sbl_series_sample(void);

/* Append the series as JSON to out: every sample newer than since (a sample
 * number from an earlier answer's "last"; 0 for the whole ring), the series'
 * names and units, the replica set's members when there are any, and the
 * newest sample's raw totals ("latest").  docs/monitoring.md shows the shape. */
void sbl_series_render_json(bson_string_t *out, uint64_t since);
/* Only "latest" (GET /api/latest). */
void sbl_series_render_latest(bson_string_t *out);

/* The page's files, generated from src/metrics/page/ and uPlot's npm package. */
typedef struct sbl_page_asset {
    const char *path;  /* "/", "/uPlot.iife.min.js" ... */
    const char *ctype; /* Content-Type */
    const unsigned char *data;
    size_t len;
} sbl_page_asset_t;
/* The asset served at path, or NULL. */
const sbl_page_asset_t *sbl_page_asset(const char *path);

#endif
