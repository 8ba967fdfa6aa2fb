/*
 * series.c: the monitoring page's data.  Once a second the metrics thread
 * reads the server's cumulative figures (the atomics serverStatus reads, the
 * WiredTiger statistics, the process's CPU time), turns the difference from
 * the previous reading into one row of per-second values and writes it into
 * a fixed ring of one hour.  Nothing is written to disk; a restart starts
 * the ring empty.
 *
 * On a replica-set member the ring also keeps each member's state and lag;
 * on sable-router, each shard's members (as the router's poller last saw
 * them) and the router's requests to each shard.  Which figures exist comes
 * from the sources the program handed in: a series whose source is NULL is
 * neither sampled nor listed.
 *
 * What must stay true: only the metrics thread touches the ring (no lock);
 * the request path pays nothing for it; a value that has no meaning for a
 * second (a latency when no operation finished) is NaN and shows as null.
 */
#include "metrics/metrics_int.h"
#include "common/clock.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>

/* ---- what is charted ----------------------------------------------------------- */

enum {
    S_CPU_USER,
    S_CPU_SYSTEM,
    S_OPS_INSERT,
    S_OPS_QUERY,
    S_OPS_UPDATE,
    S_OPS_DELETE,
    S_OPS_GETMORE,
    S_OPS_COMMAND,
    S_READ_AVG,
    S_READ_P99,
    S_WRITE_AVG,
    S_WRITE_P99,
    S_CONNECTIONS,
    S_CACHE_FILL,
    S_CACHE_DIRTY,
    S_JOURNAL,
    S_AUDIT,
    S_COUNT
};

static const struct {
    const char *key, *label, *unit;
} series_info[S_COUNT] = {
    {"cpu_user", "user", "% of a core"},
    {"cpu_system", "system", "% of a core"},
    {"ops_insert", "insert", "ops/s"},
    {"ops_query", "query", "ops/s"},
    {"ops_update", "update", "ops/s"},
    {"ops_delete", "delete", "ops/s"},
    {"ops_getmore", "getmore", "ops/s"},
    {"ops_command", "command", "ops/s"},
    {"read_avg_ms", "read avg", "ms"},
    {"read_p99_ms", "read p99", "ms"},
    {"write_avg_ms", "write avg", "ms"},
    {"write_p99_ms", "write p99", "ms"},
    {"connections", "connections", "connections"},
    {"cache_fill_pct", "fill", "% of the cache"},
    {"cache_dirty_pct", "dirty", "% of the cache"},
    {"journal_flushes", "journal flushes", "flushes/s"},
    {"audit_events", "audit events", "events/s"},
};

/* Member slots in the ring: a replica set's members, or every shard's. */
#define MEMBER_SLOTS 32

/* The cumulative figures one sample reads. */
typedef struct reading {
    int64_t wall_ms, mono_us;
    double cpu_user_s, cpu_system_s;
    int64_t opc[SBL_OPC_COUNT];
    sbl_latency_t lat[2]; /* reads, writes */
    int64_t conn, cache_used, cache_max, cache_dirty, journal, audit;
    int64_t sh_req[SBL_METRICS_MAX_SHARDS], sh_lat_us[SBL_METRICS_MAX_SHARDS]; /* by shard slot */
    bool sh_seen[SBL_METRICS_MAX_SHARDS];
} reading_t;

static struct {
    bool on;
    uv_timer_t timer;
    const sbl_metrics_sources_t *src;
    reading_t prev, latest;
    bool have_prev;
    uint64_t nsamples; /* samples taken; sample k (1-based) is in slot (k-1) % capacity */
    bool has[S_COUNT]; /* which series this process has (its sources) */
    int64_t *t_ms;
    float (*v)[S_COUNT];
    /* members: a slot per (shard, name), first come first kept; shard is ""
     * on a replica-set member */
    size_t nmembers;
    char member_name[MEMBER_SLOTS][128];
    char member_shard[MEMBER_SLOTS][64];
    signed char (*m_state)[MEMBER_SLOTS]; /* -1: not reported in that sample */
    float (*m_lag)[MEMBER_SLOTS];         /* seconds; NaN unknown */
    /* a router's shards: a slot per name; the router's requests to each */
    size_t nshards;
    char shard_name[SBL_METRICS_MAX_SHARDS][64];
    float (*sh_req)[SBL_METRICS_MAX_SHARDS]; /* requests/s; NaN: not reported */
    float (*sh_lat)[SBL_METRICS_MAX_SHARDS]; /* mean round trip, ms; NaN: none finished */
    sbl_metrics_shard_t *shards;             /* scratch for one sample's shards */
    size_t shards_now;                       /* how many the latest sample got */
} R;

/* ---- sampling -------------------------------------------------------------------- */

static size_t shard_slot(const char *name)
{
    for (size_t i = 0; i < R.nshards; i++)
        if (strcmp(R.shard_name[i], name) == 0)
            return i;
    if (R.nshards == SBL_METRICS_MAX_SHARDS)
        return SIZE_MAX;
    snprintf(R.shard_name[R.nshards], sizeof(R.shard_name[0]), "%s", name);
    return R.nshards++;
}

static void read_now(reading_t *r)
{
    struct rusage ru;
    struct timeval tv;
    memset(r, 0, sizeof(*r));
    gettimeofday(&tv, NULL);
    r->wall_ms = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
    r->mono_us = sbl_now_us();
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        r->cpu_user_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
        r->cpu_system_s = (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    }
    sbl_opcounters_t oc;
    sbl_metrics_get_opcounters(&oc);
    int64_t opv[SBL_OPC_COUNT] = {oc.insert, oc.query, oc.update, oc.del, oc.getmore, oc.command};
    memcpy(r->opc, opv, sizeof(opv));
    sbl_metrics_get_latency(SBL_LAT_READS, &r->lat[0]);
    sbl_metrics_get_latency(SBL_LAT_WRITES, &r->lat[1]);
    if (R.src != NULL && R.src->connections != NULL) {
        int64_t created, avail;
        R.src->connections(&r->conn, &created, &avail);
    }
    if (R.src != NULL && R.src->cache != NULL)
        R.src->cache(&r->cache_used, &r->cache_max, &r->cache_dirty);
    if (R.src != NULL && R.src->journal_flushes != NULL)
        r->journal = R.src->journal_flushes();
    if (R.src != NULL && R.src->audit_events != NULL)
        r->audit = (int64_t)R.src->audit_events();
    R.shards_now = 0;
    if (R.src != NULL && R.src->shards != NULL && R.shards != NULL) {
        R.shards_now = R.src->shards(R.shards, SBL_METRICS_MAX_SHARDS);
        if (R.shards_now > SBL_METRICS_MAX_SHARDS)
            R.shards_now = SBL_METRICS_MAX_SHARDS;
        for (size_t i = 0; i < R.shards_now; i++) {
            R.shards[i].name[sizeof(R.shards[i].name) - 1] = '\0';
            size_t s = shard_slot(R.shards[i].name);
            if (s != SIZE_MAX) {
                r->sh_req[s] = R.shards[i].requests;
                r->sh_lat_us[s] = R.shards[i].latency_us;
                r->sh_seen[s] = true;
            }
        }
    }
}

/* The q-quantile (0..1) of the operations in a per-bucket histogram of n
 * operations, in ms, interpolated linearly inside its bucket. */
static float quantile_ms(const int64_t *buckets, int64_t n, double q)
{
    double want = q * (double)n, cum = 0;
    for (int b = 0; b <= SBL_LAT_NBOUNDS; b++) {
        if (buckets[b] <= 0)
            continue;
        if (cum + (double)buckets[b] >= want) {
            double lo = b == 0 ? 0 : (double)sbl_lat_bounds_us[b - 1];
            if (b == SBL_LAT_NBOUNDS)
                return (float)(lo / 1000.0); /* past the last bound: its lower edge */
            double hi = (double)sbl_lat_bounds_us[b];
            double frac = (want - cum) / (double)buckets[b];
            return (float)((lo + frac * (hi - lo)) / 1000.0);
        }
        cum += (double)buckets[b];
    }
    return NAN;
}

static void latency_row(const sbl_latency_t *cur, const sbl_latency_t *prev, float *avg, float *p99)
{
    int64_t ops = cur->ops - prev->ops;
    if (ops <= 0) {
        *avg = *p99 = NAN;
        return;
    }
    int64_t d[SBL_LAT_NBOUNDS + 1];
    for (int b = 0; b <= SBL_LAT_NBOUNDS; b++)
        d[b] = cur->buckets[b] - prev->buckets[b];
    *avg = (float)((double)(cur->latency_us - prev->latency_us) / (double)ops / 1000.0);
    *p99 = quantile_ms(d, ops, 0.99);
}

static size_t member_slot(const char *shard, const char *name)
{
    for (size_t i = 0; i < R.nmembers; i++)
        if (strcmp(R.member_name[i], name) == 0 && strcmp(R.member_shard[i], shard) == 0)
            return i;
    if (R.nmembers == MEMBER_SLOTS)
        return SIZE_MAX;
    snprintf(R.member_name[R.nmembers], sizeof(R.member_name[0]), "%s", name);
    snprintf(R.member_shard[R.nmembers], sizeof(R.member_shard[0]), "%s", shard);
    return R.nmembers++;
}

static void put_member(size_t slot, const char *shard, sbl_metrics_member_t *m)
{
    m->name[sizeof(m->name) - 1] = '\0';
    size_t s = member_slot(shard, m->name);
    if (s == SIZE_MAX)
        return;
    R.m_state[slot][s] = (signed char)m->state;
    R.m_lag[slot][s] = m->lag_ms < 0 ? NAN : (float)(m->lag_ms / 1000.0);
}

static void sample_members(size_t slot)
{
    for (size_t i = 0; i < MEMBER_SLOTS; i++) {
        R.m_state[slot][i] = -1;
        R.m_lag[slot][i] = NAN;
    }
    for (size_t i = 0; i < R.shards_now; i++)
        for (size_t k = 0; k < R.shards[i].nmembers && k < SBL_METRICS_MAX_SHARD_MEMBERS; k++)
            put_member(slot, R.shards[i].name, &R.shards[i].members[k]);
    if (R.src == NULL || R.src->repl_members == NULL)
        return;
    sbl_metrics_member_t m[SBL_METRICS_MAX_MEMBERS];
    size_t n = R.src->repl_members(m, SBL_METRICS_MAX_MEMBERS);
    for (size_t i = 0; i < n && i < SBL_METRICS_MAX_MEMBERS; i++)
        put_member(slot, "", &m[i]);
}

/* The router's requests per second to each shard and their mean round trip. */
static void sample_shards(size_t slot, const reading_t *cur, const reading_t *p, double secs)
{
    if (R.sh_req == NULL)
        return;
    for (size_t i = 0; i < SBL_METRICS_MAX_SHARDS; i++) {
        R.sh_req[slot][i] = NAN;
        R.sh_lat[slot][i] = NAN;
    }
    for (size_t i = 0; i < R.shards_now; i++) {
        size_t s = shard_slot(R.shards[i].name);
        if (s == SIZE_MAX || !p->sh_seen[s])
            continue;
        int64_t n = cur->sh_req[s] - p->sh_req[s];
        R.sh_req[slot][s] = (float)((double)n / secs);
        if (n > 0)
            R.sh_lat[slot][s] = (float)((double)(cur->sh_lat_us[s] - p->sh_lat_us[s]) / (double)n / 1000.0);
    }
}

void sbl_series_sample(void)
{
    reading_t cur;
    if (!R.on)
        return;
    read_now(&cur);
    if (!R.have_prev) { /* the first reading is only a base for the next */
        R.prev = R.latest = cur;
        R.have_prev = true;
        return;
    }
    reading_t *p = &R.prev;
    double secs = (double)(cur.mono_us - p->mono_us) / 1e6;
    if (secs <= 0.001)
        return;
    size_t slot = (size_t)(R.nsamples % SBL_SERIES_CAPACITY);
    float *v = R.v[slot];
    R.t_ms[slot] = cur.wall_ms;
    v[S_CPU_USER] = (float)((cur.cpu_user_s - p->cpu_user_s) / secs * 100.0);
    v[S_CPU_SYSTEM] = (float)((cur.cpu_system_s - p->cpu_system_s) / secs * 100.0);
    for (int i = 0; i < SBL_OPC_COUNT; i++)
        v[S_OPS_INSERT + i] = (float)((double)(cur.opc[i] - p->opc[i]) / secs);
    latency_row(&cur.lat[0], &p->lat[0], &v[S_READ_AVG], &v[S_READ_P99]);
    latency_row(&cur.lat[1], &p->lat[1], &v[S_WRITE_AVG], &v[S_WRITE_P99]);
    v[S_CONNECTIONS] = (float)cur.conn;
    v[S_CACHE_FILL] = cur.cache_max > 0 ? (float)(100.0 * (double)cur.cache_used / (double)cur.cache_max) : NAN;
    v[S_CACHE_DIRTY] = cur.cache_max > 0 ? (float)(100.0 * (double)cur.cache_dirty / (double)cur.cache_max) : NAN;
    v[S_JOURNAL] = (float)((double)(cur.journal - p->journal) / secs);
    v[S_AUDIT] = (float)((double)(cur.audit - p->audit) / secs);
    sample_members(slot);
    sample_shards(slot, &cur, p, secs);
    R.nsamples++;
    R.prev = R.latest = cur;
}

static void timer_cb(uv_timer_t *t)
{
    sbl_series_sample();
}

int sbl_series_start(uv_loop_t *loop, const sbl_metrics_sources_t *src)
{
    memset(&R, 0, sizeof(R));
    R.src = src;
    R.t_ms = calloc(SBL_SERIES_CAPACITY, sizeof(*R.t_ms));
    R.v = calloc(SBL_SERIES_CAPACITY, sizeof(*R.v));
    R.m_state = calloc(SBL_SERIES_CAPACITY, sizeof(*R.m_state));
    R.m_lag = calloc(SBL_SERIES_CAPACITY, sizeof(*R.m_lag));
    bool router = src != NULL && src->shards != NULL;
    if (router) {
        R.sh_req = calloc(SBL_SERIES_CAPACITY, sizeof(*R.sh_req));
        R.sh_lat = calloc(SBL_SERIES_CAPACITY, sizeof(*R.sh_lat));
        R.shards = calloc(SBL_METRICS_MAX_SHARDS, sizeof(*R.shards));
    }
    if (R.t_ms == NULL || R.v == NULL || R.m_state == NULL || R.m_lag == NULL ||
        (router && (R.sh_req == NULL || R.sh_lat == NULL || R.shards == NULL))) {
        sbl_series_stop();
        return ENOMEM;
    }
    for (int i = 0; i < S_COUNT; i++)
        R.has[i] = true;
    R.has[S_CONNECTIONS] = src != NULL && src->connections != NULL;
    R.has[S_CACHE_FILL] = R.has[S_CACHE_DIRTY] = src != NULL && src->cache != NULL;
    R.has[S_JOURNAL] = src != NULL && src->journal_flushes != NULL;
    R.has[S_AUDIT] = src != NULL && src->audit_events != NULL;
    R.on = true;
    if (loop != NULL) {
        uv_timer_init(loop, &R.timer);
        uv_timer_start(&R.timer, timer_cb, 0, SBL_SERIES_INTERVAL_MS);
    }
    return 0;
}

void sbl_series_stop(void)
{
    if (R.on && R.timer.loop != NULL)
        uv_timer_stop(&R.timer);
    R.on = false;
    free(R.t_ms);
    free(R.v);
    free(R.m_state);
    free(R.m_lag);
    free(R.sh_req);
    free(R.sh_lat);
    free(R.shards);
    R.t_ms = NULL;
    R.v = NULL;
    R.m_state = NULL;
    R.m_lag = NULL;
    R.sh_req = NULL;
    R.sh_lat = NULL;
    R.shards = NULL;
}

/* ---- JSON ---------------------------------------------------------------------- */

static void put_num(bson_string_t *o, double x)
{
    if (isnan(x) || isinf(x))
        bson_string_append(o, "null");
    else if (fabs(x) < 1e15 && x == (double)(int64_t)x)
        bson_string_append_printf(o, "%lld", (long long)x);
    else
        bson_string_append_printf(o, "%.6g", x);
}

static void put_string(bson_string_t *o, const char *s)
{
    bson_string_append_c(o, '"');
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            bson_string_append_printf(o, "\\%c", c);
        else if (c < 0x20)
            bson_string_append_printf(o, "\\u%04x", c);
        else
            bson_string_append_c(o, (char)c);
    }
    bson_string_append_c(o, '"');
}

static void put_latest(bson_string_t *o)
{
    static const char *const opc_names[SBL_OPC_COUNT] = {"insert", "query", "update",
                                                         "delete", "getmore", "command"};
    const reading_t *r = &R.latest;
    bson_string_append_printf(o, "{\"t_ms\":%lld,\"opcounters\":{", (long long)r->wall_ms);
    for (int i = 0; i < SBL_OPC_COUNT; i++)
        bson_string_append_printf(o, "%s\"%s\":%lld", i ? "," : "", opc_names[i], (long long)r->opc[i]);
    bson_string_append_printf(o,
                              "},\"connections\":%lld,\"cache_bytes\":%lld,\"cache_max_bytes\":%lld,"
                              "\"cache_dirty_bytes\":%lld,\"journal_flushes\":%lld,\"audit_events\":%lld,"
                              "\"reads\":{\"ops\":%lld,\"latency_us\":%lld},"
                              "\"writes\":{\"ops\":%lld,\"latency_us\":%lld},"
                              "\"cpu_user_s\":%.3f,\"cpu_system_s\":%.3f",
                              (long long)r->conn, (long long)r->cache_used, (long long)r->cache_max,
                              (long long)r->cache_dirty, (long long)r->journal, (long long)r->audit,
                              (long long)r->lat[0].ops, (long long)r->lat[0].latency_us,
                              (long long)r->lat[1].ops, (long long)r->lat[1].latency_us,
                              r->cpu_user_s, r->cpu_system_s);
    if (R.sh_req != NULL) {
        bson_string_append(o, ",\"shards\":{");
        for (size_t i = 0, n = 0; i < R.nshards; i++) {
            if (!r->sh_seen[i])
                continue;
            bson_string_append(o, n++ ? "," : "");
            put_string(o, R.shard_name[i]);
            bson_string_append_printf(o, ":{\"requests\":%lld,\"latency_us\":%lld}",
                                      (long long)r->sh_req[i], (long long)r->sh_lat_us[i]);
        }
        bson_string_append_c(o, '}');
    }
    bson_string_append_c(o, '}');
}

void sbl_series_render_latest(bson_string_t *o)
{
    if (!R.on) {
        bson_string_append(o, "null");
        return;
    }
    put_latest(o);
}

/* ,"key":[v, v, ...] for samples first .. nsamples-1 of column col of a ring. */
static void put_floats(bson_string_t *o, const char *key, const float *ring, size_t stride,
                       size_t col, uint64_t first)
{
    bson_string_append_printf(o, ",\"%s\":[", key);
    for (uint64_t k = first; k < R.nsamples; k++) {
        if (k > first)
            bson_string_append_c(o, ',');
        put_num(o, ring[(k % SBL_SERIES_CAPACITY) * stride + col]);
    }
    bson_string_append_c(o, ']');
}

void sbl_series_render_json(bson_string_t *o, uint64_t since)
{
    uint64_t first = R.nsamples > SBL_SERIES_CAPACITY ? R.nsamples - SBL_SERIES_CAPACITY : 0;
    if (since > first && since <= R.nsamples)
        first = since; /* samples first+1 .. nsamples, numbered from 1 */
    bson_string_append_printf(o, "{\"role\":\"%s\",\"interval_ms\":%d,\"capacity\":%d,\"last\":%llu,"
                              "\"series\":[", R.sh_req != NULL ? "router" : "server",
                              SBL_SERIES_INTERVAL_MS, SBL_SERIES_CAPACITY,
                              (unsigned long long)R.nsamples);
    for (int s = 0, n = 0; s < S_COUNT; s++)
        if (R.has[s])
            bson_string_append_printf(o, "%s{\"key\":\"%s\",\"label\":\"%s\",\"unit\":\"%s\"}",
                                      n++ ? "," : "", series_info[s].key, series_info[s].label,
                                      series_info[s].unit);
    bson_string_append(o, "],\"t\":[");
    if (!R.on) {
        bson_string_append(o, "],\"values\":{},\"members\":[],\"shards\":[],\"latest\":null}");
        return;
    }
    for (uint64_t k = first; k < R.nsamples; k++)
        bson_string_append_printf(o, "%s%.3f", k > first ? "," : "",
                                  R.t_ms[k % SBL_SERIES_CAPACITY] / 1000.0);
    bson_string_append(o, "],\"values\":{");
    for (int s = 0, n = 0; s < S_COUNT; s++) {
        if (!R.has[s])
            continue;
        bson_string_append_printf(o, "%s\"%s\":[", n++ ? "," : "", series_info[s].key);
        for (uint64_t k = first; k < R.nsamples; k++) {
            if (k > first)
                bson_string_append_c(o, ',');
            put_num(o, R.v[k % SBL_SERIES_CAPACITY][s]);
        }
        bson_string_append_c(o, ']');
    }
    bson_string_append(o, "},\"members\":[");
    for (size_t m = 0; m < R.nmembers; m++) {
        bson_string_append(o, m ? ",{\"name\":" : "{\"name\":");
        put_string(o, R.member_name[m]);
        if (R.member_shard[m][0] != '\0') {
            bson_string_append(o, ",\"shard\":");
            put_string(o, R.member_shard[m]);
        }
        bson_string_append(o, ",\"state\":[");
        for (uint64_t k = first; k < R.nsamples; k++) {
            int st = R.m_state[k % SBL_SERIES_CAPACITY][m];
            if (k > first)
                bson_string_append_c(o, ',');
            if (st < 0)
                bson_string_append(o, "null");
            else
                bson_string_append_printf(o, "%d", st);
        }
        bson_string_append_c(o, ']');
        put_floats(o, "lag_s", &R.m_lag[0][0], MEMBER_SLOTS, m, first);
        bson_string_append_c(o, '}');
    }
    bson_string_append(o, "],\"shards\":[");
    for (size_t i = 0; R.sh_req != NULL && i < R.nshards; i++) {
        bson_string_append(o, i ? ",{\"name\":" : "{\"name\":");
        put_string(o, R.shard_name[i]);
        put_floats(o, "requests", &R.sh_req[0][0], SBL_METRICS_MAX_SHARDS, i, first);
        put_floats(o, "latency_ms", &R.sh_lat[0][0], SBL_METRICS_MAX_SHARDS, i, first);
        bson_string_append_c(o, '}');
    }
    bson_string_append(o, "],\"latest\":");
    put_latest(o);
    bson_string_append_c(o, '}');
}
