/*
 * server.c: the process-wide facts other modules may read (options, start
 * time, host name).  main() fills them once before any thread starts; they
 * are read-only afterwards.
 */
#include "server/server.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static sbl_options_t empty_options;
static const sbl_options_t *server_options = &empty_options;
static int64_t server_start_ms;
static char server_host[300] = "localhost:27017";
static char cluster_uri_opts[3 * 4096]; /* libmongoc's TLS options for member connections */

void sbl_server_init(const sbl_options_t *o)
{
    char hn[256] = "localhost";
    server_options = o;
    server_start_ms = (int64_t)time(NULL) * 1000;
    gethostname(hn, sizeof(hn) - 1);
    snprintf(server_host, sizeof(server_host), "%s:%d", hn, o->port);
}

void sbl_server_set_cluster_uri_opts(const char *opts)
{
    snprintf(cluster_uri_opts, sizeof(cluster_uri_opts), "%s", opts);
}

const char *sbl_server_cluster_uri_opts(void)
{
    return cluster_uri_opts;
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

int sbl_server_fork(int *notify_fd, const char *stderr_path)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid > 0) {
        char status = 1;
        close(fds[1]);
        if (read(fds[0], &status, 1) != 1)
            status = 1;
        if (status == 0) {
            printf("forked process: %d\nchild process started successfully, parent exiting\n",
                   (int)pid);
            exit(0);
        }
        fprintf(stderr, "ERROR: child process failed, exited with error; see the log file\n");
        exit(1);
    }
    close(fds[0]);
    setsid();
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
        dup2(devnull, STDIN_FILENO);
        dup2(devnull, STDOUT_FILENO);
        int errfd = stderr_path != NULL ? open(stderr_path, O_WRONLY | O_APPEND | O_CREAT, 0644)
                                        : -1;
        dup2(errfd >= 0 ? errfd : devnull, STDERR_FILENO);
        if (errfd > 2)
            close(errfd);
        if (devnull > 2)
            close(devnull);
    }
    *notify_fd = fds[1];
    return 0;
}

void sbl_server_notify_parent(int fd, char status)
{
    if (fd >= 0) {
        if (write(fd, &status, 1) != 1) {
            /* the parent is gone; nothing to tell */
        }
        close(fd);
    }
}
