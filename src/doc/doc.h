/*
 * doc.h: BSON values in MongoDB's terms: the comparison order across types,
 * the order-preserving key encoding ("keystring") that WiredTiger tables are
 * keyed by, and dotted-path lookup.
 *
 * What must stay true:
 *  - sbl_value_compare() is MongoDB's order: MinKey < null/undefined <
 *    numbers < string/symbol < object < array < binData < ObjectId < bool <
 *    date < timestamp < regex < MaxKey (plus the remaining types where MongoDB
 *    puts them: see below); numbers compare by value across int32/int64/double/decimal128
 *    (NaN below every other number and equal to itself); strings by bytes.
 *    regex < dbPointer < code < codeWScope < MaxKey.  null and undefined
 *    compare equal, as do a string and a symbol with the same bytes.
 *    Numbers compare by exact value across all four types (int64 2^53+1 >
 *    double 2^53; decimal 0.1 < double 0.1, where MongoDB would first round
 *    the double to 34 digits).  Exactness for decimal128 relies on the x87
 *    80-bit long double (checked at compile time, see doc_num.c).
 *  - For any a, b: memcmp order of sbl_key_append(a) vs sbl_key_append(b)
 *    (shorter prefix first) equals the sign of sbl_value_compare(a, b), and
 *    the encodings are equal exactly when compare() returns 0.
 */
#ifndef SBL_DOC_H
#define SBL_DOC_H

#include <bson/bson.h>
#include <stdbool.h>

#include "common/buf.h"
#include "common/errors.h"

/* Rank of a type in MongoDB's cross-type order: MongoDB's canonical type numbers
 * (MinKey -1, null/undefined 5, numbers 10, string/symbol 15, ... MaxKey 127). */
int sbl_type_rank(bson_type_t t);

/* MongoDB's name of a BSON type, as $type and error messages spell it ("double",
 * "string", "objectId", "long", ...); "missing" for anything else (end of document). */
const char *sbl_type_name(bson_type_t t);

/* Three-way compare of two values in MongoDB order; <0, 0 or >0. */
int sbl_value_compare(const bson_value_t *a, const bson_value_t *b);
/* Compare whole documents (field names and values, in order), MongoDB order. */
int sbl_doc_compare(const bson_t *a, const bson_t *b);
/* Compare two raw embedded documents/arrays given as data/len. */
int sbl_raw_doc_compare(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen);
/* True when sbl_value_compare(a, b) == 0. */
bool sbl_value_equal(const bson_value_t *a, const bson_value_t *b);

/* Point out (bson_init_static, no copy, no free) at the embedded document under
 * the iterator; false when the value is not a document. */
bool sbl_iter_doc(const bson_iter_t *it, bson_t *out);
/* The same for an array value; false when the value is not an array. */
bool sbl_iter_array(const bson_iter_t *it, bson_t *out);

/* Fill a bson_value_t view of the iterator's current value (no copy, no free). */
void sbl_iter_value(const bson_iter_t *it, bson_value_t *out);

/*
 * Append the order-preserving encoding of v to out.  When descending is
 * true the bytes are complemented so that memcmp order is reversed (used by
 * descending index keys).  Sub-documents and arrays are encoded recursively.
 */
void sbl_key_append(sbl_buf_t *out, const bson_value_t *v, bool descending);

/*
 * The record id find's showRecordId and {$meta: "recordId"} report for doc: a
 * collection's record key is the encoded _id (src/storage), not an integer, so
 * this is a 64-bit hash (FNV-1a) of that key, in [1, 2^63).  Stable for the
 * document's life, across restarts and on every member; two _ids may in
 * principle share one (documented in docs/operators.md).  0 when doc has no _id.
 */
int64_t sbl_doc_record_id(const bson_t *doc);

/*
 * Decode one value encoded by sbl_key_append (ascending) from p[0..len).
 * Appends it to doc under key "k" (bson_t owns the copy).  Returns the number
 * of bytes consumed, or 0 when the input is malformed (doc may then hold a
 * partial value).  The value decoded compares equal to the one encoded, but
 * the type may differ: numbers come back as the narrowest of int32, int64,
 * double, decimal128 that holds them exactly; symbol as string; undefined as
 * null.  Code with an embedded NUL byte loses everything after it.
 */
size_t sbl_key_decode(const uint8_t *p, size_t len, bson_t *doc, const char *k);
/* As sbl_key_decode; when descending is true, p holds a descending (complemented) encoding. */
size_t sbl_key_decode_dir(const uint8_t *p, size_t len, bson_t *doc, const char *k,
                          bool descending);

/*
 * Look up a dotted path ("a.b.c") through embedded documents only (no array
 * expansion; a numeric component does index into an array).  Returns true
 * and positions *out on the value when found.
 */
bool sbl_path_get(const bson_t *doc, const char *path, bson_iter_t *out);

/* A number's value as a double (a decimal128 through its string: nearest, not
 * exact); NaN for a value that is not a number. */
double sbl_number_double(const bson_value_t *v);

/* ---- checking untrusted BSON (doc_check.c) ---------------------------------- */

#define SBL_BSON_CHECK_MAX_DEPTH 200
typedef enum { SBL_BSON_OK = 0, SBL_BSON_MALFORMED, SBL_BSON_TOO_DEEP } sbl_bson_verdict_t;

/* One pass over data[0..len): OK when it is one well-formed document (framing of
 * every embedded document, array and code-with-scope scope, element sizes, bool
 * values, UTF-8 keys: what libbson's bson_validate(BSON_VALIDATE_NONE) plus
 * sbl_doc_framing_ok accept, but stricter: libbson 1.23 sometimes stops at an
 * element it cannot read without reporting it) nesting at most max_depth
 * (<= SBL_BSON_CHECK_MAX_DEPTH) levels below the top.  *bad_off (may be NULL)
 * gets the offset of the offending element.  Never recurses. */
sbl_bson_verdict_t sbl_bson_check(const uint8_t *data, size_t len, int max_depth, size_t *bad_off);

/* Position *it on doc's top-level field key, as bson_iter_init_find does but
 * without libbson's checks of every element passed over: for documents that
 * passed sbl_bson_check (requests), where it costs a fraction.  A document
 * it cannot walk is handed to bson_iter_init_find. */
bool sbl_doc_find_top(const bson_t *doc, const char *key, bson_iter_t *it);

/* doc's first field, read in place (a command's name, a collection name
 * after it) without an iterator's ~150-300 instructions: its key, or NULL
 * when doc is empty or that element cannot be read within doc; *str gets
 * its value when it is a string (NUL-terminated, as libbson reads one),
 * else NULL.  Points into doc. */
const char *sbl_doc_first(const bson_t *doc, const char **str);

/* A command's top-level fields, indexed once (their offsets and key
 * lengths) when it is dispatched: the dispatcher and the handler look up a
 * dozen of its fields with sbl_doc_find_top, each a walk over the fields
 * before it.  While an index is this thread's (sbl_doc_index_use),
 * sbl_doc_find_top answers from it for the document it was built on (the
 * same bytes at the same address and length: a command is not changed while
 * it runs) and walks every other document as before. */
#define SBL_DOC_INDEX_MAX 32
typedef struct sbl_doc_index {
    const uint8_t *data; /* NULL: nothing indexed (too many fields, or not walkable) */
    uint32_t len, n;
    uint32_t at[SBL_DOC_INDEX_MAX]; /* the element's offset; its key at at + 1 */
    uint8_t klen[SBL_DOC_INDEX_MAX];
} sbl_doc_index_t;
/* Index doc (which must outlive the index's use) into *ix. */
void sbl_doc_index_build(sbl_doc_index_t *ix, const bson_t *doc);
/* *ix: *from (may be NULL) pointed at doc's bytes when it indexed a
 * document of doc's length, which the caller knows doc is (the same bytes,
 * moved or not: a request's command as its parser indexed it, unless fields
 * were cut since); else doc indexed anew. */
void sbl_doc_index_take(sbl_doc_index_t *ix, const sbl_doc_index_t *from, const bson_t *doc);
/* Make ix (may be NULL) this thread's index; returns the one it replaces,
 * to be put back when ix's document is done with. */
const sbl_doc_index_t *sbl_doc_index_use(const sbl_doc_index_t *ix);

/* doc's top-level field key when it is a string (a pointer into doc), else
 * NULL. */
const char *sbl_doc_utf8(const bson_t *doc, const char *key);

/* The next top-level element of a document that passed sbl_bson_check, by
 * its key alone (no bson_iter_t: sbl_doc_top_iter makes one when the value
 * is wanted).  *off starts at 4 and is advanced past the element; *at gets
 * the element's offset, *key its NUL-terminated key.  False at the end, or
 * with *bad set when doc cannot be walked this way (then use libbson). */
bool sbl_doc_top_next(const bson_t *doc, uint32_t *off, uint32_t *at, const char **key, bool *bad);
/* *it on the element sbl_doc_top_next found at offset at with key key. */
bool sbl_doc_top_iter(const bson_t *doc, uint32_t at, const char *key, bson_iter_t *it);

/* What an insert checks of a document, in one walk without libbson's
 * per-element checks, for documents that passed sbl_bson_check (requests):
 * *nid top-level fields are named "_id", *id_it is on the first of them
 * (when *nid > 0) and *id_first says whether it is the document's first
 * field; *deep as sbl_doc_too_deep(doc, max_depth).  False when doc cannot be
 * walked: then ask libbson and sbl_doc_too_deep. */
bool sbl_doc_scan_ids(const bson_t *doc, int max_depth, bson_iter_t *id_it, int *nid,
                      bool *id_first, bool *deep);

/* True when doc nests containers more than max_depth levels below its top level.
 * Never recurses deeper than max_depth + 1, whatever the input. */
bool sbl_doc_too_deep(const bson_t *doc, int max_depth);

/* True when every embedded document, array and code-with-scope scope of doc is framed
 * correctly (length field, trailing 0).  libbson's bson_validate() silently skips an
 * embedded document it cannot open, so input must pass this as well.  Recurses as deep
 * as doc nests: bound the depth first (sbl_doc_too_deep). */
bool sbl_doc_framing_ok(const bson_t *doc);

/* ---- collation (collation.c, ICU) ------------------------------------------
 * A collation is a const pointer to a process-wide cached entry (never freed);
 * NULL is the simple (binary) collation, and every function below that takes one
 * does nothing extra for NULL.  Only strings and symbols (also inside arrays and
 * documents) compare differently under a collation; field names never do. */
typedef struct sbl_collation sbl_collation_t;

/*
 * Parse and open a collation document as MongoDB checks it: locale required
 * (40414), unknown fields 40415, wrong types TypeMismatch (14), strength 1..5,
 * caseFirst upper/lower/off, alternate non-ignorable/shifted, maxVariable
 * punct/space and {locale: "simple"} with other fields: FailedToParse (9); an
 * unknown locale: BadValue (2).  *outp is NULL for {locale: "simple"}.
 */
int sbl_collation_parse(const bson_t *spec, const sbl_collation_t **outp, sbl_err_t *err);
/* As sbl_collation_parse for a command field (TypeMismatch naming field when not an object). */
int sbl_collation_from_iter(const bson_iter_t *it, const char *field,
                            const sbl_collation_t **outp, sbl_err_t *err);
/* The full spec as MongoDB reports it (listCollections, listIndexes); owned by c. */
const bson_t *sbl_collation_spec(const sbl_collation_t *c);
/* Same effective collation (NULL equals only NULL). */
bool sbl_collation_equal(const sbl_collation_t *a, const sbl_collation_t *b);
/* Three-way compare of two UTF-8 strings under c (not NULL). */
int sbl_collation_compare(const sbl_collation_t *c, const char *a, size_t la, const char *b,
                          size_t lb);
/* Append the ICU sort key of s under c (not NULL) to out: no 00 byte inside, one at the
 * end; memcmp order of two keys is sbl_collation_compare order. */
void sbl_collation_sort_key(const sbl_collation_t *c, const char *s, size_t len, sbl_buf_t *out);

/* sbl_value_compare / sbl_value_equal / sbl_key_append under collation coll (NULL: binary,
 * exactly the plain functions).  Under a collation, key encodings of strings are
 * KT_STRING then the sort key: they cannot be decoded back to the string. */
int sbl_value_compare_coll(const bson_value_t *a, const bson_value_t *b,
                           const sbl_collation_t *coll);
void sbl_key_append_coll(sbl_buf_t *out, const bson_value_t *v, bool descending,
                         const sbl_collation_t *coll);

/* Validate a document received from a client: well-formed BSON, depth <= 180 (MongoDB's
 * limit with headroom), total size <= 16 MiB.  Returns 0 or an error code with message. */
int sbl_doc_validate(const uint8_t *data, size_t len, sbl_err_t *err);

/* Append v as an int32 when it fits, else as an int64 (as mongod shows counts). */
bool sbl_append_int(bson_t *doc, const char *key, int64_t v);

/* bson_append_value / bson_append_iter, except that code and code-with-scope values keep
 * the bytes after an embedded NUL (libbson's appenders cut them off).  Every copy of a
 * value outside src/doc goes through these (tests/integration/py/test_layout.py checks):
 * stored and client values must come out byte for byte. */
bool sbl_append_value(bson_t *doc, const char *key, int key_len, const bson_value_t *v);
bool sbl_append_iter(bson_t *doc, const char *key, int key_len, const bson_iter_t *it);
/* The documents of a find's or getMore's reply (its cursor's firstBatch or
 * nextBatch) appended to the array arr under keys *np, *np + 1 ... (*np
 * counts on); returns the cursor's id (0: nothing more to read, or no
 * cursor).  What gathers every batch of a cursor into one array. */
int64_t sbl_append_cursor_batch(bson_t *arr, uint32_t *np, const bson_t *reply);

/* v as mongod's messages print a value (relaxed extended JSON, "1", "\"a\"",
 * "{ \"x\" : 1 }"); bson_free it (NULL when libbson cannot print it). */
char *sbl_value_json(const bson_value_t *v);

/* The largest document MongoDB stores. */
#define SBL_BSON_MAX_SIZE (16 * 1024 * 1024)

/*
 * Prepare a client document for storage into out (initialised here): _id
 * first (an ObjectId generated when missing), size <= 16 MiB, a valid _id
 * (InvalidIdField 53; an embedded _id may not start with a '$' field).
 * Other top-level '$'-prefixed names are data, as in MongoDB 5.0+ (update
 * replacements reject them in src/update).  On error out is left
 * uninitialised.  (doc_prepare.c)
 */
int sbl_doc_prepare_insert(const bson_t *in, bson_t *out, sbl_err_t *err);

#endif
