/*
 * apply_ops.c: the applyOps command, as far as mongorestore needs it.
 * mongorestore --preserveUUID creates each collection with
 * {applyOps: [{op: "c", ns: "<db>.$cmd", ui: <UUID>, o: {create: <coll>, ...}}]},
 * so the restored collection keeps the dumped UUID.  That is the one form
 * taken; every other entry is refused with CommandNotSupported and nothing of
 * the command is applied (mongod's applyOps also inserts, updates, deletes and
 * runs other catalog commands; Sable's tools replay oplogs through ordinary
 * commands instead).  Root only.
 *
 * What must stay true: the entries are all checked before the first is
 * applied; the reply is mongod's {applied, results: [true...]}.
 */
#include "cmd/cmd_int.h"

#include <stdio.h>
#include <string.h>

/* One entry: its ns, its UUID and its create command; 0, or an error naming entry i. */
static int check_entry(const bson_iter_t *entry, uint32_t i, const char **nsp,
                       const uint8_t **uuidp, bson_t *o, sbl_err_t *err)
{
    bson_iter_t it, f;
    bson_t e;
    uint32_t len, ulen = 0;
    const uint8_t *data;
    const char *op = NULL;
    bson_subtype_t sub = BSON_SUBTYPE_BINARY;

    *nsp = NULL;
    *uuidp = NULL;
    if (!BSON_ITER_HOLDS_DOCUMENT(entry))
        return sbl_err_set(err, SBL_E_FailedToParse, "applyOps entry %u is not an object", i);
    bson_iter_document(entry, &len, &data);
    if (!bson_init_static(&e, data, len) || !bson_iter_init(&it, &e))
        return sbl_err_set(err, SBL_E_InvalidBSON, "applyOps entry %u is invalid BSON", i);
    bool has_o = false;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "op") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            op = bson_iter_utf8(&it, NULL);
        } else if (strcmp(k, "ns") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            *nsp = bson_iter_utf8(&it, NULL);
        } else if (strcmp(k, "ui") == 0 && BSON_ITER_HOLDS_BINARY(&it)) {
            bson_iter_binary(&it, &sub, &ulen, uuidp);
        } else if (strcmp(k, "o") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_document(&it, &len, &data);
            has_o = bson_init_static(o, data, len);
        }
    }
    if (op == NULL || *nsp == NULL || !has_o)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "applyOps entry %u needs op, ns and o", i);
    if (strcmp(op, "c") != 0 || !bson_iter_init(&f, o) || !bson_iter_next(&f) ||
        strcmp(bson_iter_key(&f), "create") != 0)
        return sbl_err_set(err, SBL_E_CommandNotSupported,
                           "applyOps entry %u: Sable's applyOps takes only {op: \"c\", o: "
                           "{create: ...}} with a ui (mongorestore --preserveUUID)",
                           i);
    if (*uuidp == NULL || sub != BSON_SUBTYPE_UUID || ulen != 16)
        return sbl_err_set(err, SBL_E_InvalidUUID,
                           "applyOps entry %u: ui must be a UUID (BinData subtype 4, 16 bytes)",
                           i);
    size_t nslen = strlen(*nsp);
    if (nslen < 6 || strcmp(*nsp + nslen - 5, ".$cmd") != 0)
        return sbl_err_set(err, SBL_E_InvalidNamespace,
                           "applyOps entry %u: a create's ns is <db>.$cmd, not %s", i, *nsp);
    return 0;
}

int sbl_cmd_apply_ops(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it, arr;
    const char *ns;
    const uint8_t *uuid;
    bson_t o;
    uint32_t n = 0;

    if (!bson_iter_init_find(&it, ctx->cmd, "applyOps") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &arr))
        return sbl_err_set(err, SBL_E_FailedToParse, "applyOps takes an array of entries");
    while (bson_iter_next(&arr))
        SBL_RET(check_entry(&arr, n++, &ns, &uuid, &o, err));

    const bson_t *cmd = ctx->cmd;
    const char *db = ctx->db;
    bson_t results = BSON_INITIALIZER;
    int rc = 0;
    uint32_t i = 0;
    bson_iter_recurse(&it, &arr);
    while (rc == 0 && bson_iter_next(&arr)) {
        char dbname[128];
        check_entry(&arr, i, &ns, &uuid, &o, err);
        snprintf(dbname, sizeof(dbname), "%.*s", (int)(strlen(ns) - 5), ns);
        ctx->cmd = &o;
        ctx->db = dbname;
        rc = sbl_cmd_create_with_uuid(ctx, uuid, err);
        ctx->cmd = cmd;
        ctx->db = db;
        if (rc == 0) {
            char k[16];
            const char *key;
            bson_uint32_to_string(i++, &key, k, sizeof(k));
            bson_append_bool(&results, key, -1, true);
        }
    }
    if (rc == 0) {
        BSON_APPEND_INT32(ctx->reply, "applied", (int32_t)i);
        BSON_APPEND_ARRAY(ctx->reply, "results", &results);
    }
    bson_destroy(&results);
    return rc;
}
