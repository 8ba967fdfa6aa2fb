/*
 * capped.h: private to src/cmd.  Capped collections at the command level
 * (capped.c): create's capped/size/max options, their statistics, the
 * checks find makes for tailable cursors, and the wait of an awaitData
 * getMore (the storage side is src/storage/wt_capped.c).
 *
 * What must stay true: an awaitData getMore never blocks a thread while it
 * waits; its request is parked and re-dispatched on its connection's loop
 * when a capped insert commits or its maxTimeMS runs out.
 */
#ifndef SBL_CMD_CAPPED_H
#define SBL_CMD_CAPPED_H

#include <stdbool.h>
#include <stdint.h>

#include "cmd/cmd_int.h"

/* create: whether k is one of capped, size and max (read by sbl_capped_create_options). */
bool sbl_capped_is_create_field(const char *k);
/* create: check capped/size/max of cmd as mongod 7.0 does and append the
 * options stored for a capped collection ({capped: true, size, max}) to opts. */
int sbl_capped_create_options(const bson_t *cmd, bson_t *opts, sbl_err_t *err);

/* collMod: check cappedSize / cappedMax of cmd as mongod 7.0 does (ranges,
 * then 72 "Collection must be capped." when c is not) and replace size / max
 * in opts (the new catalog options, rebuilt in place); *changedp is set when
 * they were given.  Nothing is changed on an error. */
int sbl_capped_coll_mod(const bson_t *cmd, const sbl_coll_t *c, bson_t *opts, bool *changedp,
                        sbl_err_t *err);

/* find: refuse tailable/awaitData combinations mongod refuses (sort other than
 * {$natural: 1}, singleBatch, awaitData alone, a collection that is not capped).
 * *flagsp gets the cursor flags (SBL_CURSOR_*): none when ns does not exist
 * (an empty, closed result as for any find). */
int sbl_capped_check_find(sbl_opctx_t *ctx, const char *ns, bool tailable, bool await_data,
                          const bson_t *sort, bool single_batch, unsigned *flagsp,
                          sbl_err_t *err);

/* getMore on an awaitData cursor that found nothing (worker or loop thread):
 * park ctx's request until w->genf() (sbl_op_generation when NULL: the capped
 * insert generation) moves past w->gen and w->idlef (when given) does not say
 * it would still find nothing, or until w->until_us (monotonic) passes;
 * checked at w->duef() when given, else every 5 ms; sets ctx->deferred.
 * False when the request cannot be parked (internal run, out of memory): reply now. */
bool sbl_capped_await_park(sbl_opctx_t *ctx, const sbl_op_wait_t *w);
/* cloneCollectionAsCapped {<from>, toCollection, size} and convertToCapped
 * {<coll>, size}: copy the documents in natural order into a new capped
 * collection (the oldest evicted when they do not fit); convertToCapped then
 * renames the copy over the original, whose secondary indexes are gone. */
int sbl_cmd_clone_collection_as_capped(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_convert_to_capped(sbl_opctx_t *ctx, sbl_err_t *err);

/* The dispatcher's call for a deferred request, on its connection's loop:
 * starts the wait of a request sbl_capped_await_park parked (nothing otherwise). */
void sbl_capped_await_start(sbl_conn_t *conn, sbl_request_t *req);
/* The connection closes (its loop): end its waits without an answer, so the
 * connection can be freed (shutdown does not wait for them). */
void sbl_capped_await_cancel(sbl_conn_t *conn);
/* req, an OP_MSG exhaust getMore, ends unanswered because conn is closing
 * (its stream, or its wait): its cursor is killed, as mongod kills a cursor
 * whose exhaust client went away (nobody could continue the stream).
 * Nothing for another request, an open connection, or NULLs. */
void sbl_capped_exhaust_end(sbl_conn_t *conn, sbl_request_t *req);
/* The default counter moved: the loops check their parked tailable getMores
 * now instead of at their next poll (cheap when none is parked). */
void sbl_capped_kick(void);
/* The dispatcher, around a write command (wc: its write concern) up to its
 * commit, and with NULL after: while a replica set member runs a write whose
 * write concern waits on no other member (w: 0 or 1), this thread's capped
 * inserts do not kick (sbl_capped_kick). */
void sbl_capped_kick_unhurried(const sbl_write_concern_t *wc);
/* Install the kick (the network loops' and the capped inserts' hooks); once,
 * before the network starts. */
void sbl_capped_kick_init(void);

#endif
