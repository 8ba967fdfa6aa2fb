/*
 * client.h: YCSB's Client for sable-bench: threads, pacing, status lines,
 * the time limit, and the final report.
 *
 * Must stay true: the operation count is split across threads as YCSB does
 * (the first opcount % threads threads take one more), -target is divided
 * evenly between threads and paced from each thread's start so intended
 * start times never drift, and a run that saw any failed operation or
 * could not start every thread returns non-zero.
 */
#ifndef SBENCH_CLIENT_H
#define SBENCH_CLIENT_H

#include <stdio.h>

#include "options.h"

/* Run the load or transaction phase described by o.  Writes the summary to out
 * (or to the exportfile property) and status lines to stderr.  Returns the
 * process exit code: 0 when every operation succeeded, 1 on errors, 2 on bad
 * configuration. */
int bench_client_run(const bench_options_t *o, FILE *out);

#endif
