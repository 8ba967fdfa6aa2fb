/*
 * props.h: YCSB-style properties (name=value strings) for sable-bench.
 *
 * A property set owns copies of every name and value.  Later sets of the
 * same name replace earlier ones, which gives YCSB's precedence when the
 * caller applies property files first and -p options last.
 */
#ifndef SBENCH_PROPS_H
#define SBENCH_PROPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bench_props {
    char **names;
    char **values;
    size_t n, cap;
} bench_props_t;

void bench_props_init(bench_props_t *p);
void bench_props_free(bench_props_t *p);

/* Set (copy) name=value, replacing an existing value.  Returns 0 or -1 (out of memory). */
int bench_props_set(bench_props_t *p, const char *name, const char *value);
/* Parse "name=value" and set it.  Returns 0, or -1 when there is no '='. */
int bench_props_set_pair(bench_props_t *p, const char *pair);
/* Copy every property of src into dst, replacing values of equal names. */
int bench_props_merge(bench_props_t *dst, const bench_props_t *src);

/*
 * Parse Java-properties text (key=value, key:value or "key value"; '#' and
 * '!' comments; backslash line continuation).  Returns 0, or -1 with a
 * message in err.
 */
int bench_props_parse(bench_props_t *p, const char *text, char *err, size_t errlen);
/* Read and parse a property file.  Returns 0, or -1 with a message in err. */
int bench_props_load_file(bench_props_t *p, const char *path, char *err, size_t errlen);

/* The value of name, or NULL.  Borrowed: valid until the property changes. */
const char *bench_props_get(const bench_props_t *p, const char *name);
bool bench_props_has(const bench_props_t *p, const char *name);
const char *bench_props_str(const bench_props_t *p, const char *name, const char *dflt);
/* Numeric and boolean readers; an unparsable value sets *bad (when non-NULL) and yields dflt. */
int64_t bench_props_int(const bench_props_t *p, const char *name, int64_t dflt, bool *bad);
double bench_props_double(const bench_props_t *p, const char *name, double dflt, bool *bad);
bool bench_props_bool(const bench_props_t *p, const char *name, bool dflt);

#endif
