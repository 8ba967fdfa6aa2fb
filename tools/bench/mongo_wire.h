/*
 * mongo_wire.h: a thread's own OP_MSG connection for the mongodb binding.
 * libmongoc connects and authenticates; commands then go straight to the
 * socket (see mongo_wire.c).  Not thread-safe: one thread per connection.
 */
#ifndef SBENCH_MONGO_WIRE_H
#define SBENCH_MONGO_WIRE_H

#include <mongoc/mongoc.h>
#include <stdbool.h>

typedef struct mongo_wire mongo_wire_t;

/* From now on connect to host:port through the Unix-domain socket
 * <dir>/mongodb-<port>.sock (mongod's name for it) instead of TCP; NULL: TCP.
 * dir is not copied.  Set before the first mongo_wire_open. */
void mongo_wire_set_unix_dir(const char *dir);
/* Whether uri can use a direct connection: plain TCP, reads from the primary. */
bool mongo_wire_usable(const mongoc_uri_t *uri);
/*
 * Connect, authenticate and select the primary; NULL with error set on
 * failure.  With pool (made from uri), the pool names the primary and the
 * connection goes to it directly (see mongo_wire.c).
 */
mongo_wire_t *mongo_wire_open(const mongoc_uri_t *uri, mongoc_client_pool_t *pool, const char *appname,
                              bson_error_t *error);
/* The connection's libmongoc client (for sessions; never for commands). */
mongoc_client_t *mongo_wire_client(mongo_wire_t *w);
/*
 * Send cmd (which carries its own $db).  With more_to_come nothing comes
 * back (unacknowledged writes); otherwise *reply is set to the reply, a view
 * valid until the next command.  False with error set when the connection
 * failed: it is then broken for good (mongo_wire_broken) and must be closed.
 */
bool mongo_wire_command(mongo_wire_t *w, const bson_t *cmd, bool more_to_come, bson_t *reply,
                        bson_error_t *error);
bool mongo_wire_broken(const mongo_wire_t *w);
/* Stop using the connection (its server is no longer primary): broken from now on. */
void mongo_wire_drop(mongo_wire_t *w);
void mongo_wire_close(mongo_wire_t *w);

#endif
