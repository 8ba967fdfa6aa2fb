/*
 * query_int.h: private to src/query.  The parsed form of a filter (a tree of
 * mnode_t) shared by the parser (match_parse.c) and the evaluator (match.c).
 *
 * What must stay true:
 *  - A tree is immutable after parsing, so one matcher may be evaluated from
 *    many threads at once (PCRE2 match data is allocated per evaluation).
 *  - A leaf's path parts are owned by the leaf; nparts == 0 means the leaf
 *    tests the value it is handed (inside a value-form $elemMatch).
 *  - $ne, $nin, $not and $exists:false are N_NOT over the positive leaf, so a
 *    negation holds only when no value reached by the path matches.
 */
#ifndef SBL_QUERY_INT_H
#define SBL_QUERY_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "geo/geo.h"
#include "query/query.h"

enum mnode_kind { N_AND, N_OR, N_NOR, N_NOT, N_LEAF, N_TRUE, N_FALSE, N_EXT };

typedef struct mnode mnode_t;

/* Test one value (NULL = missing).  *idxp may receive an array index ($elemMatch). */
typedef bool (*leaf_test_fn)(const mnode_t *n, const bson_value_t *v, int32_t *idxp);

struct mnode {
    enum mnode_kind kind;
    /* N_AND / N_OR / N_NOR / N_NOT (one kid) and value-form $elemMatch. */
    mnode_t **kids;
    size_t nkids;
    /* N_LEAF */
    leaf_test_fn test;
    bool expand;   /* also test each element of an array found at the leaf */
    char **parts;  /* dotted path split at '.' */
    size_t nparts;
    bson_value_t arg; /* owned copy; BSON_TYPE_EOD when unused */
    int cmp;          /* comparison kind for $lt..$gte */
    pcre2_code *re;   /* $regex */
    bson_value_t *vals; /* $in: owned copies */
    pcre2_code **vres;  /* $in: vres[i] compiled when vals[i] is a regex */
    size_t nvals;
    int64_t mod_div, mod_rem;
    int types[24]; /* $type codes; 0 stands for "number" */
    size_t ntypes;
    sbl_matcher_t *sub; /* object-form $elemMatch */
    const sbl_collation_t *coll; /* how strings compare (NULL: binary) */
    const sbl_match_ext_t *ext; /* N_EXT: $expr / $jsonSchema, with its plan */
    sbl_geo_region_t *geo;      /* $geoWithin / $geoIntersects */
    void *plan;
};

struct sbl_matcher {
    mnode_t *root;
    bool empty;
};

/* match.c: node lifetime and the leaf tests the parser installs. */
mnode_t *mnode_new(enum mnode_kind kind);
void mnode_free(mnode_t *n);
void mnode_add_kid(mnode_t *parent, mnode_t *kid);
bool mtest_eq(const mnode_t *n, const bson_value_t *v, int32_t *idxp);
bool mtest_geo(const mnode_t *n, const bson_value_t *v, int32_t *idxp);
bool mtest_cmp(const mnode_t *n, const bson_value_t *v, int32_t *idxp);
bool mtest_in(const mnode_t *n, const bson_value_t *v, int32_t *idxp);
bool mtest_exists(const mnode_t *n, const bson_value_t *v, int32_t *idxp);
bool mtest_type(const mnode_t *n, const bson_value_t *v, int32_t *idxp);
bool mtest_regex(const mnode_t *n, const bson_value_t *v, int32_t *idxp);
bool mtest_size(const mnode_t *n, const bson_value_t *v, int32_t *idxp);
bool mtest_mod(const mnode_t *n, const bson_value_t *v, int32_t *idxp);
bool mtest_elem_obj(const mnode_t *n, const bson_value_t *v, int32_t *idxp);
bool mtest_elem_val(const mnode_t *n, const bson_value_t *v, int32_t *idxp);

/* Comparison kinds stored in mnode_t.cmp. */
enum { CMP_LT, CMP_LTE, CMP_GT, CMP_GTE };

/* match_parse.c: compile a regex with MongoDB options; NULL with err (51091/51108). */
pcre2_code *sbl_regex_compile(const char *pattern, const char *options, sbl_err_t *err);

/* True when s is a non-empty string of digits (an array index path part). */
bool sbl_path_part_is_index(const char *s, uint32_t *indexp);

#endif
