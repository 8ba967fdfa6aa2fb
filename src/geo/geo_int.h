/*
 * geo_int.h: private to src/geo: the C side's view of the S2 wrapper
 * (s2_wrap.cc).  s2w_build turns a parsed geometry's parts into S2 shapes
 * in one shape index (built at once, so later reads from many threads are
 * safe); an invalid loop or polygon gives NULL and the reason in mongod's
 * words.
 */
#ifndef SBL_GEO_INT_H
#define SBL_GEO_INT_H

#include "geo/geo.h"

#ifdef __cplusplus
extern "C" {
#endif

struct s2w_shape *s2w_build(const sbl_geo_t *g, char *why, size_t whylen);
void s2w_free(struct s2w_shape *s);

#ifdef __cplusplus
}
#endif

#endif
