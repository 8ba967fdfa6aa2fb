/*
 * metrics.c: the counters (opcounters, latencies with histograms, documents,
 * per command) and top's per-namespace table.
 *
 * Counters are relaxed atomics, each group on its own cache line so that
 * unrelated counters do not bounce the same line between cores.  Top is a
 * hash table split into shards by the namespace's hash, each shard with its
 * own mutex; an entry, once created, lives until its namespace is forgotten.
 */
#include "metrics/metrics.h"

#include "doc/doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#define LINE 64

/* ---- opcounters ------------------------------------------------------------ */

static struct {
    _Alignas(LINE) atomic_llong v[SBL_OPC_COUNT];
} opc;

void sbl_metrics_count_op(sbl_opc_t kind, int64_t n)
{
    atomic_fetch_add_explicit(&opc.v[kind], n, memory_order_relaxed);
}

void sbl_metrics_get_opcounters(sbl_opcounters_t *out)
{
    out->insert = atomic_load_explicit(&opc.v[SBL_OPC_INSERT], memory_order_relaxed);
    out->query = atomic_load_explicit(&opc.v[SBL_OPC_QUERY], memory_order_relaxed);
    out->update = atomic_load_explicit(&opc.v[SBL_OPC_UPDATE], memory_order_relaxed);
    out->del = atomic_load_explicit(&opc.v[SBL_OPC_DELETE], memory_order_relaxed);
    out->getmore = atomic_load_explicit(&opc.v[SBL_OPC_GETMORE], memory_order_relaxed);
    out->command = atomic_load_explicit(&opc.v[SBL_OPC_COMMAND], memory_order_relaxed);
}

/* ---- latencies ------------------------------------------------------------- */

const int64_t sbl_lat_bounds_us[SBL_LAT_NBOUNDS] = {
    50,     100,    250,     500,     1000,    2500,    5000,     10000,
    25000,  50000,  100000,  250000,  500000,  1000000, 5000000,  10000000,
};

typedef struct lat_slot {
    _Alignas(LINE) atomic_llong sum_us;
    atomic_llong ops;
    atomic_llong buckets[SBL_LAT_NBOUNDS + 1];
} lat_slot_t;

static lat_slot_t lat[SBL_LAT_COUNT];

static int bucket_of(int64_t us)
{
    int lo = 0, hi = SBL_LAT_NBOUNDS; /* first bound >= us, or NBOUNDS (+Inf) */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (sbl_lat_bounds_us[mid] >= us)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void sbl_metrics_record_latency(sbl_lat_class_t cls, int64_t micros)
{
    lat_slot_t *s = &lat[cls];
    if (micros < 0)
        micros = 0;
    atomic_fetch_add_explicit(&s->sum_us, micros, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->ops, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->buckets[bucket_of(micros)], 1, memory_order_relaxed);
}

void sbl_metrics_get_latency(sbl_lat_class_t cls, sbl_latency_t *out)
{
    lat_slot_t *s = &lat[cls];
    out->latency_us = atomic_load_explicit(&s->sum_us, memory_order_relaxed);
    out->ops = atomic_load_explicit(&s->ops, memory_order_relaxed);
    for (int i = 0; i <= SBL_LAT_NBOUNDS; i++)
        out->buckets[i] = atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
}

/* ---- documents and commands ------------------------------------------------ */

static struct {
    _Alignas(LINE) atomic_llong v[SBL_DOC_COUNT];
} docs;

void sbl_metrics_count_docs(sbl_doc_kind_t kind, int64_t n)
{
    if (n > 0)
        atomic_fetch_add_explicit(&docs.v[kind], n, memory_order_relaxed);
}

int64_t sbl_metrics_get_docs(sbl_doc_kind_t kind)
{
    return atomic_load_explicit(&docs.v[kind], memory_order_relaxed);
}

static struct {
    atomic_llong total, failed;
} cmds[SBL_METRICS_MAX_COMMANDS];

void sbl_metrics_count_command(size_t row, bool failed)
{
    if (row >= SBL_METRICS_MAX_COMMANDS)
        return;
    atomic_fetch_add_explicit(&cmds[row].total, 1, memory_order_relaxed);
    if (failed)
        atomic_fetch_add_explicit(&cmds[row].failed, 1, memory_order_relaxed);
}

void sbl_metrics_get_command(size_t row, int64_t *totalp, int64_t *failedp)
{
    *totalp = *failedp = 0;
    if (row >= SBL_METRICS_MAX_COMMANDS)
        return;
    *totalp = atomic_load_explicit(&cmds[row].total, memory_order_relaxed);
    *failedp = atomic_load_explicit(&cmds[row].failed, memory_order_relaxed);
}

/* ---- top ------------------------------------------------------------------- */

#define TOP_SHARDS 16

typedef struct top_node {
    sbl_top_entry_t e;
    struct top_node *next;
} top_node_t;

typedef struct top_shard {
    _Alignas(LINE) uv_mutex_t mu;
    top_node_t *head; /* a short list: a shard holds a sixteenth of the namespaces */
} top_shard_t;

static top_shard_t top_shards[TOP_SHARDS];
static uv_once_t top_once = UV_ONCE_INIT;

static void top_init(void)
{
    for (int i = 0; i < TOP_SHARDS; i++)
        uv_mutex_init(&top_shards[i].mu);
}

static uint32_t hash_ns(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static void cell_add(sbl_top_cell_t *c, int64_t us)
{
    c->time_us += us;
    c->count++;
}

void sbl_metrics_top_record(const char *ns, sbl_top_kind_t kind, bool write, int64_t micros)
{
    uv_once(&top_once, top_init);
    top_shard_t *sh = &top_shards[hash_ns(ns) % TOP_SHARDS];
    uv_mutex_lock(&sh->mu);
    top_node_t *n = sh->head;
    while (n != NULL && strcmp(n->e.ns, ns) != 0)
        n = n->next;
    if (n == NULL && (n = calloc(1, sizeof(*n))) != NULL) {
        snprintf(n->e.ns, sizeof(n->e.ns), "%s", ns);
        n->next = sh->head;
        sh->head = n;
    }
    if (n != NULL) {
        cell_add(&n->e.total, micros);
        cell_add(write ? &n->e.write : &n->e.read, micros);
        cell_add(&n->e.kind[kind], micros);
    }
    uv_mutex_unlock(&sh->mu);
}

static int cmp_top(const void *a, const void *b)
{
    return strcmp(((const sbl_top_entry_t *)a)->ns, ((const sbl_top_entry_t *)b)->ns);
}

sbl_top_entry_t *sbl_metrics_top_snapshot(size_t *np)
{
    sbl_top_entry_t *v = NULL;
    size_t n = 0, cap = 0;
    uv_once(&top_once, top_init);
    for (int i = 0; i < TOP_SHARDS; i++) {
        top_shard_t *sh = &top_shards[i];
        uv_mutex_lock(&sh->mu);
        for (top_node_t *t = sh->head; t != NULL; t = t->next) {
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 32;
                sbl_top_entry_t *nv = realloc(v, ncap * sizeof(*v));
                if (nv == NULL)
                    break;
                v = nv;
                cap = ncap;
            }
            v[n++] = t->e;
        }
        uv_mutex_unlock(&sh->mu);
    }
    if (n > 1)
        qsort(v, n, sizeof(*v), cmp_top);
    *np = n;
    return v;
}

void sbl_metrics_top_forget(const char *prefix)
{
    size_t plen = strlen(prefix);
    bool whole_db = plen > 0 && prefix[plen - 1] == '.';
    uv_once(&top_once, top_init);
    for (int i = 0; i < TOP_SHARDS; i++) {
        top_shard_t *sh = &top_shards[i];
        uv_mutex_lock(&sh->mu);
        for (top_node_t **pp = &sh->head; *pp != NULL;) {
            top_node_t *t = *pp;
            bool hit = whole_db ? strncmp(t->e.ns, prefix, plen) == 0 : strcmp(t->e.ns, prefix) == 0;
            if (hit) {
                *pp = t->next;
                free(t);
            } else {
                pp = &t->next;
            }
        }
        uv_mutex_unlock(&sh->mu);
    }
}

/* ---- process ----------------------------------------------------------------- */

void sbl_metrics_process(double *cpu_seconds, int64_t *resident_bytes, int64_t *virtual_bytes)
{
    struct rusage ru;
    long pages_virt = 0, pages_res = 0;
    *cpu_seconds = 0;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        *cpu_seconds = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        if (fscanf(f, "%ld %ld", &pages_virt, &pages_res) != 2)
            pages_virt = pages_res = 0;
        fclose(f);
    }
    long psize = sysconf(_SC_PAGESIZE);
    *resident_bytes = (int64_t)pages_res * psize;
    *virtual_bytes = (int64_t)pages_virt * psize;
}

/* ---- commands as shown to people --------------------------------------------- */

#define CMD_SHOW_MAX 1024

void sbl_metrics_append_cmd(bson_t *out, const char *key, const bson_t *cmd)
{
    if (cmd->len <= CMD_SHOW_MAX) {
        bson_append_document(out, key, -1, cmd);
        return;
    }
    size_t len = 0;
    char *json = bson_as_relaxed_extended_json(cmd, &len);
    bson_t d;
    bson_append_document_begin(out, key, -1, &d);
    if (json != NULL) {
        char shown[CMD_SHOW_MAX + 8];
        snprintf(shown, sizeof(shown), "%.*s...", CMD_SHOW_MAX, json);
        BSON_APPEND_UTF8(&d, "$truncated", shown);
        bson_free(json);
    }
    bson_iter_t it;
    if (bson_iter_init_find(&it, cmd, "comment"))
        sbl_append_value(&d, "comment", -1, bson_iter_value(&it));
    bson_append_document_end(out, &d);
}
