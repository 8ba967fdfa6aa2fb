/*
 * views.h: private to src/cmd.  Read-only views (create with viewOn and
 * pipeline): reads on a view run its pipeline over its source; writes fail.
 *
 * What must stay true: while no view exists (the usual case) the read and
 * write paths pay one relaxed atomic load (sbl_views_any).
 */
#ifndef SBL_CMD_VIEWS_H
#define SBL_CMD_VIEWS_H

#include <stdatomic.h>
#include <stdbool.h>

#include "cmd/cmd_int.h"

/* 1: some view may exist; 0: none; -1: not yet known (views.c). */
extern atomic_int sbl_views_state;
bool sbl_views_scan(void);

static inline bool sbl_views_any(void)
{
    int v = atomic_load_explicit(&sbl_views_state, memory_order_relaxed);
    return v >= 0 ? v != 0 : sbl_views_scan();
}

/* Record that a view now exists (create). */
void sbl_views_note_created(void);

/* Whether ns names a view (opened through ss). */
bool sbl_view_is(sbl_session_t *ss, const char *ns);

/*
 * find, count, distinct and aggregate call this first: when the command's
 * namespace is a view, it runs the command as an aggregation over the view's
 * source (the view's pipeline first) and returns 0 or an error code, having
 * filled ctx->reply as the command would; returns -1 when it is no view.
 */
int sbl_view_read(sbl_cmd_ctx_t *ctx, sbl_err_t *err);

/* create with viewOn: check viewOn / pipeline and fill opts {viewOn, pipeline}. */
int sbl_view_options(const bson_t *cmd, bson_t *opts, sbl_err_t *err);

#endif
