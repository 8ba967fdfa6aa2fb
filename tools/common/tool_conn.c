/*
 * tool_conn.c: the connection every tool opens (a connection string, or
 * --host/--port with -u/-p/--authenticationDatabase and TLS options, as
 * mongo-tools take them), checked with a ping so a bad address or a failed
 * authentication is reported before any work starts; --writeConcern; commands
 * whose failure is reported in the server's words.
 */
#include "tool.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static int build_uri(const tool_conn_t *c, mongoc_uri_t **urip)
{
    bson_error_t e;
    char buf[1024];
    *urip = NULL;
    if (c->uri != NULL && (c->host != NULL || c->port != 0))
        return tool_err("illegal argument combination: cannot specify --host or --port "
                        "together with --uri");
    if (c->uri != NULL) {
        snprintf(buf, sizeof(buf), "%s", c->uri);
    } else {
        const char *host = c->host ? c->host : "127.0.0.1";
        const char *slash = strchr(host, '/'); /* "rs0/h1:1,h2:2" */
        if (slash != NULL)
            host = slash + 1;
        bool has_port = strchr(host, ':') != NULL && host[0] != '[';
        if (has_port && c->port != 0)
            return tool_err("illegal argument combination: --host names a port and --port "
                            "gives another");
        if (has_port)
            snprintf(buf, sizeof(buf), "mongodb://%s/", host);
        else
            snprintf(buf, sizeof(buf), "mongodb://%s:%ld/", host, c->port ? c->port : 27017L);
    }
    mongoc_uri_t *uri = mongoc_uri_new_with_error(buf, &e);
    if (uri == NULL)
        return tool_err("error parsing the connection string '%s': %s", buf, e.message);
    if (c->username != NULL)
        mongoc_uri_set_username(uri, c->username);
    if (c->password != NULL)
        mongoc_uri_set_password(uri, c->password);
    if (c->auth_db != NULL)
        mongoc_uri_set_auth_source(uri, c->auth_db);
    if (c->mechanism != NULL)
        mongoc_uri_set_auth_mechanism(uri, c->mechanism);
    if (c->tls)
        mongoc_uri_set_option_as_bool(uri, MONGOC_URI_TLS, true);
    if (c->tls_insecure)
        mongoc_uri_set_option_as_bool(uri, MONGOC_URI_TLSINSECURE, true);
    if (c->tls_ca != NULL)
        mongoc_uri_set_option_as_utf8(uri, MONGOC_URI_TLSCAFILE, c->tls_ca);
    if (c->tls_cert != NULL)
        mongoc_uri_set_option_as_utf8(uri, MONGOC_URI_TLSCERTIFICATEKEYFILE, c->tls_cert);
    if (!mongoc_uri_has_option(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS))
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, 10000);
    if (!mongoc_uri_has_option(uri, MONGOC_URI_APPNAME))
        mongoc_uri_set_option_as_utf8(uri, MONGOC_URI_APPNAME, tool_prog);
    *urip = uri;
    return 0;
}

mongoc_client_t *tool_connect(const tool_conn_t *conn)
{
    static bool inited;
    if (!inited) {
        mongoc_init();
        inited = true;
    }
    mongoc_uri_t *uri;
    if (build_uri(conn, &uri) != 0)
        return NULL;
    bson_error_t e;
    mongoc_client_t *c = mongoc_client_new_from_uri_with_error(uri, &e);
    if (c == NULL) {
        tool_err("cannot use the connection string: %s", e.message);
        mongoc_uri_destroy(uri);
        return NULL;
    }
    mongoc_client_set_error_api(c, MONGOC_ERROR_API_VERSION_2);
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_INT32(&cmd, "ping", 1);
    bool ok = mongoc_client_command_simple(c, "admin", &cmd, NULL, &reply, &e);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    if (!ok) {
        char *s = mongoc_uri_get_string(uri) ? strdup(mongoc_uri_get_string(uri)) : NULL;
        /* never print a password back */
        if (s != NULL && mongoc_uri_get_password(uri) != NULL) {
            char *at = strchr(s, '@'), *scheme = strstr(s, "://");
            if (at != NULL && scheme != NULL)
                memmove(scheme + 3, at + 1, strlen(at + 1) + 1);
        }
        tool_err("cannot connect to %s: %s", s ? s : "the server", e.message);
        free(s);
        mongoc_client_destroy(c);
        mongoc_uri_destroy(uri);
        return NULL;
    }
    mongoc_uri_destroy(uri);
    return c;
}

int tool_write_concern(const tool_conn_t *conn, mongoc_write_concern_t **wcp)
{
    *wcp = NULL;
    const char *w = conn->write_concern;
    if (w == NULL)
        return 0;
    mongoc_write_concern_t *wc = mongoc_write_concern_new();
    while (isspace((unsigned char)*w))
        w++;
    if (*w == '{') {
        bson_t doc;
        if (tool_json_arg("--writeConcern", w, &doc) != 0) {
            mongoc_write_concern_destroy(wc);
            return -1;
        }
        bson_iter_t it;
        bson_iter_init(&it, &doc);
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strcmp(k, "w") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
                if (strcmp(bson_iter_utf8(&it, NULL), "majority") == 0)
                    mongoc_write_concern_set_w(wc, MONGOC_WRITE_CONCERN_W_MAJORITY);
                else
                    mongoc_write_concern_set_wtag(wc, bson_iter_utf8(&it, NULL));
            } else if (strcmp(k, "w") == 0 && BSON_ITER_HOLDS_NUMBER(&it)) {
                mongoc_write_concern_set_w(wc, (int32_t)bson_iter_as_int64(&it));
            } else if (strcmp(k, "j") == 0) {
                mongoc_write_concern_set_journal(wc, bson_iter_as_bool(&it));
            } else if (strcmp(k, "wtimeout") == 0 || strcmp(k, "wtimeoutMS") == 0) {
                mongoc_write_concern_set_wtimeout_int64(wc, bson_iter_as_int64(&it));
            } else if (strcmp(k, "fsync") == 0) {
                mongoc_write_concern_set_journal(wc, bson_iter_as_bool(&it));
            } else {
                bson_destroy(&doc);
                mongoc_write_concern_destroy(wc);
                return tool_err("--writeConcern: unknown field '%s'", k);
            }
        }
        bson_destroy(&doc);
    } else if (strcmp(w, "majority") == 0) {
        mongoc_write_concern_set_w(wc, MONGOC_WRITE_CONCERN_W_MAJORITY);
    } else {
        char *end;
        long n = strtol(w, &end, 10);
        if (*w == '\0' || *end != '\0' || n < 0) {
            mongoc_write_concern_destroy(wc);
            return tool_err("--writeConcern: expected 'majority', a number or a document, "
                            "got '%s'",
                            w);
        }
        mongoc_write_concern_set_w(wc, (int32_t)n);
    }
    *wcp = wc;
    return 0;
}

int tool_command(mongoc_client_t *c, const char *db, const bson_t *cmd, bson_t *reply,
                 const char *what)
{
    bson_error_t e;
    bson_t tmp;
    bool ok = mongoc_client_command_simple(c, db, cmd, NULL, reply ? reply : &tmp, &e);
    if (reply == NULL)
        bson_destroy(&tmp);
    if (!ok)
        return tool_err("%s: %s", what, e.message);
    return 0;
}

void tool_server_version(mongoc_client_t *c, char *buf, size_t len)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_error_t e;
    bson_iter_t it;
    snprintf(buf, len, "unknown");
    BSON_APPEND_INT32(&cmd, "buildInfo", 1);
    if (mongoc_client_command_simple(c, "admin", &cmd, NULL, &reply, &e) &&
        bson_iter_init_find(&it, &reply, "version") && BSON_ITER_HOLDS_UTF8(&it))
        snprintf(buf, len, "%s", bson_iter_utf8(&it, NULL));
    bson_destroy(&cmd);
    bson_destroy(&reply);
}

/* ---- namespaces ------------------------------------------------------------------- */

bool tool_wildcard_match(const char *p, const char *s)
{
    const char *star = NULL, *back = NULL;
    while (*s) {
        if (*p == '*') {
            star = p++;
            back = s;
        } else if (*p == *s) {
            p++, s++;
        } else if (star != NULL) {
            p = star + 1;
            s = ++back;
        } else {
            return false;
        }
    }
    while (*p == '*')
        p++;
    return *p == '\0';
}

void tool_ns_split(const char *ns, char *db, size_t dblen, char *coll, size_t colllen)
{
    const char *dot = strchr(ns, '.');
    if (dot == NULL) {
        snprintf(db, dblen, "%s", ns);
        snprintf(coll, colllen, "%s", "");
        return;
    }
    snprintf(db, dblen, "%.*s", (int)(dot - ns), ns);
    snprintf(coll, colllen, "%s", dot + 1);
}

bool tool_ns_selected(const tool_ns_t *ns, const char *db, const char *coll)
{
    char full[512];
    snprintf(full, sizeof(full), "%s.%s", db, coll);
    bool in = ns->include.n == 0;
    for (int i = 0; i < ns->include.n && !in; i++)
        in = tool_wildcard_match(ns->include.v[i], full);
    for (int i = 0; i < ns->exclude.n && in; i++)
        in = !tool_wildcard_match(ns->exclude.v[i], full);
    return in;
}

/* Variables $name$ in a pattern: counts them; -1 on an unterminated one. */
static int count_vars(const char *p)
{
    int n = 0;
    for (const char *d = strchr(p, '$'); d != NULL; d = strchr(d + 1, '$')) {
        const char *e = strchr(d + 1, '$');
        if (e == NULL)
            return -1;
        n++;
        d = e;
    }
    return n;
}

int tool_ns_check(const tool_ns_t *ns)
{
    if (ns->from.n != ns->to.n)
        return tool_err("--nsFrom and --nsTo must be given the same number of times (%d and %d)",
                        ns->from.n, ns->to.n);
    for (int i = 0; i < ns->from.n; i++) {
        int a = count_vars(ns->from.v[i]), b = count_vars(ns->to.v[i]);
        if (a < 0 || b < 0)
            return tool_err("--nsFrom '%s' / --nsTo '%s': a variable is not closed with '$'",
                            ns->from.v[i], ns->to.v[i]);
        if (a != b)
            return tool_err("--nsFrom '%s' and --nsTo '%s' must use the same variables",
                            ns->from.v[i], ns->to.v[i]);
    }
    return 0;
}

typedef struct capture {
    char name[64];
    const char *start;
    size_t len;
} capture_t;

/* Match s against pattern p where $x$ captures a run of characters (shortest first,
   backtracking) and '*' matches any run; literal characters must be equal. */
static bool match_vars(const char *p, const char *s, capture_t *caps, int *ncaps)
{
    if (*p == '\0')
        return *s == '\0';
    if (*p == '$') {
        const char *e = strchr(p + 1, '$');
        capture_t *c = &caps[*ncaps];
        snprintf(c->name, sizeof(c->name), "%.*s", (int)(e - p - 1), p + 1);
        (*ncaps)++;
        for (size_t n = 0; n <= strlen(s); n++) {
            c->start = s;
            c->len = n;
            if (match_vars(e + 1, s + n, caps, ncaps))
                return true;
        }
        (*ncaps)--;
        return false;
    }
    if (*p == '*') {
        for (size_t n = 0; n <= strlen(s); n++)
            if (match_vars(p + 1, s + n, caps, ncaps))
                return true;
        return false;
    }
    return *p == *s && match_vars(p + 1, s + 1, caps, ncaps);
}

int tool_ns_rename(const tool_ns_t *ns, const char *db, const char *coll, char *out,
                   size_t outlen)
{
    char full[512];
    snprintf(full, sizeof(full), "%s.%s", db, coll);
    for (int i = 0; i < ns->from.n; i++) {
        capture_t caps[16];
        int ncaps = 0;
        if (count_vars(ns->from.v[i]) > 16 || !match_vars(ns->from.v[i], full, caps, &ncaps))
            continue;
        size_t o = 0;
        for (const char *t = ns->to.v[i]; *t; t++) {
            if (*t == '$') {
                const char *e = strchr(t + 1, '$');
                size_t nl = (size_t)(e - t - 1);
                for (int k = 0; k < ncaps; k++) {
                    if (strlen(caps[k].name) == nl && strncmp(caps[k].name, t + 1, nl) == 0) {
                        if (o + caps[k].len >= outlen)
                            return -1;
                        memcpy(out + o, caps[k].start, caps[k].len);
                        o += caps[k].len;
                        break;
                    }
                }
                t = e;
            } else {
                if (o + 1 >= outlen)
                    return -1;
                out[o++] = *t;
            }
        }
        out[o] = '\0';
        return 0;
    }
    if (strlen(full) >= outlen)
        return -1;
    memcpy(out, full, strlen(full) + 1);
    return 0;
}
