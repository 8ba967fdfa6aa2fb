/*
 * props.c: property sets and Java-properties parsing for sable-bench.
 *
 * Values are kept as strings and converted on read, as YCSB does; a numeric
 * reader never aborts, it reports a bad value to its caller.
 */
#include "props.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void bench_props_init(bench_props_t *p) { memset(p, 0, sizeof(*p)); }

void bench_props_free(bench_props_t *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->names[i]);
        free(p->values[i]);
    }
    free(p->names);
    free(p->values);
    memset(p, 0, sizeof(*p));
}

static long props_find(const bench_props_t *p, const char *name)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->names[i], name) == 0)
            return (long)i;
    return -1;
}

int bench_props_set(bench_props_t *p, const char *name, const char *value)
{
    char *v = strdup(value);
    if (v == NULL)
        return -1;
    long i = props_find(p, name);
    if (i >= 0) {
        free(p->values[i]);
        p->values[i] = v;
        return 0;
    }
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        char **nn = realloc(p->names, cap * sizeof(*nn));
        if (nn == NULL)
            goto oom;
        p->names = nn;
        char **nv = realloc(p->values, cap * sizeof(*nv));
        if (nv == NULL)
            goto oom;
        p->values = nv;
        p->cap = cap;
    }
    p->names[p->n] = strdup(name);
    if (p->names[p->n] == NULL)
        goto oom;
    p->values[p->n++] = v;
    return 0;
oom:
    free(v);
    return -1;
}

int bench_props_set_pair(bench_props_t *p, const char *pair)
{
    const char *eq = strchr(pair, '=');
    if (eq == NULL || eq == pair)
        return -1;
    char name[256];
    size_t len = (size_t)(eq - pair);
    if (len >= sizeof(name))
        return -1;
    memcpy(name, pair, len);
    name[len] = '\0';
    return bench_props_set(p, name, eq + 1);
}

int bench_props_merge(bench_props_t *dst, const bench_props_t *src)
{
    for (size_t i = 0; i < src->n; i++)
        if (bench_props_set(dst, src->names[i], src->values[i]) != 0)
            return -1;
    return 0;
}

/* Trim trailing spaces in place. */
static void rtrim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
}

/* Handle one logical line (continuations already joined). */
static int props_line(bench_props_t *p, char *line, int lineno, char *err, size_t errlen)
{
    while (isspace((unsigned char)*line))
        line++;
    if (*line == '\0' || *line == '#' || *line == '!')
        return 0;
    char *k = line;
    while (*line && *line != '=' && *line != ':' && !isspace((unsigned char)*line))
        line++;
    char *kend = line;
    while (isspace((unsigned char)*line))
        line++;
    if (*line == '=' || *line == ':')
        line++;
    while (isspace((unsigned char)*line))
        line++;
    *kend = '\0';
    rtrim(line);
    if (bench_props_set(p, k, line) != 0) {
        snprintf(err, errlen, "line %d: out of memory", lineno);
        return -1;
    }
    return 0;
}

int bench_props_parse(bench_props_t *p, const char *text, char *err, size_t errlen)
{
    size_t cap = strlen(text) + 1;
    char *buf = malloc(cap);
    if (buf == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t len = 0;
    int lineno = 0, rc = 0;
    const char *s = text;
    while (*s && rc == 0) {
        const char *nl = strchr(s, '\n');
        size_t n = nl ? (size_t)(nl - s) : strlen(s);
        lineno++;
        if (n > 0 && s[n - 1] == '\r')
            n--;
        /* A line ending in an odd number of backslashes continues on the next. */
        size_t bs = 0;
        while (bs < n && s[n - 1 - bs] == '\\')
            bs++;
        bool cont = (bs % 2) == 1;
        const char *start = s;
        if (len > 0) /* continuation lines drop their leading white space */
            while (start < s + n && isspace((unsigned char)*start))
                start++;
        size_t take = (size_t)(s + n - start) - (cont ? 1 : 0);
        memcpy(buf + len, start, take);
        len += take;
        if (!cont) {
            buf[len] = '\0';
            rc = props_line(p, buf, lineno, err, errlen);
            len = 0;
        }
        s = nl ? nl + 1 : s + strlen(s);
    }
    if (rc == 0 && len > 0) {
        buf[len] = '\0';
        rc = props_line(p, buf, lineno, err, errlen);
    }
    free(buf);
    return rc;
}

int bench_props_load_file(bench_props_t *p, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *t = realloc(text, cap);
            if (t == NULL) {
                snprintf(err, errlen, "out of memory reading %s", path);
                rc = -1;
                goto done;
            }
            text = t;
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "cannot read %s", path);
        rc = -1;
        goto done;
    }
    text[len] = '\0';
    rc = bench_props_parse(p, text, err, errlen);
done:
    free(text);
    fclose(f);
    return rc;
}

const char *bench_props_get(const bench_props_t *p, const char *name)
{
    long i = props_find(p, name);
    return i >= 0 ? p->values[i] : NULL;
}

bool bench_props_has(const bench_props_t *p, const char *name) { return props_find(p, name) >= 0; }

const char *bench_props_str(const bench_props_t *p, const char *name, const char *dflt)
{
    const char *v = bench_props_get(p, name);
    return v ? v : dflt;
}

int64_t bench_props_int(const bench_props_t *p, const char *name, int64_t dflt, bool *bad)
{
    const char *v = bench_props_get(p, name);
    if (v == NULL)
        return dflt;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || errno != 0) {
        if (bad)
            *bad = true;
        return dflt;
    }
    return (int64_t)x;
}

double bench_props_double(const bench_props_t *p, const char *name, double dflt, bool *bad)
{
    const char *v = bench_props_get(p, name);
    if (v == NULL)
        return dflt;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0) {
        if (bad)
            *bad = true;
        return dflt;
    }
    return x;
}

bool bench_props_bool(const bench_props_t *p, const char *name, bool dflt)
{
    const char *v = bench_props_get(p, name);
    if (v == NULL)
        return dflt;
    return strcasecmp(v, "true") == 0; /* Java's Boolean.parseBoolean */
}
