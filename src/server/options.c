/*
 * options.c: mongod-compatible command-line options and YAML config file.
 *
 * Every option is one row of opt_table: its command-line spelling, the
 * dotted YAML key it stands for, and its value kind.  Both sources are
 * first collected into one flat list of (dotted key, text value) settings,
 * the config file first and the command line after it, so the command line
 * wins; the settings are then checked and applied to sbl_options_t in one
 * place (apply_setting).  Unknown options and malformed values are errors.
 */
#include "server/server.h"

#include "doc/doc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <sys/stat.h>
#include <yaml.h>

typedef enum { OPT_INT, OPT_DOUBLE, OPT_STRING, OPT_FLAG, OPT_PARAM } opt_kind_t;

typedef struct opt_def {
    const char *name; /* command-line name without dashes */
    const char *key;  /* dotted config key */
    opt_kind_t kind;
    const char *help;
} opt_def_t;

static const opt_def_t opt_table[] = {
    {"help", NULL, OPT_FLAG, "print the options and exit"},
    {"version", NULL, OPT_FLAG, "print the version and exit"},
    {"config", "config", OPT_STRING, "read options from this YAML file (command-line options win)"},
    {"port", "net.port", OPT_INT, "TCP port to listen on (27017)"},
    {"bind_ip", "net.bindIp", OPT_STRING,
     "addresses to listen on, separated by commas (127.0.0.1)"},
    {"bind_ip_all", "net.bindIpAll", OPT_FLAG, "listen on every address of the host"},
    {"ipv6", "net.ipv6", OPT_FLAG, "accepted for mongod's sake; IPv6 addresses always work"},
    {"nounixsocket", "net.unixDomainSocket.enabled", OPT_FLAG,
     "do not listen on the Unix-domain socket <prefix>/mongodb-<port>.sock"},
    {"unixSocketPrefix", "net.unixDomainSocket.pathPrefix", OPT_STRING,
     "directory of the Unix-domain socket - /tmp by default"},
    {"filePermissions", "net.unixDomainSocket.filePermissions", OPT_INT,
     "mode of the Unix-domain socket file - 0700 by default"},
    {"maxConns", "net.maxIncomingConnections", OPT_INT,
     "refuse connections beyond this many open at once (1000000)"},
    {"dbpath", "storage.dbPath", OPT_STRING, "where the data files live (/data/db)"},
    {"journalCommitInterval", "storage.journal.commitIntervalMs", OPT_INT,
     "milliseconds between journal flushes (1-500; 100)"},
    {"syncdelay", "storage.syncPeriodSecs", OPT_INT, "seconds between checkpoints (60; 0: none)"},
    {"wiredTigerCacheSizeGB", "storage.wiredTiger.engineConfig.cacheSizeGB", OPT_DOUBLE,
     "WiredTiger cache size in GB ((RAM - 1 GB) / 2, at least 0.25)"},
    {"wiredTigerJournalCompressor", "storage.wiredTiger.engineConfig.journalCompressor", OPT_STRING,
     "journal compression: none, snappy or zlib (none)"},
    {"wiredTigerEngineConfigString", "storage.wiredTiger.engineConfig.configString", OPT_STRING,
     "extra wiredtiger_open settings, added after sabled's own"},
    {"wiredTigerCollectionConfigString", "storage.wiredTiger.collectionConfig.configString",
     OPT_STRING, "extra WiredTiger create settings of new collections' tables"},
    {"wiredTigerIndexConfigString", "storage.wiredTiger.indexConfig.configString", OPT_STRING,
     "extra WiredTiger create settings of new indexes' tables"},
    {"logpath", "systemLog.path", OPT_STRING,
     "write the log to this file rather than to standard output"},
    {"logappend", "systemLog.logAppend", OPT_FLAG, "accepted; sabled always appends to --logpath"},
    {"quiet", "systemLog.quiet", OPT_FLAG, "log less"},
    {"verbose", "systemLog.verbosity", OPT_INT, "log level, 0 to 5 (-v, -vv, ... set it too)"},
    {"fork", "processManagement.fork", OPT_FLAG, "run in the background once started"},
    {"pidfilepath", "processManagement.pidFilePath", OPT_STRING,
     "write the process id to this file"},
    {"setParameter", "setParameter", OPT_PARAM, "name=value: set a server parameter at start-up"},
    {"serviceExecutorThreads", "net.serviceExecutorThreads", OPT_INT,
     "network event loop threads (sabled); default: one per core"},
    {"auth", "security.authorization", OPT_FLAG,
     "clients must authenticate (security.authorization: enabled)"},
    {"noscripting", "security.javascriptEnabled", OPT_FLAG, "turn server-side JavaScript off"},
    {"tlsMode", "net.tls.mode", OPT_STRING,
     "TLS on connections: disabled, allowTLS, preferTLS or requireTLS"},
    {"tlsCertificateKeyFile", "net.tls.certificateKeyFile", OPT_STRING,
     "PEM file with the server's certificate and private key"},
    {"tlsCertificateKeyFilePassword", "net.tls.certificateKeyFilePassword", OPT_STRING,
     "password of the private key in tlsCertificateKeyFile"},
    {"tlsCAFile", "net.tls.CAFile", OPT_STRING,
     "certificate authority file used to verify client certificates"},
    {"tlsAllowConnectionsWithoutCertificates", "net.tls.allowConnectionsWithoutCertificates",
     OPT_FLAG, "allow clients that present no certificate (when tlsCAFile is set)"},
    {"tlsClusterFile", "net.tls.clusterFile", OPT_STRING,
     "PEM file with the certificate and key presented to other members (tlsCertificateKeyFile)"},
    {"tlsClusterPassword", "net.tls.clusterPassword", OPT_STRING,
     "password of the private key in tlsClusterFile"},
    {"tlsClusterCAFile", "net.tls.clusterCAFile", OPT_STRING,
     "certificate authority file that verifies the certificates of members and clients "
     "connecting here (tlsCAFile)"},
    {"tlsAllowInvalidCertificates", "net.tls.allowInvalidCertificates", OPT_FLAG,
     "accept certificates that do not verify, from clients and from other members"},
    {"tlsAllowInvalidHostnames", "net.tls.allowInvalidHostnames", OPT_FLAG,
     "accept another member's certificate that does not name the host dialed"},
    {"metricsPort", "net.metricsPort", OPT_INT,
     "serve Prometheus metrics and the monitoring page over HTTP on this port; off by default"},
    {"metricsBindIp", "net.metricsBindIp", OPT_STRING,
     "address of the metrics endpoint - 127.0.0.1 by default"},
    {"slowms", "operationProfiling.slowOpThresholdMs", OPT_INT,
     "operations slower than this many ms are logged and profiled (100)"},
    {"profile", "operationProfiling.mode", OPT_STRING,
     "what the profiler records: 0 nothing, 1 slow operations, 2 all (0)"},
    {"slowOpSampleRate", "operationProfiling.slowOpSampleRate", OPT_DOUBLE,
     "share of slow operations that are logged and profiled (1.0)"},
    {"keyFile", "security.keyFile", OPT_STRING,
     "private key for cluster authentication (members authenticate to each other; implies "
     "--auth)"},
    {"replSet", "replication.replSetName", OPT_STRING,
     "name of the replica set this server is a member of"},
    {"configsvr", "sharding.clusterRole", OPT_FLAG,
     "serve as a sharded cluster's config server (sharding.clusterRole: configsvr)"},
    {"shardsvr", "sharding.clusterRole", OPT_FLAG,
     "serve as a shard of a sharded cluster (sharding.clusterRole: shardsvr)"},
    {"configdb", "sharding.configDB", OPT_STRING,
     "sable-router: the config servers, as <configReplSetName>/host1:port,host2:port,..."},
    {"oplogSizeMB", "replication.oplogSizeMB", OPT_INT,
     "oplog size in MB (5% of free disk, from 990 MB to 50 GB)"},
    {"auditDestination", "auditLog.destination", OPT_STRING,
     "where audit events go: file, syslog or console (no auditing without it)"},
    {"auditFormat", "auditLog.format", OPT_STRING, "JSON or BSON, for auditDestination file"},
    {"auditPath", "auditLog.path", OPT_STRING, "the audit log file (auditDestination file)"},
    {"auditFilter", "auditLog.filter", OPT_STRING,
     "query document (JSON) over audit events; only matching events are recorded"},
};
#define OPT_COUNT (sizeof(opt_table) / sizeof(opt_table[0]))

/* Config keys accepted in YAML that have no command-line spelling. */
static const opt_def_t yaml_only[] = {
    {NULL, "systemLog.destination", OPT_STRING, NULL},
    {NULL, "storage.journal.enabled", OPT_FLAG, NULL},
    {NULL, "storage.engine", OPT_STRING, NULL},
    {NULL, "storage.directoryPerDB", OPT_FLAG, NULL},
    {NULL, "processManagement.timeZoneInfo", OPT_STRING, NULL},
};
#define YAML_ONLY_COUNT (sizeof(yaml_only) / sizeof(yaml_only[0]))

typedef struct setting {
    const opt_def_t *def;
    char *key; /* dotted key (for setParameter: "setParameter.<name>") */
    char *value;
} setting_t;

typedef struct settings {
    setting_t *v;
    size_t n, cap;
} settings_t;

static void settings_add(settings_t *s, const opt_def_t *def, const char *key, const char *value)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->v = bson_realloc(s->v, s->cap * sizeof(*s->v));
    }
    s->v[s->n].def = def;
    s->v[s->n].key = bson_strdup(key);
    s->v[s->n].value = bson_strdup(value);
    s->n++;
}

static void settings_free(settings_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        bson_free(s->v[i].key);
        bson_free(s->v[i].value);
    }
    bson_free(s->v);
}

static const opt_def_t *opt_by_name(const char *name)
{
    for (size_t i = 0; i < OPT_COUNT; i++)
        if (strcmp(opt_table[i].name, name) == 0)
            return &opt_table[i];
    return NULL;
}

static const opt_def_t *opt_by_key(const char *key)
{
    for (size_t i = 0; i < OPT_COUNT; i++)
        if (opt_table[i].key != NULL && strcmp(opt_table[i].key, key) == 0)
            return &opt_table[i];
    for (size_t i = 0; i < YAML_ONLY_COUNT; i++)
        if (strcmp(yaml_only[i].key, key) == 0)
            return &yaml_only[i];
    return NULL;
}

/* ---- YAML ---------------------------------------------------------------- */

/* Walk a YAML mapping, adding a setting for each scalar leaf under its dotted key. */
static int yaml_walk(yaml_document_t *doc, yaml_node_t *node, const char *prefix, settings_t *s,
                     const char *path, sbl_err_t *err)
{
    if (node->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
             p < node->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            yaml_node_t *v = yaml_document_get_node(doc, p->value);
            if (k == NULL || v == NULL || k->type != YAML_SCALAR_NODE)
                return sbl_err_set(err, SBL_E_BadValue, "Error parsing YAML config file %s: "
                                   "mapping keys must be scalars", path);
            char key[256];
            snprintf(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "",
                     (const char *)k->data.scalar.value);
            if (strcmp(prefix, "setParameter") == 0) {
                if (v->type != YAML_SCALAR_NODE)
                    return sbl_err_set(err, SBL_E_BadValue,
                                       "Error parsing YAML config file %s: setParameter.%s "
                                       "must be a scalar", path, k->data.scalar.value);
                settings_add(s, opt_by_name("setParameter"), key, (const char *)v->data.scalar.value);
                continue;
            }
            SBL_RET(yaml_walk(doc, v, key, s, path, err));
        }
        return 0;
    }
    if (node->type == YAML_SEQUENCE_NODE) {
        /* Only bindIp-like lists: join with commas. */
        bson_string_t *joined = bson_string_new(NULL);
        for (yaml_node_item_t *i = node->data.sequence.items.start;
             i < node->data.sequence.items.top; i++) {
            yaml_node_t *v = yaml_document_get_node(doc, *i);
            if (v == NULL || v->type != YAML_SCALAR_NODE) {
                bson_string_free(joined, true);
                return sbl_err_set(err, SBL_E_BadValue,
                                   "Error parsing YAML config file %s: %s: bad list", path, prefix);
            }
            if (joined->len)
                bson_string_append_c(joined, ',');
            bson_string_append(joined, (const char *)v->data.scalar.value);
        }
        const opt_def_t *def = opt_by_key(prefix);
        if (def == NULL) {
            bson_string_free(joined, true);
            return sbl_err_set(err, SBL_E_BadValue, "Unrecognized option: %s", prefix);
        }
        settings_add(s, def, prefix, joined->str);
        bson_string_free(joined, true);
        return 0;
    }
    if (node->type == YAML_SCALAR_NODE) {
        const opt_def_t *def = opt_by_key(prefix);
        if (def == NULL)
            return sbl_err_set(err, SBL_E_BadValue, "Unrecognized option: %s", prefix);
        settings_add(s, def, prefix, (const char *)node->data.scalar.value);
        return 0;
    }
    return 0;
}

static int load_yaml(const char *path, settings_t *s, sbl_err_t *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "Error reading config file: %s: %s", path,
                           strerror(errno));
    yaml_parser_t parser;
    yaml_document_t doc;
    int rc = 0;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &doc)) {
        rc = sbl_err_set(err, SBL_E_BadValue, "Error parsing YAML config file %s: %s (line %zu)",
                         path, parser.problem ? parser.problem : "syntax error",
                         parser.problem_mark.line + 1);
        yaml_parser_delete(&parser);
        fclose(f);
        return rc;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root != NULL) {
        if (root->type != YAML_MAPPING_NODE)
            rc = sbl_err_set(err, SBL_E_BadValue,
                             "Error parsing YAML config file %s: the top level must be a mapping",
                             path);
        else
            rc = yaml_walk(&doc, root, "", s, path, err);
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}

/* ---- values ---------------------------------------------------------------- */

static int parse_int(const setting_t *st, long lo, long hi, int *out, sbl_err_t *err)
{
    char *end;
    errno = 0;
    long v = strtol(st->value, &end, 10);
    if (errno != 0 || end == st->value || *end != '\0')
        return sbl_err_set(err, SBL_E_BadValue, "Error parsing option \"%s\" as int: %s", st->key,
                           st->value);
    if (v < lo || v > hi)
        return sbl_err_set(err, SBL_E_BadValue, "%s must be between %ld and %ld, got %ld",
                           st->key, lo, hi, v);
    *out = (int)v;
    return 0;
}

static int parse_bool(const setting_t *st, bool *out, sbl_err_t *err)
{
    if (strcmp(st->value, "true") == 0 || strcmp(st->value, "1") == 0) {
        *out = true;
        return 0;
    }
    if (strcmp(st->value, "false") == 0 || strcmp(st->value, "0") == 0) {
        *out = false;
        return 0;
    }
    return sbl_err_set(err, SBL_E_BadValue, "Error parsing option \"%s\": expected true or false, "
                       "got %s", st->key, st->value);
}

static void set_str(char **dst, const char *v)
{
    bson_free(*dst);
    *dst = bson_strdup(v);
}

static void split_bind_ips(sbl_options_t *o, const char *list)
{
    for (size_t i = 0; i < o->nbind; i++)
        bson_free(o->bind_ips[i]);
    bson_free(o->bind_ips);
    o->nbind = 0;
    o->bind_ips = bson_malloc0(sizeof(char *) * (strlen(list) + 2));
    char *copy = bson_strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        size_t n = strlen(tok);
        while (n > 0 && tok[n - 1] == ' ')
            tok[--n] = '\0';
        if (n == 0)
            continue;
        if (strcmp(tok, "localhost") == 0)
            tok = "127.0.0.1";
        o->bind_ips[o->nbind++] = bson_strdup(tok);
    }
    bson_free(copy);
}

/* Apply one setting to o and record it (typed) in the flat parsed list. */

/* security.keyFile, as mongod reads it: the file must not be readable by
 * group or others; its key is the file without whitespace, 6 to 1024
 * base64 characters.  The key is the password of __system@local, which
 * members use to authenticate to each other; a keyFile turns on
 * authorization. */
static int read_key_file(sbl_options_t *o, const char *path, sbl_err_t *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return sbl_err_set(err, SBL_E_BadValue, "error getting file %s: %s", path, strerror(errno));
    if (sb.st_mode & 077)
        return sbl_err_set(err, SBL_E_BadValue, "permissions on %s are too open", path);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "error opening file: %s: %s", path, strerror(errno));
    char buf[4096];
    size_t n = 0;
    int ch;
    bool bad = false;
    while ((ch = fgetc(f)) != EOF) {
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v')
            continue;
        if (!(isalnum(ch) || ch == '+' || ch == '/' || ch == '='))
            bad = true;
        if (n < sizeof(buf) - 1)
            buf[n] = (char)ch;
        n++;
    }
    fclose(f);
    if (bad)
        return sbl_err_set(err, SBL_E_BadValue, "invalid char in key file %s: not a base64 "
                           "character", path);
    if (n < 6 || n > 1024)
        return sbl_err_set(err, SBL_E_BadValue, "security key in %s has length %zu, must be "
                           "between 6 and 1024 chars", path, n);
    buf[n] = '\0';
    set_str(&o->key_file, path);
    set_str(&o->cluster_key, buf);
    o->auth = true;
    return 0;
}

static int apply_setting(sbl_options_t *o, const setting_t *st, bson_t *flat, sbl_err_t *err)
{
    const char *k = st->key;
    int iv;
    bool bv;

    if (strcmp(k, "sharding.clusterRole") == 0) {
        /* --configsvr / --shardsvr are flags; the YAML key holds the role's name */
        if (strcmp(st->value, "configsvr") == 0)
            o->cluster_role = SBL_ROLE_CONFIGSVR;
        else if (strcmp(st->value, "shardsvr") == 0)
            o->cluster_role = SBL_ROLE_SHARDSVR;
        else
            return sbl_err_set(err, SBL_E_BadValue, "sharding.clusterRole must be configsvr "
                               "or shardsvr, got %s", st->value);
        BSON_APPEND_UTF8(flat, k, st->value);
        return 0;
    }
    if (st->def->kind == OPT_PARAM) {
        const char *name = k + strlen("setParameter.");
        BSON_APPEND_UTF8(&o->parameters, name, st->value);
        BSON_APPEND_UTF8(flat, k, st->value);
        return 0;
    }
    if (strcmp(k, "security.authorization") == 0) {
        /* --auth is a flag; the YAML key takes enabled / disabled. */
        if (strcmp(st->value, "enabled") == 0 || strcmp(st->value, "true") == 0)
            o->auth = true;
        else if (strcmp(st->value, "disabled") == 0 || strcmp(st->value, "false") == 0)
            o->auth = false;
        else
            return sbl_err_set(err, SBL_E_BadValue, "security.authorization must be \"enabled\" "
                               "or \"disabled\", got %s", st->value);
        BSON_APPEND_UTF8(flat, k, o->auth ? "enabled" : "disabled");
        return 0;
    }
    switch (st->def->kind) {
    case OPT_INT:
        if (strcmp(k, "net.port") == 0) {
            SBL_RET(parse_int(st, 0, 65535, &o->port, err));
            iv = o->port;
        } else if (strcmp(k, "net.maxIncomingConnections") == 0) {
            SBL_RET(parse_int(st, 1, 10000000, &o->max_conns, err));
            iv = o->max_conns;
        } else if (strcmp(k, "storage.journal.commitIntervalMs") == 0) {
            SBL_RET(parse_int(st, 1, 500, &o->commit_interval_ms, err));
            iv = o->commit_interval_ms;
        } else if (strcmp(k, "storage.syncPeriodSecs") == 0) {
            SBL_RET(parse_int(st, 0, 9 * 60 * 60, &o->syncdelay_s, err));
            iv = o->syncdelay_s;
        } else if (strcmp(k, "systemLog.verbosity") == 0) {
            SBL_RET(parse_int(st, 0, 5, &o->verbosity, err));
            iv = o->verbosity;
        } else if (strcmp(k, "net.serviceExecutorThreads") == 0) {
            SBL_RET(parse_int(st, 1, 256, &o->nloops, err));
            iv = o->nloops;
        } else if (strcmp(k, "net.metricsPort") == 0) {
            SBL_RET(parse_int(st, 0, 65535, &o->metrics_port, err));
            iv = o->metrics_port;
        } else if (strcmp(k, "replication.oplogSizeMB") == 0) {
            SBL_RET(parse_int(st, 1, 1024 * 1024 * 1024, &o->oplog_size_mb, err));
            iv = o->oplog_size_mb;
        } else if (strcmp(k, "net.unixDomainSocket.filePermissions") == 0) {
            /* as mongod reads numbers: 0700 is octal, 0x1c0 hex, 448 decimal */
            char *end;
            errno = 0;
            long v = strtol(st->value, &end, 0);
            if (errno != 0 || end == st->value || *end != '\0' || v < 0 || v > 07777)
                return sbl_err_set(err, SBL_E_BadValue, "Error parsing option \"%s\" as int: %s",
                                   k, st->value);
            o->unix_socket_perms = iv = (int)v;
        } else if (strcmp(k, "operationProfiling.slowOpThresholdMs") == 0) {
            SBL_RET(parse_int(st, -1, INT32_MAX, &o->slowms, err));
            iv = o->slowms;
        } else {
            return sbl_err_set(err, SBL_E_BadValue, "Unrecognized option: %s", k);
        }
        BSON_APPEND_INT32(flat, k, iv);
        return 0;
    case OPT_DOUBLE: {
        char *end;
        errno = 0;
        double d = strtod(st->value, &end);
        if (strcmp(k, "operationProfiling.slowOpSampleRate") == 0) {
            if (errno != 0 || end == st->value || *end != '\0' || !(d >= 0 && d <= 1))
                return sbl_err_set(err, SBL_E_BadValue, "Error parsing option \"%s\": must be "
                                   "a number between 0 and 1, got %s", k, st->value);
            o->slow_sample_rate = d;
            BSON_APPEND_DOUBLE(flat, k, d);
            return 0;
        }
        if (errno != 0 || end == st->value || *end != '\0' || !(d >= 0.25 && d <= 10000))
            return sbl_err_set(err, SBL_E_BadValue,
                               "Error parsing option \"%s\": must be a number between 0.25 and "
                               "10000, got %s", k, st->value);
        o->cache_size_gb = d;
        BSON_APPEND_DOUBLE(flat, k, d);
        return 0;
    }
    case OPT_FLAG:
        SBL_RET(parse_bool(st, &bv, err));
        if (strcmp(k, "net.bindIpAll") == 0 && bv)
            split_bind_ips(o, "0.0.0.0,::");
        else if (strcmp(k, "processManagement.fork") == 0)
            o->fork = bv;
        else if (strcmp(k, "systemLog.quiet") == 0)
            o->quiet = bv;
        else if (strcmp(k, "systemLog.logAppend") == 0)
            o->log_append = bv;
        else if (strcmp(k, "net.unixDomainSocket.enabled") == 0)
            o->unix_socket = bv;
        else if (strcmp(k, "security.javascriptEnabled") == 0)
            o->js_disabled = !bv;
        else if (strcmp(k, "net.tls.allowConnectionsWithoutCertificates") == 0)
            o->tls_allow_no_cert = bv;
        else if (strcmp(k, "net.tls.allowInvalidCertificates") == 0)
            o->tls_allow_invalid_certs = bv;
        else if (strcmp(k, "net.tls.allowInvalidHostnames") == 0)
            o->tls_allow_invalid_hostnames = bv;
        else if (strcmp(k, "storage.journal.enabled") == 0 && !bv)
            return sbl_err_set(err, SBL_E_BadValue,
                               "storage.journal.enabled: false is not supported; the journal is "
                               "always on");
        BSON_APPEND_BOOL(flat, k, bv);
        return 0;
    case OPT_STRING:
        if (strcmp(k, "net.bindIp") == 0) {
            split_bind_ips(o, st->value);
            if (o->nbind == 0)
                return sbl_err_set(err, SBL_E_BadValue, "net.bindIp: no address given");
        } else if (strcmp(k, "storage.dbPath") == 0) {
            set_str(&o->dbpath, st->value);
        } else if (strcmp(k, "storage.wiredTiger.engineConfig.journalCompressor") == 0) {
            static const char *const names[] = {"none", "snappy", "zlib"};
            int m = -1;
            for (int i = 0; i < 3; i++)
                if (strcmp(st->value, names[i]) == 0)
                    m = i;
            if (m < 0)
                return sbl_err_set(err, SBL_E_BadValue,
                                   "Invalid value for journalCompressor: %s; expected none, "
                                   "snappy or zlib%s", st->value,
                                   strcmp(st->value, "zstd") == 0
                                       ? " (Debian's WiredTiger has no zstd extension)" : "");
            o->journal_compressor = names[m];
        } else if (strcmp(k, "systemLog.path") == 0) {
            set_str(&o->logpath, st->value);
        } else if (strcmp(k, "processManagement.pidFilePath") == 0) {
            set_str(&o->pidfile, st->value);
        } else if (strcmp(k, "storage.wiredTiger.engineConfig.configString") == 0) {
            set_str(&o->wt_config, st->value);
        } else if (strcmp(k, "storage.wiredTiger.collectionConfig.configString") == 0) {
            set_str(&o->wt_coll_config, st->value);
        } else if (strcmp(k, "storage.wiredTiger.indexConfig.configString") == 0) {
            set_str(&o->wt_index_config, st->value);
        } else if (strcmp(k, "net.tls.mode") == 0) {
            static const char *const modes[] = {"disabled", "allowTLS", "preferTLS", "requireTLS"};
            int m = -1;
            for (int i = 0; i < 4; i++)
                if (strcmp(st->value, modes[i]) == 0)
                    m = i;
            if (m < 0)
                return sbl_err_set(err, SBL_E_BadValue, "Invalid value for tlsMode: %s; expected "
                                   "disabled, allowTLS, preferTLS or requireTLS", st->value);
            o->tls_mode = m; /* the enum follows the same order */
        } else if (strcmp(k, "net.tls.certificateKeyFile") == 0) {
            set_str(&o->tls_cert_key_file, st->value);
        } else if (strcmp(k, "net.tls.certificateKeyFilePassword") == 0) {
            set_str(&o->tls_cert_key_password, st->value);
            BSON_APPEND_UTF8(flat, k, "<password>"); /* redacted, as mongod does */
            return 0;
        } else if (strcmp(k, "net.tls.CAFile") == 0) {
            set_str(&o->tls_ca_file, st->value);
        } else if (strcmp(k, "net.tls.clusterFile") == 0) {
            set_str(&o->tls_cluster_file, st->value);
        } else if (strcmp(k, "net.tls.clusterPassword") == 0) {
            set_str(&o->tls_cluster_password, st->value);
            BSON_APPEND_UTF8(flat, k, "<password>");
            return 0;
        } else if (strcmp(k, "net.tls.clusterCAFile") == 0) {
            set_str(&o->tls_cluster_ca_file, st->value);
        } else if (strcmp(k, "net.unixDomainSocket.pathPrefix") == 0) {
            if (st->value[0] == '\0')
                return sbl_err_set(err, SBL_E_BadValue, "net.unixDomainSocket.pathPrefix: no "
                                   "directory given");
            set_str(&o->unix_socket_prefix, st->value);
        } else if (strcmp(k, "net.metricsBindIp") == 0) {
            set_str(&o->metrics_bind_ip, st->value);
        } else if (strcmp(k, "operationProfiling.mode") == 0) {
            const char *v = st->value;
            if (strcmp(v, "off") == 0 || strcmp(v, "0") == 0)
                o->profile = 0;
            else if (strcmp(v, "slowOp") == 0 || strcmp(v, "1") == 0)
                o->profile = 1;
            else if (strcmp(v, "all") == 0 || strcmp(v, "2") == 0)
                o->profile = 2;
            else
                return sbl_err_set(err, SBL_E_BadValue, "operationProfiling.mode must be off, "
                                   "slowOp or all (or --profile 0, 1, 2), got %s", v);
        } else if (strcmp(k, "auditLog.destination") == 0) {
            static const char *const dests[] = {"file", "syslog", "console"};
            o->audit_destination = 0;
            for (int i = 0; i < 3; i++)
                if (strcmp(st->value, dests[i]) == 0)
                    o->audit_destination = i + 1;
            if (o->audit_destination == 0)
                return sbl_err_set(err, SBL_E_BadValue, "auditLog.destination must be file, "
                                   "syslog or console, got %s", st->value);
        } else if (strcmp(k, "auditLog.format") == 0) {
            if (strcmp(st->value, "JSON") != 0 && strcmp(st->value, "BSON") != 0)
                return sbl_err_set(err, SBL_E_BadValue, "auditLog.format must be JSON or BSON, "
                                   "got %s", st->value);
            o->audit_format = strcmp(st->value, "BSON") == 0;
        } else if (strcmp(k, "security.keyFile") == 0) {
            SBL_RET(read_key_file(o, st->value, err));
        } else if (strcmp(k, "replication.replSetName") == 0) {
            if (st->value[0] == '\0' || strchr(st->value, '/') != NULL)
                return sbl_err_set(err, SBL_E_BadValue, "replication.replSetName: a set name may "
                                   "not be empty nor contain '/' (seed lists are not supported)");
            set_str(&o->repl_set_name, st->value);
        } else if (strcmp(k, "sharding.configDB") == 0) {
            if (strchr(st->value, '/') == NULL || strchr(st->value, '/') == st->value)
                return sbl_err_set(err, SBL_E_BadValue, "sharding.configDB must be "
                                   "<configReplSetName>/host:port[,host:port...], got %s",
                                   st->value);
            set_str(&o->config_db, st->value);
        } else if (strcmp(k, "auditLog.path") == 0) {
            set_str(&o->audit_path, st->value);
        } else if (strcmp(k, "auditLog.filter") == 0) {
            bson_t f;
            bson_error_t je;
            if (!bson_init_from_json(&f, st->value, -1, &je))
                return sbl_err_set(err, SBL_E_BadValue, "auditLog.filter is not a valid JSON "
                                   "query document: %s", je.message);
            bson_destroy(&f);
            set_str(&o->audit_filter, st->value);
        } else if (strcmp(k, "systemLog.destination") == 0) {
            if (strcmp(st->value, "file") != 0 && strcmp(st->value, "syslog") != 0)
                return sbl_err_set(err, SBL_E_BadValue,
                                   "systemLog.destination must be \"file\" or \"syslog\"");
        } else if (strcmp(k, "storage.engine") == 0) {
            if (strcmp(st->value, "wiredTiger") != 0)
                return sbl_err_set(err, SBL_E_BadValue,
                                   "storage.engine: only wiredTiger is supported");
        }
        BSON_APPEND_UTF8(flat, k, st->value);
        return 0;
    default:
        return sbl_err_set(err, SBL_E_BadValue, "Unrecognized option: %s", k);
    }
}

/* Turn the flat {"a.b.c": v} list into nested documents, as getCmdLineOpts shows. */
static void nest(const bson_t *flat, const char *prefix, bson_t *out)
{
    size_t plen = strlen(prefix);
    bson_iter_t it;
    /* Names of the children already emitted at this level. */
    bson_t seen = BSON_INITIALIZER;
    bson_iter_init(&it, flat);
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        if (strncmp(key, prefix, plen) != 0)
            continue;
        const char *rest = key + plen;
        const char *dot = strchr(rest, '.');
        if (dot == NULL) {
            bson_iter_t dup;
            if (!bson_iter_init_find(&dup, out, rest))
                sbl_append_value(out, rest, -1, bson_iter_value(&it));
            else { /* a later setting replaces an earlier one: rebuild out without it */
                bson_t tmp = BSON_INITIALIZER;
                bson_copy_to_excluding_noinit(out, &tmp, rest, NULL);
                sbl_append_value(&tmp, rest, -1, bson_iter_value(&it));
                bson_reinit(out);
                bson_concat(out, &tmp);
                bson_destroy(&tmp);
            }
            continue;
        }
        char child[128];
        snprintf(child, sizeof(child), "%.*s", (int)(dot - rest), rest);
        bson_iter_t s;
        if (bson_iter_init_find(&s, &seen, child))
            continue;
        BSON_APPEND_BOOL(&seen, child, true);
        char sub[256];
        snprintf(sub, sizeof(sub), "%s%s.", prefix, child);
        bson_t doc;
        bson_append_document_begin(out, child, -1, &doc);
        nest(flat, sub, &doc);
        bson_append_document_end(out, &doc);
    }
    bson_destroy(&seen);
}

int sbl_options_parse(int argc, char **argv, sbl_options_t *o, sbl_err_t *err)
{
    settings_t cli = {0}, all = {0};
    bson_t flat = BSON_INITIALIZER;
    const char *config = NULL;
    int rc = 0;

    memset(o, 0, sizeof(*o));
    o->action = SBL_ACTION_RUN;
    o->port = 27017;
    o->dbpath = bson_strdup("/data/db");
    o->max_conns = 1000000;
    o->commit_interval_ms = 100;
    o->syncdelay_s = 60;
    o->log_append = true;
    o->slowms = 100;
    o->slow_sample_rate = 1.0;
    o->unix_socket = true;
    o->unix_socket_prefix = bson_strdup("/tmp");
    o->unix_socket_perms = 0700;
    o->argc = argc;
    o->argv = argv;
    bson_init(&o->parsed);
    bson_init(&o->parameters);
    split_bind_ips(o, "127.0.0.1");

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char name[128];
        const char *value = NULL;
        if (strcmp(a, "-f") == 0) {
            a = "--config";
        } else if (a[0] == '-' && a[1] == 'v' && strspn(a + 1, "v") == strlen(a + 1)) {
            char n[24];
            snprintf(n, sizeof(n), "%zu", strlen(a + 1));
            settings_add(&cli, opt_by_name("verbose"), "systemLog.verbosity", n);
            continue;
        } else if (strcmp(a, "-h") == 0) {
            a = "--help";
        }
        if (strncmp(a, "--", 2) != 0) {
            rc = sbl_err_set(err, SBL_E_BadValue, "Error parsing command line: unexpected "
                             "argument '%s'; try '%s --help' for more information", a, argv[0]);
            goto err;
        }
        const char *eq = strchr(a + 2, '=');
        snprintf(name, sizeof(name), "%.*s", (int)(eq ? (size_t)(eq - a - 2) : strlen(a + 2)),
                 a + 2);
        const opt_def_t *def = opt_by_name(name);
        if (def == NULL) {
            rc = sbl_err_set(err, SBL_E_BadValue, "Error parsing command line: unrecognised "
                             "option '--%s'; try '%s --help' for more information", name, argv[0]);
            goto err;
        }
        if (def->kind == OPT_FLAG) {
            value = eq ? eq + 1 : "true";
            /* --noscripting and --nounixsocket set security.javascriptEnabled
             * and net.unixDomainSocket.enabled to their opposite. */
            if (strcmp(name, "noscripting") == 0 || strcmp(name, "nounixsocket") == 0)
                value = strcmp(value, "false") == 0 || strcmp(value, "0") == 0 ? "true" : "false";
        } else if (eq) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            rc = sbl_err_set(err, SBL_E_BadValue, "Error parsing command line: the required "
                             "argument for option '--%s' is missing", name);
            goto err;
        }
        if (strcmp(name, "help") == 0) {
            o->action = SBL_ACTION_HELP;
        } else if (strcmp(name, "version") == 0) {
            o->action = SBL_ACTION_VERSION;
        } else if (strcmp(name, "config") == 0) {
            config = value;
        } else if (strcmp(name, "configsvr") == 0 || strcmp(name, "shardsvr") == 0) {
            /* flags spelled as the YAML key's value, as mongod does */
            if (strcmp(value, "true") == 0)
                settings_add(&cli, def, def->key, name);
        } else if (def->kind == OPT_PARAM) {
            const char *peq = strchr(value, '=');
            if (peq == NULL || peq == value) {
                rc = sbl_err_set(err, SBL_E_BadValue, "Illegal --setParameter parameter: \"%s\"",
                                 value);
                goto err;
            }
            char key[256];
            snprintf(key, sizeof(key), "setParameter.%.*s", (int)(peq - value), value);
            settings_add(&cli, def, key, peq + 1);
        } else {
            settings_add(&cli, def, def->key, value);
        }
    }
    if (o->action != SBL_ACTION_RUN)
        goto done;

    if (config != NULL) {
        SBL_ERR(load_yaml(config, &all, err));
        BSON_APPEND_UTF8(&flat, "config", config);
    }
    for (size_t i = 0; i < cli.n; i++)
        settings_add(&all, cli.v[i].def, cli.v[i].key, cli.v[i].value);
    for (size_t i = 0; i < all.n; i++)
        SBL_ERR(apply_setting(o, &all.v[i], &flat, err));
    if (o->tls_mode != SBL_TLS_DISABLED && o->tls_cert_key_file == NULL) {
        rc = sbl_err_set(err, SBL_E_BadValue,
                         "need tlsCertificateKeyFile or certificateSelector when TLS is enabled");
        goto err;
    }
    nest(&flat, "", &o->parsed);

done:
err:
    settings_free(&cli);
    settings_free(&all);
    bson_destroy(&flat);
    return rc;
}

void sbl_options_destroy(sbl_options_t *o)
{
    for (size_t i = 0; i < o->nbind; i++)
        bson_free(o->bind_ips[i]);
    bson_free(o->bind_ips);
    bson_free(o->dbpath);
    bson_free(o->logpath);
    bson_free(o->pidfile);
    bson_free(o->wt_config);
    bson_free(o->wt_coll_config);
    bson_free(o->wt_index_config);
    bson_free(o->tls_cert_key_file);
    bson_free(o->tls_cert_key_password);
    bson_free(o->tls_ca_file);
    bson_free(o->tls_cluster_file);
    bson_free(o->tls_cluster_password);
    bson_free(o->tls_cluster_ca_file);
    bson_free(o->metrics_bind_ip);
    bson_free(o->unix_socket_prefix);
    bson_free(o->audit_path);
    bson_free(o->audit_filter);
    bson_free(o->repl_set_name);
    bson_free(o->key_file);
    bson_free(o->cluster_key);
    bson_free(o->config_db);
    bson_destroy(&o->parsed);
    bson_destroy(&o->parameters);
    memset(o, 0, sizeof(*o));
}

const char *sbl_options_help(void)
{
    static char text[8192];
    if (text[0] == '\0') {
        size_t off = (size_t)snprintf(text, sizeof(text),
                                      "Usage: sabled [options]\n\nOptions:\n");
        for (size_t i = 0; i < OPT_COUNT && off < sizeof(text); i++) {
            char left[64];
            snprintf(left, sizeof(left), "--%s%s", opt_table[i].name,
                     opt_table[i].kind == OPT_FLAG ? "" : " arg");
            off += (size_t)snprintf(text + off, sizeof(text) - off, "  %-32s %s\n", left,
                                    opt_table[i].help);
        }
        if (off < sizeof(text))
            snprintf(text + off, sizeof(text) - off,
                     "  %-32s %s\n  %-32s %s\n", "-f arg", "same as --config",
                     "-v [-vv ...]", "more log (-vv: level 2, and so on)");
    }
    return text;
}
