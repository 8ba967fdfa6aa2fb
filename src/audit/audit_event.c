/*
 * audit_event.c: an audit event's two forms, built from its parts (atype,
 * ts, the client, param, result): the BSON document (the BSON format, and
 * what the filter sees, with only the fields the filter names) written by
 * hand into a stack buffer, and the JSON line (the JSON format) written
 * straight into an audit buffer, with a thread's repeated head remembered.
 *
 * What must stay true: both forms hold the same fields in the same order
 * (MongoDB's event shape); a command's top-level "pwd" is written as "xxx",
 * and a command larger than AUDIT_ARGS_MAX as {"$truncated": <size>}; on
 * allocation failure oom is set and nothing else is promised of the bytes.
 */
#include "audit/audit.h"
#include "audit/audit_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- building an event ------------------------------------------------------ */

/* "1.2.3.4:5" or "[::1]:5" split into the ip (without brackets) and the port. */
static void split_addr(const char *addr, const char **ip, size_t *iplen, int *port)
{
    const char *colon = strrchr(addr, ':');
    size_t n = colon != NULL ? (size_t)(colon - addr) : strlen(addr);
    *ip = addr;
    if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']') {
        (*ip)++;
        n -= 2;
    }
    *iplen = n;
    *port = colon != NULL ? atoi(colon + 1) : -1;
}

static void json_addr(audit_buf_t *b, const char *key, const char *addr)
{
    audit_buf_puts(b, key);
    if (addr == NULL) {
        audit_buf_puts(b, "{}");
        return;
    }
    if (addr[0] == '/') { /* a Unix-domain socket: {unix: <its path>} */
        audit_buf_puts(b, "{\"unix\":");
        audit_json_str(b, addr, strlen(addr));
        audit_buf_puts(b, "}");
        return;
    }
    const char *ip;
    size_t n;
    int port;
    char tmp[24];
    split_addr(addr, &ip, &n, &port);
    audit_buf_puts(b, "{\"ip\":");
    audit_json_str(b, ip, n);
    if (port >= 0) {
        snprintf(tmp, sizeof(tmp), ",\"port\":%d", port);
        audit_buf_puts(b, tmp);
    }
    audit_buf_puts(b, "}");
}
/* The slow half of eb_reserve: move to (or grow on) the heap. */
static bool eb_grow(ev_buf_t *b, size_t n)
{
    if (b->oom)
        return false;
    size_t cap = b->cap * 2 > b->len + n ? b->cap * 2 : b->len + n;
    uint8_t *p = b->heap ? realloc(b->p, cap) : malloc(cap);
    if (p == NULL) {
        b->oom = true;
        return false;
    }
    if (!b->heap)
        memcpy(p, b->p, b->len);
    b->p = p;
    b->cap = cap;
    b->heap = true;
    return true;
}

/* Room for n more bytes (none once oom: cap stops growing). */
static inline bool eb_reserve(ev_buf_t *b, size_t n)
{
    return (b->cap - b->len >= n && !b->oom) || eb_grow(b, n);
}

static inline void eb_put(ev_buf_t *b, const void *data, size_t n)
{
    if (eb_reserve(b, n)) {
        memcpy(b->p + b->len, data, n);
        b->len += n;
    }
}

static inline void le32(uint8_t *p, uint32_t u)
{
    p[0] = (uint8_t)u;
    p[1] = (uint8_t)(u >> 8);
    p[2] = (uint8_t)(u >> 16);
    p[3] = (uint8_t)(u >> 24);
}

static inline void eb_i32(ev_buf_t *b, int32_t v)
{
    if (eb_reserve(b, 4)) {
        le32(b->p + b->len, (uint32_t)v);
        b->len += 4;
    }
}

/* The element's type byte and key (inline: the keys are constants). */
static inline void eb_key(ev_buf_t *b, uint8_t type, const char *key)
{
    size_t kn = strlen(key) + 1;
    if (eb_reserve(b, 1 + kn)) {
        b->p[b->len] = type;
        memcpy(b->p + b->len + 1, key, kn);
        b->len += 1 + kn;
    }
}

/* Start a document (its length is patched by eb_end); returns its offset. */
static inline size_t eb_begin(ev_buf_t *b)
{
    size_t at = b->len;
    eb_i32(b, 0);
    return at;
}

static inline void eb_end(ev_buf_t *b, size_t at)
{
    if (eb_reserve(b, 1)) {
        b->p[b->len++] = 0;
        le32(b->p + at, (uint32_t)(b->len - at));
    }
}

/* A string element, reserved and written at once. */
static inline void eb_utf8(ev_buf_t *b, const char *key, const char *s, size_t n)
{
    size_t kn = strlen(key) + 1;
    if (eb_reserve(b, 6 + kn + n)) {
        uint8_t *o = b->p + b->len;
        o[0] = BSON_TYPE_UTF8;
        memcpy(o + 1, key, kn);
        le32(o + 1 + kn, (uint32_t)n + 1);
        memcpy(o + 5 + kn, s, n);
        o[5 + kn + n] = 0;
        b->len += 6 + kn + n;
    }
}

static void eb_addr(ev_buf_t *b, const char *key, const char *addr)
{
    eb_key(b, BSON_TYPE_DOCUMENT, key);
    size_t at = eb_begin(b);
    if (addr != NULL && addr[0] == '/') {
        eb_utf8(b, "unix", addr, strlen(addr)); /* a Unix-domain socket's path */
    } else if (addr != NULL) {
        const char *ip;
        size_t n;
        int port;
        split_addr(addr, &ip, &n, &port);
        eb_utf8(b, "ip", ip, n);
        if (port >= 0) {
            eb_key(b, BSON_TYPE_INT32, "port");
            eb_i32(b, port);
        }
    }
    eb_end(b, at);
}

/* Commands larger than this are recorded with args {$truncated: <size>}. */
#define AUDIT_ARGS_MAX (64 * 1024)

/* args of a command for the BSON event: the command itself, or in copy the
 * command with its password replaced, or {$truncated: <size>}. */
static const bson_t *bson_args(const ev_param_t *pm, bson_t *copy)
{
    bson_iter_t it;
    const bson_t *cmd = pm->args;
    if (!pm->cmd_args)
        return cmd;
    if (cmd->len > AUDIT_ARGS_MAX) {
        BSON_APPEND_INT32(copy, "$truncated", (int32_t)cmd->len);
        return copy;
    }
    if (!sbl_audit_doc_has_key(cmd, "pwd") || !bson_iter_init(&it, cmd))
        return cmd;
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), "pwd") == 0)
            BSON_APPEND_UTF8(copy, "pwd", "xxx");
        else
            sbl_append_iter(copy, NULL, 0, &it);
    }
    return copy;
}

/*
 * The event as a BSON document into b (the BSON format, and what the
 * filter sees): only the fields in mask (a filter's result depends only on
 * the fields it names), in the event's order; args only with EV_ARGS.
 */
void audit_build_event(ev_buf_t *b, unsigned mask, const char *atype, int64_t ts,
                       const sbl_audit_client_t *c, const ev_param_t *pm, int result)
{
    size_t at = eb_begin(b);
    if (mask & EV_ATYPE)
        eb_utf8(b, "atype", atype, strlen(atype));
    if (mask & EV_TS) {
        uint64_t u = (uint64_t)ts;
        uint8_t le[8];
        for (int i = 0; i < 8; i++)
            le[i] = (uint8_t)(u >> (8 * i));
        eb_key(b, BSON_TYPE_DATE_TIME, "ts");
        eb_put(b, le, 8);
    }
    if ((mask & EV_UUID) && c->uuid != NULL) {
        uint8_t sub = BSON_SUBTYPE_UUID;
        eb_key(b, BSON_TYPE_BINARY, "uuid");
        eb_i32(b, 16);
        eb_put(b, &sub, 1);
        eb_put(b, c->uuid, 16);
    }
    if (mask & EV_LOCAL)
        eb_addr(b, "local", c->local);
    if (mask & EV_REMOTE)
        eb_addr(b, "remote", c->remote);
    if (mask & EV_USERS) {
        eb_key(b, BSON_TYPE_ARRAY, "users");
        size_t arr = eb_begin(b);
        if (c->user != NULL) {
            const char *db = c->user_db != NULL ? c->user_db : "admin";
            eb_key(b, BSON_TYPE_DOCUMENT, "0");
            size_t u = eb_begin(b);
            eb_utf8(b, "user", c->user, strlen(c->user));
            eb_utf8(b, "db", db, strlen(db));
            eb_end(b, u);
        }
        eb_end(b, arr);
    }
    if (mask & EV_ROLES) {
        eb_key(b, BSON_TYPE_ARRAY, "roles");
        if (c->roles != NULL)
            eb_put(b, bson_get_data(c->roles), c->roles->len);
        else
            eb_end(b, eb_begin(b));
    }
    if (mask & EV_PARAM) {
        eb_key(b, BSON_TYPE_DOCUMENT, "param");
        size_t p = eb_begin(b);
        if (pm->doc != NULL && pm->doc->len > 5)
            eb_put(b, bson_get_data(pm->doc) + 4, pm->doc->len - 5);
        if (pm->command != NULL) {
            eb_utf8(b, "command", pm->command, strlen(pm->command));
            eb_utf8(b, "ns", pm->ns, strlen(pm->ns));
        }
        if (pm->args != NULL && (mask & EV_ARGS)) {
            bson_t copy = BSON_INITIALIZER;
            const bson_t *args = bson_args(pm, &copy);
            eb_key(b, BSON_TYPE_DOCUMENT, "args");
            eb_put(b, bson_get_data(args), args->len);
            bson_destroy(&copy);
        }
        eb_end(b, p);
    }
    if (mask & EV_RESULT) {
        eb_key(b, BSON_TYPE_INT32, "result");
        eb_i32(b, result);
    }
    eb_end(b, at);
}

/* The client's part of a JSON event: ,"uuid":..,"local":..,"remote":..,"users":..,"roles":.. */
static void json_who(audit_buf_t *b, const sbl_audit_client_t *c)
{
    if (c->uuid != NULL) {
        bson_t tmp = BSON_INITIALIZER;
        bson_iter_t it;
        BSON_APPEND_BINARY(&tmp, "uuid", BSON_SUBTYPE_UUID, c->uuid, 16);
        audit_buf_puts(b, ",");
        if (bson_iter_init(&it, &tmp))
            audit_json_fields(b, &tmp);
        bson_destroy(&tmp);
    }
    json_addr(b, ",\"local\":", c->local);
    json_addr(b, ",\"remote\":", c->remote);
    audit_buf_puts(b, ",\"users\":[");
    if (c->user != NULL) {
        audit_buf_puts(b, "{\"user\":");
        audit_json_str(b, c->user, strlen(c->user));
        audit_buf_puts(b, ",\"db\":");
        const char *db = c->user_db != NULL ? c->user_db : "admin";
        audit_json_str(b, db, strlen(db));
        audit_buf_puts(b, "}");
    }
    audit_buf_puts(b, "],\"roles\":");
    if (c->roles != NULL)
        audit_json_doc(b, c->roles, true);
    else
        audit_buf_puts(b, "[]");
}

size_t sbl_audit_who_json(const sbl_audit_client_t *c, char *out, size_t cap)
{
    audit_buf_t b = {0};
    json_who(&b, c);
    size_t n = !b.oom && b.len <= cap ? b.len : 0;
    if (n > 0)
        memcpy(out, b.data, n);
    free(b.data);
    return n;
}

/*
 * The JSON around an authCheck's ts and client, the same for a thread's
 * consecutive events while atype, command and ns stay the same (a client
 * repeating one operation on one collection): {"atype":<atype>,"ts": and
 * ,"param":{"command":<command>,"ns":<ns>, remembered per thread for the
 * last (atype, command, ns), compared by content.
 */
#define HEAD_KEY 400
#define HEAD_JSON 1024
static _Thread_local struct {
    bool valid;
    size_t alen, clen;        /* atype's and command's lengths in key */
    size_t head_len, mid_len; /* json: the head, then the middle */
    char key[HEAD_KEY];       /* atype \0 command \0 ns \0 */
    char json[HEAD_JSON];
} tl_head;

static bool head_memo_hit(const char *atype, const ev_param_t *pm)
{
    const char *k = tl_head.key;
    return tl_head.valid && strcmp(atype, k) == 0 && strcmp(pm->command, k + tl_head.alen + 1) == 0 &&
           strcmp(pm->ns, k + tl_head.alen + tl_head.clen + 2) == 0;
}

static void head_memo_set(const char *atype, const ev_param_t *pm, const char *head,
                          size_t head_len, const char *mid, size_t mid_len)
{
    size_t al = strlen(atype), cl = strlen(pm->command), nl = strlen(pm->ns);
    tl_head.valid = false;
    if (al + cl + nl + 3 > HEAD_KEY || head_len + mid_len > HEAD_JSON)
        return;
    memcpy(tl_head.key, atype, al + 1);
    memcpy(tl_head.key + al + 1, pm->command, cl + 1);
    memcpy(tl_head.key + al + cl + 2, pm->ns, nl + 1);
    memcpy(tl_head.json, head, head_len);
    memcpy(tl_head.json + head_len, mid, mid_len);
    tl_head.alen = al;
    tl_head.clen = cl;
    tl_head.head_len = head_len;
    tl_head.mid_len = mid_len;
    tl_head.valid = true;
}

/* One JSON event line appended to b. */
void audit_json_event(audit_buf_t *b, const char *atype, int64_t ts,
                      const sbl_audit_client_t *c, const ev_param_t *pm, int result)
{
    /* authCheck: param has only command, ns and args */
    bool cmd_only = pm->command != NULL && (pm->doc == NULL || bson_empty(pm->doc));
    bool hit = cmd_only && head_memo_hit(atype, pm);
    size_t head = b->len;
    if (hit) {
        audit_buf_put(b, tl_head.json, tl_head.head_len);
    } else {
        audit_buf_puts(b, "{\"atype\":");
        audit_json_str(b, atype, strlen(atype));
        audit_buf_puts(b, ",\"ts\":");
    }
    size_t head_end = b->len;
    audit_json_date(b, ts);
    if (c->who_json != NULL)
        audit_buf_put(b, c->who_json, c->who_json_len);
    else
        json_who(b, c);
    bool sep = true;
    if (hit) {
        audit_buf_put(b, tl_head.json + tl_head.head_len, tl_head.mid_len);
    } else {
        size_t mid = b->len;
        audit_buf_puts(b, ",\"param\":{");
        sep = pm->doc != NULL && !bson_empty(pm->doc);
        if (sep)
            audit_json_fields(b, pm->doc);
        if (pm->command != NULL) {
            audit_buf_puts(b, sep ? ",\"command\":" : "\"command\":");
            audit_json_str(b, pm->command, strlen(pm->command));
            audit_buf_puts(b, ",\"ns\":");
            audit_json_str(b, pm->ns, strlen(pm->ns));
            sep = true;
        }
        if (cmd_only && !b->oom)
            head_memo_set(atype, pm, b->data + head, head_end - head, b->data + mid,
                          b->len - mid);
    }
    if (pm->args != NULL) {
        audit_buf_puts(b, sep ? ",\"args\":" : "\"args\":");
        if (!pm->cmd_args) {
            audit_json_doc(b, pm->args, false);
        } else if (pm->args->len > AUDIT_ARGS_MAX) {
            audit_buf_puts(b, "{\"$truncated\":");
            audit_json_int(b, pm->args->len);
            audit_buf_puts(b, "}");
        } else {
            audit_json_args(b, pm->args);
        }
    }
    audit_buf_puts(b, "},\"result\":");
    audit_json_int(b, result);
    audit_buf_puts(b, "}\n");
}
