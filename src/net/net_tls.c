/*
 * net_tls.c: TLS for connections, with OpenSSL over memory BIOs so libuv
 * keeps doing all socket I/O.
 *
 * A connection's TLS state (sbl_conn_t.tls_state):
 *   PLAIN      bytes go straight into the read buffer (the only state with
 *              --tlsMode disabled: the plaintext path is unchanged);
 *   UNDECIDED  allowTLS / preferTLS / requireTLS before the first bytes: a
 *              TLS handshake record header (0x16 0x03 0x01-0x04) makes it
 *              TLS, anything else PLAIN (requireTLS closes instead);
 *   TLS        ciphertext from the socket goes into the SSL's read BIO,
 *              plaintext from SSL_read into the read buffer; replies are
 *              SSL_write'n and the write BIO's ciphertext is sent raw.
 * What must stay true: the SSL object is touched only by the connection's
 * loop thread (replies from workers are encrypted when they arrive there),
 * and a handshake or record error closes the connection, never the server.
 */
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "net/net_int.h"

#define TLS_RECORD_BYTE 0x16
#define PLAIN_CHUNK (16 * 1024)

struct net_tls {
    SSL *ssl;
    BIO *rbio, *wbio; /* owned by ssl */
    uint8_t cbuf[64 * 1024]; /* ciphertext read from the socket */
};

static SSL_CTX *tls_ctx;
static int tls_mode;

static char *key_password;

int net_tls_password_cb(char *buf, int size, int rwflag, void *u)
{
    const char *pw = u;
    int n = pw != NULL ? (int)strlen(pw) : 0;
    if (n > size)
        n = size;
    if (n > 0) /* no password: nothing to copy (memcpy from NULL is undefined even for 0) */
        memcpy(buf, pw, (size_t)n);
    return n;
}

int net_tls_accept_any_cb(int ok, X509_STORE_CTX *ctx)
{
    return 1;
}

void net_tls_error(char *out, size_t n)
{
    unsigned long e = ERR_get_error();
    if (e == 0)
        snprintf(out, n, "unknown error");
    else
        ERR_error_string_n(e, out, n);
    ERR_clear_error();
}

int net_tls_init(const sbl_net_config_t *cfg, sbl_err_t *err)
{
    char why[256];
    tls_mode = cfg->tls_mode;
    if (cfg->tls_mode == SBL_NET_TLS_DISABLED)
        return 0;
    if (cfg->tls_cert_key_file == NULL)
        return sbl_err_set(err, SBL_E_BadValue,
                           "need tlsCertificateKeyFile or certificateSelector when TLS is enabled");
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "cannot create the TLS context");
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    key_password = cfg->tls_cert_key_password != NULL ? bson_strdup(cfg->tls_cert_key_password)
                                                      : NULL;
    SSL_CTX_set_default_passwd_cb(ctx, net_tls_password_cb);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, key_password);
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert_key_file) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_cert_key_file, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        net_tls_error(why, sizeof(why));
        SSL_CTX_free(ctx);
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "cannot read certificate and key from %s: %s", cfg->tls_cert_key_file,
                           why);
    }
    if (cfg->tls_ca_file != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, cfg->tls_ca_file, NULL) != 1) {
            net_tls_error(why, sizeof(why));
            SSL_CTX_free(ctx);
            return sbl_err_set(err, SBL_E_InvalidOptions, "cannot read CA file %s: %s",
                               cfg->tls_ca_file, why);
        }
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(cfg->tls_ca_file);
        if (names != NULL)
            SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (cfg->tls_allow_no_cert
                                                       ? 0 : SSL_VERIFY_FAIL_IF_NO_PEER_CERT),
                           cfg->tls_allow_invalid_certs ? net_tls_accept_any_cb : NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    tls_ctx = ctx;
    return 0;
}

void net_tls_shutdown(void)
{
    if (tls_ctx != NULL)
        SSL_CTX_free(tls_ctx);
    tls_ctx = NULL;
    bson_free(key_password);
    key_password = NULL;
}

void net_tls_conn_init(sbl_conn_t *c)
{
    c->tls = NULL;
    c->tls_state = tls_ctx != NULL ? NET_TLS_UNDECIDED : NET_TLS_PLAIN;
}

void net_tls_conn_free(sbl_conn_t *c)
{
    if (c->tls == NULL)
        return;
    SSL_free(c->tls->ssl);
    free(c->tls);
    c->tls = NULL;
}

/*
 * A TLS record header: content type 22 (handshake) and version 3.x.  A wire
 * message starts with its little-endian length instead; one that begins
 * 0x16 0x03 0x01..0x04 would be over 64 KiB, which no first message
 * (hello) is.
 */
static bool looks_like_tls(const uint8_t *h)
{
    return h[0] == TLS_RECORD_BYTE && h[1] == 0x03 && h[2] >= 0x01 && h[2] <= 0x04;
}

static void log_tls(const sbl_conn_t *c, const char *msg, const char *error)
{
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "remote", c->remote);
    BSON_APPEND_INT64(&attr, "connectionId", (int64_t)c->id);
    if (error != NULL)
        BSON_APPEND_UTF8(&attr, "error", error);
    sbl_log(SBL_LOG_INFO, "NETWORK", 22988, msg, &attr);
    bson_destroy(&attr);
}

/* Send whatever ciphertext the SSL produced. */
static int flush_wbio(sbl_conn_t *c)
{
    size_t n = BIO_ctrl_pending(c->tls->wbio);
    if (n == 0)
        return 0;
    uint8_t *mem = malloc(n);
    if (mem == NULL)
        return -1;
    int got = BIO_read(c->tls->wbio, mem, (int)n);
    if (got <= 0) {
        free(mem);
        return -1;
    }
    net_conn_write_raw(c, mem, (size_t)got, mem);
    return 0;
}

uv_buf_t net_tls_read_buffer(sbl_conn_t *c)
{
    return uv_buf_init((char *)c->tls->cbuf, sizeof(c->tls->cbuf));
}

/* Feed ciphertext, pull plaintext into the read buffer.  0, or -1: close. */
static int tls_feed(sbl_conn_t *c, const uint8_t *data, size_t len)
{
    net_tls_t *t = c->tls;
    while (len > 0) {
        int w = BIO_write(t->rbio, data, (int)len);
        if (w <= 0)
            return -1;
        data += w;
        len -= (size_t)w;
    }
    for (;;) {
        uint8_t *dst = net_conn_reserve(c, PLAIN_CHUNK);
        if (dst == NULL)
            return -1;
        int n = SSL_read(t->ssl, dst, (int)(c->rcap - c->rend));
        if (n > 0) {
            c->rend += (size_t)n;
            continue;
        }
        int e = SSL_get_error(t->ssl, n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            break;
        char why[256];
        if (e == SSL_ERROR_ZERO_RETURN) {
            flush_wbio(c);
            return -1; /* the peer closed TLS */
        }
        net_tls_error(why, sizeof(why));
        flush_wbio(c); /* an alert, if any */
        log_tls(c, "Error receiving request from client. Ending connection", why);
        return -1;
    }
    return flush_wbio(c);
}

int net_tls_on_read(sbl_conn_t *c, const uint8_t *data, size_t len)
{
    if (c->tls_state != NET_TLS_UNDECIDED)
        return tls_feed(c, data, len);
    /* The bytes are in the read buffer (alloc_cb gave it); decide on the first three. */
    c->rend += len;
    size_t have = c->rend - c->rstart;
    if (have < 3)
        return 0;
    const uint8_t *h = c->rbuf + c->rstart;
    if (!looks_like_tls(h)) {
        if (tls_mode == SBL_NET_TLS_REQUIRE) {
            log_tls(c, "Error receiving request from client. Ending connection",
                    "SSLHandshakeFailed: the server requires TLS (tlsMode requireTLS)");
            return -1;
        }
        c->tls_state = NET_TLS_PLAIN;
        return 0;
    }
    net_tls_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -1;
    t->ssl = SSL_new(tls_ctx);
    t->rbio = BIO_new(BIO_s_mem());
    t->wbio = BIO_new(BIO_s_mem());
    if (t->ssl == NULL || t->rbio == NULL || t->wbio == NULL) {
        if (t->ssl != NULL)
            SSL_free(t->ssl);
        BIO_free(t->rbio);
        BIO_free(t->wbio);
        free(t);
        return -1;
    }
    SSL_set_bio(t->ssl, t->rbio, t->wbio);
    SSL_set_accept_state(t->ssl);
    c->tls = t;
    c->tls_state = NET_TLS_ON;
    /* Move the ciphertext out of the read buffer, which now receives plaintext. */
    uint8_t *copy = malloc(have);
    if (copy == NULL)
        return -1;
    memcpy(copy, h, have);
    c->rstart = c->rend = 0;
    int rc = tls_feed(c, copy, have);
    free(copy);
    return rc;
}

void net_tls_write(sbl_conn_t *c, const uint8_t *data, size_t len)
{
    net_tls_t *t = c->tls;
    while (len > 0) {
        int chunk = len > (1u << 30) ? 1 << 30 : (int)len;
        int n = SSL_write(t->ssl, data, chunk);
        if (n <= 0) {
            char why[256];
            net_tls_error(why, sizeof(why));
            log_tls(c, "Error sending response to client. Ending connection", why);
            net_conn_close(c);
            return;
        }
        data += n;
        len -= (size_t)n;
    }
    if (flush_wbio(c) != 0)
        net_conn_close(c);
}
