/*
 * db_pg.c: the postgres binding, behaving as YCSB's PostgreNoSQL binding:
 * table usertable (YCSB_KEY varchar primary key, YCSB_VALUE jsonb), one
 * JSON object of field -> string per record, updates merged with jsonb ||.
 *
 * Must stay true: statements are prepared once per connection (YCSB caches
 * its PreparedStatements); one connection per thread; with
 * postgrenosql.autocommit=false each thread works in one transaction that
 * its cleanup commits.
 */
#include <libpq-fe.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"

typedef struct pg_shared {
    char conninfo[2048];
    char table[128];
    bool autocommit;
    atomic_int errors_printed;
} pg_shared_t;

typedef struct pg_ctx {
    pg_shared_t *sh;
    PGconn *conn;
    char *json;
    size_t jsoncap;
} pg_ctx_t;

int bench_pg_conninfo(const bench_props_t *p, char *out, size_t cap, char *err, size_t errlen)
{
    const char *native = bench_props_get(p, "postgres.url");
    if (native) {
        snprintf(out, cap, "%s", native);
        return 0;
    }
    const char *url = bench_props_str(p, "postgrenosql.url", "jdbc:postgresql://127.0.0.1:5432/test");
    if (strncmp(url, "jdbc:", 5) != 0) {
        snprintf(err, errlen, "postgrenosql.url must be jdbc:postgresql://host:port/db (got %s)", url);
        return -1;
    }
    /* What follows jdbc: is a URI libpq understands; user and password come apart. */
    const char *user = bench_props_str(p, "postgrenosql.user", "postgres");
    const char *pass = bench_props_str(p, "postgrenosql.passwd", "");
    int n = snprintf(out, cap, "%s%s%s=%s", url + 5, strchr(url, '?') ? "&" : "?", "user", user);
    if (n > 0 && (size_t)n < cap && *pass)
        n += snprintf(out + n, cap - (size_t)n, "&password=%s", pass);
    if (n < 0 || (size_t)n >= cap) {
        snprintf(err, errlen, "postgrenosql.url too long");
        return -1;
    }
    return 0;
}

static void report_error(pg_shared_t *sh, const char *what, const char *msg)
{
    if (atomic_fetch_add(&sh->errors_printed, 1) < 10)
        fprintf(stderr, "postgres %s failed: %s\n", what, msg);
}

static bool exec_ok(PGconn *conn, const char *sql, char *err, size_t errlen)
{
    PGresult *r = PQexec(conn, sql);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok)
        snprintf(err, errlen, "%s: %s", sql, PQerrorMessage(conn));
    PQclear(r);
    return ok;
}

static void no_notices(void *arg, const char *msg) {}

static int pg_open(const bench_props_t *p, int nthreads, void **sharedp, char *err, size_t errlen)
{
    pg_shared_t *sh = calloc(1, sizeof(*sh));
    if (sh == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (bench_pg_conninfo(p, sh->conninfo, sizeof(sh->conninfo), err, errlen) != 0)
        goto fail;
    snprintf(sh->table, sizeof(sh->table), "%s", bench_props_str(p, "table", "usertable"));
    sh->autocommit = bench_props_bool(p, "postgrenosql.autocommit", true);
    PGconn *conn = PQconnectdb(sh->conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(err, errlen, "cannot connect: %s", PQerrorMessage(conn));
        PQfinish(conn);
        goto fail;
    }
    /* YCSB expects the table to exist; creating it when missing saves a step. */
    char sql[512];
    snprintf(sql, sizeof(sql),
             "CREATE TABLE IF NOT EXISTS %s (YCSB_KEY VARCHAR(255) PRIMARY KEY NOT NULL, YCSB_VALUE JSONB NOT NULL)",
             sh->table);
    PQsetNoticeProcessor(conn, no_notices, NULL);
    bool ok = exec_ok(conn, sql, err, errlen);
    PQfinish(conn);
    if (!ok)
        goto fail;
    *sharedp = sh;
    return 0;
fail:
    free(sh);
    return -1;
}

static int pg_thread_init(void *shared, void **ctxp, char *err, size_t errlen)
{
    pg_shared_t *sh = shared;
    pg_ctx_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->sh = sh;
    c->conn = PQconnectdb(sh->conninfo);
    if (PQstatus(c->conn) != CONNECTION_OK) {
        snprintf(err, errlen, "cannot connect: %s", PQerrorMessage(c->conn));
        goto fail;
    }
    PQsetNoticeProcessor(c->conn, no_notices, NULL);
    const char *t = sh->table;
    char sql[5][512];
    snprintf(sql[0], 512, "INSERT INTO %s (YCSB_KEY, YCSB_VALUE) VALUES ($1, $2::jsonb)", t);
    snprintf(sql[1], 512, "UPDATE %s SET YCSB_VALUE = YCSB_VALUE || $2::jsonb WHERE YCSB_KEY = $1", t);
    snprintf(sql[2], 512, "DELETE FROM %s WHERE YCSB_KEY = $1", t);
    snprintf(sql[3], 512, "SELECT YCSB_VALUE FROM %s WHERE YCSB_KEY = $1", t);
    snprintf(sql[4], 512, "SELECT YCSB_VALUE FROM %s WHERE YCSB_KEY >= $1 ORDER BY YCSB_KEY LIMIT $2", t);
    static const char *const names[5] = {"ins", "upd", "del", "rd", "sc"};
    for (int i = 0; i < 5; i++) {
        PGresult *r = PQprepare(c->conn, names[i], sql[i], 0, NULL);
        bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (!ok) {
            snprintf(err, errlen, "prepare %s: %s", sql[i], PQerrorMessage(c->conn));
            goto fail;
        }
    }
    if (!sh->autocommit && !exec_ok(c->conn, "BEGIN", err, errlen))
        goto fail;
    *ctxp = c;
    return 0;
fail:
    PQfinish(c->conn);
    free(c);
    return -1;
}

/* Run a prepared statement; returns the result or NULL (error reported). */
static PGresult *run(pg_ctx_t *c, const char *stmt, int n, const char *const *vals, const char *what)
{
    PGresult *r = PQexecPrepared(c->conn, stmt, n, vals, NULL, NULL, 0);
    ExecStatusType s = PQresultStatus(r);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
        report_error(c->sh, what, PQerrorMessage(c->conn));
        PQclear(r);
        if (PQstatus(c->conn) != CONNECTION_OK)
            PQreset(c->conn);
        return NULL;
    }
    return r;
}

/* The values as a JSON object of strings. */
static const char *to_json(pg_ctx_t *c, const bench_field_t *v, int n)
{
    size_t need = 3;
    for (int i = 0; i < n; i++)
        need += strlen(v[i].name) + 2 * v[i].len + 8;
    if (need > c->jsoncap) {
        char *j = realloc(c->json, need);
        if (j == NULL)
            return NULL;
        c->json = j;
        c->jsoncap = need;
    }
    char *o = c->json;
    *o++ = '{';
    for (int i = 0; i < n; i++) {
        if (i)
            *o++ = ',';
        o += sprintf(o, "\"%s\":\"", v[i].name);
        for (size_t k = 0; k < v[i].len; k++) {
            char ch = v[i].value[k];
            if (ch == '"' || ch == '\\')
                *o++ = '\\';
            *o++ = ch;
        }
        *o++ = '"';
    }
    *o++ = '}';
    *o = '\0';
    return c->json;
}

static bench_status_t pg_read(void *ctx, const char *table, const char *key, const char *const *fields,
                              int nfields)
{
    pg_ctx_t *c = ctx;
    const char *vals[1] = {key};
    PGresult *r = run(c, "rd", 1, vals, "read");
    if (r == NULL)
        return BENCH_ERROR;
    bench_status_t st = PQntuples(r) > 0 ? BENCH_OK : BENCH_NOT_FOUND;
    PQclear(r);
    return st;
}

static bench_status_t pg_scan(void *ctx, const char *table, const char *startkey, int count,
                              const char *const *fields, int nfields)
{
    pg_ctx_t *c = ctx;
    char cnt[32];
    snprintf(cnt, sizeof(cnt), "%d", count);
    const char *vals[2] = {startkey, cnt};
    PGresult *r = run(c, "sc", 2, vals, "scan");
    if (r == NULL)
        return BENCH_ERROR;
    PQclear(r);
    return BENCH_OK;
}

static bench_status_t pg_write(pg_ctx_t *c, const char *stmt, const char *key, const bench_field_t *v, int n,
                               const char *what)
{
    const char *json = to_json(c, v, n);
    if (json == NULL)
        return BENCH_ERROR;
    const char *vals[2] = {key, json};
    PGresult *r = run(c, stmt, 2, vals, what);
    if (r == NULL)
        return BENCH_ERROR;
    bench_status_t st = strcmp(PQcmdTuples(r), "0") == 0 ? BENCH_NOT_FOUND : BENCH_OK;
    PQclear(r);
    return st;
}

static bench_status_t pg_insert(void *ctx, const char *table, const char *key, const bench_field_t *values, int n)
{
    return pg_write(ctx, "ins", key, values, n, "insert");
}

static bench_status_t pg_update(void *ctx, const char *table, const char *key, const bench_field_t *values, int n)
{
    return pg_write(ctx, "upd", key, values, n, "update");
}

static bench_status_t pg_delete(void *ctx, const char *table, const char *key)
{
    pg_ctx_t *c = ctx;
    const char *vals[1] = {key};
    PGresult *r = run(c, "del", 1, vals, "delete");
    if (r == NULL)
        return BENCH_ERROR;
    bench_status_t st = strcmp(PQcmdTuples(r), "0") == 0 ? BENCH_NOT_FOUND : BENCH_OK;
    PQclear(r);
    return st;
}

static bench_status_t pg_thread_cleanup(void *ctx)
{
    pg_ctx_t *c = ctx;
    bench_status_t st = BENCH_OK;
    char err[512];
    if (!c->sh->autocommit && !exec_ok(c->conn, "COMMIT", err, sizeof(err))) {
        report_error(c->sh, "commit", err);
        st = BENCH_ERROR;
    }
    PQfinish(c->conn);
    free(c->json);
    free(c);
    return st;
}

static void pg_close(void *shared) { free(shared); }

const bench_db_t bench_db_postgres = {
    .name = "postgres",
    .open = pg_open,
    .thread_init = pg_thread_init,
    .read = pg_read,
    .scan = pg_scan,
    .update = pg_update,
    .insert = pg_insert,
    .del = pg_delete,
    .thread_cleanup = pg_thread_cleanup,
    .close = pg_close,
};
