/*
 * db.h: the interface every sable-bench binding implements (YCSB's DB class).
 *
 * A binding has one shared context (made once by open, freed by close after
 * every thread finished) and one context per client thread (thread_init /
 * thread_cleanup), used by that thread only.  Operations return YCSB's
 * status; they never print per-operation noise except as YCSB's bindings do.
 */
#ifndef SBENCH_DB_H
#define SBENCH_DB_H

#include <stddef.h>
#include <stdint.h>

#include "measure.h"
#include "props.h"

/* One field of a record: value bytes are not NUL-terminated. */
typedef struct bench_field {
    const char *name;
    const char *value;
    size_t len;
} bench_field_t;

typedef struct bench_db {
    const char *name;
    /* Shared set-up from properties.  Returns 0, or -1 with a message in err. */
    int (*open)(const bench_props_t *props, int nthreads, void **sharedp, char *err, size_t errlen);
    /* Per-thread set-up.  Returns 0, or -1 with a message in err. */
    int (*thread_init)(void *shared, void **ctxp, char *err, size_t errlen);
    /* fields == NULL reads all fields. */
    bench_status_t (*read)(void *ctx, const char *table, const char *key, const char *const *fields, int nfields);
    bench_status_t (*scan)(void *ctx, const char *table, const char *startkey, int count,
                           const char *const *fields, int nfields);
    bench_status_t (*update)(void *ctx, const char *table, const char *key, const bench_field_t *values, int n);
    bench_status_t (*insert)(void *ctx, const char *table, const char *key, const bench_field_t *values, int n);
    bench_status_t (*del)(void *ctx, const char *table, const char *key);
    /* Flush pending batches and release the thread's context (measured as CLEANUP). */
    bench_status_t (*thread_cleanup)(void *ctx);
    void (*close)(void *shared);
} bench_db_t;

extern const bench_db_t bench_db_mongodb;
extern const bench_db_t bench_db_redis;
extern const bench_db_t bench_db_postgres;

/*
 * The mongodb URL YCSB's MongoDbClient would use: mongodb.url (default
 * mongodb://localhost:27017/ycsb?w=1) plus the options implied by
 * mongodb.maxconnections, mongodb.writeConcern and mongodb.readPreference
 * that the URL does not already set.  Returns 0, or -1 with a message in err.
 */
int bench_mongo_build_url(const bench_props_t *p, char *url, size_t cap, char *err, size_t errlen);
/* Java's String.hashCode of an ASCII string (the Redis binding's scan-index score). */
int32_t bench_java_string_hash(const char *s);
/* Convert postgrenosql.url (jdbc:postgresql://...) or postgres.url (libpq conninfo/URI)
 * into a libpq connection string.  Returns 0, or -1 with a message in err. */
int bench_pg_conninfo(const bench_props_t *p, char *out, size_t cap, char *err, size_t errlen);

/* The binding called name ("mongodb", "redis", "postgres", YCSB class names too), or NULL. */
const bench_db_t *bench_db_find(const char *name);

#endif
