/*
 * sable-audit: read an audit log written with --auditFormat BSON (a plain
 * concatenation of BSON documents) and print its events as JSON lines
 * (relaxed extended JSON), optionally only those matching --filter, a query
 * document in JSON evaluated by the server's own matcher.
 *
 * What must stay true: a truncated or corrupt tail (e.g. after kill -9 in
 * the middle of a write) is reported on stderr with its offset and exit
 * status 1, never read past; every complete event before it is printed.
 */
#include "query/query.h"

#include <bson/bson.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    fputs("usage: sable-audit [--filter '<json query>'] [FILE]\n"
          "Print the events of a BSON audit log (FILE or stdin) as JSON lines.\n",
          stderr);
}

int main(int argc, char **argv)
{
    const char *path = NULL, *filter_json = NULL;
    sbl_matcher_t *m = NULL;
    int status = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc)
            filter_json = argv[++i];
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage();
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            usage();
            return 2;
        } else
            path = argv[i];
    }
    if (filter_json != NULL) {
        bson_t f;
        bson_error_t je;
        sbl_err_t err;
        sbl_err_clear(&err);
        if (!bson_init_from_json(&f, filter_json, -1, &je)) {
            fprintf(stderr, "sable-audit: --filter is not valid JSON: %s\n", je.message);
            return 2;
        }
        m = sbl_matcher_new(&f, &err);
        bson_destroy(&f);
        if (m == NULL) {
            fprintf(stderr, "sable-audit: bad --filter: %s\n", err.msg);
            return 2;
        }
    }
    FILE *in = path != NULL ? fopen(path, "rb") : stdin;
    if (in == NULL) {
        fprintf(stderr, "sable-audit: %s: %s\n", path, strerror(errno));
        return 2;
    }
    uint8_t *buf = NULL;
    size_t cap = 0;
    long long off = 0;
    for (;;) {
        uint8_t hdr[4];
        size_t n = fread(hdr, 1, 4, in);
        if (n == 0)
            break;
        uint32_t len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
                       (uint32_t)hdr[3] << 24;
        if (n < 4 || len < 5 || len > 64u * 1024 * 1024) {
            fprintf(stderr, "sable-audit: bad event length at offset %lld\n", off);
            status = 1;
            break;
        }
        if (len > cap) {
            uint8_t *p = realloc(buf, len);
            if (p == NULL) {
                fprintf(stderr, "sable-audit: out of memory\n");
                status = 1;
                break;
            }
            buf = p;
            cap = len;
        }
        memcpy(buf, hdr, 4);
        bson_t doc;
        if (fread(buf + 4, 1, len - 4, in) != len - 4 || !bson_init_static(&doc, buf, len) ||
            !bson_validate(&doc, BSON_VALIDATE_NONE, NULL)) {
            fprintf(stderr, "sable-audit: truncated or corrupt event at offset %lld\n", off);
            status = 1;
            break;
        }
        off += len;
        if (m != NULL && !sbl_matcher_match(m, &doc, NULL))
            continue;
        char *json = bson_as_relaxed_extended_json(&doc, NULL);
        puts(json);
        bson_free(json);
    }
    free(buf);
    if (in != stdin)
        fclose(in);
    if (m != NULL)
        sbl_matcher_free(m);
    return status;
}
