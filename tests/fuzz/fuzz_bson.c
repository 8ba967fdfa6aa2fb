/*
 * fuzz_bson: input validation of documents and the key encoding.
 * sbl_bson_check() accepts nothing the recursive reference rejects, and
 * sbl_doc_scan_ids agrees with libbson on what it checks.  For every
 * document sbl_doc_validate() accepts: it compares equal to itself, and
 * each top-level value survives sbl_key_append -> sbl_key_decode with an
 * equal value whose encoding is byte-identical (ascending and descending);
 * keys of two values order as sbl_value_compare orders the values.
 */
#include "fuzz_common.h"

static void roundtrip(const bson_value_t *v, bool desc)
{
    sbl_buf_t a, b;
    bson_t out = BSON_INITIALIZER;
    bson_iter_t it;
    bson_value_t back;

    sbl_buf_init(&a);
    sbl_buf_init(&b);
    sbl_key_append(&a, v, desc);
    size_t used = sbl_key_decode_dir(a.data, a.len, &out, "k", desc);
    FUZZ_ASSERT(used == a.len);
    FUZZ_ASSERT(bson_iter_init_find(&it, &out, "k"));
    sbl_iter_value(&it, &back);
    FUZZ_ASSERT(sbl_value_compare(v, &back) == 0);
    sbl_key_append(&b, &back, desc);
    FUZZ_ASSERT(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
    bson_destroy(&out);
    sbl_buf_destroy(&a);
    sbl_buf_destroy(&b);
}

/* True when flags are what libbson's bson_append_regex keeps unchanged: a sorted
 * string of distinct letters from "ilmsux". */
static bool regex_flags_canonical(const char *flags)
{
    const char *order = "ilmsux";
    if (flags == NULL)
        return true;
    for (; *flags; flags++) {
        const char *p = strchr(order, *flags);
        if (p == NULL)
            return false;
        order = p + 1;
    }
    return true;
}

/* True when v is or contains (through documents and arrays) a value the key
 * decoder is documented not to restore exactly: a regex whose flags are not
 * canonical, code or a dbPointer namespace with an embedded NUL. */
static bool has_odd_regex(const bson_value_t *v, int depth)
{
    bson_iter_t it;
    if (v->value_type == BSON_TYPE_REGEX)
        return !regex_flags_canonical(v->value.v_regex.options);
    if (v->value_type == BSON_TYPE_CODE)
        return memchr(v->value.v_code.code, 0, v->value.v_code.code_len) != NULL;
    if (v->value_type == BSON_TYPE_DBPOINTER)
        return memchr(v->value.v_dbpointer.collection, 0,
                      v->value.v_dbpointer.collection_len) != NULL;
    if ((v->value_type != BSON_TYPE_DOCUMENT && v->value_type != BSON_TYPE_ARRAY) || depth > 200 ||
        !bson_iter_init_from_data(&it, v->value.v_doc.data, v->value.v_doc.data_len))
        return false;
    while (bson_iter_next(&it)) {
        bson_value_t c;
        sbl_iter_value(&it, &c);
        if (has_odd_regex(&c, depth + 1))
            return true;
    }
    return false;
}

static int sign(int x) { return (x > 0) - (x < 0); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sbl_err_t err;
    bson_t doc;
    bson_iter_t it;
    bson_value_t prev;
    bool have_prev = false;

    /* The one-pass checker accepts nothing the recursive reference (libbson's
     * iterator and bson_validate plus framing and depth) rejects.  (It is
     * stricter: libbson sometimes stops at an element it cannot read.) */
    if (size >= 5 && size <= 64 * 1024 && bson_init_static(&doc, data, size)) {
        bool ref = !sbl_doc_too_deep(&doc, 20) && sbl_doc_framing_ok(&doc) &&
                   bson_validate(&doc, BSON_VALIDATE_NONE, NULL);
        FUZZ_ASSERT(ref || sbl_bson_check(data, size, 20, NULL) != SBL_BSON_OK);
        /* An insert's raw scan of a checked document agrees with libbson's
         * walk and sbl_doc_too_deep (or declines the document). */
        bson_iter_t id, w;
        int nid, ref_n = 0, depth = (int)(size % 8);
        bool first, deep;
        if (sbl_bson_check(data, size, 20, NULL) == SBL_BSON_OK &&
            sbl_doc_scan_ids(&doc, depth, &id, &nid, &first, &deep) && bson_iter_init(&w, &doc)) {
            while (bson_iter_next(&w))
                ref_n += strcmp(bson_iter_key(&w), "_id") == 0;
            FUZZ_ASSERT(nid == ref_n && deep == sbl_doc_too_deep(&doc, depth));
            FUZZ_ASSERT(nid == 0 || strcmp(bson_iter_key(&id), "_id") == 0);
        }
    }
    if (sbl_doc_validate(data, size, &err) != 0)
        return 0;
    /* sbl_doc_validate must only accept what libbson can read. */
    FUZZ_ASSERT(bson_init_static(&doc, data, size));
    FUZZ_ASSERT(sbl_doc_compare(&doc, &doc) == 0);
    if (!bson_iter_init(&it, &doc))
        return 0;
    while (bson_iter_next(&it)) {
        bson_value_t v;
        sbl_iter_value(&it, &v);
        if (has_odd_regex(&v, 0))
            continue; /* see has_odd_regex */
        roundtrip(&v, false);
        roundtrip(&v, true);
        if (have_prev) {
            sbl_buf_t a, b;
            sbl_buf_init(&a);
            sbl_buf_init(&b);
            sbl_key_append(&a, &prev, false);
            sbl_key_append(&b, &v, false);
            size_t n = a.len < b.len ? a.len : b.len;
            int c = memcmp(a.data, b.data, n);
            if (c == 0)
                c = (a.len > b.len) - (a.len < b.len);
            FUZZ_ASSERT(sign(c) == sign(sbl_value_compare(&prev, &v)));
            sbl_buf_destroy(&a);
            sbl_buf_destroy(&b);
        }
        prev = v;
        have_prev = true;
    }
    return 0;
}
