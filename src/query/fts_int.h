/* fts_int.h: text search internals shared by fts.c and fts_stop.c (private to query/). */
#ifndef SBL_FTS_INT_H
#define SBL_FTS_INT_H

#include <stddef.h>

typedef struct sbl_fts_lang {
    const char *name, *code;   /* "english", "en" */
    const char *snowball;      /* the libstemmer algorithm; NULL: no stemming */
    const char *const *stop;   /* sorted stop words (folded) */
    size_t nstop;
} sbl_fts_lang_t;

extern const sbl_fts_lang_t sbl_fts_langs[];
extern const size_t sbl_fts_nlangs;

#endif
