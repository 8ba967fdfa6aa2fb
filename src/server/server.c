/*
 * server.c: the process-wide facts other modules may read (options, start
 * time, host name).  main() fills them once before any thread starts; they
 * are read-only afterwards.
 */
#include "server/server.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static sbl_options_t empty_options;
static const sbl_options_t *server_options = &empty_options;
static int64_t server_start_ms;
static char server_host[300] = "localhost:27017";

void sbl_server_init(const sbl_options_t *o)
{
    char hn[256] = "localhost";
    server_options = o;
    server_start_ms = (int64_t)time(NULL) * 1000;
    gethostname(hn, sizeof(hn) - 1);
    snprintf(server_host, sizeof(server_host), "%s:%d", hn, o->port);
}

const sbl_options_t *sbl_server_options(void)
{
    return server_options;
}

int64_t sbl_server_start_ms(void)
{
    return server_start_ms;
}

const char *sbl_server_host(void)
{
    return server_host;
}

void sbl_server_request_shutdown(void)
{
    kill(getpid(), SIGTERM);
}
