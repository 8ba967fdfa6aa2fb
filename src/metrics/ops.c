/*
 * ops.c: the registry of running operations behind currentOp and killOp.
 *
 * Each running command is one sbl_op_t owned by its caller (the dispatcher
 * embeds it in the pending command) and linked into one of a few shards
 * chosen by its opid, each shard a doubly linked list under its own mutex.
 * What must stay true: an op is unlinked before its memory or anything it
 * points to (command, db, client) is released, so a reader holding the
 * shard lock only ever sees live data.  killOp only sets the op's atomic
 * flag; the operation itself notices it at its next interrupt check.
 */
#include "metrics/metrics.h"

#include <time.h>
#include <uv.h>

#define OP_SHARDS 16

typedef struct op_shard {
    _Alignas(64) uv_mutex_t mu;
    sbl_op_t *head;
} op_shard_t;

static op_shard_t shards[OP_SHARDS];
static uv_once_t shards_once = UV_ONCE_INIT;
static atomic_llong next_opid = 1;
static atomic_llong active;

static void shards_init(void)
{
    for (int i = 0; i < OP_SHARDS; i++)
        uv_mutex_init(&shards[i].mu);
}

void sbl_op_register(sbl_op_t *op)
{
    struct timespec mono, wall;
    uv_once(&shards_once, shards_init);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    clock_gettime(CLOCK_REALTIME, &wall);
    op->start_us = (int64_t)mono.tv_sec * 1000000 + mono.tv_nsec / 1000;
    op->start_ms = (int64_t)wall.tv_sec * 1000 + wall.tv_nsec / 1000000;
    op->opid = atomic_fetch_add_explicit(&next_opid, 1, memory_order_relaxed);
    atomic_store_explicit(&op->killed, 0, memory_order_relaxed);
    op->shard = (unsigned)(op->opid % OP_SHARDS);
    op_shard_t *sh = &shards[op->shard];
    uv_mutex_lock(&sh->mu);
    op->prev = NULL;
    op->next = sh->head;
    if (sh->head != NULL)
        sh->head->prev = op;
    sh->head = op;
    uv_mutex_unlock(&sh->mu);
    atomic_fetch_add_explicit(&active, 1, memory_order_relaxed);
}

void sbl_op_unregister(sbl_op_t *op)
{
    if (op->opid == 0)
        return; /* never registered */
    op_shard_t *sh = &shards[op->shard];
    uv_mutex_lock(&sh->mu);
    if (op->prev != NULL)
        op->prev->next = op->next;
    else
        sh->head = op->next;
    if (op->next != NULL)
        op->next->prev = op->prev;
    uv_mutex_unlock(&sh->mu);
    op->prev = op->next = NULL;
    op->opid = 0;
    atomic_fetch_sub_explicit(&active, 1, memory_order_relaxed);
}

void sbl_op_set_txn_number(sbl_op_t *op, int64_t txn_number)
{
    op_shard_t *sh = &shards[op->shard];
    uv_mutex_lock(&sh->mu);
    op->txn_number = txn_number;
    uv_mutex_unlock(&sh->mu);
}

bool sbl_op_kill(int64_t opid)
{
    bool found = false;
    if (opid <= 0)
        return false;
    uv_once(&shards_once, shards_init);
    op_shard_t *sh = &shards[opid % OP_SHARDS];
    uv_mutex_lock(&sh->mu);
    for (sbl_op_t *op = sh->head; op != NULL; op = op->next) {
        if (op->opid == opid) {
            atomic_store_explicit(&op->killed, 1, memory_order_relaxed);
            found = true;
            break;
        }
    }
    uv_mutex_unlock(&sh->mu);
    return found;
}

void sbl_ops_foreach(sbl_op_visit_fn fn, void *arg)
{
    uv_once(&shards_once, shards_init);
    for (int i = 0; i < OP_SHARDS; i++) {
        uv_mutex_lock(&shards[i].mu);
        for (sbl_op_t *op = shards[i].head; op != NULL; op = op->next)
            fn(op, arg);
        uv_mutex_unlock(&shards[i].mu);
    }
}

int64_t sbl_ops_active(void)
{
    return atomic_load_explicit(&active, memory_order_relaxed);
}
