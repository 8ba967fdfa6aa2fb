/*
 * geo_flat.c: the flat geometry of 2d indexes and of the legacy shapes
 * $box, $center and $polygon (Euclidean, on the raw coordinates), and the
 * arithmetic of S2 cell ids (a face in the top 3 bits, then 2 bits per
 * level, then a 1 marking the level).
 */
#include "geo/geo.h"

#include <math.h>

bool sbl_geo_flat_in_box(double x, double y, const double b[4])
{
    double x0 = fmin(b[0], b[2]), x1 = fmax(b[0], b[2]);
    double y0 = fmin(b[1], b[3]), y1 = fmax(b[1], b[3]);
    return x >= x0 && x <= x1 && y >= y0 && y <= y1;
}

/* Crossing number, with points on an edge inside (as mongod's $polygon). */
bool sbl_geo_flat_in_polygon(double x, double y, const sbl_geo_ll_t *p, size_t n)
{
    bool in = false;
    for (size_t i = 0, j = n - 1; i < n; j = i++) {
        double xi = p[i].x, yi = p[i].y, xj = p[j].x, yj = p[j].y;
        double cross = (xj - xi) * (y - yi) - (yj - yi) * (x - xi);
        if (fabs(cross) < 1e-12 && x >= fmin(xi, xj) && x <= fmax(xi, xj) && y >= fmin(yi, yj) &&
            y <= fmax(yi, yj))
            return true;
        if ((yi > y) != (yj > y) && x < (xj - xi) * (y - yi) / (yj - yi) + xi)
            in = !in;
    }
    return in;
}

double sbl_geo_flat_distance(double x1, double y1, double x2, double y2)
{
    return hypot(x1 - x2, y1 - y2);
}

static uint64_t lsb_for_level(int level)
{
    return 1ULL << (2 * (30 - level));
}

int sbl_geo_cell_level(uint64_t id)
{
    return id == 0 ? 0 : 30 - __builtin_ctzll(id) / 2;
}

uint64_t sbl_geo_cell_parent(uint64_t id, int level)
{
    uint64_t lsb = lsb_for_level(level);
    return (id & (~lsb + 1)) | lsb;
}

uint64_t sbl_geo_cell_range_min(uint64_t id)
{
    return id - ((id & (~id + 1)) - 1);
}

uint64_t sbl_geo_cell_range_max(uint64_t id)
{
    return id + ((id & (~id + 1)) - 1);
}
