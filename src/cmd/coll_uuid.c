/*
 * coll_uuid.c: the collectionUUID argument (MongoDB 7.0).  A command that
 * names a collection and carries collectionUUID runs only when that
 * collection exists and has this UUID; otherwise it fails with
 * CollectionUUIDMismatch (361) and mongod's extra fields db, collectionUUID,
 * expectedCollection and actualCollection (the collection of this database
 * that has the UUID, or null).  Checked once by the dispatcher, before the
 * handler, so every command in the list behaves the same.
 */
#include "cmd/cmd_int.h"
#include "doc/doc.h"
#include "storage/storage.h"

#include <stdio.h>
#include <string.h>

/* The commands mongod 7.0 accepts collectionUUID on (that Sable has). */
static const char *const uuid_cmds[] = {
    "aggregate",   "collMod", "count",        "createIndexes", "delete", "distinct", "drop",
    "dropIndexes", "find",    "findAndModify", "insert",       "listIndexes", "update", NULL};

typedef struct uuid_look {
    const char *ns;         /* the command's namespace */
    const uint8_t *uuid;    /* the UUID it expects */
    size_t dblen;           /* length of "db." */
    bool match;             /* ns exists with uuid */
    char actual[SBL_NS_MAX]; /* the collection (name only) of this db that has uuid */
} uuid_look_t;

static bool visit(const char *ns, const bson_t *options, const uint8_t *uuid, void *arg)
{
    (void)options;
    uuid_look_t *l = arg;
    if (memcmp(uuid, l->uuid, 16) != 0)
        return true;
    if (strcmp(ns, l->ns) == 0)
        l->match = true;
    else if (strncmp(ns, l->ns, l->dblen) == 0)
        snprintf(l->actual, sizeof(l->actual), "%s", ns + l->dblen);
    return false; /* a UUID names one collection */
}

int sbl_cmd_check_coll_uuid(sbl_opctx_t *ctx, bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it;
    if (!sbl_doc_find_top(ctx->cmd, "collectionUUID", &it))
        return 0;
    bool known = false;
    for (const char *const *c = uuid_cmds; *c != NULL && !known; c++)
        known = strcmp(*c, ctx->name) == 0;
    if (!known)
        return 0; /* the handler's own argument check refuses it (or ignores it) */
    char field[128];
    snprintf(field, sizeof(field), "%s.collectionUUID", ctx->name);
    if (!BSON_ITER_HOLDS_BINARY(&it))
        return sbl_type_error(err, field, &it, "binData");
    bson_subtype_t st;
    uint32_t len;
    const uint8_t *uuid;
    bson_iter_binary(&it, &st, &len, &uuid);
    if (st != BSON_SUBTYPE_UUID || len != 16)
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field '%s' is the wrong binData type, expected type 'UUID'",
                           field);
    bson_iter_t first;
    if (!bson_iter_init(&first, ctx->cmd) || !bson_iter_next(&first) ||
        !BSON_ITER_HOLDS_UTF8(&first))
        return 0; /* aggregate: 1 names no collection */
    const char *coll = bson_iter_utf8(&first, NULL);
    char ns[SBL_NS_MAX];
    snprintf(ns, sizeof(ns), "%s.%s", ctx->db, coll);
    uuid_look_t l = {ns, uuid, strlen(ctx->db) + 1, false, ""};
    sbl_catalog_list(ctx->db, visit, &l);
    if (l.match)
        return 0;
    BSON_APPEND_UTF8(reply, "db", ctx->db);
    bson_append_binary(reply, "collectionUUID", -1, BSON_SUBTYPE_UUID, uuid, 16);
    BSON_APPEND_UTF8(reply, "expectedCollection", coll);
    if (l.actual[0] != '\0')
        BSON_APPEND_UTF8(reply, "actualCollection", l.actual);
    else
        BSON_APPEND_NULL(reply, "actualCollection");
    return sbl_err_set(err, SBL_E_CollectionUUIDMismatch,
                       "Collection UUID does not match that on collection %s", ns);
}
