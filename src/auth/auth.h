/*
 * auth.h: authentication and authorization, as MongoDB does them.
 *
 *  - SCRAM-SHA-1 and SCRAM-SHA-256 server conversations (RFC 5802 / 7677)
 *    on OpenSSL's PBKDF2, HMAC and SHA; SASLprep (RFC 4013, the subset
 *    documented in auth_scram.c) for SCRAM-SHA-256 passwords.
 *  - Credentials stored as MongoDB stores them: {iterationCount, salt,
 *    storedKey, serverKey} (base64); SCRAM-SHA-1's are derived from the hex
 *    MD5 of "user:mongo:password".  The password itself is never stored.
 *  - Users live in admin.system.users (_id "db.user") and user-defined roles
 *    in admin.system.roles (_id "db.role"); both are written through the
 *    storage write path.  Built-in roles are compiled in.
 *  - A user's privileges are resolved once (roles, inherited roles) into an
 *    sbl_authz_t; every change to users or roles bumps a generation number
 *    so holders know when to resolve again.
 */
#ifndef SBL_AUTH_H
#define SBL_AUTH_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/errors.h"
#include "storage/storage.h"

#define SBL_AUTH_USERS_NS "admin.system.users"
#define SBL_AUTH_ROLES_NS "admin.system.roles"

/* ---- configuration ---------------------------------------------------- */

/* Whether --auth / security.authorization: enabled is on (read from the server options). */
bool sbl_auth_enabled(void);

/* Generation of the users/roles data: bumped by every write to either. */
uint64_t sbl_auth_generation(void);
void sbl_auth_bump_generation(void);

/*
 * Where users and roles come from when they are not in this process's
 * storage: sable-router reads them from the config servers.  Once fn is set
 * every lookup of a user or a user-defined role (SCRAM, privilege
 * resolution) calls it instead of storage, and the sbl_session_t arguments
 * below may be NULL.  fn fills doc (initialised by fn when *foundp) with the
 * stored document of admin.system.users (roles false) or admin.system.roles.
 */
typedef int (*sbl_auth_lookup_fn)(bool roles, const char *db, const char *name, bson_t *doc,
                                  bool *foundp, sbl_err_t *err);
void sbl_auth_set_lookup(sbl_auth_lookup_fn fn);

/*
 * The connection string a cluster member uses to reach hosts ("h:p,..."):
 * with key (the keyFile's), as __system@local over SCRAM-SHA-256; without,
 * plain; opts are appended as URI options, and with TLS on member
 * connections the TLS options that make libmongoc's connections match
 * sbl_client_dial's (sbl_server_cluster_uri_opts).  False when buf is too
 * small.
 */
bool sbl_auth_cluster_uri(char *buf, size_t n, const char *key, const char *hosts,
                          const char *opts);

/* ---- SASLprep and credentials ------------------------------------------ */

/*
 * SASLprep (RFC 4013 subset, see auth_scram.c) of the UTF-8 string in.
 * On success *outp is a bson_malloc'd NUL-terminated string the caller
 * bson_free()s.  Prohibited or malformed input: BadValue.
 */
int sbl_saslprep(const char *in, char **outp, sbl_err_t *err);

/*
 * Build the credentials sub-document for user/password into out (initialised
 * by the caller): "SCRAM-SHA-1" when sha1, "SCRAM-SHA-256" when sha256, each
 * with a fresh random salt.  Returns 0 or an error (BadValue from SASLprep).
 */
int sbl_auth_make_credentials(const char *user, const char *password, bool sha1, bool sha256,
                              bson_t *out, sbl_err_t *err);

/*
 * Whether password is user@db's password, checked against the stored SCRAM
 * credentials (SHA-256 when the user has them, else SHA-1), for logins that
 * carry the password itself (the metrics port's HTTP basic auth).  *okp is
 * false for an unknown user.  Returns 0 or an error (BadValue from SASLprep).
 */
int sbl_auth_check_password(sbl_session_t *ss, const char *db, const char *user,
                            const char *password, bool *okp, sbl_err_t *err);

/* ---- SCRAM conversations ---------------------------------------------- */

typedef struct sbl_scram sbl_scram_t;

/*
 * Start a conversation for mechanism ("SCRAM-SHA-1" / "SCRAM-SHA-256") on
 * database db with the client-first message.  Looks the user up in
 * admin.system.users with ss; an unknown user (or one without credentials for
 * the mechanism) gets a fake conversation that fails only at the proof, so
 * replies never tell whether the user exists.  On success *convp (caller
 * frees with sbl_scram_free) and outp / outlenp (the server-first message,
 * bson_malloc'd) are set.  Errors: MechanismUnavailable (334) for
 * an unknown mechanism, BadValue for a malformed message.
 */
/* The SASL commands' fields, as saslStart/saslContinue carry them for
 * sabled and sable-router: the payload (binData, or a string), whether
 * options.skipEmptyExchange is set, and a reply's conversationId (always
 * SBL_SASL_CONVERSATION_ID), done and payload. */
#define SBL_SASL_CONVERSATION_ID 1
int sbl_sasl_payload(const bson_t *cmd, const uint8_t **datap, uint32_t *lenp, sbl_err_t *err);
bool sbl_sasl_skip_empty(const bson_t *cmd);
void sbl_sasl_append_reply(bson_t *r, bool done, const uint8_t *out, size_t len);
/* How long the reply to a failed authentication waits (sabled and
 * sable-router alike): 250 ms per failure on the connection so far
 * (failures >= 1), at most 3 s, so guessing passwords is slow. */
int sbl_auth_fail_delay_ms(int failures);

int sbl_scram_start(sbl_session_t *ss, const char *db, const char *mechanism,
                    const uint8_t *payload, size_t len, sbl_scram_t **convp, uint8_t **outp,
                    size_t *outlenp, sbl_err_t *err);

/*
 * The next client message.  Step 1 takes client-final and answers the server
 * signature ("v=..."); step 2 takes the empty message and answers nothing.
 * *donep is set when the conversation succeeded and is over (after step 1 when
 * skip_empty_exchange).  A wrong proof, wrong nonce or channel binding, or an
 * unknown user: AuthenticationFailed (18) "Authentication failed."; a
 * malformed message BadValue (2); a step past the end ProtocolError (17).
 * *outp (bson_malloc'd, may be empty) is set on success.
 */
int sbl_scram_step(sbl_scram_t *conv, const uint8_t *payload, size_t len, bool skip_empty_exchange,
                   uint8_t **outp, size_t *outlenp, bool *donep, sbl_err_t *err);

/* The conversation's user name, database and mechanism (valid until sbl_scram_free). */
const char *sbl_scram_user(const sbl_scram_t *conv);
const char *sbl_scram_db(const sbl_scram_t *conv);
const char *sbl_scram_mechanism(const sbl_scram_t *conv);
void sbl_scram_free(sbl_scram_t *conv);

/*
 * The client side of SCRAM-SHA-256, for a cluster member's own connections
 * (sable-router's direct shard connections as __system).  new: the
 * client-first message (*firstp, bson_malloc'd); step: the server-first
 * message in, the client-final out (*outp); verify: the server-final's
 * signature.  Errors: AuthenticationFailed for a bad server message.
 */
typedef struct sbl_scram_client sbl_scram_client_t;
int sbl_scram_client_new(const char *user, const char *password, sbl_scram_client_t **cp,
                         char **firstp, sbl_err_t *err);
int sbl_scram_client_step(sbl_scram_client_t *c, const uint8_t *in, size_t len, char **outp,
                          sbl_err_t *err);
int sbl_scram_client_verify(sbl_scram_client_t *c, const uint8_t *in, size_t len, sbl_err_t *err);
void sbl_scram_client_free(sbl_scram_client_t *c);
/* How many times a client derived its keys (PBKDF2): once per password,
 * salt and iteration count, then cached. */
int64_t sbl_scram_client_derivations(void);

/* ---- users and roles in storage ---------------------------------------- */

/* Look up user@db; *foundp tells; when found, doc (initialised here) is the
 * stored document, which the caller bson_destroy()s. */
int sbl_auth_user_get(sbl_session_t *ss, const char *db, const char *user, bson_t *doc,
                      bool *foundp, sbl_err_t *err);
/* Same for a user-defined role. */
int sbl_auth_role_get(sbl_session_t *ss, const char *db, const char *role, bson_t *doc,
                      bool *foundp, sbl_err_t *err);

/*
 * Insert (kind SBL_WRITE_INSERT, doc), replace (UPDATE, doc with the same
 * _id) or delete (DELETE, doc = the stored document) one document of
 * admin.system.users (roles == false) or admin.system.roles (roles == true),
 * in its own transaction; bumps the generation.  Insert of an existing _id:
 * DuplicateKey (11000).
 */
int sbl_auth_store_write(sbl_session_t *ss, bool roles, sbl_write_kind_t kind, const bson_t *doc,
                         sbl_err_t *err);

/* Visit the stored users (roles == false) or roles of db (all when db is NULL);
 * fn returns false to stop.  The document is valid only during the call. */
typedef bool (*sbl_auth_visit_fn)(const bson_t *doc, void *arg);
int sbl_auth_store_list(sbl_session_t *ss, bool roles, const char *db, sbl_auth_visit_fn fn,
                        void *arg, sbl_err_t *err);

/* Whether admin.system.users holds at least one user (the localhost exception
 * applies while it holds none).  Cached; refreshed when the generation moves. */
bool sbl_auth_has_users(sbl_session_t *ss);

/* ---- privileges -------------------------------------------------------- */

/* The id of a MongoDB action name ("find", "insert" ...), or -1 if unknown. */
int sbl_auth_action_id(const char *name);
/* Whether the action applies to the cluster resource (serverStatus, shutdown ...). */
bool sbl_auth_action_is_cluster(int action);
const char *sbl_auth_action_name(int action);

/* Whether role@db names a built-in role (admin-only roles only exist on admin). */
bool sbl_auth_builtin_role(const char *role, const char *db);

typedef struct sbl_authz sbl_authz_t;

/*
 * Resolve user@db's privileges: the direct roles of the stored user and
 * everything they inherit (built-in and user-defined).  A user that no longer
 * exists resolves to no privileges.  *authzp is freed with sbl_authz_free.
 */
int sbl_authz_resolve(sbl_session_t *ss, const char *db, const char *user, sbl_authz_t **authzp,
                      sbl_err_t *err);
void sbl_authz_free(sbl_authz_t *a);

/*
 * Whether a allows action on a resource: for cluster actions db/coll are
 * ignored; coll NULL means the database db itself; otherwise the collection
 * db.coll (system collections match only privileges naming them exactly).
 */
bool sbl_authz_allows(const sbl_authz_t *a, int action, const char *db, const char *coll);

/* Whether a may write where a pipeline's $out or $merge stages write (db,
 * or a stage's own {db, coll} / into), with mongod's actions: $out insert
 * and remove; $merge insert when whenNotMatched is insert (its default) and
 * update unless whenMatched is fail; bypassDocumentValidation too when
 * bypass (the command asks for it).  pipe is the command's pipeline field;
 * a malformed stage is allowed here (the stage itself refuses it).  On a
 * refusal *dbp is the target's database. */
bool sbl_authz_pipeline_writes(const sbl_authz_t *a, const char *db, const bson_iter_t *pipe,
                               bool bypass, const char **dbp);

/* Append every role a holds (direct and inherited) as {role, db} documents to
 * the array arr; and, when privs is not NULL, its privileges as MongoDB shows
 * them ({resource, actions}). */
void sbl_authz_append_roles(const sbl_authz_t *a, bson_t *arr);
void sbl_authz_append_privileges(const sbl_authz_t *a, bson_t *arr);

/*
 * Resolve a list of role names ([{role, db}] or ["name"] meaning default_db)
 * for rolesInfo / inheritance checks: appends every role reachable from the
 * list (including the list itself) to out as {role, db}; RoleNotFound (31)
 * for a missing one.  Detects cycles when cycle_role / cycle_db are given:
 * GraphContainsCycle (5) when that role is reachable.
 */
int sbl_auth_roles_closure(sbl_session_t *ss, const bson_t *roles_array, const char *default_db,
                           const char *cycle_role, const char *cycle_db, bson_t *out,
                           sbl_err_t *err);

/*
 * Parse and check a privileges array as createRole / grantPrivilegesToRole
 * take it ([{resource: {db, collection} | {cluster: true} | {anyResource: true},
 * actions: [names]}]): BadValue / FailedToParse for malformed input or an
 * unknown action.
 */
int sbl_auth_check_privileges(const bson_t *privs, sbl_err_t *err);

/* The privileges a built-in role grants, appended to arr as MongoDB shows them
 * (for rolesInfo showPrivileges).  Unknown role: nothing appended. */
void sbl_auth_builtin_privileges(const char *role, const char *db, bson_t *arr);


/* ---- signed $clusterTime (auth_ctime.c) --------------------------------- */

/*
 * The keys that sign cluster times on a set with a keyFile, as mongod's
 * admin.system.keys holds them ({_id: NumberLong, purpose: "HMAC", key:
 * BinData 20 bytes, expiresAt: Timestamp}).  The process keeps one cache:
 * a member's own keys, or on sable-router those of the config servers and
 * every shard.  A signature is HMAC-SHA1(key, the time with the low 16 bits
 * of its increment set, 8 bytes little-endian), as mongod's TimeProofService.
 */
#define SBL_CTIME_KEYS_NS "admin.system.keys"
#define SBL_CTIME_KEY_LEN 20
typedef struct sbl_ctime_key {
    int64_t id;
    uint8_t key[SBL_CTIME_KEY_LEN];
    uint64_t expires; /* expiresAt (seconds << 32 | increment) */
} sbl_ctime_key_t;

/* A key document; false when doc is not an HMAC key. */
bool sbl_ctime_key_parse(const bson_t *doc, sbl_ctime_key_t *k);
/* Replace the cache with keys[0..n). */
void sbl_ctime_keys_set(const sbl_ctime_key_t *keys, int n);
/* Keys valid after ts held (count) and the latest expiresAt among them. */
int sbl_ctime_keys_valid(uint64_t ts, uint64_t *newest);
/* Sign ts with the cached key that expires first after it: false when none. */
bool sbl_ctime_sign(uint64_t ts, uint8_t hash[SBL_CTIME_KEY_LEN], int64_t *key_id);
/* Append $clusterTime {clusterTime: ts, signature: {hash, keyId}} to r. */
void sbl_ctime_append(bson_t *r, uint64_t ts, const uint8_t hash[SBL_CTIME_KEY_LEN],
                      int64_t key_id);
/* A $clusterTime's time, hash and keyId (false: not one; hash NULL: unsigned). */
bool sbl_ctime_parse(const bson_iter_t *ct, uint64_t *ts, const uint8_t **hash,
                     int64_t *key_id);
/*
 * Check a client's $clusterTime as mongod's validator: a time at or before
 * last_valid passes; else a cached key with its keyId valid at the time
 * (reload, when not NULL, refreshes the cache at most every 500 ms on a
 * miss; KeyNotFound 211) whose signature matches (TimeProofMismatch 204).
 * A missing signature: NoSuchKey (4).
 */
int sbl_ctime_check(const bson_iter_t *ct, uint64_t last_valid, void (*reload)(void),
                    sbl_err_t *err);

#endif
