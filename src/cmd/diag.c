/*
 * diag.c: serverStatus and fsync.  serverStatus reports the sections tools
 * read (host, version, uptime, connections, network, opcounters, mem,
 * extra_info, metrics.cursor, wiredTiger) from counters kept elsewhere;
 * it never takes a lock on the request path.
 */
#include "cmd/cmd_int.h"
#include "server/server.h"

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

static void append_mem(bson_t *r)
{
    long pages_virt = 0, pages_res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        if (fscanf(f, "%ld %ld", &pages_virt, &pages_res) != 2)
            pages_virt = pages_res = 0;
        fclose(f);
    }
    long psize = sysconf(_SC_PAGESIZE);
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(r, "mem", &d);
    BSON_APPEND_INT32(&d, "bits", 64);
    BSON_APPEND_INT32(&d, "resident", (int32_t)((int64_t)pages_res * psize / (1024 * 1024)));
    BSON_APPEND_INT32(&d, "virtual", (int32_t)((int64_t)pages_virt * psize / (1024 * 1024)));
    BSON_APPEND_BOOL(&d, "supported", true);
    bson_append_document_end(r, &d);
}

int sbl_cmd_server_status(sbl_cmd_ctx_t *ctx, sbl_err_t *err)
{
    bson_t *r = ctx->reply, d, m, c;
    int64_t now = sbl_now_ms();
    int64_t up_ms = now - sbl_server_start_ms();
    sbl_net_stats_t ns;
    sbl_opcounters_t oc;
    struct rusage ru;

    BSON_APPEND_UTF8(r, "host", sbl_server_host());
    BSON_APPEND_UTF8(r, "version", SBL_VERSION);
    /* Tools tell a mongod from a mongos by this field. */
    BSON_APPEND_UTF8(r, "process", "mongod");
    BSON_APPEND_INT64(r, "pid", (int64_t)getpid());
    BSON_APPEND_DOUBLE(r, "uptime", (double)(up_ms / 1000));
    BSON_APPEND_INT64(r, "uptimeMillis", up_ms);
    BSON_APPEND_INT64(r, "uptimeEstimate", up_ms / 1000);
    BSON_APPEND_DATE_TIME(r, "localTime", now);

    sbl_net_get_stats(&ns);
    BSON_APPEND_DOCUMENT_BEGIN(r, "connections", &d);
    BSON_APPEND_INT32(&d, "current", (int32_t)ns.current);
    BSON_APPEND_INT32(&d, "available", (int32_t)ns.available);
    BSON_APPEND_INT32(&d, "totalCreated", (int32_t)ns.total_created);
    BSON_APPEND_INT32(&d, "active", (int32_t)ns.current);
    bson_append_document_end(r, &d);

    BSON_APPEND_DOCUMENT_BEGIN(r, "network", &d);
    BSON_APPEND_INT64(&d, "bytesIn", ns.bytes_in);
    BSON_APPEND_INT64(&d, "bytesOut", ns.bytes_out);
    BSON_APPEND_INT64(&d, "numRequests", ns.num_requests);
    bson_append_document_end(r, &d);

    sbl_cmd_get_opcounters(&oc);
    BSON_APPEND_DOCUMENT_BEGIN(r, "opcounters", &d);
    BSON_APPEND_INT64(&d, "insert", oc.insert);
    BSON_APPEND_INT64(&d, "query", oc.query);
    BSON_APPEND_INT64(&d, "update", oc.update);
    BSON_APPEND_INT64(&d, "delete", oc.del);
    BSON_APPEND_INT64(&d, "getmore", oc.getmore);
    BSON_APPEND_INT64(&d, "command", oc.command);
    bson_append_document_end(r, &d);

    append_mem(r);

    BSON_APPEND_DOCUMENT_BEGIN(r, "extra_info", &d);
    BSON_APPEND_UTF8(&d, "note", "fields vary by platform");
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        BSON_APPEND_INT64(&d, "user_time_us",
                          (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec);
        BSON_APPEND_INT64(&d, "system_time_us",
                          (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec);
        BSON_APPEND_INT64(&d, "maximum_resident_set_kb", ru.ru_maxrss);
        BSON_APPEND_INT64(&d, "page_faults", ru.ru_majflt);
    }
    bson_append_document_end(r, &d);

    BSON_APPEND_DOCUMENT_BEGIN(r, "metrics", &m);
    BSON_APPEND_DOCUMENT_BEGIN(&m, "cursor", &d);
    BSON_APPEND_DOCUMENT_BEGIN(&d, "open", &c);
    BSON_APPEND_INT64(&c, "total", sbl_cursors_open_count());
    bson_append_document_end(&d, &c);
    bson_append_document_end(&m, &d);
    bson_append_document_end(r, &m);

    BSON_APPEND_DOCUMENT_BEGIN(r, "storageEngine", &d);
    BSON_APPEND_UTF8(&d, "name", "wiredTiger");
    BSON_APPEND_BOOL(&d, "supportsCommittedReads", true);
    BSON_APPEND_BOOL(&d, "persistent", true);
    bson_append_document_end(r, &d);

    BSON_APPEND_DOCUMENT_BEGIN(r, "wiredTiger", &d);
    sbl_storage_append_stats(&d);
    bson_append_document_end(r, &d);
    return 0;
}

int sbl_cmd_fsync(sbl_cmd_ctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, ctx->cmd, "lock") && bson_iter_as_bool(&it))
        return sbl_err_set(err, SBL_E_CommandNotSupported, "fsync with lock is not supported");
    SBL_RET(sbl_storage_flush(err));
    SBL_RET(sbl_storage_checkpoint(err));
    BSON_APPEND_INT32(ctx->reply, "numFiles", 1);
    return 0;
}
