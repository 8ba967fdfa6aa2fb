/*
 * sable-import: mongoimport for Sable.  Reads Extended JSON (documents one
 * after another, or one --jsonArray), CSV or TSV (import_csv.c) and writes
 * them in batches by --mode: insert (default), upsert (replace the document
 * matching --upsertFields, or insert it), merge (set the file's fields on the
 * matching document, or insert it), delete (remove the matching document).
 *
 * What must stay true: a document the server refuses (duplicate _id,
 * validation) is counted and reported and the import goes on, unless
 * --stopOnError; the last line says how many documents were imported and how
 * many failed, and the exit status is non-zero when any failed.
 */
#include "import.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct iopts {
    const char *db, *coll, *file, *type, *fields, *field_file, *mode, *upsert_fields,
        *grace;
    bool headerline, typed, json_array, drop, stop_on_error, ignore_blanks, keep_order,
        bypass, legacy;
    long workers, batch;
} iopts_t;

typedef enum mode { M_INSERT, M_UPSERT, M_MERGE, M_DELETE } mode_t_;

typedef struct imp {
    iopts_t o;
    mode_t_ mode;
    tool_strs_t keys; /* --upsertFields */
    mongoc_collection_t *coll;
    mongoc_write_concern_t *wc;
    mongoc_bulk_operation_t *bulk;
    uint32_t in_bulk;
    tool_inserter_t *ins; /* --mode insert: the insertion workers */
    int64_t ok, failed, reported;
    tool_progress_t p; /* bytes: of the input read, against its size when it is a file */
    tool_stream_t *in;
} imp_t;

static const char usage[] =
    "usage: sable-import --db DB --collection C [options] [FILE]\n"
    "  Imports Extended JSON (one document after another, or --jsonArray), CSV or TSV\n"
    "  (--type csv|tsv with --headerline, --fields or --fieldFile) from FILE or stdin.";

static int flush(imp_t *m)
{
    if (m->bulk == NULL)
        return 0;
    if (m->in_bulk == 0) {
        mongoc_bulk_operation_destroy(m->bulk);
        m->bulk = NULL;
        return 0;
    }
    bson_t reply;
    bson_error_t e;
    uint32_t sent = m->in_bulk;
    bool ok = mongoc_bulk_operation_execute(m->bulk, &reply, &e) != 0;
    mongoc_bulk_operation_destroy(m->bulk);
    m->bulk = NULL;
    m->in_bulk = 0;
    int rc = 0;
    int64_t nerr = 0;
    if (!ok) {
        bson_iter_t i, arr, we;
        if (bson_iter_init_find(&i, &reply, "writeErrors") && bson_iter_recurse(&i, &arr)) {
            while (bson_iter_next(&arr)) {
                if (m->reported++ < 5 && bson_iter_recurse(&arr, &we) &&
                    bson_iter_find(&we, "errmsg"))
                    tool_log("continuing through error: %s", bson_iter_utf8(&we, NULL));
                nerr++;
            }
        }
        if (nerr == 0) {
            rc = tool_err("writing to the server: %s", e.message);
            nerr = sent;
        } else if (m->o.stop_on_error) {
            rc = tool_err("stopping at the first failed document (--stopOnError): %s",
                          e.message);
        }
    }
    m->failed += nerr;
    m->ok += sent - (nerr < (int64_t)sent ? nerr : sent);
    bson_destroy(&reply);
    return rc;
}

/* The --upsertFields of doc as a filter; false when doc has none of them. */
static bool key_filter(imp_t *m, const bson_t *doc, bson_t *filter)
{
    bool any = false;
    bson_init(filter);
    for (int k = 0; k < m->keys.n; k++) {
        bson_iter_t it, f;
        if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, m->keys.v[k], &f)) {
            sbl_append_iter(filter, m->keys.v[k], -1, &f);
            any = true;
        }
    }
    return any;
}

static int add(imp_t *m, const bson_t *doc)
{
    if (m->ins != NULL) {
        tool_progress_add(&m->p, 1, tool_stream_nread(m->in) - m->p.bytes);
        return tool_inserter_add(m->ins, doc);
    }
    if (m->bulk == NULL) {
        bson_t opts = BSON_INITIALIZER;
        BSON_APPEND_BOOL(&opts, "ordered", m->o.keep_order || m->mode != M_INSERT);
        m->bulk = mongoc_collection_create_bulk_operation_with_opts(m->coll, &opts);
        bson_destroy(&opts);
        if (m->wc)
            mongoc_bulk_operation_set_write_concern(m->bulk, m->wc);
        if (m->o.bypass)
            mongoc_bulk_operation_set_bypass_document_validation(m->bulk, true);
    }
    bson_t filter;
    bson_error_t e;
    bool has_key = m->mode != M_INSERT && key_filter(m, doc, &filter);
    bool ok = true;
    if (m->mode == M_INSERT || (!has_key && m->mode != M_DELETE)) {
        mongoc_bulk_operation_insert(m->bulk, doc);
    } else if (m->mode == M_DELETE) {
        if (has_key)
            ok = mongoc_bulk_operation_remove_one_with_opts(m->bulk, &filter, NULL, &e);
        else
            m->in_bulk--; /* nothing to match: nothing to delete */
    } else if (m->mode == M_UPSERT) {
        bson_t opts = BSON_INITIALIZER;
        BSON_APPEND_BOOL(&opts, "upsert", true);
        ok = mongoc_bulk_operation_replace_one_with_opts(m->bulk, &filter, doc, &opts, &e);
        bson_destroy(&opts);
    } else { /* merge: $set every field; _id only when the document is inserted */
        bson_t up = BSON_INITIALIZER, set, soi, opts = BSON_INITIALIZER;
        bson_iter_t it;
        BSON_APPEND_DOCUMENT_BEGIN(&up, "$set", &set);
        bson_iter_init(&it, doc);
        while (bson_iter_next(&it))
            if (strcmp(bson_iter_key(&it), "_id") != 0)
                sbl_append_iter(&set, bson_iter_key(&it), -1, &it);
        bson_append_document_end(&up, &set);
        if (bson_iter_init_find(&it, doc, "_id")) {
            BSON_APPEND_DOCUMENT_BEGIN(&up, "$setOnInsert", &soi);
            sbl_append_iter(&soi, "_id", 3, &it);
            bson_append_document_end(&up, &soi);
        }
        BSON_APPEND_BOOL(&opts, "upsert", true);
        ok = mongoc_bulk_operation_update_one_with_opts(m->bulk, &filter, &up, &opts, &e);
        bson_destroy(&up);
        bson_destroy(&opts);
    }
    if (m->mode != M_INSERT)
        bson_destroy(&filter);
    if (!ok)
        return tool_err("cannot write a document: %s", e.message);
    m->in_bulk++;
    tool_progress_add(&m->p, 1, tool_stream_nread(m->in) - m->p.bytes);
    long batch = m->o.batch > 0 ? m->o.batch : 1000;
    return m->in_bulk >= (uint32_t)batch ? flush(m) : 0;
}

static int load_names(const char *list, const char *file, tool_strs_t *out)
{
    if (list != NULL) {
        char *copy = strdup(list), *save = NULL;
        for (char *f = strtok_r(copy, ",", &save); f; f = strtok_r(NULL, ",", &save))
            tool_strs_push(out, f);
        free(copy);
        return 0;
    }
    if (file == NULL)
        return 0;
    FILE *f = fopen(file, "r");
    if (f == NULL)
        return tool_err("cannot open --fieldFile %s: %s", file, strerror(errno));
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0])
            tool_strs_push(out, line);
    }
    fclose(f);
    return 0;
}

static int check(imp_t *m, bool *csvp, bool *tsvp)
{
    iopts_t *o = &m->o;
    const char *type = o->type ? o->type : "json";
    *csvp = strcmp(type, "csv") == 0;
    *tsvp = strcmp(type, "tsv") == 0;
    if (!*csvp && !*tsvp && strcmp(type, "json") != 0)
        return tool_err("--type must be json, csv or tsv, not '%s'", type);
    const char *mode = o->mode ? o->mode : "insert";
    static const char *const modes[] = {"insert", "upsert", "merge", "delete"};
    m->mode = (mode_t_)-1;
    for (int i = 0; i < 4; i++)
        if (strcmp(mode, modes[i]) == 0)
            m->mode = (mode_t_)i;
    if ((int)m->mode < 0)
        return tool_err("--mode must be insert, upsert, merge or delete, not '%s'", mode);
    if (o->upsert_fields != NULL && m->mode == M_INSERT)
        m->mode = M_UPSERT; /* mongoimport: --upsertFields implies --mode upsert */
    load_names(o->upsert_fields ? o->upsert_fields : "_id", NULL, &m->keys);
    if (o->db == NULL)
        o->db = "test";
    if (o->coll == NULL && o->file != NULL) { /* the file's name without its extension */
        const char *base = strrchr(o->file, '/') ? strrchr(o->file, '/') + 1 : o->file;
        static char name[256];
        snprintf(name, sizeof(name), "%s", base);
        char *dot = strrchr(name, '.');
        if (dot != NULL)
            *dot = '\0';
        o->coll = name;
    }
    if (o->coll == NULL)
        return tool_err("no collection specified: give --collection");
    if (!*csvp && !*tsvp && (o->headerline || o->fields || o->field_file || o->typed))
        return tool_err("--headerline, --fields, --fieldFile and --columnsHaveTypes are for CSV "
                        "and TSV");
    if ((*csvp || *tsvp) && o->headerline && (o->fields || o->field_file))
        return tool_err("--headerline cannot be used with --fields or --fieldFile");
    if ((*csvp || *tsvp) && !o->headerline && !o->fields && !o->field_file)
        return tool_err("CSV and TSV import need --headerline, --fields or --fieldFile");
    if (o->json_array && (*csvp || *tsvp))
        return tool_err("--jsonArray is for JSON input");
    return 0;
}

int main(int argc, char **argv)
{
    imp_t m;
    memset(&m, 0, sizeof(m));
    iopts_t *o = &m.o;
    tool_conn_t conn = {0};
    tool_strs_t pos = {0};
    const tool_opt_t opts[] = {
        {"db", 'd', TO_STR, &o->db, "database (default test)"},
        {"collection", 'c', TO_STR, &o->coll, "collection (default: the file's name)"},
        {"file", 0, TO_STR, &o->file, "input file (default: standard input)"},
        {"type", 0, TO_STR, &o->type, "json (default), csv or tsv"},
        {"headerline", 0, TO_FLAG, &o->headerline, "CSV/TSV: the first line names the fields"},
        {"fields", 'f', TO_STR, &o->fields, "CSV/TSV: comma-separated field names"},
        {"fieldFile", 0, TO_STR, &o->field_file, "CSV/TSV: one field name per line"},
        {"columnsHaveTypes", 0, TO_FLAG, &o->typed, "field names carry types: age.int32()"},
        {"parseGrace", 0, TO_STR, &o->grace, "autoCast (default), skipField, skipRow, stop"},
        {"ignoreBlanks", 0, TO_FLAG, &o->ignore_blanks, "CSV/TSV: leave out empty cells"},
        {"jsonArray", 0, TO_FLAG, &o->json_array, "the input is one JSON array"},
        {"mode", 0, TO_STR, &o->mode, "insert (default), upsert, merge or delete"},
        {"upsertFields", 0, TO_STR, &o->upsert_fields, "fields that match (default _id)"},
        {"drop", 0, TO_FLAG, &o->drop, "drop the collection first"},
        {"stopOnError", 0, TO_FLAG, &o->stop_on_error, "stop at the first failed document"},
        {"maintainInsertionOrder", 0, TO_FLAG, &o->keep_order, "write in the input's order"},
        {"bypassDocumentValidation", 0, TO_FLAG, &o->bypass, "skip validators"},
        {"writeConcern", 0, TO_STR, &conn.write_concern, "e.g. majority, 1, '{w:1,j:true}'"},
        {"numInsertionWorkers", 'j', TO_INT, &o->workers,
         "--mode insert: connections inserting at once (default 2; 1 with "
         "--maintainInsertionOrder)"},
        {"batchSize", 0, TO_INT, &o->batch, "documents per batch (default 1000)"},
        {"legacy", 0, TO_FLAG, &o->legacy, NULL},
        {NULL, 0, 0, NULL, NULL},
    };
    int rc = tool_opts_parse("sable-import", usage, argc, argv, opts, &conn, &pos);
    if (rc != 0)
        return rc > 0 ? 0 : 1;
    if (pos.n > 1 || (pos.n == 1 && o->file != NULL))
        return tool_err("give one input file") != 0;
    if (pos.n == 1)
        o->file = pos.v[0];
    bool csv, tsv;
    if (check(&m, &csv, &tsv) != 0 || tool_write_concern(&conn, &m.wc) != 0)
        return 1;
    tool_stream_t *in = tool_stream_open(o->file ? o->file : "-", false, false);
    if (in == NULL)
        return 1;
    csv_reader_t cr = {0};
    tool_json_reader_t jr = {0};
    cr.in = jr.in = in;
    cr.tsv = tsv;
    cr.typed = o->typed;
    cr.ignore_blanks = o->ignore_blanks;
    jr.array = o->json_array;
    if (o->grace != NULL) {
        static const char *const g[] = {"autoCast", "skipField", "skipRow", "stop"};
        cr.grace = (grace_t)-1;
        for (int i = 0; i < 4; i++)
            if (strcmp(o->grace, g[i]) == 0)
                cr.grace = (grace_t)i;
        if ((int)cr.grace < 0)
            return tool_err("--parseGrace must be autoCast, skipField, skipRow or stop") != 0;
    }
    if (csv || tsv) {
        if (o->headerline) {
            if (csv_read_header(&cr) != 0)
                return 1;
        } else {
            tool_strs_t names = {0};
            if (load_names(o->fields, o->field_file, &names) != 0 ||
                csv_set_columns(&cr, names.v, names.n) != 0)
                return 1;
            tool_strs_free(&names);
        }
    }
    mongoc_client_t *c = tool_connect(&conn);
    if (c == NULL)
        return 1;
    m.coll = mongoc_client_get_collection(c, o->db, o->coll);
    char what[400];
    snprintf(what, sizeof(what), "%s.%s", o->db, o->coll);
    if (o->drop) {
        bson_error_t e;
        if (!mongoc_collection_drop(m.coll, &e) && e.code != 26) {
            tool_err("dropping %s: %s", what, e.message);
            return 1;
        }
        tool_log("dropping: %s", what);
    }
    if (m.mode == M_INSERT) {
        tool_insert_opts_t io = {
            .workers = o->keep_order ? 1 : (o->workers > 0 ? (int)o->workers : 2),
            .batch_docs = o->batch,
            .ordered = o->keep_order || o->stop_on_error,
            .bypass_validation = o->bypass,
            .stop_on_error = o->stop_on_error,
            .wc = m.wc,
            .max_reported = 5,
            .error_prefix = "continuing through error",
            .stop_prefix = "stopping at the first failed document (--stopOnError)",
            .fatal_prefix = "writing to the server",
        };
        if ((m.ins = tool_inserter_new(&conn, o->db, o->coll, &io)) == NULL)
            return 1;
    }
    tool_progress_start(&m.p, what, 0);
    m.in = in;
    struct stat st;
    if (o->file != NULL && strcmp(o->file, "-") != 0 && stat(o->file, &st) == 0 &&
        S_ISREG(st.st_mode))
        m.p.total_bytes = st.st_size; /* the share done and the time left */
    rc = 0;
    int64_t skipped = 0;
    for (;;) {
        bson_t doc;
        int n = csv || tsv ? csv_next(&cr, &doc) : tool_json_next(&jr, &doc);
        if (n == 0)
            break;
        if (n < 0) {
            rc = -1;
            break;
        }
        if (n == 2) {
            skipped++;
            continue;
        }
        rc = add(&m, &doc);
        bson_destroy(&doc);
        if (rc != 0)
            break;
    }
    if (flush(&m) != 0)
        rc = -1;
    if (m.ins != NULL) {
        int64_t ok = 0, failed = 0;
        if (tool_inserter_finish(m.ins, &ok, &failed) != 0)
            rc = -1;
        m.ok += ok;
        m.failed += failed;
    }
    tool_progress_done(&m.p, "done importing ");
    fprintf(stderr, "%s: %lld document(s) imported successfully. %lld document(s) failed to "
                    "import.\n",
            tool_prog, (long long)m.ok, (long long)m.failed);
    if (skipped > 0)
        tool_log("%lld row(s) skipped (--parseGrace skipRow)", (long long)skipped);
    tool_stream_close(in);
    csv_reader_free(&cr);
    tool_json_reader_free(&jr);
    mongoc_collection_destroy(m.coll);
    if (m.wc)
        mongoc_write_concern_destroy(m.wc);
    mongoc_client_destroy(c);
    tool_strs_free(&m.keys);
    tool_strs_free(&pos);
    return rc == 0 && m.failed == 0 ? 0 : 1;
}
