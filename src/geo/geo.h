/*
 * geo.h: geospatial geometry for 2dsphere and 2d indexes and the geo query
 * operators: parsing GeoJSON and legacy coordinate pairs (with mongod's
 * validation messages), the spherical predicates and distances (Google's S2
 * library behind a thin C++ wrapper, s2_wrap.cc), S2 cell coverings for index
 * keys and query bounds, and the flat geometry of 2d ($box, $center,
 * $polygon).  Coordinates are (longitude, latitude) in degrees; spherical
 * distances leave this module in radians (the caller multiplies by the
 * earth's radius, SBL_GEO_EARTH_M, where mongod reports meters).
 *
 * What must stay true:
 *  - A parsed geometry (sbl_geo_t) is immutable once parsed, so one may be
 *    evaluated from many threads at once (its S2 index is built at parse).
 *  - Bad input never reaches S2 unchecked: coordinates are range-checked and
 *    loops validated with S2's debug checks off, so nothing aborts.
 */
#ifndef SBL_GEO_H
#define SBL_GEO_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SBL_GEO_EARTH_M 6378100.0 /* mongod's kRadiusOfEarthInMeters */
/* Index levels: points index one cell at the finest level; other shapes a
 * covering of at most SBL_GEO_DOC_CELLS cells between the two levels. */
#define SBL_GEO_FINEST 23
#define SBL_GEO_COARSEST 0
#define SBL_GEO_DOC_CELLS 20

typedef struct { double x, y; } sbl_geo_ll_t; /* longitude, latitude */

enum sbl_geo_part_kind { SBL_GEO_PT, SBL_GEO_LINE, SBL_GEO_POLY };

/* One simple shape: a point, a line string, or a polygon whose rings
 * (closing vertex dropped) end at ring_end[0..nrings). */
typedef struct sbl_geo_part {
    enum sbl_geo_part_kind kind;
    sbl_geo_ll_t *pts;
    size_t npts;
    size_t *ring_end;
    size_t nrings;
} sbl_geo_part_t;

/* A parsed geometry: the parts of a GeoJSON object (Multi* and
 * GeometryCollection flattened) or one legacy point.  s2 is the wrapper's
 * state (built by sbl_geo_parse). */
typedef struct sbl_geo {
    bool legacy; /* a legacy pair [x, y] or {x:, y:} */
    sbl_geo_part_t *parts;
    size_t nparts;
    struct s2w_shape *s2;
} sbl_geo_t;

/* What a geometry may be. */
#define SBL_GEO_ALLOW_LEGACY 1 /* a legacy pair is a point */

/*
 * Parse v (a GeoJSON object or, with SBL_GEO_ALLOW_LEGACY, a legacy point)
 * into *gp (the caller frees it with sbl_geo_free).  Errors: BadValue (2)
 * with mongod's reason ("Point must only contain numeric elements", "Loop is
 * not closed ...", "Edges 0 and 2 cross ...").
 */
int sbl_geo_parse(const bson_value_t *v, int flags, sbl_geo_t **gp, sbl_err_t *err);
void sbl_geo_free(sbl_geo_t *g);

/* Fast path: v is a GeoJSON Point or a legacy pair with coordinates in
 * range; *x, *y get them.  Allocates nothing. */
bool sbl_geo_as_point(const bson_value_t *v, double *x, double *y);
/* v is a legacy pair ([x, y, ...] or a document whose first two fields are
 * numbers, not a GeoJSON object); no range check. */
bool sbl_geo_legacy_pair(const bson_value_t *v, double *x, double *y);

/* ---- spherical predicates (s2_wrap.cc) ------------------------------------ */

/* region (polygons, or any geometry for intersects) contains every part of g. */
bool sbl_geo_contains(const sbl_geo_t *region, const sbl_geo_t *g);
bool sbl_geo_contains_point(const sbl_geo_t *region, double x, double y);
bool sbl_geo_intersects(const sbl_geo_t *a, const sbl_geo_t *b);
/* Smallest angle (radians) between g and the point (x, y); 0 inside a polygon. */
double sbl_geo_distance(const sbl_geo_t *g, double x, double y);
/* Angle (radians) between two points. */
double sbl_geo_point_distance(double x1, double y1, double x2, double y2);

/* ---- cells (s2_wrap.cc) ------------------------------------------------- */

/* The index cells of g into *cellsp (bson_malloc'd; the caller frees):
 * one cell at SBL_GEO_FINEST per point, a covering for other parts;
 * sorted, distinct.  Returns the count. */
size_t sbl_geo_index_cells(const sbl_geo_t *g, uint64_t **cellsp);
/* A covering of g (a query region) with at most max_cells cells. */
size_t sbl_geo_cover(const sbl_geo_t *g, int max_cells, uint64_t **cellsp);
/* Cells inside polygons g (S2's interior covering, at most max_cells per
 * polygon; every point of such a cell is within g); 0 when g has other
 * parts. */
size_t sbl_geo_interior(const sbl_geo_t *g, int max_cells, uint64_t **cellsp);
/* A covering of the cap of angle r (radians) around (x, y). */
size_t sbl_geo_cover_cap(double x, double y, double r, int max_cells, uint64_t **cellsp);
/* The centre of a cell. */
void sbl_geo_cell_center(uint64_t cell, double *x, double *y);
/* g's latitude-longitude bounding box (x0, y0, x1, y1); false when it crosses
 * the antimeridian or is empty. */
bool sbl_geo_bound(const sbl_geo_t *g, double b[4]);
/* The cell at level of point (x, y). */
uint64_t sbl_geo_point_cell(double x, double y, int level);
/* Cell id arithmetic (S2's Hilbert curve ids). */
int sbl_geo_cell_level(uint64_t id);
uint64_t sbl_geo_cell_parent(uint64_t id, int level);
uint64_t sbl_geo_cell_range_min(uint64_t id);
uint64_t sbl_geo_cell_range_max(uint64_t id);

/* ---- query operators (geo_region.c) ----------------------------------------- */

/* The argument of $geoWithin ($geometry Polygon/MultiPolygon, $centerSphere,
 * $box, $center, $polygon) or of $geoIntersects ($geometry: any GeoJSON). */
typedef struct sbl_geo_region sbl_geo_region_t;
/* Parse; BadValue (2) with mongod's reasons.  *rp is the caller's. */
int sbl_geo_region_parse(bool intersects, const bson_value_t *arg, sbl_geo_region_t **rp,
                         sbl_err_t *err);
void sbl_geo_region_free(sbl_geo_region_t *r);
/* Does one value reached by the operator's path satisfy it?  A value that
 * is no geometry does not. */
bool sbl_geo_region_match(const sbl_geo_region_t *r, const bson_value_t *v);
/* A spherical region's covering for a 2dsphere index scan (at most
 * max_cells cells, bson_malloc'd into *cellsp); 0 for the flat legacy
 * shapes, which a 2dsphere index cannot bound. */
size_t sbl_geo_region_cover(const sbl_geo_region_t *r, int max_cells, uint64_t **cellsp);
/* A $geoWithin $geometry region's interior cells (sbl_geo_interior); 0 for
 * others. */
size_t sbl_geo_region_interior(const sbl_geo_region_t *r, int max_cells, uint64_t **cellsp);
/* A $geometry region's bounding box (as sbl_geo_bound); false for others. */
bool sbl_geo_region_bound(const sbl_geo_region_t *r, double b[4]);
/* A $centerSphere region's cap; false for others. */
bool sbl_geo_region_cap(const sbl_geo_region_t *r, double *x, double *y, double *rad);
/* The flat shapes' bounding box (x0, y0, x1, y1); false for spherical ones. */
bool sbl_geo_region_flat_box(const sbl_geo_region_t *r, double box[4]);

/* $near / $nearSphere / $geoNear's near: a point and distance bounds.  geojson:
 * a GeoJSON point (distances in meters); otherwise legacy (radians when
 * spherical, coordinate units when flat). */
typedef struct sbl_geo_near {
    double x, y;
    bool geojson, sphere;
    double min_dist, max_dist; /* max_dist: HUGE_VAL when not given */
} sbl_geo_near_t;
/* Parse {op: arg} where ops is the whole operator document (siblings
 * $minDistance / $maxDistance of a legacy point).  BadValue (2). */
int sbl_geo_near_parse(bool sphere, const bson_value_t *arg, const bson_t *ops,
                       sbl_geo_near_t *n, sbl_err_t *err);

/* ---- flat (2d) geometry (geo_flat.c) ------------------------------------ */

bool sbl_geo_flat_in_box(double x, double y, const double box[4]); /* x0,y0,x1,y1 */
bool sbl_geo_flat_in_polygon(double x, double y, const sbl_geo_ll_t *p, size_t n);
double sbl_geo_flat_distance(double x1, double y1, double x2, double y2);

#ifdef __cplusplus
}
#endif

#endif
