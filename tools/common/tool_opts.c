/*
 * tool_opts.c: command-line options the way mongo-tools reads them (--name V,
 * --name=V, -x V, -xV, repeated options, --help, --version), the messages every
 * tool prints, and the connection options shared by all four tools.
 */
#include "tool.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *tool_prog = "sable-tool";
bool tool_quiet;

int tool_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    flockfile(stderr); /* one line, whole, when several threads report */
    fprintf(stderr, "%s: ", tool_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    funlockfile(stderr);
    va_end(ap);
    return -1;
}

void tool_log(const char *fmt, ...)
{
    if (tool_quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    flockfile(stderr); /* one line, whole, when several threads report */
    fprintf(stderr, "%s: ", tool_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    funlockfile(stderr);
    va_end(ap);
}

void tool_strs_push(tool_strs_t *s, const char *str)
{
    s->v = realloc(s->v, sizeof(char *) * (size_t)(s->n + 1));
    s->v[s->n++] = strdup(str);
}

void tool_strs_free(tool_strs_t *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

static bool verbose_flag, help_flag, version_flag;

static const tool_opt_t *conn_opts(tool_conn_t *c)
{
    static tool_opt_t o[20];
    tool_opt_t t[] = {
        {"uri", 0, TO_STR, &c->uri, "mongodb:// connection string"},
        {"host", 'h', TO_STR, &c->host, "host[:port] to connect to (default 127.0.0.1)"},
        {"port", 0, TO_INT, &c->port, "port (default 27017)"},
        {"username", 'u', TO_STR, &c->username, "user name"},
        {"password", 'p', TO_STR, &c->password, "password"},
        {"authenticationDatabase", 0, TO_STR, &c->auth_db, "database holding the user"},
        {"authenticationMechanism", 0, TO_STR, &c->mechanism, "SCRAM-SHA-1 or SCRAM-SHA-256"},
        {"ssl", 0, TO_FLAG, &c->tls, NULL},
        {"tls", 0, TO_FLAG, &c->tls, "connect with TLS"},
        {"sslCAFile", 0, TO_STR, &c->tls_ca, NULL},
        {"tlsCAFile", 0, TO_STR, &c->tls_ca, "CA certificates (PEM)"},
        {"sslPEMKeyFile", 0, TO_STR, &c->tls_cert, NULL},
        {"tlsCertificateKeyFile", 0, TO_STR, &c->tls_cert, "client certificate and key (PEM)"},
        {"sslAllowInvalidCertificates", 0, TO_FLAG, &c->tls_insecure, NULL},
        {"tlsInsecure", 0, TO_FLAG, &c->tls_insecure, "do not check the server's certificate"},
        {"verbose", 'v', TO_FLAG, &verbose_flag, NULL},
        {"quiet", 0, TO_FLAG, &tool_quiet, "no progress or information lines"},
        {"help", 0, TO_FLAG, &help_flag, "this text"},
        {"version", 0, TO_FLAG, &version_flag, "the tool's version"},
        {NULL, 0, 0, NULL, NULL},
    };
    memcpy(o, t, sizeof(t));
    return o;
}

static const tool_opt_t *find_long(const tool_opt_t *tabs[2], const char *name, size_t len)
{
    for (int t = 0; t < 2; t++)
        for (const tool_opt_t *o = tabs[t]; o->name != NULL; o++)
            if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
                return o;
    return NULL;
}

static const tool_opt_t *find_short(const tool_opt_t *tabs[2], char c)
{
    for (int t = 0; t < 2; t++)
        for (const tool_opt_t *o = tabs[t]; o->name != NULL; o++)
            if (o->shortname == c)
                return o;
    return NULL;
}

static int set_value(const tool_opt_t *o, const char *v)
{
    switch (o->kind) {
    case TO_FLAG:
        if (v != NULL && strcmp(v, "false") == 0)
            *(bool *)o->dest = false;
        else if (v == NULL || strcmp(v, "true") == 0)
            *(bool *)o->dest = true;
        else
            return tool_err("error parsing command line options: --%s takes no value", o->name);
        return 0;
    case TO_STR:
    case TO_OPTSTR:
        *(const char **)o->dest = v;
        return 0;
    case TO_INT: {
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (errno != 0 || *v == '\0' || *end != '\0')
            return tool_err("error parsing command line options: invalid number for --%s: '%s'",
                            o->name, v);
        *(long *)o->dest = n;
        return 0;
    }
    case TO_MULTI:
        tool_strs_push((tool_strs_t *)o->dest, v);
        return 0;
    }
    return -1;
}

static void print_help(const char *usage, const tool_opt_t *tabs[2])
{
    fprintf(stdout, "%s\n", usage);
    for (int t = 0; t < 2; t++) {
        fputs(t == 0 ? "\noptions:\n" : "\nconnection and general options:\n", stdout);
        for (const tool_opt_t *o = tabs[t]; o->name != NULL; o++) {
            if (o->help == NULL)
                continue;
            char left[64];
            snprintf(left, sizeof(left), "%s%c%s--%s%s", o->shortname ? "-" : "",
                     o->shortname ? o->shortname : ' ', o->shortname ? ", " : "  ", o->name,
                     o->kind == TO_FLAG ? "" : o->kind == TO_OPTSTR ? "[=FILE]" : "=V");
            fprintf(stdout, "  %-34s %s\n", o->shortname ? left : left + 1, o->help);
        }
    }
}

int tool_opts_parse(const char *prog, const char *usage, int argc, char **argv,
                    const tool_opt_t *opts, tool_conn_t *conn, tool_strs_t *positional)
{
    tool_prog = prog;
    const tool_opt_t *tabs[2] = {opts, conn_opts(conn)};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const tool_opt_t *o = NULL;
        const char *v = NULL;
        if (a[0] == '-' && a[1] == '-' && a[2] != '\0') {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
            o = find_long(tabs, a + 2, len);
            if (o == NULL)
                return tool_err("error parsing command line options: unknown option \"%.*s\"",
                                (int)len, a + 2);
            if (eq != NULL)
                v = eq + 1;
        } else if (a[0] == '-' && a[1] != '\0' && a[1] != '-') {
            o = find_short(tabs, a[1]);
            if (o == NULL)
                return tool_err("error parsing command line options: unknown option \"%c\"",
                                a[1]);
            if (a[2] != '\0') {
                if (o->kind == TO_FLAG) { /* -vvv */
                    bool ok = true;
                    for (const char *p = a + 1; *p; p++)
                        ok = ok && *p == a[1];
                    if (!ok)
                        return tool_err("error parsing command line options: bad option '%s'",
                                        a);
                } else {
                    v = a[2] == '=' ? a + 3 : a + 2;
                }
            }
        } else {
            if (positional == NULL)
                return tool_err("error parsing command line options: unexpected argument '%s'",
                                a);
            tool_strs_push(positional, a);
            continue;
        }
        if (v == NULL && (o->kind == TO_STR || o->kind == TO_INT || o->kind == TO_MULTI)) {
            if (i + 1 >= argc)
                return tool_err("error parsing command line options: expected an argument "
                                "for --%s",
                                o->name);
            v = argv[++i];
        }
        if (v == NULL && o->kind == TO_OPTSTR)
            v = "-";
        if (set_value(o, v) != 0)
            return -1;
    }
    if (help_flag) {
        print_help(usage, tabs);
        return 1;
    }
    if (version_flag) {
        printf("%s version: 100.9.4-sable (Sable's own, mongo-tools 100.x compatible)\n", prog);
        return 1;
    }
    return 0;
}
