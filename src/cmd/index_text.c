/*
 * index_text.c: createIndexes for text indexes.  A key pattern naming
 * fields with "text" ({a: 1, b: "text", c: "text"}) is stored as mongod
 * stores it: the text fields become {_fts: "text", _ftsx: 1} between the
 * equality prefix and any suffix, and their weights (1 unless the spec's
 * weights say otherwise), default_language, language_override and
 * textIndexVersion 3 join the spec.  One text index per collection.
 */
#include "cmd/cmd_int.h"

#include <math.h>
#include <string.h>

#include "query/query.h"
#include "storage/storage.h"

static const char *const text_options[] = {"weights", "default_language", "language_override",
                                           "textIndexVersion", NULL};

bool sbl_cmd_text_option(const char *k)
{
    for (size_t i = 0; text_options[i] != NULL; i++)
        if (strcmp(k, text_options[i]) == 0)
            return true;
    return false;
}

bool sbl_cmd_key_is_text(const bson_t *key)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, key, "_fts"))
        return true;
    bson_iter_init(&it, key);
    while (bson_iter_next(&it))
        if (BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), "text") == 0)
            return true;
    return false;
}

/* Add {field: weight} to the sorted list (names, w) unless present. */
static void add_weight(const char **names, double *w, size_t *n, const char *f, double v,
                       bool replace)
{
    size_t i;
    for (i = 0; i < *n; i++)
        if (strcmp(names[i], f) == 0) {
            if (replace)
                w[i] = v;
            return;
        }
    if (*n >= 64)
        return;
    for (i = *n; i > 0 && strcmp(names[i - 1], f) > 0; i--) {
        names[i] = names[i - 1];
        w[i] = w[i - 1];
    }
    names[i] = f;
    w[i] = v;
    (*n)++;
}

int sbl_cmd_text_spec(const bson_t *spec, const bson_t *key, bson_t *out, sbl_err_t *err)
{
    bson_iter_t it, wit;
    bson_t nkey, weights;
    const char *names[64];
    double w[64];
    size_t nw = 0;
    bool in_text = false, done_text = false, stored = false;
    const char *lang = "english", *override = "language";

    if (bson_iter_init_find(&it, key, "_fts"))
        stored = true; /* already in stored form (a spec listIndexes gave back) */
    bson_init(&nkey);
    bson_iter_init(&it, key);
    while (bson_iter_next(&it)) {
        const char *f = bson_iter_key(&it);
        bool is_text = BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), "text") == 0;
        if (stored) {
            sbl_append_iter(&nkey, f, -1, &it);
            continue;
        }
        if (is_text) {
            if (done_text) {
                bson_destroy(&nkey);
                return sbl_err_set(err, SBL_E_CannotCreateIndex,
                                   "Error in specification :: caused by :: expected "
                                   "text fields to be contiguous in the key pattern");
            }
            if (!in_text) {
                BSON_APPEND_UTF8(&nkey, "_fts", "text");
                BSON_APPEND_INT32(&nkey, "_ftsx", 1);
            }
            in_text = true;
            add_weight(names, w, &nw, f, 1, false);
            continue;
        }
        if (in_text)
            done_text = true;
        if (BSON_ITER_HOLDS_UTF8(&it)) {
            bson_destroy(&nkey);
            return sbl_err_set(err, SBL_E_CannotCreateIndex,
                               "Error in specification :: caused by :: Index type '%s' cannot "
                               "be used in a compound text index",
                               bson_iter_utf8(&it, NULL));
        }
        sbl_append_iter(&nkey, f, -1, &it);
    }
    if (bson_iter_init_find(&it, spec, "weights")) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &wit)) {
            bson_destroy(&nkey);
            return sbl_err_set(err, SBL_E_CannotCreateIndex, "weights must be an object");
        }
        while (bson_iter_next(&wit)) {
            double v = BSON_ITER_HOLDS_NUMBER(&wit) ? bson_iter_as_double(&wit) : -1;
            if (!(v > 0 && v < 100000) || floor(v) != v) {
                bson_destroy(&nkey);
                return sbl_err_set(err, SBL_E_CannotCreateIndex,
                                   "text index weights must be in the exclusive interval (0,"
                                   "100000) but found: %g", v);
            }
            add_weight(names, w, &nw, bson_iter_key(&wit), v, true);
        }
    }
    if (bson_iter_init_find(&it, spec, "default_language")) {
        if (!BSON_ITER_HOLDS_UTF8(&it) || sbl_fts_lang(bson_iter_utf8(&it, NULL)) < 0) {
            bson_destroy(&nkey);
            return sbl_err_set(err, SBL_E_CannotCreateIndex,
                               "Error in specification :: caused by :: default_language: "
                               "unsupported language: \"%s\" for text index version 3",
                               BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "?");
        }
        lang = bson_iter_utf8(&it, NULL);
    }
    if (bson_iter_init_find(&it, spec, "language_override")) {
        if (!BSON_ITER_HOLDS_UTF8(&it) || bson_iter_utf8(&it, NULL)[0] == '\0') {
            bson_destroy(&nkey);
            return sbl_err_set(err, SBL_E_CannotCreateIndex,
                               "language_override must be a non-empty string");
        }
        override = bson_iter_utf8(&it, NULL);
    }
    if (bson_iter_init_find(&it, spec, "textIndexVersion") &&
        (!BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_int64(&it) != 3)) {
        bson_destroy(&nkey);
        return sbl_err_set(err, SBL_E_CannotCreateIndex,
                           "Currently only textIndexVersion 3 is supported by Sable");
    }
    BSON_APPEND_DOCUMENT(out, "key", &nkey);
    bson_destroy(&nkey);
    bson_init(&weights);
    for (size_t i = 0; i < nw; i++)
        BSON_APPEND_INT32(&weights, names[i], (int32_t)w[i]);
    BSON_APPEND_DOCUMENT(out, "weights", &weights);
    bson_destroy(&weights);
    BSON_APPEND_UTF8(out, "default_language", lang);
    BSON_APPEND_UTF8(out, "language_override", override);
    BSON_APPEND_INT32(out, "textIndexVersion", 3);
    return 0;
}

int sbl_cmd_text_conflict(const bson_t *req, const bson_t *have, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t kr, kh;
    if (!bson_iter_init_find(&it, req, "key") || !sbl_iter_doc(&it, &kr) ||
        !bson_iter_init_find(&it, have, "key") || !sbl_iter_doc(&it, &kh))
        return 0;
    bool tr = sbl_cmd_key_is_text(&kr), th = sbl_cmd_key_is_text(&kh);
    if (!tr || !th)
        return 0;
    const char *nr = "", *nh = "";
    if (bson_iter_init_find(&it, req, "name") && BSON_ITER_HOLDS_UTF8(&it))
        nr = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, have, "name") && BSON_ITER_HOLDS_UTF8(&it))
        nh = bson_iter_utf8(&it, NULL);
    static const char *const same[] = {"weights", "default_language", "language_override"};
    bool eq = strcmp(nr, nh) == 0 && sbl_doc_compare(&kr, &kh) == 0;
    for (size_t i = 0; i < 3 && eq; i++) {
        bson_iter_t a, b;
        bool ha = bson_iter_init_find(&a, req, same[i]), hb = bson_iter_init_find(&b, have, same[i]);
        eq = ha == hb && (!ha || sbl_value_compare(bson_iter_value(&a), bson_iter_value(&b)) == 0);
    }
    if (eq)
        return 1;
    return sbl_err_set(err, SBL_E_IndexOptionsConflict,
                       "An equivalent index already exists with a different name and options. "
                       "only one text index per collection allowed, found existing text index "
                       "\"%s\"", nh);
}
