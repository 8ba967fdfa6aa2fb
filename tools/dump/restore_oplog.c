/*
 * restore_oplog.c: sable-restore --oplogReplay.  After the collections, views,
 * users and roles are in, the oplog entries sable-dump --oplog (or mongodump
 * --oplog) saved are applied in order, which brings every namespace to the
 * state of the dump's end; --oplogLimit ts[:ordinal] stops before the first
 * entry at or after that time.
 *
 * What must stay true: replay is idempotent, as applyOps is when it replays
 * an oplog (the dumped documents may already hold some of the changes): an
 * insert or a full-document update replaces by _id with upsert, a delete of a
 * missing document is no error, a create of an existing collection or a drop
 * of a missing one is skipped.  Entries are applied strictly in order (runs of
 * writes to one namespace go in one ordered bulk write).  Any other failure
 * stops the replay and says at which entry.
 */
#include "restore.h"
#include "repl/repl.h"

#include <stdlib.h>
#include <string.h>

#define BULK_MAX 1000

typedef struct replay {
    restore_t *r;
    mongoc_collection_t *coll; /* the namespace of the bulk being built */
    mongoc_bulk_operation_t *bulk;
    char ns[400];
    int nops;
    int64_t applied, skipped;
    uint32_t last_t, last_i; /* the entry being applied, for messages */
} replay_t;

int restore_parse_ts(const char *s, uint32_t *tp, uint32_t *ip)
{
    char *end;
    *tp = *ip = 0;
    unsigned long long t = strtoull(s, &end, 10);
    unsigned long long i = 0;
    if (end == s || t > UINT32_MAX)
        goto bad;
    if (*end == ':') {
        const char *p = end + 1;
        i = strtoull(p, &end, 10);
        if (end == p || i > UINT32_MAX)
            goto bad;
    }
    if (*end != '\0')
        goto bad;
    *tp = (uint32_t)t;
    *ip = (uint32_t)i;
    return 0;
bad:
    return tool_err("--oplogLimit %s: expected seconds[:ordinal], e.g. 1700000000:5", s);
}

static int flush(replay_t *p)
{
    int rc = 0;
    if (p->bulk != NULL && p->nops > 0) {
        bson_t reply;
        bson_error_t e;
        if (!mongoc_bulk_operation_execute(p->bulk, &reply, &e))
            rc = tool_err("replaying the oplog on %s (an entry at or before Timestamp(%u, %u)): "
                          "%s",
                          p->ns, p->last_t, p->last_i, e.message);
        bson_destroy(&reply);
    }
    if (p->bulk != NULL)
        mongoc_bulk_operation_destroy(p->bulk);
    if (p->coll != NULL)
        mongoc_collection_destroy(p->coll);
    p->bulk = NULL;
    p->coll = NULL;
    p->nops = 0;
    p->ns[0] = '\0';
    return rc;
}

static bool sub_doc(const bson_t *doc, const char *key, bson_t *out)
{
    bson_iter_t it;
    uint32_t len;
    const uint8_t *data;
    if (!bson_iter_init_find(&it, doc, key) || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return false;
    bson_iter_document(&it, &len, &data);
    return bson_init_static(out, data, len);
}

/* Namespaces an oplog replay leaves alone, as mongorestore does: the server's own. */
static bool ignored_ns(const char *ns)
{
    return strncmp(ns, "local.", 6) == 0 || strncmp(ns, "config.", 7) == 0 ||
           strstr(ns, ".system.profile") != NULL || strcmp(ns, "admin.system.version") == 0;
}

/* diff_to_update's answer for a diff that resizes an array */
#define RESIZE 1

/*
 * mongod's $v: 2 update diff as update operators: {u: {f: v}} and {i: {f: v}} set,
 * {d: {f: false}} unsets, {s<f>: diff} recurses into f.  An array diff ({a: true,
 * u<n>: v, s<n>: diff, l: len}) sets elements; its resize (l) no operator says:
 * RESIZE, and the caller applies the diff to the document itself.  Returns 0, RESIZE
 * or -1.
 */
static int diff_to_update(const bson_t *diff, const char *prefix, bson_t *set, bson_t *unset)
{
    bson_iter_t it, sub;
    bool array = bson_iter_init_find(&it, diff, "a") && bson_iter_as_bool(&it);
    if (!bson_iter_init(&it, diff))
        return -1;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        char path[1024];
        if (array) {
            if (strcmp(k, "a") == 0)
                continue;
            if (strcmp(k, "l") == 0)
                return RESIZE;
            snprintf(path, sizeof(path), "%s.%s", prefix, k + 1);
            if (k[0] == 'u') {
                sbl_append_iter(set, path, -1, &it);
            } else if (k[0] == 's' && BSON_ITER_HOLDS_DOCUMENT(&it)) {
                bson_t d;
                uint32_t len;
                const uint8_t *data;
                bson_iter_document(&it, &len, &data);
                bson_init_static(&d, data, len);
                int r = diff_to_update(&d, path, set, unset);
                if (r != 0)
                    return r;
            }
            continue;
        }
        if ((strcmp(k, "u") == 0 || strcmp(k, "i") == 0 || strcmp(k, "d") == 0) &&
            BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub)) {
            while (bson_iter_next(&sub)) {
                snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "",
                         bson_iter_key(&sub));
                if (k[0] == 'd')
                    BSON_APPEND_INT32(unset, path, 1);
                else
                    sbl_append_iter(set, path, -1, &sub);
            }
        } else if (k[0] == 's' && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "", k + 1);
            bson_t d;
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&it, &len, &data);
            bson_init_static(&d, data, len);
            int r = diff_to_update(&d, path, set, unset);
            if (r != 0)
                return r;
        }
    }
    return 0;
}

/* The bulk write of ns open, the one before sent when it was another's or full. */
static int open_bulk(replay_t *p, const char *ns)
{
    if (p->bulk != NULL && strcmp(ns, p->ns) == 0 && p->nops < BULK_MAX)
        return 0;
    if (flush(p) != 0)
        return -1;
    char db[128], coll[300];
    tool_ns_split(ns, db, sizeof(db), coll, sizeof(coll));
    snprintf(p->ns, sizeof(p->ns), "%s", ns);
    p->coll = mongoc_client_get_collection(p->r->c, db, coll);
    bson_t opts = BSON_INITIALIZER;
    BSON_APPEND_BOOL(&opts, "ordered", true);
    if (p->r->wc != NULL)
        mongoc_write_concern_append(p->r->wc, &opts);
    p->bulk = mongoc_collection_create_bulk_operation_with_opts(p->coll, &opts);
    bson_destroy(&opts);
    return 0;
}

/* An update whose diff no update operators say (an array's resize): the
 * document as the target holds it now (the bulk before it sent first, which
 * closes it: open_bulk opens the next), with
 * the diff applied as mongod applies it (src/repl/repl_diff.c), into post;
 * *foundp false when the target has no such document (nothing to apply). */
static int diff_post_image(replay_t *p, const char *ns, const bson_t *filter, const bson_t *diff,
                           bson_t *post, bool *foundp)
{
    const bson_t *doc;
    bson_error_t e;
    sbl_err_t err;
    int rc = 0;
    char db[128], coll[300];
    *foundp = false;
    if (flush(p) != 0)
        return -1;
    tool_ns_split(ns, db, sizeof(db), coll, sizeof(coll));
    mongoc_collection_t *c = mongoc_client_get_collection(p->r->c, db, coll);
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(c, filter, NULL, NULL);
    if (mongoc_cursor_next(cur, &doc)) {
        sbl_err_clear(&err);
        if (sbl_repl_diff_apply(doc, diff, post, &err) != 0)
            rc = tool_err("an update in the oplog at Timestamp(%u, %u) on %s: %s", p->last_t,
                          p->last_i, ns, err.msg);
        *foundp = rc == 0;
    } else if (mongoc_cursor_error(cur, &e)) {
        rc = tool_err("reading the document an oplog update at Timestamp(%u, %u) changes on "
                      "%s: %s",
                      p->last_t, p->last_i, ns, e.message);
    }
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(c);
    return rc;
}

/* Add one insert, update or delete to the bulk write of its namespace. */
static int apply_crud(replay_t *p, char op, const char *ns, const bson_t *o, const bson_t *o2)
{
    if (open_bulk(p, ns) != 0)
        return -1;
    bson_iter_t it;
    bson_t filter = BSON_INITIALIZER, uopts = BSON_INITIALIZER;
    bson_error_t e;
    bool ok = true;
    int rc = 0;
    BSON_APPEND_BOOL(&uopts, "upsert", true);
    if (op == 'i' || op == 'd') {
        if (!bson_iter_init_find(&it, o, "_id")) {
            rc = tool_err("an oplog entry at Timestamp(%u, %u) on %s has no _id", p->last_t,
                          p->last_i, ns);
        } else {
            sbl_append_iter(&filter, "_id", 3, &it);
            ok = op == 'i' ? mongoc_bulk_operation_replace_one_with_opts(p->bulk, &filter, o,
                                                                         &uopts, &e)
                           : mongoc_bulk_operation_remove_one_with_opts(p->bulk, &filter, NULL,
                                                                        &e);
        }
    } else if (o2 == NULL || !bson_iter_init_find(&it, o2, "_id")) {
        rc = tool_err("an update in the oplog at Timestamp(%u, %u) on %s has no o2._id",
                      p->last_t, p->last_i, ns);
    } else {
        sbl_append_iter(&filter, "_id", 3, &it);
        bson_t diff;
        bool ops = bson_iter_init(&it, o) && bson_iter_next(&it) && bson_iter_key(&it)[0] == '$';
        if (!ops) { /* Sable's entries: the whole new document */
            ok = mongoc_bulk_operation_replace_one_with_opts(p->bulk, &filter, o, &uopts, &e);
        } else if (sub_doc(o, "diff", &diff)) { /* mongod 5.0+: {$v: 2, diff} */
            bson_t u = BSON_INITIALIZER, set = BSON_INITIALIZER, unset = BSON_INITIALIZER;
            rc = diff_to_update(&diff, "", &set, &unset);
            if (!bson_empty(&set))
                BSON_APPEND_DOCUMENT(&u, "$set", &set);
            if (!bson_empty(&unset))
                BSON_APPEND_DOCUMENT(&u, "$unset", &unset);
            if (rc == 0 && !bson_empty(&u))
                ok = mongoc_bulk_operation_update_one_with_opts(p->bulk, &filter, &u, NULL, &e);
            if (rc == RESIZE) { /* replaced by the document with the diff applied */
                bson_t post = BSON_INITIALIZER;
                bool found;
                rc = diff_post_image(p, ns, &filter, &diff, &post, &found);
                if (rc == 0 && found && (rc = open_bulk(p, ns)) == 0)
                    ok = mongoc_bulk_operation_replace_one_with_opts(p->bulk, &filter, &post, NULL,
                                                                     &e);
                bson_destroy(&post);
            }
            bson_destroy(&u);
            bson_destroy(&set);
            bson_destroy(&unset);
        } else { /* older mongod: {$set, $unset} ($v: 1 dropped) */
            bson_t u = BSON_INITIALIZER;
            bson_iter_init(&it, o);
            while (bson_iter_next(&it))
                if (strcmp(bson_iter_key(&it), "$v") != 0)
                    sbl_append_iter(&u, bson_iter_key(&it), -1, &it);
            ok = mongoc_bulk_operation_update_one_with_opts(p->bulk, &filter, &u, NULL, &e);
            bson_destroy(&u);
        }
    }
    if (!ok)
        rc = tool_err("an oplog entry at Timestamp(%u, %u) on %s: %s", p->last_t, p->last_i, ns,
                      e.message);
    if (rc == 0)
        p->nops++;
    bson_destroy(&filter);
    bson_destroy(&uopts);
    return rc;
}

/* A catalog change: the command it logged, as the server takes it. */
static int apply_command(replay_t *p, const char *ns, const bson_t *o)
{
    if (flush(p) != 0)
        return -1;
    bson_iter_t f;
    if (!bson_iter_init(&f, o) || !bson_iter_next(&f))
        return tool_err("an empty command in the oplog at Timestamp(%u, %u)", p->last_t,
                        p->last_i);
    char db[128], coll[300];
    tool_ns_split(ns, db, sizeof(db), coll, sizeof(coll));
    const char *name = bson_iter_key(&f);
    bson_t cmd = BSON_INITIALIZER, arr, spec;
    if (strcmp(name, "createIndexes") == 0) { /* one spec per entry, flattened into o */
        sbl_append_iter(&cmd, "createIndexes", -1, &f);
        BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &spec);
        while (bson_iter_next(&f))
            sbl_append_iter(&spec, bson_iter_key(&f), -1, &f);
        bson_append_document_end(&arr, &spec);
        bson_append_array_end(&cmd, &arr);
    } else if (strcmp(name, "create") == 0 || strcmp(name, "drop") == 0 ||
               strcmp(name, "dropIndexes") == 0 || strcmp(name, "deleteIndexes") == 0 ||
               strcmp(name, "renameCollection") == 0 || strcmp(name, "dropDatabase") == 0 ||
               strcmp(name, "collMod") == 0 || strcmp(name, "emptycapped") == 0 ||
               strcmp(name, "convertToCapped") == 0) {
        if (strcmp(name, "renameCollection") == 0)
            snprintf(db, sizeof(db), "admin");
        do
            if (strcmp(bson_iter_key(&f), "idIndex") != 0 &&
                strcmp(bson_iter_key(&f), "stayTemp") != 0)
                sbl_append_iter(&cmd, bson_iter_key(&f), -1, &f);
        while (bson_iter_next(&f));
    } else {
        bson_destroy(&cmd);
        return tool_err("the oplog entry at Timestamp(%u, %u) is a command sable-restore "
                        "cannot replay: %s",
                        p->last_t, p->last_i, name);
    }
    if (p->r->wc != NULL)
        mongoc_write_concern_append(p->r->wc, &cmd);
    bson_t reply;
    bson_error_t e;
    bool ok = mongoc_client_command_simple(p->r->c, db, &cmd, NULL, &reply, &e);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    /* NamespaceExists, NamespaceNotFound, IndexNotFound: already as the entry leaves it */
    if (!ok && e.code != 48 && e.code != 26 && e.code != 27)
        return tool_err("replaying %s on %s (oplog entry at Timestamp(%u, %u)): %s", name, db,
                        p->last_t, p->last_i, e.message);
    return 0;
}

/* One entry (or one operation of a transaction's applyOps). */
static int apply_entry(replay_t *p, const bson_t *e)
{
    bson_iter_t it, arr;
    const char *op = NULL, *ns = NULL;
    bson_t o, o2;
    bool has_o2 = sub_doc(e, "o2", &o2);
    if (bson_iter_init_find(&it, e, "op") && BSON_ITER_HOLDS_UTF8(&it))
        op = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, e, "ns") && BSON_ITER_HOLDS_UTF8(&it))
        ns = bson_iter_utf8(&it, NULL);
    if (op == NULL || ns == NULL || op[0] == '\0' || op[1] != '\0')
        return tool_err("the oplog entry after Timestamp(%u, %u) has no op or ns", p->last_t,
                        p->last_i);
    if (op[0] == 'n') {
        p->skipped++;
        return 0;
    }
    if (!sub_doc(e, "o", &o))
        return tool_err("the oplog entry at Timestamp(%u, %u) has no document o", p->last_t,
                        p->last_i);
    if (op[0] == 'c' && bson_iter_init_find(&it, &o, "applyOps") &&
        BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &arr)) {
        while (bson_iter_next(&arr)) {
            uint32_t len;
            const uint8_t *data;
            bson_t inner;
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr))
                return tool_err("a transaction's applyOps at Timestamp(%u, %u) holds a "
                                "non-document",
                                p->last_t, p->last_i);
            bson_iter_document(&arr, &len, &data);
            bson_init_static(&inner, data, len);
            if (apply_entry(p, &inner) != 0)
                return -1;
        }
        return 0;
    }
    char db[128], coll[300];
    tool_ns_split(ns, db, sizeof(db), coll, sizeof(coll));
    if (ignored_ns(ns) || !tool_ns_selected(&p->r->o.ns, db, coll)) {
        p->skipped++;
        return 0;
    }
    p->applied++;
    switch (op[0]) {
    case 'i':
    case 'd':
    case 'u':
        return apply_crud(p, op[0], ns, &o, has_o2 ? &o2 : NULL);
    case 'c':
        return apply_command(p, ns, &o);
    default:
        return tool_err("the oplog entry at Timestamp(%u, %u) has an unknown op \"%s\"",
                        p->last_t, p->last_i, op);
    }
}

int restore_oplog_replay(restore_t *r, tool_stream_t *in, const char *what)
{
    replay_t p;
    memset(&p, 0, sizeof(p));
    p.r = r;
    uint32_t lim_t = 0, lim_i = 0;
    if (r->o.oplog_limit != NULL && restore_parse_ts(r->o.oplog_limit, &lim_t, &lim_i) != 0)
        return -1;
    tool_bson_reader_t br = {0};
    br.in = in;
    tool_progress_t prog;
    tool_progress_start(&prog, "oplog", 0);
    int rc = 0, n;
    int64_t entries = 0;
    bool limited = false;
    bson_t doc;
    while (rc == 0 && (n = tool_bson_next(&br, &doc)) != 0) {
        if (n < 0) {
            rc = tool_err("reading the oplog from %s failed after %lld entries", what,
                          (long long)entries);
            break;
        }
        bson_iter_t it;
        uint32_t t, i;
        if (!bson_iter_init_find(&it, &doc, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            rc = tool_err("oplog entry %lld of %s has no timestamp ts", (long long)entries + 1,
                          what);
            break;
        }
        bson_iter_timestamp(&it, &t, &i);
        if (r->o.oplog_limit != NULL && (t > lim_t || (t == lim_t && i >= lim_i))) {
            limited = true;
            break; /* entries are in ts order: none after it is before the limit */
        }
        p.last_t = t;
        p.last_i = i;
        entries++;
        rc = apply_entry(&p, &doc);
        tool_progress_add(&prog, 1, doc.len);
    }
    if (flush(&p) != 0)
        rc = -1;
    tool_bson_reader_free(&br);
    if (rc != 0)
        return tool_err("the oplog replay stopped: the data is as of some time between the "
                        "dump's start and Timestamp(%u, %u), not a consistent point",
                        p.last_t, p.last_i);
    tool_progress_done(&prog, "replayed ");
    tool_log("oplog: %lld entries read, %lld applied, %lld skipped%s; restored to "
             "Timestamp(%u, %u)",
             (long long)entries, (long long)p.applied, (long long)p.skipped,
             limited ? " (stopped at --oplogLimit)" : "", p.last_t, p.last_i);
    return 0;
}
