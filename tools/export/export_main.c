/*
 * sable-export: mongoexport for Sable.  Writes a collection's documents (a
 * --query, --sort, --skip, --limit and --fields projection applied by the
 * server) as Extended JSON v2, one document per line or one --jsonArray, in
 * the relaxed (default) or canonical --jsonFormat; or as CSV or TSV with the
 * named --fields, a header line first unless --noHeaderLine.
 *
 * What must stay true: JSON output read back by sable-import (or
 * mongoimport) gives the same documents; canonical output keeps every type.
 * CSV cells follow mongoexport: strings as they are (quoted when needed),
 * ObjectId(hex), ISO-8601 dates, sub-documents and arrays as relaxed JSON.
 */
#include "tool.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct eopts {
    const char *db, *coll, *query, *query_file, *fields, *field_file, *type, *out, *format,
        *sort, *read_pref;
    bool json_array, no_header, pretty, force_scan;
    long limit, skip;
} eopts_t;

static const char usage[] =
    "usage: sable-export --db DB --collection C [options]\n"
    "  Writes a collection as Extended JSON (one document per line, or --jsonArray) or\n"
    "  as CSV/TSV (--type csv|tsv with --fields or --fieldFile).";

static int load_fields(const eopts_t *o, tool_strs_t *fields)
{
    if (o->fields != NULL) {
        char *copy = strdup(o->fields), *save = NULL;
        for (char *f = strtok_r(copy, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
            while (*f == ' ')
                f++;
            if (*f)
                tool_strs_push(fields, f);
        }
        free(copy);
    } else if (o->field_file != NULL) {
        FILE *f = fopen(o->field_file, "r");
        if (f == NULL)
            return tool_err("cannot open --fieldFile %s: %s", o->field_file, strerror(errno));
        char line[4096];
        while (fgets(line, sizeof(line), f)) {
            line[strcspn(line, "\r\n")] = '\0';
            if (line[0])
                tool_strs_push(fields, line);
        }
        fclose(f);
    }
    return 0;
}

/* A double the shortest way that reads back the same. */
static void fmt_double(double v, char *buf, size_t len)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static void fmt_date(int64_t ms, char *buf, size_t len)
{
    time_t secs = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    int milli = (int)(ms - (int64_t)secs * 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03dZ", milli);
}

/* One CSV/TSV cell for the value at it into out. */
static void cell(bson_iter_t *it, bson_string_t *out)
{
    char buf[64];
    switch (bson_iter_type(it)) {
    case BSON_TYPE_UTF8:
        bson_string_append(out, bson_iter_utf8(it, NULL));
        return;
    case BSON_TYPE_INT32:
        bson_string_append_printf(out, "%d", bson_iter_int32(it));
        return;
    case BSON_TYPE_INT64:
        bson_string_append_printf(out, "%" PRId64, bson_iter_int64(it));
        return;
    case BSON_TYPE_DOUBLE:
        fmt_double(bson_iter_double(it), buf, sizeof(buf));
        bson_string_append(out, buf);
        return;
    case BSON_TYPE_BOOL:
        bson_string_append(out, bson_iter_bool(it) ? "true" : "false");
        return;
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED:
        return;
    case BSON_TYPE_OID: {
        char hex[25];
        bson_oid_to_string(bson_iter_oid(it), hex);
        bson_string_append_printf(out, "ObjectId(%s)", hex);
        return;
    }
    case BSON_TYPE_DECIMAL128: {
        bson_decimal128_t dec;
        char str[BSON_DECIMAL128_STRING];
        bson_iter_decimal128(it, &dec);
        bson_decimal128_to_string(&dec, str);
        bson_string_append(out, str);
        return;
    }
    case BSON_TYPE_DATE_TIME:
        fmt_date(bson_iter_date_time(it), buf, sizeof(buf));
        bson_string_append(out, buf);
        return;
    default:
        tool_json_append_value(out, it, false);
        return;
    }
}

/* Append n bytes at p to line. */
static void put_n(bson_string_t *line, const char *p, size_t n)
{
    if (line->alloc - line->len <= n) {
        size_t cap = line->alloc ? line->alloc : 64;
        while (cap <= line->len + n)
            cap *= 2;
        line->str = bson_realloc(line->str, cap);
        line->alloc = (uint32_t)cap;
    }
    memcpy(line->str + line->len, p, n);
    line->len += (uint32_t)n;
    line->str[line->len] = '\0';
}

static void append_cell_n(bson_string_t *line, const char *s, size_t n, bool tsv)
{
    if (tsv || strpbrk(s, ",\"\r\n") == NULL) {
        put_n(line, s, n);
        return;
    }
    put_n(line, "\"", 1);
    for (const char *p = s, *end = s + n; p < end;) { /* runs up to each quote, doubled */
        const char *q = memchr(p, '"', (size_t)(end - p));
        if (q == NULL) {
            put_n(line, p, (size_t)(end - p));
            break;
        }
        put_n(line, p, (size_t)(q + 1 - p));
        put_n(line, "\"", 1);
        p = q + 1;
    }
    put_n(line, "\"", 1);
}

static void append_cell(bson_string_t *line, const char *s, bool tsv)
{
    append_cell_n(line, s, strlen(s), tsv);
}

/* One CSV/TSV line for doc appended to line. */
static void export_csv(bson_string_t *line, const bson_t *doc, const tool_strs_t *fields, bool tsv)
{
    static bson_string_t *c;
    if (c == NULL)
        c = bson_string_new(NULL);
    for (int i = 0; i < fields->n; i++) {
        if (i > 0)
            bson_string_append_c(line, tsv ? '\t' : ',');
        bson_iter_t it, f;
        if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, fields->v[i], &f)) {
            c->len = 0;
            c->str[0] = '\0';
            cell(&f, c);
            append_cell_n(line, c->str, c->len, tsv);
        }
    }
    bson_string_append_c(line, '\n');
}

int main(int argc, char **argv)
{
    eopts_t o = {0};
    tool_conn_t conn = {0};
    const tool_opt_t opts[] = {
        {"db", 'd', TO_STR, &o.db, "database"},
        {"collection", 'c', TO_STR, &o.coll, "collection to export"},
        {"query", 'q', TO_STR, &o.query, "filter (JSON)"},
        {"queryFile", 0, TO_STR, &o.query_file, "file holding the filter"},
        {"fields", 'f', TO_STR, &o.fields, "comma-separated fields (needed for CSV/TSV)"},
        {"fieldFile", 0, TO_STR, &o.field_file, "file with one field per line"},
        {"type", 0, TO_STR, &o.type, "json (default), csv or tsv"},
        {"out", 'o', TO_STR, &o.out, "output file (default: standard output)"},
        {"jsonFormat", 0, TO_STR, &o.format, "relaxed (default) or canonical"},
        {"jsonArray", 0, TO_FLAG, &o.json_array, "one JSON array instead of one per line"},
        {"noHeaderLine", 0, TO_FLAG, &o.no_header, "CSV/TSV without the field names first"},
        {"sort", 0, TO_STR, &o.sort, "sort order (JSON), e.g. '{a: 1}'"},
        {"limit", 0, TO_INT, &o.limit, "at most this many documents"},
        {"skip", 0, TO_INT, &o.skip, "skip this many documents first"},
        {"readPreference", 0, TO_STR, &o.read_pref, NULL},
        {"forceTableScan", 0, TO_FLAG, &o.force_scan, NULL},
        {NULL, 0, 0, NULL, NULL},
    };
    int rc = tool_opts_parse("sable-export", usage, argc, argv, opts, &conn, NULL);
    if (rc != 0)
        return rc > 0 ? 0 : 1;
    if (o.db == NULL || o.coll == NULL)
        return tool_err("--db and --collection are required") != 0;
    const char *type = o.type ? o.type : "json";
    bool csv = strcmp(type, "csv") == 0, tsv = strcmp(type, "tsv") == 0;
    if (!csv && !tsv && strcmp(type, "json") != 0)
        return tool_err("--type must be json, csv or tsv, not '%s'", type) != 0;
    bool canonical = false;
    if (o.format != NULL && strcmp(o.format, "canonical") == 0)
        canonical = true;
    else if (o.format != NULL && strcmp(o.format, "relaxed") != 0)
        return tool_err("--jsonFormat must be relaxed or canonical, not '%s'", o.format) != 0;
    tool_strs_t fields = {0};
    if (load_fields(&o, &fields) != 0)
        return 1;
    if ((csv || tsv) && fields.n == 0)
        return tool_err("CSV and TSV export need --fields or --fieldFile") != 0;
    bson_t filter = BSON_INITIALIZER, fopts = BSON_INITIALIZER, sort, proj;
    if (o.query != NULL || o.query_file != NULL) {
        bson_destroy(&filter);
        const char *q = o.query;
        char buf[65536];
        if (q == NULL) {
            FILE *f = fopen(o.query_file, "rb");
            if (f == NULL)
                return tool_err("cannot open --queryFile %s: %s", o.query_file,
                                strerror(errno)) != 0;
            buf[fread(buf, 1, sizeof(buf) - 1, f)] = '\0';
            fclose(f);
            q = buf;
        }
        if (tool_json_arg("--query", q, &filter) != 0)
            return 1;
    }
    if (o.sort != NULL) {
        if (tool_json_arg("--sort", o.sort, &sort) != 0)
            return 1;
        BSON_APPEND_DOCUMENT(&fopts, "sort", &sort);
        bson_destroy(&sort);
    }
    if (o.limit > 0)
        BSON_APPEND_INT64(&fopts, "limit", o.limit);
    if (o.skip > 0)
        BSON_APPEND_INT64(&fopts, "skip", o.skip);
    if (fields.n > 0) {
        bson_init(&proj);
        for (int i = 0; i < fields.n; i++)
            BSON_APPEND_INT32(&proj, fields.v[i], 1);
        BSON_APPEND_DOCUMENT(&fopts, "projection", &proj);
        bson_destroy(&proj);
    }
    mongoc_client_t *c = tool_connect(&conn);
    if (c == NULL)
        return 1;
    tool_stream_t *out = tool_stream_open(o.out ? o.out : "-", true, false);
    if (out == NULL) {
        mongoc_client_destroy(c);
        return 1;
    }
    mongoc_collection_t *coll = mongoc_client_get_collection(c, o.db, o.coll);
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, &fopts, NULL);
    char what[400];
    snprintf(what, sizeof(what), "%s.%s", o.db, o.coll);
    tool_progress_t p;
    int64_t total = 0; /* for the progress line: the count, when cheap and exact */
    if (bson_empty(&filter) && o.skip <= 0 && o.limit <= 0) {
        bson_error_t e;
        total = mongoc_collection_estimated_document_count(coll, NULL, NULL, NULL, &e);
        total = total < 0 ? 0 : total;
    }
    tool_progress_start(&p, what, total);
    rc = 0;
    if ((csv || tsv) && !o.no_header) {
        bson_string_t *h = bson_string_new(NULL);
        for (int i = 0; i < fields.n; i++) {
            if (i > 0)
                bson_string_append_c(h, tsv ? '\t' : ',');
            append_cell(h, fields.v[i], tsv);
        }
        bson_string_append_c(h, '\n');
        rc = tool_stream_write(out, h->str, h->len);
        bson_string_free(h, true);
    }
    if (rc == 0 && !csv && !tsv && o.json_array)
        rc = tool_stream_write(out, "[", 1);
    const bson_t *doc;
    /* Lines gather in buf and go out about a megabyte at a time. */
    bson_string_t *buf = bson_string_new(NULL);
    while (rc == 0 && mongoc_cursor_next(cur, &doc)) {
        if (csv || tsv) {
            export_csv(buf, doc, &fields, tsv);
        } else {
            if (o.json_array && p.docs > 0)
                bson_string_append_c(buf, ',');
            tool_json_append(buf, doc, canonical);
            if (!o.json_array)
                bson_string_append_c(buf, '\n');
        }
        if (buf->len >= (1u << 20)) {
            rc = tool_stream_write(out, buf->str, buf->len);
            buf->len = 0;
            buf->str[0] = '\0';
        }
        tool_progress_add(&p, 1, doc->len);
    }
    if (rc == 0 && buf->len > 0)
        rc = tool_stream_write(out, buf->str, buf->len);
    bson_string_free(buf, true);
    bson_error_t e;
    if (rc == 0 && mongoc_cursor_error(cur, &e))
        rc = tool_err("reading %s: %s", what, e.message);
    if (rc == 0 && !csv && !tsv && o.json_array)
        rc = tool_stream_write(out, "]\n", 2);
    if (tool_stream_close(out) != 0)
        rc = -1;
    if (rc == 0)
        tool_log("exported %lld record%s", (long long)p.docs, p.docs == 1 ? "" : "s");
    tool_progress_done(&p, "done exporting ");
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
    bson_destroy(&filter);
    bson_destroy(&fopts);
    tool_strs_free(&fields);
    return rc == 0 ? 0 : 1;
}
