/*
 * test_geo.c: unit tests for src/geo: GeoJSON and legacy parsing with
 * mongod's checks, the S2 wrapper's predicates (a polygon with a hole,
 * lines, caps), distances against the haversine formula, cell coverings and
 * cell id arithmetic, the flat shapes, and the query operators' arguments.
 */
#include <math.h>
#include <string.h>

#include "check.h"
#include "geo/geo.h"

static sbl_geo_t *parse_json(const char *json, int flags, sbl_err_t *err)
{
    bson_error_t be;
    bson_t *d = bson_new_from_json((const uint8_t *)json, -1, &be);
    bson_iter_t it;
    sbl_geo_t *g = NULL;
    if (d == NULL || !bson_iter_init_find(&it, d, "g")) {
        fprintf(stderr, "bad json: %s\n", json);
        return NULL;
    }
    sbl_geo_parse(bson_iter_value(&it), flags, &g, err);
    bson_destroy(d);
    return g;
}

static bool parses(const char *json, int flags)
{
    sbl_err_t err = {0};
    sbl_geo_t *g = parse_json(json, flags, &err);
    sbl_geo_free(g);
    return g != NULL;
}

static double haversine(double x1, double y1, double x2, double y2)
{
    double r = M_PI / 180, a = sin((y2 - y1) * r / 2), b = sin((x2 - x1) * r / 2);
    return 2 * asin(sqrt(a * a + cos(y1 * r) * cos(y2 * r) * b * b));
}

static void test_parse(void)
{
    CHECK(parses("{\"g\": {\"type\": \"Point\", \"coordinates\": [1, 2]}}", 0));
    CHECK(parses("{\"g\": [1, 2]}", SBL_GEO_ALLOW_LEGACY));
    CHECK(!parses("{\"g\": [1, 2]}", 0));
    CHECK(parses("{\"g\": {\"x\": 1, \"y\": 2}}", SBL_GEO_ALLOW_LEGACY));
    CHECK(!parses("{\"g\": {\"type\": \"Point\", \"coordinates\": [181, 0]}}", 0));
    CHECK(!parses("{\"g\": {\"type\": \"Point\", \"coordinates\": [\"a\", 0]}}", 0));
    CHECK(!parses("{\"g\": {\"type\": \"Nope\", \"coordinates\": [0, 0]}}", 0));
    CHECK(parses("{\"g\": {\"type\": \"LineString\", \"coordinates\": [[0, 0], [1, 1]]}}", 0));
    CHECK(!parses("{\"g\": {\"type\": \"LineString\", \"coordinates\": [[0, 0]]}}", 0));
    /* rings: closed, four positions, no crossing edges, holes inside the shell */
    CHECK(parses("{\"g\": {\"type\": \"Polygon\", \"coordinates\": [[[0,0],[1,0],[1,1],[0,0]]]}}", 0));
    CHECK(!parses("{\"g\": {\"type\": \"Polygon\", \"coordinates\": [[[0,0],[1,0],[1,1],[0,1]]]}}", 0));
    CHECK(!parses("{\"g\": {\"type\": \"Polygon\", \"coordinates\": [[[0,0],[1,0],[0,0]]]}}", 0));
    CHECK(!parses("{\"g\": {\"type\": \"Polygon\", \"coordinates\": "
                  "[[[0,0],[2,2],[2,0],[0,2],[0,0]]]}}", 0));
    CHECK(!parses("{\"g\": {\"type\": \"Polygon\", \"coordinates\": [[[0,0],[1,0],[1,1],[0,1],[0,0]],"
                  "[[5,5],[6,5],[6,6],[5,5]]]}}", 0));
    CHECK(parses("{\"g\": {\"type\": \"GeometryCollection\", \"geometries\": ["
                 "{\"type\": \"Point\", \"coordinates\": [1, 2]},"
                 "{\"type\": \"MultiLineString\", \"coordinates\": [[[0,0],[1,1]],[[2,2],[3,3]]]}]}}", 0));
    sbl_err_t err = {0};
    sbl_geo_t *g = parse_json("{\"g\": {\"type\": \"Polygon\", \"coordinates\": [[[0,0],[1,0],[1,1],[0,1]]]}}",
                              0, &err);
    CHECK(g == NULL && err.code == 2 && strstr(err.msg, "Loop is not closed") != NULL);
}

static void test_predicates(void)
{
    sbl_err_t err = {0};
    sbl_geo_t *sq = parse_json("{\"g\": {\"type\": \"Polygon\", \"coordinates\": ["
                               "[[0,0],[10,0],[10,10],[0,10],[0,0]],"
                               "[[4,4],[6,4],[6,6],[4,6],[4,4]]]}}", 0, &err);
    CHECK(sq != NULL);
    if (sq == NULL)
        return;
    CHECK(sbl_geo_contains_point(sq, 1, 1));
    CHECK(!sbl_geo_contains_point(sq, 5, 5)); /* the hole */
    CHECK(!sbl_geo_contains_point(sq, 11, 5));
    sbl_geo_t *in = parse_json("{\"g\": {\"type\": \"LineString\", \"coordinates\": [[1,1],[3,1]]}}", 0, &err);
    sbl_geo_t *across = parse_json("{\"g\": {\"type\": \"LineString\", \"coordinates\": [[8,5],[15,5]]}}", 0, &err);
    sbl_geo_t *far = parse_json("{\"g\": {\"type\": \"Point\", \"coordinates\": [30, 30]}}", 0, &err);
    CHECK(sbl_geo_contains(sq, in) && !sbl_geo_contains(sq, across));
    CHECK(sbl_geo_intersects(sq, across) && !sbl_geo_intersects(sq, far));
    /* distances: 0 inside, to the nearest edge outside, haversine for points */
    CHECK(sbl_geo_distance(sq, 1, 1) == 0);
    CHECK(fabs(sbl_geo_distance(far, 31, 30) - haversine(30, 30, 31, 30)) < 1e-9);
    CHECK(fabs(sbl_geo_distance(sq, 12, 5) - haversine(10, 5, 12, 5)) < 1e-4);
    CHECK(fabs(sbl_geo_point_distance(2.35, 48.85, -0.12, 51.5) -
               haversine(2.35, 48.85, -0.12, 51.5)) < 1e-9);
    sbl_geo_free(in);
    sbl_geo_free(across);
    sbl_geo_free(far);
    sbl_geo_free(sq);
}

static void test_cells(void)
{
    uint64_t c = sbl_geo_point_cell(2.35, 48.85, 23);
    CHECK(sbl_geo_cell_level(c) == 23);
    uint64_t p = sbl_geo_cell_parent(c, 10);
    CHECK(sbl_geo_cell_level(p) == 10);
    CHECK(sbl_geo_cell_range_min(p) <= c && c <= sbl_geo_cell_range_max(p));
    CHECK(p == sbl_geo_point_cell(2.35, 48.85, 10));
    /* a cap's covering holds the cells of the points inside it */
    uint64_t *cells = NULL;
    size_t n = sbl_geo_cover_cap(2.35, 48.85, 1000 / SBL_GEO_EARTH_M, 16, &cells);
    CHECK(n > 0 && n <= 16);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        found |= sbl_geo_cell_range_min(cells[i]) <= c && c <= sbl_geo_cell_range_max(cells[i]);
    CHECK(found);
    bson_free(cells);
    /* a point indexes one finest cell; a polygon a bounded covering */
    sbl_err_t err = {0};
    sbl_geo_t *g = parse_json("{\"g\": [2.35, 48.85]}", SBL_GEO_ALLOW_LEGACY, &err);
    n = sbl_geo_index_cells(g, &cells);
    CHECK(n == 1 && cells[0] == c);
    bson_free(cells);
    sbl_geo_free(g);
    g = parse_json("{\"g\": {\"type\": \"Polygon\", \"coordinates\": [[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}",
                   0, &err);
    n = sbl_geo_index_cells(g, &cells);
    CHECK(n >= 1 && n <= SBL_GEO_DOC_CELLS);
    bson_free(cells);
    double b[4];
    CHECK(sbl_geo_bound(g, b) && fabs(b[0]) < 1e-9 && fabs(b[2] - 1) < 1e-9 && b[3] >= 1);
    sbl_geo_free(g);
}

static void test_flat_and_operators(void)
{
    double box[4] = {0, 0, 5, 5};
    sbl_geo_ll_t tri[3] = {{0, 0}, {10, 0}, {0, 10}};
    CHECK(sbl_geo_flat_in_box(5, 5, box) && !sbl_geo_flat_in_box(5.1, 5, box));
    CHECK(sbl_geo_flat_in_polygon(1, 1, tri, 3) && !sbl_geo_flat_in_polygon(6, 6, tri, 3));
    CHECK(sbl_geo_flat_in_polygon(5, 0, tri, 3)); /* on an edge */

    bson_error_t be;
    bson_t *d = bson_new_from_json((const uint8_t *)"{\"w\": {\"$centerSphere\": [[0, 0], 0.01]},"
                                   "\"bad\": {\"$geometry\": {\"type\": \"Point\", \"coordinates\": [0, 0]}},"
                                   "\"pt\": [0.1, 0.1], \"pt2\": [1, 1],"
                                   "\"near\": {\"$geometry\": {\"type\": \"Point\", \"coordinates\": [1, 2]},"
                                   " \"$maxDistance\": 10}}", -1, &be);
    bson_iter_t it;
    sbl_err_t err = {0};
    sbl_geo_region_t *r = NULL;
    bson_iter_init_find(&it, d, "w");
    CHECK(sbl_geo_region_parse(false, bson_iter_value(&it), &r, &err) == 0);
    bson_iter_init_find(&it, d, "pt");
    CHECK(r != NULL && sbl_geo_region_match(r, bson_iter_value(&it)));
    bson_iter_init_find(&it, d, "pt2");
    CHECK(r != NULL && !sbl_geo_region_match(r, bson_iter_value(&it)));
    sbl_geo_region_free(r);
    r = NULL;
    bson_iter_init_find(&it, d, "bad"); /* $geoWithin takes polygons only */
    CHECK(sbl_geo_region_parse(false, bson_iter_value(&it), &r, &err) == 2 && r == NULL);
    CHECK(sbl_geo_region_parse(true, bson_iter_value(&it), &r, &err) == 0 && r != NULL);
    sbl_geo_region_free(r);
    sbl_geo_near_t nr;
    bson_iter_init_find(&it, d, "near");
    CHECK(sbl_geo_near_parse(false, bson_iter_value(&it), NULL, &nr, &err) == 0);
    CHECK(nr.geojson && nr.sphere && nr.x == 1 && nr.y == 2 && nr.max_dist == 10);
    bson_destroy(d);
}

int main(void)
{
    test_parse();
    test_predicates();
    test_cells();
    test_flat_and_operators();
    return CHECK_DONE("test_geo");
}
