/*
 * text.c: the $text stage (text.h): parse $text, read the text index's
 * entries for each positive term (prefix keys, term, score, _id: one range
 * per term, in score order within it), add up each document's scores, and
 * hand out the candidates best first, each read and checked before it is
 * returned.
 *
 * Each term's best EARLY_READ entries are read first, backward (highest
 * score first), as Fagin's "no random access" threshold algorithm does: the
 * score of the last entry read of a term bounds what its unread entries can
 * add.  The best candidate goes out once its score is exact (every term seen
 * or read to its end) and no other candidate, nor a document not seen yet,
 * can score more; otherwise the term with the highest bound reads the rest of
 * its entries, forward and at once (then the candidates are a heap).  So the
 * top 10 of a frequent word reads 64 entries; where the summed scores are
 * flat (two words, each mostly once per document) everything is read, at
 * the cost of the old single forward read.
 *
 * What must stay true: a document is returned at most once, with the sum of
 * its positive terms' scores, never before a document that scores more;
 * candidates are read lazily so a query with a limit reads only as many
 * documents as it returns (plus those rejected).  Equal scores may come out
 * in any order (as in mongod).
 */
#include "exec/text.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"

typedef struct cand {
    uint64_t hash;
    size_t off; /* of the encoded _id in the arena */
    uint32_t len;
    bool out;      /* handed out (or rejected) already */
    uint64_t seen; /* the terms whose entry for this document has been read */
    double score;  /* the sum of those entries' scores */
} cand_t;

#define MAX_TERMS 64 /* a query with more positive terms reads them all at once */
/* Past this many candidates handed out (a large limit, a filter that rejects
 * many), the terms are read to their end and the rest comes from a heap:
 * choosing each candidate by a scan of all of them would then cost more. */
#define EARLY_MAX 128
/* Entries of a term read best first before the rest is read at once. */
#define EARLY_READ 64

typedef struct term_scan {
    sbl_buf_t hi;  /* exclusive upper bound of the entries not read yet */
    size_t lo_len; /* hi's first lo_len bytes: prefix keys + term (the range's low end) */
    double bound;  /* no unread entry scores more (the last one read) */
    bool done;
    size_t nread;
} term_scan_t;

struct sbl_text_exec {
    char *search, *language;
    bool case_sens, diac_sens;
    bool started;
    sbl_fts_query_t *q;
    sbl_fts_spec_t *spec; /* a copy of the index's */
    cand_t *c;
    size_t n, cap;
    term_scan_t *ts; /* one per positive term */
    size_t nts;
    size_t handed;   /* candidates handed out or rejected: past EARLY_MAX, read all */
    bool heap;       /* every term read: c is a heap (heap_build) */
    double max_score; /* the highest candidate score so far (handed out or not) */
    size_t next;     /* heap: how many were popped */
    cand_t popped;
    sbl_buf_t ids; /* the candidates' encoded _ids */
    size_t *slots; /* open addressing over c: index + 1, 0 empty */
    size_t nslots;
};

void sbl_text_free(sbl_text_exec_t *t)
{
    if (t == NULL)
        return;
    sbl_buf_destroy(&t->ids);
    for (size_t i = 0; i < t->nts; i++)
        sbl_buf_destroy(&t->ts[i].hi);
    free(t->ts);
    free(t->c);
    free(t->slots);
    free(t->search);
    free(t->language);
    sbl_fts_query_free(t->q);
    sbl_fts_spec_free(t->spec);
    free(t);
}

static bool has_text_below(const bson_t *d, int depth)
{
    bson_iter_t it;
    if (depth > 50 || !bson_iter_init(&it, d))
        return false;
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), "$text") == 0 && depth > 0)
            return true;
        if (BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_t sub;
            if (sbl_iter_doc(&it, &sub) && has_text_below(&sub, depth + 1))
                return true;
        }
    }
    return false;
}

/* {$and: [{$text: ...}, ...], ...} is a top-level $text too (as in mongod):
 * copy filter into out with each $text of a top-level $and's elements moved to
 * the top level.  Returns false (out untouched) when there is none. */
static bool hoist_and_text(const bson_t *filter, bson_t *out)
{
    bson_iter_t it, arr, el;
    bool found = false;

    if (!bson_iter_init_find(&it, filter, "$and") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &arr))
        return false;
    while (!found && bson_iter_next(&arr))
        if (BSON_ITER_HOLDS_DOCUMENT(&arr) && bson_iter_recurse(&arr, &el) &&
            bson_iter_find(&el, "$text"))
            found = true;
    if (!found)
        return false;
    bson_init(out);
    bson_iter_init(&it, filter);
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), "$and") != 0) {
            sbl_append_iter(out, bson_iter_key(&it), -1, &it);
            continue;
        }
        bson_t keep = BSON_INITIALIZER;
        uint32_t n = 0;
        char idx[16];
        bson_iter_recurse(&it, &arr);
        while (bson_iter_next(&arr)) {
            bson_t sub, rest;
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !sbl_iter_doc(&arr, &sub) ||
                !bson_iter_init(&el, &sub)) {
                snprintf(idx, sizeof(idx), "%u", n++);
                sbl_append_iter(&keep, idx, -1, &arr);
                continue;
            }
            bson_init(&rest);
            while (bson_iter_next(&el)) {
                if (strcmp(bson_iter_key(&el), "$text") == 0)
                    sbl_append_iter(out, "$text", -1, &el); /* two are refused later */
                else
                    sbl_append_iter(&rest, bson_iter_key(&el), -1, &el);
            }
            if (!bson_empty(&rest)) {
                snprintf(idx, sizeof(idx), "%u", n++);
                bson_append_document(&keep, idx, -1, &rest);
            }
            bson_destroy(&rest);
        }
        if (n > 0) /* an $and of only $text leaves nothing to check */
            bson_append_array(out, "$and", -1, &keep);
        bson_destroy(&keep);
    }
    return true;
}

static int parse_flat(const bson_t *filter, bson_t *rest, sbl_text_exec_t **tp, sbl_err_t *err);

int sbl_text_parse(const bson_t *filter, bson_t *rest, sbl_text_exec_t **tp, sbl_err_t *err)
{
    bson_t hoisted;
    *tp = NULL;
    if (filter != NULL && hoist_and_text(filter, &hoisted)) {
        int rc = parse_flat(&hoisted, rest, tp, err);
        bson_destroy(&hoisted);
        return rc;
    }
    return parse_flat(filter, rest, tp, err);
}

static int parse_flat(const bson_t *filter, bson_t *rest, sbl_text_exec_t **tp, sbl_err_t *err)
{
    bson_iter_t it, a;
    int ntext = 0;

    *tp = NULL;
    if (filter == NULL || !bson_iter_init(&it, filter))
        return 0;
    while (bson_iter_next(&it))
        if (strcmp(bson_iter_key(&it), "$text") == 0)
            ntext++;
    if (has_text_below(filter, 0))
        return sbl_err_set(err, SBL_E_BadValue, "$text is not allowed in this context: it must "
                           "be at the top level of the query");
    if (ntext == 0)
        return 0;
    if (ntext > 1)
        return sbl_err_set(err, SBL_E_BadValue, "Too many text expressions");
    sbl_text_exec_t *t = calloc(1, sizeof(*t));
    sbl_buf_init(&t->ids);
    bson_init(rest);
    bson_iter_init(&it, filter);
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), "$text") != 0) {
            sbl_append_iter(rest, bson_iter_key(&it), -1, &it);
            continue;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &a))
            goto bad_arg;
        while (bson_iter_next(&a)) {
            const char *k = bson_iter_key(&a);
            if (strcmp(k, "$search") == 0) {
                if (!BSON_ITER_HOLDS_UTF8(&a))
                    goto bad_search;
                t->search = strdup(bson_iter_utf8(&a, NULL));
            } else if (strcmp(k, "$language") == 0) {
                if (!BSON_ITER_HOLDS_UTF8(&a)) {
                    sbl_err_set(err, SBL_E_BadValue, "$language requires a string value");
                    goto fail;
                }
                t->language = strdup(bson_iter_utf8(&a, NULL));
                if (sbl_fts_lang(t->language) < 0) {
                    sbl_err_set(err, SBL_E_BadValue,
                                "unsupported language: \"%s\" for text index version 3",
                                t->language);
                    goto fail;
                }
            } else if (strcmp(k, "$caseSensitive") == 0 || strcmp(k, "$diacriticSensitive") == 0) {
                if (!BSON_ITER_HOLDS_BOOL(&a)) {
                    sbl_err_set(err, SBL_E_BadValue, "%s requires a boolean value", k);
                    goto fail;
                }
                if (k[1] == 'c')
                    t->case_sens = bson_iter_bool(&a);
                else
                    t->diac_sens = bson_iter_bool(&a);
            } else {
                sbl_err_set(err, SBL_E_BadValue, "extra fields in $text: %s", k);
                goto fail;
            }
        }
        if (t->search == NULL)
            goto bad_search;
    }
    *tp = t;
    return 0;
bad_arg:
    sbl_err_set(err, SBL_E_BadValue, "$text expects an object");
    goto fail;
bad_search:
    sbl_err_set(err, SBL_E_BadValue, "$search required and must be a string");
fail:
    bson_destroy(rest);
    sbl_text_free(t);
    return err->code;
}

/* ---- candidates --------------------------------------------------------------- */

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static void rehash(sbl_text_exec_t *t)
{
    size_t ns = t->nslots ? t->nslots * 2 : 1024;
    free(t->slots);
    t->slots = calloc(ns, sizeof(size_t));
    t->nslots = ns;
    for (size_t i = 0; i < t->n; i++) {
        size_t h = t->c[i].hash & (ns - 1);
        while (t->slots[h] != 0)
            h = (h + 1) & (ns - 1);
        t->slots[h] = i + 1;
    }
}

static void add_score(sbl_text_exec_t *t, const uint8_t *idk, size_t len, double score,
                      size_t term)
{
    uint64_t bit = term < MAX_TERMS ? (uint64_t)1 << term : 0;
    if (2 * (t->n + 1) > t->nslots)
        rehash(t);
    uint64_t hv = hash_bytes(idk, len);
    size_t h = hv & (t->nslots - 1);
    while (t->slots[h] != 0) {
        cand_t *c = &t->c[t->slots[h] - 1];
        if (c->hash == hv && c->len == len && memcmp(t->ids.data + c->off, idk, len) == 0) {
            if (!(c->seen & bit) || bit == 0)
                c->score += score;
            c->seen |= bit;
            if (c->score > t->max_score)
                t->max_score = c->score;
            return;
        }
        h = (h + 1) & (t->nslots - 1);
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 256;
        t->c = realloc(t->c, t->cap * sizeof(*t->c));
    }
    cand_t *c = &t->c[t->n];
    c->hash = hv;
    c->off = t->ids.len;
    sbl_buf_append(&t->ids, idk, len);
    c->len = (uint32_t)len;
    c->out = false;
    c->seen = bit;
    c->score = score;
    if (score > t->max_score)
        t->max_score = score;
    t->slots[h] = ++t->n;
}

/* True when a comes before b: best first, equal scores in _id order. */
static bool cand_before(const sbl_text_exec_t *t, const cand_t *a, const cand_t *b)
{
    if (a->score != b->score)
        return a->score > b->score;
    int c = memcmp(t->ids.data + a->off, t->ids.data + b->off, a->len < b->len ? a->len : b->len);
    return c != 0 ? c < 0 : a->len < b->len;
}

/* The value the filter pins field f to ({f: v} or {f: {$eq: v}}), or false. */
static bool prefix_value(const bson_t *rest, const char *f, bson_value_t *v)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, rest, f))
        return false;
    if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t d;
        bson_iter_t e;
        if (!sbl_iter_doc(&it, &d) || !bson_iter_init(&e, &d) || !bson_iter_next(&e))
            return false;
        if (bson_iter_key(&e)[0] != '$') {
            sbl_iter_value(&it, v);
            return true;
        }
        if (strcmp(bson_iter_key(&e), "$eq") != 0 || bson_iter_next(&e))
            return false;
        it = e;
        bson_iter_init(&e, &d);
        bson_iter_next(&e);
        sbl_iter_value(&e, v);
        return v->value_type != BSON_TYPE_ARRAY && v->value_type != BSON_TYPE_REGEX;
    }
    if (BSON_ITER_HOLDS_ARRAY(&it) || BSON_ITER_HOLDS_REGEX(&it))
        return false;
    sbl_iter_value(&it, v);
    return true;
}

/* c's text index (in *ixsp, which the caller frees), or IndexNotFound (27). */
static int text_index(sbl_coll_t *c, sbl_index_t ***ixsp, size_t *nixp, sbl_index_t **ixp,
                      sbl_err_t *err)
{
    *ixp = NULL;
    sbl_index_list(c, false, ixsp, nixp);
    for (size_t i = 0; i < *nixp && *ixp == NULL; i++)
        if (sbl_index_text((*ixsp)[i]) != NULL)
            *ixp = (*ixsp)[i];
    if (*ixp != NULL)
        return 0;
    sbl_index_list_free(*ixsp, *nixp);
    *ixsp = NULL;
    *nixp = 0;
    return sbl_err_set(err, SBL_E_IndexNotFound, "text index required for $text query");
}

/* Parse the query against the text index's spec and set up one backward
 * range per positive term (after the prefix keys the filter pins). */
static int start(sbl_text_exec_t *t, sbl_coll_t *c, const bson_t *rest, sbl_err_t *err)
{
    sbl_index_t **ixs = NULL, *ix = NULL;
    size_t nix = 0;
    sbl_buf_t key;
    int rc = 0;

    SBL_RET(text_index(c, &ixs, &nix, &ix, err));
    t->spec = sbl_fts_spec_new(sbl_index_spec(ix));
    int lang = t->language != NULL ? sbl_fts_lang(t->language) : t->spec->default_lang;
    t->q = sbl_fts_query_parse(t->search, lang, t->case_sens, t->diac_sens);
    sbl_buf_init(&key);
    for (size_t f = 0; f < sbl_index_nfields(ix); f++) {
        bson_value_t v;
        if (!prefix_value(rest, sbl_index_field(ix, f), &v)) {
            rc = sbl_err_set(err, SBL_E_BadValue,
                             "error processing query: planner returned error :: caused by :: "
                             "failed to use text index to satisfy $text query (if text index is "
                             "compound, are equality predicates given for all prefix fields?)");
            goto done;
        }
        sbl_key_append(&key, &v, sbl_index_dir(ix, f) < 0);
    }
    size_t plen = key.len;
    t->nts = t->q->terms.n;
    t->ts = calloc(t->nts ? t->nts : 1, sizeof(*t->ts));
    for (size_t ti = 0; ti < t->nts; ti++) {
        term_scan_t *ts = &t->ts[ti];
        bson_value_t tv;
        key.len = plen;
        tv.value_type = BSON_TYPE_UTF8;
        tv.value.v_utf8.str = t->q->terms.term[ti];
        tv.value.v_utf8.len = (uint32_t)strlen(tv.value.v_utf8.str);
        sbl_key_append(&key, &tv, false);
        sbl_buf_init(&ts->hi);
        sbl_buf_append(&ts->hi, key.data, key.len);
        ts->lo_len = key.len;
        sbl_buf_append_byte(&ts->hi, 0xff);
        sbl_buf_append_byte(&ts->hi, 0xff);
        ts->bound = HUGE_VAL;
    }
done:
    sbl_buf_destroy(&key);
    sbl_index_list_free(ixs, nix);
    return rc;
}

/* Read up to max of term ti's unread entries, highest score first; with max
 * SIZE_MAX all of them, forward (a backward step in a page's in-memory insert
 * list is a search: the whole rest of a term is cheaper read forward). */
static int read_chunk(sbl_text_exec_t *t, sbl_opctx_t *ctx, sbl_coll_t *c, size_t ti, size_t max,
                      sbl_err_t *err)
{
    term_scan_t *ts = &t->ts[ti];
    sbl_index_t **ixs = NULL, *ix = NULL;
    size_t nix = 0;
    sbl_iscan_t *sc = NULL;
    SBL_RET(text_index(c, &ixs, &nix, &ix, err));
    int rc = sbl_iscan_open(ctx->ss, ix, ts->hi.data, ts->lo_len, ts->hi.data, ts->hi.len,
                            max != SIZE_MAX, &sc, err);
    for (size_t k = 0; rc == 0;) {
        const uint8_t *ek, *idk;
        size_t eklen, idlen;
        bool done;
        if (k == max) /* the entries left score at most the last one read */
            break;
        if ((rc = sbl_iscan_next(sc, &ek, &eklen, &idk, &idlen, &done, err)) != 0)
            break;
        if (done) {
            ts->done = true;
            ts->bound = 0;
            break;
        }
        ctx->keys_examined++;
        ts->nread++;
        if (max != SIZE_MAX) {
            sbl_buf_reset(&ts->hi);
            sbl_buf_append(&ts->hi, ek, eklen);
        }
        if (eklen >= ts->lo_len + 8) {
            double sc_ = sbl_index_text_score_get(ek + ts->lo_len);
            add_score(t, idk, idlen, sc_, ti);
            if (max != SIZE_MAX)
                ts->bound = sc_;
        }
        if (++k % 4096 == 0)
            rc = sbl_op_check_interrupt(ctx, err);
    }
    sbl_iscan_close(sc);
    sbl_index_list_free(ixs, nix);
    return rc;
}

/* Once every term has been read: the candidates left form a heap (best at
 * 0) over c[0 .. n - next), so many results cost no scan of them each. */
static void sift_down(sbl_text_exec_t *t, size_t i, size_t n)
{
    for (;;) {
        size_t l = 2 * i + 1, best = i;
        if (l < n && cand_before(t, &t->c[l], &t->c[best]))
            best = l;
        if (l + 1 < n && cand_before(t, &t->c[l + 1], &t->c[best]))
            best = l + 1;
        if (best == i)
            return;
        cand_t tmp = t->c[i];
        t->c[i] = t->c[best];
        t->c[best] = tmp;
        i = best;
    }
}

static void heap_build(sbl_text_exec_t *t)
{
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++)
        if (!t->c[i].out)
            t->c[k++] = t->c[i];
    t->n = k; /* no entry is added any more: the slots are not needed */
    t->next = 0;
    for (size_t i = k / 2; i-- > 0;)
        sift_down(t, i, k);
    t->heap = true;
}

static cand_t *heap_pop(sbl_text_exec_t *t)
{
    size_t n = t->n - t->next;
    if (n == 0)
        return NULL;
    t->popped = t->c[0];
    t->c[0] = t->c[n - 1];
    t->next++;
    if (n > 1)
        sift_down(t, 0, n - 1);
    return &t->popped;
}

/* The most cd's score can become: what the terms it has not been seen in may add. */
static double upper(const sbl_text_exec_t *t, const cand_t *cd, bool *exactp)
{
    double up = cd->score;
    *exactp = true;
    for (size_t ti = 0; ti < t->nts; ti++)
        if (!t->ts[ti].done && (ti >= MAX_TERMS || !(cd->seen & (uint64_t)1 << ti))) {
            up += t->ts[ti].bound;
            *exactp = false;
        }
    return up;
}

/* The candidate to hand out next (its score exact and no other document can
 * score more), or NULL when more entries must be read first: then *tip is the
 * unfinished term with the highest bound.  *allp: nothing is left at all. */
static cand_t *next_ready(sbl_text_exec_t *t, size_t *tip, bool *allp)
{
    double unseen = 0, top = -1; /* a document no entry has been read for */
    bool exact;
    *allp = true;
    *tip = 0;
    for (size_t i = 0; i < t->nts; i++)
        if (!t->ts[i].done) {
            unseen += t->ts[i].bound;
            if (t->ts[i].bound > top) {
                top = t->ts[i].bound;
                *tip = i;
            }
            *allp = false;
        }
    if (!*allp && t->max_score < unseen)
        return NULL; /* an unseen document may beat every candidate: no scan */
    cand_t *best = NULL;
    for (size_t i = 0; i < t->n; i++)
        if (!t->c[i].out && (best == NULL || cand_before(t, &t->c[i], best)))
            best = &t->c[i];
    if (best == NULL)
        return NULL;
    *allp = false;
    upper(t, best, &exact);
    if (!exact || best->score < unseen)
        return NULL;
    for (size_t i = 0; i < t->n; i++)
        if (!t->c[i].out && &t->c[i] != best && upper(t, &t->c[i], &exact) > best->score)
            return NULL;
    return best;
}

int sbl_text_next(sbl_text_exec_t *t, sbl_opctx_t *ctx, sbl_coll_t *c, const sbl_matcher_t *m,
                  const bson_t *rest, bson_t **docp, sbl_err_t *err)
{
    *docp = NULL;
    if (!t->started) {
        t->started = true;
        SBL_RET(start(t, c, rest, err));
    }
    bool check = sbl_fts_query_needs_doc(t->q);
    for (;;) {
        size_t ti;
        bool all = false;
        cand_t *cd;
        if (!t->heap) {
            bool read_all = true; /* every term read: a heap, no scans */
            for (size_t i = 0; i < t->nts; i++) {
                if (!t->ts[i].done && t->handed >= EARLY_MAX)
                    SBL_RET(read_chunk(t, ctx, c, i, SIZE_MAX, err));
                read_all = read_all && t->ts[i].done;
            }
            if (read_all)
                heap_build(t);
        }
        if (t->heap) {
            if ((cd = heap_pop(t)) == NULL)
                return 0;
        } else if ((cd = next_ready(t, &ti, &all)) == NULL && all) {
            return 0;
        }
        if (cd == NULL) {
            term_scan_t *ts = &t->ts[ti];
            /* the best EARLY_READ first, then the rest at once: where scores
             * are flat the bound falls only near the end, and reading on
             * backward would cost more than the early stop saves */
            size_t max = t->nts > MAX_TERMS || ts->nread >= EARLY_READ ? SIZE_MAX : EARLY_READ;
            SBL_RET(read_chunk(t, ctx, c, ti, max, err));
            continue;
        }
        cd->out = true;
        t->handed++;
        bson_t doc;
        bool found = false;
        bson_init(&doc);
        int rc = sbl_coll_get_by_key(ctx->ss, c, t->ids.data + cd->off, cd->len, &doc, &found,
                                     err);
        if (rc != 0) {
            bson_destroy(&doc);
            return rc;
        }
        ctx->docs_examined++;
        if (!found || (check && !sbl_fts_query_match(t->q, t->spec, &doc)) ||
            !sbl_matcher_match(m, &doc, NULL)) {
            bson_destroy(&doc);
            continue;
        }
        bson_t *out = bson_sized_new(doc.len + 32);
        bson_concat(out, &doc);
        bson_destroy(&doc);
        BSON_APPEND_DOUBLE(out, SBL_TEXT_SCORE_FIELD, cd->score);
        *docp = out;
        return 0;
    }
}
