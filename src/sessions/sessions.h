/*
 * sessions.h: logical sessions.  Every command a modern driver sends carries
 * an lsid ({id: <UUID>}); the server keeps a catalog of the sessions it has
 * seen (the "logical session cache"), each with its owner and the time it
 * was last used, so that sessions can be listed ($listLocalSessions), ended
 * (endSessions), killed with their cursors (killSessions, killAllSessions,
 * killAllSessionsByPattern), persisted in config.system.sessions and
 * expired after localLogicalSessionTimeoutMinutes (30) without use.
 *
 * This module is the catalog only: it knows no commands and writes no
 * collection.  The command layer (src/cmd/sessions_cmds.c) touches a session
 * per command, runs the session commands, kills the cursors, and persists
 * the catalog through ordinary internal commands.  Retryable writes and
 * transactions will keep their per-session state here too (issue 26).
 *
 * What must stay true: a session is identified by (id, uid), as mongod does:
 * uid is the SHA-256 of the owner's "user@db" (of "" when unauthenticated),
 * so two users presenting the same id have two sessions.
 */
#ifndef SBL_SESSIONS_H
#define SBL_SESSIONS_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/errors.h"

#define SBL_LSESS_TIMEOUT_MINUTES 30

typedef struct sbl_lsid {
    uint8_t id[16];  /* the UUID the driver chose */
    uint8_t uid[32]; /* SHA-256 of the owner's "user@db" */
} sbl_lsid_t;

/* What the catalog knows of one session. */
typedef struct sbl_lsess_info {
    sbl_lsid_t lsid;
    int64_t last_use_ms; /* wall clock */
    char user[160];      /* "user@db", or "" when unauthenticated */
    int64_t txn_number;  /* the highest txnNumber an operation used (-1: none) */
    bool checked_out;    /* an operation with a txnNumber runs in it now */
} sbl_lsess_info_t;

/* uid for a user (user and db NULL or "": unauthenticated). */
void sbl_lsid_uid(const char *user, const char *db, uint8_t uid[32]);

/*
 * Parse an lsid value ({id: UUID} from a command, optionally with uid) for
 * the owner whose uid is given: a uid in the value must be that one
 * (Unauthorized 13 otherwise, as mongod refuses impersonation) unless
 * any_uid.  Errors in mongod's words: TypeMismatch (14) when it is not an
 * object or id is not binData, BadValue (2) when id is not a UUID, 40414
 * when id is missing, 40415 for an unknown field.  field names the argument
 * in messages ("lsid").
 */
int sbl_lsid_parse(const bson_iter_t *it, const char *field, const uint8_t owner_uid[32],
                   bool any_uid, sbl_lsid_t *out, sbl_err_t *err);

/* Append {id: UUID, uid: BinData} (the form $listLocalSessions shows as _id). */
void sbl_lsid_append(bson_t *doc, const char *key, const sbl_lsid_t *l);

/* Record a use of the session at now_ms, adding it to the catalog when new. */
void sbl_lsess_touch(const sbl_lsid_t *l, const char *user, int64_t now_ms);

/*
 * Retryable writes and transactions run one operation at a time per session
 * (mongod's session checkout): check the session out for an operation that
 * carries a txnNumber, waiting while another operation holds it; returns the
 * highest txnNumber used in it so far (-1: none).  Check it in when the
 * operation ends, with the txnNumber it used (kept when higher).
 */
int64_t sbl_lsess_checkout(const sbl_lsid_t *l, const char *user, int64_t now_ms);
void sbl_lsess_checkin(const sbl_lsid_t *l, int64_t txn_number);

/*
 * What the checked-out operation's layer keeps in the session between its
 * operations: bytes this module does not read (retryable writes keep their
 * last known version of the session's config.transactions record there, a
 * hint they check before use).  len 0: nothing kept.
 */
#define SBL_LSESS_STATE_MAX 448
typedef struct sbl_lsess_state {
    uint32_t len;
    _Alignas(8) uint8_t data[SBL_LSESS_STATE_MAX];
} sbl_lsess_state_t;
/* sbl_lsess_checkout, also copying the session's kept state to *state. */
int64_t sbl_lsess_checkout_state(const sbl_lsid_t *l, const char *user, int64_t now_ms,
                                 sbl_lsess_state_t *state);
/* sbl_lsess_checkin, keeping *state (NULL: forgetting what was kept). */
void sbl_lsess_checkin_state(const sbl_lsid_t *l, int64_t txn_number,
                             const sbl_lsess_state_t *state);

/* Remove the session from the catalog (endSessions); false when it was not there. */
bool sbl_lsess_end(const sbl_lsid_t *l);

/* Visit every session in the catalog (a snapshot: fn may call the functions
 * above).  fn returns false to stop. */
typedef bool (*sbl_lsess_visit_fn)(const sbl_lsess_info_t *s, void *arg);
void sbl_lsess_foreach(sbl_lsess_visit_fn fn, void *arg);

/* Remove the sessions last used before now_ms - timeout_ms, calling fn for
 * each (after it left the catalog); returns how many. */
size_t sbl_lsess_reap(int64_t now_ms, int64_t timeout_ms, sbl_lsess_visit_fn fn, void *arg);

/* Sessions ended since the last call (for config.system.sessions): fills at
 * most max into out and forgets them; returns how many. */
size_t sbl_lsess_take_ended(sbl_lsid_t *out, size_t max);

/* Sessions in the catalog now (serverStatus logicalSessionRecordCache.activeSessionsCount). */
size_t sbl_lsess_count(void);

/* Empty the catalog (shutdown, tests). */
void sbl_lsess_clear(void);

#endif
