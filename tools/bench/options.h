/*
 * options.h: sable-bench's command line, parsed with YCSB's meaning.
 *
 *   sable-bench load|run DB [-P file]... [-p name=value]... [-threads N]
 *               [-target OPS] [-s] [-l label] [--chart FILE.png]
 *
 * YCSB's own spellings (-load, -t, -db CLASS) are accepted too.  As in YCSB,
 * -p, -threads, -target and -s override whatever the -P files say,
 * whatever their order on the line.
 */
#ifndef SBENCH_OPTIONS_H
#define SBENCH_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "props.h"

typedef struct bench_options {
    bool load;            /* load phase (doInsert) rather than run (doTransaction) */
    char dbname[128];     /* "mongodb", "redis", "postgres" or a YCSB class name */
    bench_props_t props;  /* the merged properties */
    char chart[1024];     /* --chart: a PNG of throughput and latency over time, or "" */
    bool help;
} bench_options_t;

/*
 * Parse argv.  Returns 0, or -1 with a message in err.  On success the
 * caller frees o->props with bench_props_free.
 */
int bench_options_parse(bench_options_t *o, int argc, char **argv, char *err, size_t errlen);
/* The usage text. */
const char *bench_usage(void);

#endif
