/*
 * timeseries.h: private to src/cmd.  Time-series collections (create with
 * `timeseries`) and clustered collections (create with `clusteredIndex`):
 * their create options checked in MongoDB 7.0's words and stored in the
 * catalog in the form listCollections shows, the time field check on
 * writes, and how listCollections / listIndexes present them.
 *
 * What must stay true: measurements are stored as ordinary documents (no
 * buckets); a collection is time-series exactly when its stored options hold
 * `timeseries`, clustered exactly when they hold `clusteredIndex`.
 */
#ifndef SBL_CMD_TIMESERIES_H
#define SBL_CMD_TIMESERIES_H

#include <bson/bson.h>
#include <stdbool.h>

#include "cmd/cmd_int.h"

/* True for the create fields this file parses (timeseries, clusteredIndex,
 * expireAfterSeconds): create's option loop leaves them to sbl_ts_create_options. */
bool sbl_ts_is_create_field(const char *key);

/*
 * Check the create command cmd's timeseries / clusteredIndex /
 * expireAfterSeconds options as MongoDB 7.0 does (IDL errors 14, 40414,
 * 40415, 51024, BadValue; InvalidOptions 72; 5979700, 197, 5979704) and
 * append them to opts in their stored form: timeseries {timeField,
 * metaField?, granularity | bucketRoundingSeconds, bucketMaxSpanSeconds},
 * expireAfterSeconds (int64), clusteredIndex {v: 2, key, name, unique: true}.
 * ns is "db.coll" (it appears in some messages).  Returns 0 or the error.
 */
int sbl_ts_create_options(const bson_t *cmd, const char *ns, bson_t *opts, sbl_err_t *err);

/* After a time-series collection ns with a metaField was created: its default
 * index {<metaField>: 1, <timeField>: 1} named "<meta>_1_<time>_1", as
 * MongoDB 7.0 creates.  No-op for other collections. */
int sbl_ts_after_create(sbl_session_t *ss, const char *ns, const bson_t *opts, sbl_err_t *err);

/*
 * collMod on a collection whose options (a copy the caller owns) are *opts:
 * `expireAfterSeconds` (seconds, or "off") on a time-series or clustered
 * collection, `timeseries` {granularity | bucketMaxSpanSeconds +
 * bucketRoundingSeconds} on a time-series one (only coarser), and the
 * options a time-series collection refuses (validator ...), with MongoDB
 * 7.0's InvalidOptions (72) messages.  On a change *opts is replaced by the
 * new options (same storage) and *changedp set.  Returns 0 or the error.
 */
int sbl_ts_coll_mod(const bson_t *cmd, bson_t *opts, bool *changedp, sbl_err_t *err);

/* Whether stored collection options describe a time-series collection. */
bool sbl_ts_is_timeseries(const bson_t *options);

/* Writes to a time-series collection: BadValue (2) "'<timeField>' must be
 * present and contain a valid BSON UTC datetime value" when doc lacks a date
 * there.  0 for any other collection (options NULL is fine). */
int sbl_ts_check_doc(const bson_t *options, const bson_t *doc, sbl_err_t *err);

/* listIndexes' first entries for a collection with these options: nothing for
 * a time-series collection (it has no _id index), {v, key, name, unique,
 * clustered: true} for a clustered one, else {v: 2, key: {_id: 1}, name: "_id_"}.
 * Appends to out; returns false when nothing is to be listed. */
bool sbl_ts_id_index_spec(const bson_t *options, bson_t *out);

#endif
