/*
 * restore.h: sable-restore's namespaces ("intents", as mongo-tools calls
 * them) and the operations that apply one to the server: create (with --drop),
 * insert documents in batches, build indexes, write users and roles.
 * restore_main.c finds the intents in a directory or an archive and drives
 * them; restore_apply.c talks to the server.
 */
#ifndef SABLE_TOOLS_RESTORE_H
#define SABLE_TOOLS_RESTORE_H

#include "dump.h"

typedef enum rkind {
    RK_COLLECTION,
    RK_VIEW,
    RK_USERS, /* admin.system.users, or a database's $admin.system.users */
    RK_ROLES,
} rkind_t;

typedef enum rstate {
    RS_PENDING,  /* nothing done yet */
    RS_PARTIAL,  /* created, some documents may be in */
    RS_DONE,     /* every document read and indexes built */
    RS_FAILED,   /* an error stopped it */
} rstate_t;

typedef struct rintent {
    char db[128], coll[256];   /* as in the dump */
    char tdb[128], tcoll[256]; /* where it goes (after --nsFrom/--nsTo, --db, --collection) */
    rkind_t kind;
    bool selected;             /* passes the filters */
    bson_t *meta;              /* parsed metadata (empty when none); bson_t is not
                                  relocatable, and intents live in a growing array */
    char *bson_path;           /* directory layout: the .bson file, NULL for none */
    bool gzip;
    rstate_t state;
    int64_t docs, failed, bytes;
    int64_t expect_bytes;      /* the .bson file's size or the archive's size: progress */
    uint64_t crc;
    bson_t *pending;           /* users and roles: collected, written at the end */
    uint32_t n_pending;
    tool_inserter_t *bulk;     /* the insertion workers while documents arrive */
    char msg[3][600];          /* their message prefixes (error, stop, fatal) */
    tool_progress_t progress;
} rintent_t;

typedef struct ropts {
    const char *db, *coll, *dir, *archive;
    bool gzip, drop, no_index, no_options, stop_on_error, dry_run, oplog_replay,
        keep_order, users_roles, preserve_uuid, bypass_validation;
    long jobs, workers, batch;
    const char *oplog_limit, *oplog_file;
    tool_ns_t ns;
} ropts_t;

typedef struct restore {
    ropts_t o;
    tool_conn_t conn;
    mongoc_client_t *c;
    mongoc_write_concern_t *wc;
    rintent_t *in;
    int n;
    int64_t total_docs, total_failed;
    char *oplog_path;          /* --oplogReplay: the dump's oplog.bson[.gz] (or --oplogFile) */
    bool oplog_gzip;
} restore_t;

/* Parse a metadata JSON text into it->meta; 0 or -1. */
int restore_parse_meta(rintent_t *it, const char *json, const char *origin);
/* Create the collection or view (dropping it first with --drop); 0 or -1. */
int restore_create(restore_t *r, rintent_t *it);
/* Add one document (copied) to the intent's batch, sending full batches; 0 or -1
   (with --stopOnError, or when the server cannot be written at all). */
int restore_doc(restore_t *r, rintent_t *it, const bson_t *doc);
/* Send what is batched, then build the indexes; marks the intent done.  0 or -1. */
int restore_finish(restore_t *r, rintent_t *it);
/* Write the collected users or roles into admin.system.*; 0 or -1. */
int restore_users(restore_t *r, rintent_t *it);

/* --oplogReplay (restore_oplog.c): apply the oplog entries read from in, in order, each
   before --oplogLimit; what names the source in messages.  0 or -1. */
int restore_oplog_replay(restore_t *r, tool_stream_t *in, const char *what);
/* Parse "seconds[:ordinal]" (--oplogLimit); 0 or -1 (message printed). */
int restore_parse_ts(const char *s, uint32_t *tp, uint32_t *ip);

#endif
