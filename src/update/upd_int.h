/*
 * upd_int.h: private to src/update.  The mutable document tree an update is
 * applied to, the parsed form of an update (a sorted list of actions), and
 * the operator table rows.
 *
 * What must stay true: a tree owns every node and every value in it (deep
 * copies); array elements carry no key (arrays are renumbered when written
 * back); actions are kept sorted by path, so fields that an update creates
 * appear in the order MongoDB creates them (its update tree is a sorted map).
 */
#ifndef SBL_UPD_INT_H
#define SBL_UPD_INT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "query/query.h"
#include "update/update.h"

/* ---- the mutable tree (upd_tree.c) ------------------------------------ */

typedef struct upd_node {
    char *key;        /* field name inside a document; NULL inside an array */
    bson_type_t type; /* BSON_TYPE_DOCUMENT / BSON_TYPE_ARRAY have kids */
    bson_value_t val; /* scalars only: an owned copy */
    struct upd_node **kids;
    size_t nkids, cap;
} upd_node_t;

/* A container node with no children; key is copied (may be NULL). */
upd_node_t *upd_node_new(const char *key, bson_type_t type);
/* A deep copy of v under key (documents and arrays become subtrees). */
upd_node_t *upd_node_from_value(const char *key, const bson_value_t *v);
/* The tree of a whole document (root is a document node with no key). */
upd_node_t *upd_node_from_bson(const bson_t *doc);
upd_node_t *upd_node_clone(const upd_node_t *n, const char *key);
void upd_node_free(upd_node_t *n);
/* Replace n's key with a copy of key (NULL allowed). */
void upd_node_rekey(upd_node_t *n, const char *key);

static inline bool upd_node_is_container(const upd_node_t *n)
{
    return n->type == BSON_TYPE_DOCUMENT || n->type == BSON_TYPE_ARRAY;
}

/*
 * Find a child: by name in a document, by decimal index in an array.
 * Returns NULL when absent; *posp (may be NULL) gets its index in kids.
 */
upd_node_t *upd_node_child(const upd_node_t *n, const char *key, size_t *posp);
/* Insert kid (taking ownership) at pos (<= nkids). */
void upd_node_insert(upd_node_t *n, size_t pos, upd_node_t *kid);
/* Detach and return the child at pos. */
upd_node_t *upd_node_detach(upd_node_t *n, size_t pos);
/* Free the child at pos and put kid (owned) there, with the old child's key. */
void upd_node_replace(upd_node_t *n, size_t pos, upd_node_t *kid);

/* Write the children of a container into out; when id_first, "_id" goes first. */
void upd_node_write(const upd_node_t *n, bson_t *out, bool id_first);
/* Append n under key to out. */
void upd_node_append(bson_t *out, const char *key, const upd_node_t *n);
/*
 * A read-only bson_value_t view of n.  scratch is always initialised here and
 * must be bson_destroy()ed by the caller after the view is no longer used.
 */
void upd_node_view(const upd_node_t *n, bson_t *scratch, bson_value_t *out);

/* True when s is a canonical array index ("0", "17"; no sign, no leading 0). */
bool upd_parse_index(const char *s, size_t *idxp);

/* Render a value the way MongoDB prints one in messages (1, "x", { a: 1 }, [ 1 ]). */
void upd_render_value(bson_string_t *s, const bson_value_t *v);
void upd_render_node(bson_string_t *s, const upd_node_t *n);

/* ---- parsed updates (upd_parse.c, upd_ops.c) -------------------------- */

typedef struct upd_action upd_action_t;
typedef struct upd_ctx upd_ctx_t;

/* Where an operator applies: one field of a document or one element of an array. */
typedef struct upd_target {
    upd_node_t *parent; /* the document or array that holds (or will hold) the field */
    const char *key;    /* the field name, or the decimal index inside an array */
    size_t pos;         /* index in parent->kids of node; for a missing array element, the index */
    upd_node_t *node;   /* the existing value, or NULL when missing */
    const char *path;   /* the concrete dotted path, for messages */
} upd_target_t;

typedef int (*upd_parse_fn)(upd_action_t *a, bson_iter_t *arg, sbl_err_t *err);
typedef int (*upd_apply_fn)(const upd_action_t *a, upd_target_t *t, const upd_ctx_t *cx,
                            sbl_err_t *err);

typedef struct upd_op {
    const char *name;
    upd_parse_fn parse;
    upd_apply_fn apply;
    bool creates; /* creates missing paths; false: a missing or non-viable path is a no-op */
} upd_op_t;

/* Look an operator up in the sorted table; NULL when unknown. */
const upd_op_t *upd_op_find(const char *name);

enum { UPD_PULL_EQ, UPD_PULL_QUERY, UPD_PULL_WRAPPED };
enum { UPD_BIT_AND, UPD_BIT_OR, UPD_BIT_XOR };
enum { UPD_SORT_NONE, UPD_SORT_ASC, UPD_SORT_DESC, UPD_SORT_SPEC };

typedef struct upd_bitop {
    int op;
    bson_value_t v; /* int32 or int64 */
} upd_bitop_t;

struct upd_action {
    const upd_op_t *op;
    char *path;    /* as written in the update */
    char **comps;  /* path split at dots */
    size_t ncomps;
    int positional;   /* index of the "$" component, or -1 */
    bson_value_t arg; /* owned copy of the operand */
    /* $push / $addToSet: the values to add */
    bson_value_t *each;
    size_t neach;
    bool has_slice, has_position;
    int64_t slice, position;
    int sort_kind;
    sbl_sort_t *sort;
    /* $pull */
    int pull_kind;
    sbl_matcher_t *matcher;
    /* $bit */
    upd_bitop_t *bits;
    size_t nbits;
    /* $currentDate */
    bool timestamp;
    /* $pop: 1 removes the last element, -1 the first */
    int pop;
    /* $rename: destination */
    char *to;
    char **to_comps;
    size_t to_ncomps;
};

typedef struct upd_filter {
    char *id;
    sbl_matcher_t *m;
} upd_filter_t;

struct sbl_update {
    bool replacement;
    bson_t *repl; /* replacement document, or NULL */
    upd_action_t *acts;
    size_t nacts;
    upd_filter_t *filters;
    size_t nfilters;
    const sbl_collation_t *coll; /* $addToSet, $pull(All), $min/$max compare by it; NULL: binary */
};

/* What applying needs besides the action. */
struct upd_ctx {
    const sbl_update_t *u;
    bool is_insert;
    int64_t now_ms;
    const bson_value_t *id; /* the document's _id (for messages), or NULL */
};

/* "{_id: 1}" / "{no id}" style fragment used in several MongoDB messages. */
void upd_render_id(bson_string_t *s, const upd_ctx_t *cx);

/* Store n (owned) at the target: replace the existing value, append a new
 * field, or pad an array with nulls up to the index. */
void upd_target_put(upd_target_t *t, upd_node_t *n);
/* Remove the target: a document field disappears, an array element becomes null. */
void upd_target_remove(upd_target_t *t);

/* True when comp is "$[]" (*lenp = 0) or "$[<id>]" (*idp points at id, *lenp its length). */
bool upd_array_update(const char *comp, const char **idp, size_t *lenp);

/* Split a dotted path; *compsp is malloc'd (free with upd_comps_free). */
int upd_split_path(const char *path, char ***compsp, size_t *np, sbl_err_t *err);
void upd_comps_free(char **comps, size_t n);

/* Apply a $rename action (upd_apply.c): it touches two paths. */
int upd_apply_rename(const upd_action_t *a, upd_node_t *root, const upd_ctx_t *cx,
                     sbl_err_t *err);

#endif
