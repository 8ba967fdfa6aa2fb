/*
 * import_csv.c: CSV (RFC 4180: quoted cells, "" for a quote, newlines inside
 * quotes) and TSV (tab-separated, no quoting) rows into documents, the way
 * mongoimport builds them: an untyped cell becomes an int32, int64 or double
 * when it reads as one and a string otherwise; a typed column (--columnsHaveTypes)
 * converts its cell or, when it cannot, follows --parseGrace; "a.b" makes
 * {a: {b: ...}}.
 */
#include "import.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const types[] = {"auto",   "binary",  "boolean", "date",   "date_go",
                                    "date_ms", "date_oracle", "decimal", "double", "int32",
                                    "int64",  "string",  NULL};

int csv_set_columns(csv_reader_t *r, char **names, int n)
{
    r->cols = calloc((size_t)n, sizeof(csv_col_t));
    r->ncols = n;
    for (int i = 0; i < n; i++) {
        csv_col_t *c = &r->cols[i];
        const char *s = names[i];
        if (!r->typed) {
            c->name = strdup(s);
            continue;
        }
        /* name.type(arg) */
        size_t len = strlen(s);
        const char *open = strchr(s, '(');
        const char *dot = NULL;
        for (const char *p = s; open && p < open; p++)
            if (*p == '.')
                dot = p;
        if (len < 3 || s[len - 1] != ')' || open == NULL || dot == NULL)
            return tool_err("--columnsHaveTypes: field '%s' has no type (write name.type(), "
                            "e.g. age.int32())",
                            s);
        snprintf(c->type, sizeof(c->type), "%.*s", (int)(open - dot - 1), dot + 1);
        bool known = false;
        for (int k = 0; types[k]; k++)
            known = known || strcmp(types[k], c->type) == 0;
        if (!known)
            return tool_err("--columnsHaveTypes: field '%s' has an unknown type '%s'", s,
                            c->type);
        c->name = strndup(s, (size_t)(dot - s));
        c->arg = strndup(open + 1, len - (size_t)(open - s) - 2);
    }
    return 0;
}

/* ---- rows ----------------------------------------------------------------------- */

static int fill(csv_reader_t *r)
{
    return tool_window_fill(r->in, &r->win);
}

/* Split the next record into cells (NUL-terminated copies in *cellsp, count returned);
   0 at the end, -1 on an error. */
/* Append p[0..n) to the cell being read (r->cell, *lenp bytes so far), NUL-terminated. */
static void cell_put(csv_reader_t *r, const char *p, size_t n, size_t *lenp)
{
    if (*lenp + n + 1 > r->cell_cap) {
        r->cell_cap = (*lenp + n + 1) * 2;
        r->cell = realloc(r->cell, r->cell_cap);
    }
    memcpy(r->cell + *lenp, p, n);
    *lenp += n;
    r->cell[*lenp] = '\0';
}

static int next_record(csv_reader_t *r, tool_strs_t *cells)
{
    for (;;) {
        /* find the record's end, respecting quotes */
        bool q = false;
        size_t i = r->win.pos;
        /* memchr from quote to quote and to the newline: the bytes between are plain */
        while (i < r->win.len) {
            const char *b = r->win.buf + i;
            size_t left = r->win.len - i;
            const char *nl = q ? NULL : memchr(b, '\n', left);
            size_t span = nl ? (size_t)(nl - b) : left;
            const char *quote = r->tsv ? NULL : memchr(b, '"', span);
            if (quote != NULL) {
                q = !q;
                i += (size_t)(quote - b) + 1;
            } else if (nl != NULL) {
                i += span;
                break;
            } else if (q) { /* inside quotes: a newline there is the cell's */
                i += span;
            } else {
                i = r->win.len;
            }
        }
        if (i == r->win.len && !r->win.eof) {
            int f = fill(r);
            if (f < 0)
                return -1;
            continue;
        }
        if (r->win.pos >= r->win.len)
            return 0;
        if (q && i == r->win.len)
            return tool_err("%s: line %lld: a quoted cell is not closed",
                            tool_stream_path(r->in), (long long)r->line + 1);
        size_t end = i;
        if (end > r->win.pos && r->win.buf[end - 1] == '\r')
            end--;
        /* cells: runs of plain characters are copied whole */
        const char *b = r->win.buf;
        char sep = r->tsv ? '\t' : ',';
        size_t cl = 0;
        for (size_t k = r->win.pos; k <= end; k++) {
            if (k == end || b[k] == sep) {
                cell_put(r, "", 0, &cl);
                tool_strs_push(cells, r->cell);
                cl = 0;
                continue;
            }
            if (!r->tsv && b[k] == '"' && cl == 0) {
                for (k++; k < end; k++) {
                    if (b[k] == '"' && k + 1 < end && b[k + 1] == '"') {
                        cell_put(r, "\"", 1, &cl);
                        k++;
                    } else if (b[k] == '"') {
                        break;
                    } else {
                        const char *qq = memchr(b + k, '"', end - k);
                        size_t st = k;
                        k = qq ? (size_t)(qq - b) : end;
                        cell_put(r, b + st, k - st, &cl);
                        k--;
                    }
                }
                continue;
            }
            size_t st = k;
            const char *ss = memchr(b + k, sep, end - k);
            k = ss ? (size_t)(ss - b) : end;
            cell_put(r, b + st, k - st, &cl);
            k--;
        }
        for (const char *nl = r->win.buf + r->win.pos;
             (nl = memchr(nl, '\n', (size_t)(r->win.buf + i - nl))) != NULL; nl++)
            r->line++; /* newlines inside quoted cells */
        r->line++;
        r->win.pos = i < r->win.len ? i + 1 : i;
        return 1;
    }
}

int csv_read_header(csv_reader_t *r)
{
    tool_strs_t cells = {0};
    int rc = next_record(r, &cells);
    if (rc == 0)
        return tool_err("%s: --headerline: the input is empty", tool_stream_path(r->in));
    if (rc > 0) {
        for (int i = 0; i < cells.n; i++)
            if (cells.v[i][0] == '\0')
                rc = tool_err("%s: the header line has an empty field name (column %d)",
                              tool_stream_path(r->in), i + 1);
        if (rc > 0)
            rc = csv_set_columns(r, cells.v, cells.n);
    }
    tool_strs_free(&cells);
    return rc < 0 ? -1 : 0;
}

/* ---- values ------------------------------------------------------------------------ */

static bool parse_i64(const char *s, int64_t *v)
{
    char *end;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno != 0)
        return false;
    *v = n;
    return true;
}

static bool parse_double(const char *s, double *v)
{
    char *end;
    if (*s == '\0' || isspace((unsigned char)*s))
        return false;
    *v = strtod(s, &end);
    return *end == '\0';
}

/* Append an untyped cell: a number when it reads as one, else a string. */
static void append_auto(bson_t *d, const char *k, const char *s)
{
    int64_t i;
    double v;
    if (parse_i64(s, &i)) {
        if (i >= INT32_MIN && i <= INT32_MAX)
            BSON_APPEND_INT32(d, k, (int32_t)i);
        else
            BSON_APPEND_INT64(d, k, i);
    } else if (parse_double(s, &v) && strpbrk(s, "xXnN") == NULL) {
        BSON_APPEND_DOUBLE(d, k, v);
    } else {
        BSON_APPEND_UTF8(d, k, s);
    }
}

/* Go's reference-time layout ("2006-01-02T15:04:05Z07:00") or a Microsoft/Oracle one
   ("yyyy-MM-dd HH:mm:ss") read into milliseconds since the epoch (UTC). */
static bool parse_date(const char *layout, const char *s, int64_t *ms)
{
    struct tm tm = {0};
    int msec = 0, off = 0;
    tm.tm_mday = 1;
    const char *l = layout;
    while (*l) {
        int *field = NULL, width = 0;
        size_t adv = 0;
        if (!strncmp(l, "2006", 4) || !strncmp(l, "yyyy", 4) || !strncmp(l, "YYYY", 4))
            field = &tm.tm_year, width = 4, adv = 4;
        else if (!strncmp(l, "01", 2) || !strncmp(l, "MM", 2))
            field = &tm.tm_mon, width = 2, adv = 2;
        else if (!strncmp(l, "02", 2) || !strncmp(l, "dd", 2) || !strncmp(l, "DD", 2))
            field = &tm.tm_mday, width = 2, adv = 2;
        else if (!strncmp(l, "15", 2) || !strncmp(l, "HH", 2) || !strncmp(l, "hh24", 4))
            field = &tm.tm_hour, width = 2, adv = l[2] == '2' ? 4 : 2;
        else if (!strncmp(l, "04", 2) || !strncmp(l, "mm", 2) || !strncmp(l, "mi", 2))
            field = &tm.tm_min, width = 2, adv = 2;
        else if (!strncmp(l, "05", 2) || !strncmp(l, "ss", 2))
            field = &tm.tm_sec, width = 2, adv = 2;
        else if (!strncmp(l, ".000", 4) || !strncmp(l, ".SSS", 4) || !strncmp(l, ".fff", 4)) {
            if (*s != '.')
                return false;
            s++;
            field = &msec, width = 3, adv = 4;
        } else if (!strncmp(l, "Z07:00", 6) || !strncmp(l, "-07:00", 6)) {
            adv = 6;
            if (*s == 'Z') {
                s++;
            } else if (*s == '+' || *s == '-') {
                int h, m;
                if (sscanf(s + 1, "%2d:%2d", &h, &m) != 2)
                    return false;
                off = (h * 60 + m) * (*s == '-' ? -1 : 1);
                s += 6;
            } else {
                return false;
            }
            l += adv;
            continue;
        }
        if (field != NULL) {
            int v = 0;
            for (int k = 0; k < width; k++, s++) {
                if (!isdigit((unsigned char)*s))
                    return false;
                v = v * 10 + (*s - '0');
            }
            *field = v;
            l += adv;
            continue;
        }
        if (*l != *s)
            return false;
        l++, s++;
    }
    if (*s != '\0')
        return false;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    *ms = (int64_t)t * 1000 + msec - (int64_t)off * 60000;
    return true;
}

static int hexval(char c)
{
    return isdigit((unsigned char)c) ? c - '0' : (tolower((unsigned char)c) - 'a' + 10);
}

/* Append a typed cell; false when it does not convert. */
static bool append_typed(bson_t *d, const char *k, const csv_col_t *c, const char *s)
{
    const char *t = c->type;
    if (strcmp(t, "string") == 0)
        return BSON_APPEND_UTF8(d, k, s);
    if (strcmp(t, "auto") == 0) {
        append_auto(d, k, s);
        return true;
    }
    if (strcmp(t, "int32") == 0) {
        int64_t i;
        return parse_i64(s, &i) && i >= INT32_MIN && i <= INT32_MAX &&
               BSON_APPEND_INT32(d, k, (int32_t)i);
    }
    if (strcmp(t, "int64") == 0) {
        int64_t i;
        return parse_i64(s, &i) && BSON_APPEND_INT64(d, k, i);
    }
    if (strcmp(t, "double") == 0) {
        double v;
        return parse_double(s, &v) && BSON_APPEND_DOUBLE(d, k, v);
    }
    if (strcmp(t, "decimal") == 0) {
        bson_decimal128_t dec;
        return bson_decimal128_from_string(s, &dec) && BSON_APPEND_DECIMAL128(d, k, &dec);
    }
    if (strcmp(t, "boolean") == 0) {
        static const char *const yes[] = {"1", "t", "T", "true", "TRUE", "True", NULL};
        static const char *const no[] = {"0", "f", "F", "false", "FALSE", "False", NULL};
        for (int i = 0; yes[i]; i++) {
            if (strcmp(s, yes[i]) == 0)
                return BSON_APPEND_BOOL(d, k, true);
            if (strcmp(s, no[i]) == 0)
                return BSON_APPEND_BOOL(d, k, false);
        }
        return false;
    }
    if (strncmp(t, "date", 4) == 0) {
        int64_t ms;
        return parse_date(c->arg, s, &ms) && BSON_APPEND_DATE_TIME(d, k, ms);
    }
    if (strcmp(t, "binary") == 0) {
        size_t n = strlen(s);
        uint8_t *out = malloc(n + 1);
        size_t o = 0;
        bool ok = true;
        if (strcmp(c->arg, "hex") == 0) {
            ok = n % 2 == 0;
            for (size_t i = 0; ok && i < n; i += 2) {
                ok = isxdigit((unsigned char)s[i]) && isxdigit((unsigned char)s[i + 1]);
                out[o++] = (uint8_t)(hexval(s[i]) << 4 | hexval(s[i + 1]));
            }
        } else if (strcmp(c->arg, "base64") == 0) {
            static const char b64[] =
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            uint32_t acc = 0;
            int bits = 0;
            for (size_t i = 0; ok && i < n && s[i] != '='; i++) {
                const char *p = strchr(b64, s[i]);
                ok = p != NULL && s[i] != '\0';
                acc = acc << 6 | (uint32_t)(p ? p - b64 : 0);
                bits += 6;
                if (bits >= 8) {
                    bits -= 8;
                    out[o++] = (uint8_t)(acc >> bits);
                }
            }
        } else {
            ok = false;
        }
        if (ok)
            BSON_APPEND_BINARY(d, k, BSON_SUBTYPE_BINARY, out, (uint32_t)o);
        free(out);
        return ok;
    }
    return false;
}

/* Append cells [from, to) whose names share prefix (of plen chars) into d, nesting
   "a.b" as sub-documents. */
static void build(bson_t *d, csv_reader_t *r, tool_strs_t *cells, bool *used, size_t plen,
                  const char *prefix, bool *skip_row, bool *stop)
{
    for (int i = 0; i < r->ncols && i < cells->n; i++) {
        const char *name = r->cols[i].name;
        if (used[i] || strncmp(name, prefix, plen) != 0)
            continue;
        const char *rest = name + plen;
        const char *dot = strchr(rest, '.');
        if (dot == NULL) {
            used[i] = true;
            const char *s = cells->v[i];
            if (r->ignore_blanks && s[0] == '\0')
                continue;
            if (!r->typed || r->cols[i].type[0] == '\0') {
                append_auto(d, rest, s);
            } else if (!append_typed(d, rest, &r->cols[i], s)) {
                if (r->grace == GRACE_AUTOCAST)
                    append_auto(d, rest, s);
                else if (r->grace == GRACE_SKIPROW)
                    *skip_row = true;
                else if (r->grace == GRACE_STOP) {
                    *stop = true;
                    tool_err("%s: line %lld: '%s' is not a valid %s for field %s",
                             tool_stream_path(r->in), (long long)r->line, s, r->cols[i].type,
                             name);
                }
            }
            continue;
        }
        char sub_prefix[1024];
        snprintf(sub_prefix, sizeof(sub_prefix), "%.*s", (int)(dot - name + 1), name);
        char key[512];
        snprintf(key, sizeof(key), "%.*s", (int)(dot - rest), rest);
        bson_t child;
        bson_append_document_begin(d, key, -1, &child);
        build(&child, r, cells, used, strlen(sub_prefix), sub_prefix, skip_row, stop);
        bson_append_document_end(d, &child);
    }
}

int csv_next(csv_reader_t *r, bson_t *doc)
{
    tool_strs_t cells = {0};
    int rc;
    do {
        tool_strs_free(&cells);
        rc = next_record(r, &cells);
    } while (rc == 1 && cells.n == 1 && cells.v[0][0] == '\0'); /* blank line */
    if (rc <= 0)
        return rc;
    if (cells.n > r->ncols) {
        tool_strs_free(&cells);
        return tool_err("%s: line %lld: %d cells, but only %d fields are named",
                        tool_stream_path(r->in), (long long)r->line,
                        cells.n, r->ncols);
    }
    bool *used = calloc((size_t)r->ncols, sizeof(bool));
    bool skip = false, stop = false;
    bson_init(doc);
    build(doc, r, &cells, used, 0, "", &skip, &stop);
    free(used);
    tool_strs_free(&cells);
    if (stop || skip) {
        bson_destroy(doc);
        return stop ? -1 : 2;
    }
    return 1;
}

void csv_reader_free(csv_reader_t *r)
{
    for (int i = 0; i < r->ncols; i++) {
        free(r->cols[i].name);
        free(r->cols[i].arg);
    }
    free(r->cols);
    free(r->win.buf);
    free(r->cell);
}
