/*
 * auth_scram.c: the SCRAM-SHA-1 / SCRAM-SHA-256 server side (RFC 5802, 7677),
 * SASLprep, and credential derivation, on OpenSSL's primitives.
 *
 * The conversation: start (client-first "n,,n=user,r=cnonce") -> server-first
 * "r=cnonce+snonce,s=salt,i=iterations" -> step 1 (client-final
 * "c=biws,r=nonce,p=proof") -> verify H(proof XOR HMAC(StoredKey, AuthMessage))
 * == StoredKey -> server-final "v=HMAC(ServerKey, AuthMessage)" -> step 2
 * (empty) -> done.  What must stay true: an unknown user runs the same
 * conversation with a salt derived from a per-process secret (stable for a
 * name, so repeated probes look alike) and keys nobody can match, so every
 * failure is the same "Authentication failed." at the proof; a failed or
 * finished conversation accepts no further step.
 *
 * SASLprep coverage (RFC 4013): non-ASCII spaces (C.1.2) map to U+0020; the
 * "commonly mapped to nothing" set (B.1) is removed; control characters
 * (C.2), private use (C.3), non-characters (C.4), surrogates (C.5),
 * inappropriate-for-plain-text (C.6), ideographic description (C.7),
 * change-display (C.8) and tagging (C.9) code points are refused.  NFKC
 * normalisation, the unassigned-code-point check and the bidi rule are not
 * applied: ASCII passwords (and most others) are unaffected.
 */
#include "auth/auth.h"
#include "auth/auth_int.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/md5.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define AUTH_FAIL_DELAY_MS 250
#define AUTH_FAIL_DELAY_MAX_MS 3000
#include <string.h>

#define SHA1_ITERATIONS 10000
#define SHA256_ITERATIONS 15000
#define SHA1_SALT_LEN 16
#define SHA256_SALT_LEN 28
#define NONCE_BYTES 24
#define MAX_HASH 32

/* ---- base64 ---------------------------------------------------------------- */

char *sbl_auth_b64(const uint8_t *in, size_t len)
{
    char *out = bson_malloc(4 * ((len + 2) / 3) + 1);
    EVP_EncodeBlock((unsigned char *)out, in, (int)len);
    return out;
}

/* Decode n chars of base64 into out (capacity cap); returns the length or -1. */
int sbl_auth_unb64(const char *in, size_t n, uint8_t *out, size_t cap)
{
    if (n % 4 != 0 || n / 4 * 3 > cap + 2)
        return -1;
    if (n == 0)
        return 0;
    uint8_t *tmp = bson_malloc(n / 4 * 3 + 1);
    int len = EVP_DecodeBlock(tmp, (const unsigned char *)in, (int)n);
    if (len < 0) {
        bson_free(tmp);
        return -1;
    }
    if (in[n - 1] == '=')
        len--;
    if (n >= 2 && in[n - 2] == '=')
        len--;
    if ((size_t)len > cap) {
        bson_free(tmp);
        return -1;
    }
    memcpy(out, tmp, (size_t)len);
    bson_free(tmp);
    return len;
}

/* ---- SASLprep ---------------------------------------------------------------- */

static bool in_b1(uint32_t c)
{
    return c == 0x00AD || c == 0x034F || c == 0x1806 || (c >= 0x180B && c <= 0x180D) ||
           (c >= 0x200B && c <= 0x200D) || c == 0x2060 || (c >= 0xFE00 && c <= 0xFE0F) ||
           c == 0xFEFF;
}

static bool in_c12(uint32_t c)
{
    return c == 0x00A0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200B) || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static bool prohibited(uint32_t c)
{
    if (c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0x9F)) /* C.2.1, C.2.2 */
        return true;
    if (c == 0x06DD || c == 0x070F || c == 0x180E || c == 0x200C || c == 0x200D || c == 0x2028 ||
        c == 0x2029 || (c >= 0x2060 && c <= 0x2063) || (c >= 0x206A && c <= 0x206F) ||
        c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFD) || (c >= 0x1D173 && c <= 0x1D17A))
        return true; /* C.2.2, C.6 */
    if ((c >= 0xE000 && c <= 0xF8FF) || (c >= 0xF0000 && c <= 0xFFFFD) ||
        (c >= 0x100000 && c <= 0x10FFFD))
        return true; /* C.3 */
    if ((c >= 0xFDD0 && c <= 0xFDEF) || (c & 0xFFFE) == 0xFFFE || (c >= 0xD800 && c <= 0xDFFF))
        return true; /* C.4, C.5 */
    if ((c >= 0x2FF0 && c <= 0x2FFB) || c == 0x0340 || c == 0x0341 || c == 0x200E ||
        c == 0x200F || (c >= 0x202A && c <= 0x202E))
        return true; /* C.7, C.8 */
    if (c == 0xE0001 || (c >= 0xE0020 && c <= 0xE007F))
        return true; /* C.9 */
    return false;
}

/* Decode one UTF-8 code point at *p (n bytes left); returns its length or 0. */
static size_t utf8_next(const unsigned char *p, size_t n, uint32_t *cp)
{
    if (p[0] < 0x80) {
        *cp = p[0];
        return 1;
    }
    size_t len = (p[0] & 0xE0) == 0xC0 ? 2 : (p[0] & 0xF0) == 0xE0 ? 3 : (p[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    uint32_t c = p[0] & (0xFF >> (len + 1));
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (p[i] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[len] || c > 0x10FFFF)
        return 0;
    *cp = c;
    return len;
}

int sbl_saslprep(const char *in, char **outp, sbl_err_t *err)
{
    size_t n = strlen(in);
    char *out = bson_malloc(n + 1);
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)in;
    *outp = NULL;
    while (n > 0) {
        uint32_t c;
        size_t len = utf8_next(p, n, &c);
        if (len == 0) {
            bson_free(out);
            return sbl_err_set(err, SBL_E_BadValue, "SASLprep: invalid UTF-8");
        }
        if (in_b1(c)) {
            /* mapped to nothing */
        } else if (in_c12(c)) {
            out[o++] = ' ';
        } else if (prohibited(c)) {
            bson_free(out);
            return sbl_err_set(err, SBL_E_BadValue,
                               "SASLprep: prohibited character U+%04X in password", (unsigned)c);
        } else {
            memcpy(out + o, p, len);
            o += len;
        }
        p += len;
        n -= len;
    }
    out[o] = '\0';
    *outp = out;
    return 0;
}

/* ---- credentials --------------------------------------------------------------- */

typedef struct mech {
    const char *name;
    const EVP_MD *(*md)(void);
    size_t hlen, salt_len;
    int iterations;
} mech_t;

static const mech_t mechs[] = {
    {"SCRAM-SHA-1", EVP_sha1, 20, SHA1_SALT_LEN, SHA1_ITERATIONS},
    {"SCRAM-SHA-256", EVP_sha256, 32, SHA256_SALT_LEN, SHA256_ITERATIONS},
};

static const mech_t *mech_find(const char *name)
{
    for (size_t i = 0; i < sizeof(mechs) / sizeof(mechs[0]); i++)
        if (strcmp(mechs[i].name, name) == 0)
            return &mechs[i];
    return NULL;
}

/* The password as the mechanism hashes it: hex MD5("user:mongo:pw") for SHA-1, SASLprep'd for SHA-256. */
static int mech_password(const mech_t *m, const char *user, const char *pw, char **outp,
                         sbl_err_t *err)
{
    if (m->hlen == 32)
        return sbl_saslprep(pw, outp, err);
    char *joined = bson_strdup_printf("%s:mongo:%s", user, pw);
    uint8_t d[MD5_DIGEST_LENGTH];
    EVP_Digest(joined, strlen(joined), d, NULL, EVP_md5(), NULL);
    bson_free(joined);
    char *hex = bson_malloc(2 * MD5_DIGEST_LENGTH + 1);
    for (int i = 0; i < MD5_DIGEST_LENGTH; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    *outp = hex;
    return 0;
}

static void hmac(const mech_t *m, const uint8_t *key, size_t klen, const void *data, size_t len,
                 uint8_t *out)
{
    unsigned int olen = 0;
    HMAC(m->md(), key, (int)klen, data, len, out, &olen);
}

static void derive_keys(const mech_t *m, const char *pw, const uint8_t *salt, size_t salt_len,
                        int iterations, uint8_t *stored, uint8_t *server)
{
    uint8_t salted[MAX_HASH], client[MAX_HASH];
    PKCS5_PBKDF2_HMAC(pw, (int)strlen(pw), salt, (int)salt_len, iterations, m->md(), (int)m->hlen,
                      salted);
    hmac(m, salted, m->hlen, "Client Key", 10, client);
    EVP_Digest(client, m->hlen, stored, NULL, m->md(), NULL);
    hmac(m, salted, m->hlen, "Server Key", 10, server);
    OPENSSL_cleanse(salted, sizeof(salted));
    OPENSSL_cleanse(client, sizeof(client));
}

int sbl_auth_make_credentials(const char *user, const char *password, bool sha1, bool sha256,
                              bson_t *out, sbl_err_t *err)
{
    for (size_t i = 0; i < sizeof(mechs) / sizeof(mechs[0]); i++) {
        const mech_t *m = &mechs[i];
        if ((m->hlen == 20 && !sha1) || (m->hlen == 32 && !sha256))
            continue;
        char *pw = NULL;
        SBL_RET(mech_password(m, user, password, &pw, err));
        uint8_t salt[SHA256_SALT_LEN], stored[MAX_HASH], server[MAX_HASH];
        RAND_bytes(salt, (int)m->salt_len);
        derive_keys(m, pw, salt, m->salt_len, m->iterations, stored, server);
        OPENSSL_cleanse(pw, strlen(pw));
        bson_free(pw);
        bson_t c;
        char *salt64 = sbl_auth_b64(salt, m->salt_len);
        char *stored64 = sbl_auth_b64(stored, m->hlen);
        char *server64 = sbl_auth_b64(server, m->hlen);
        bson_append_document_begin(out, m->name, -1, &c);
        BSON_APPEND_INT32(&c, "iterationCount", m->iterations);
        BSON_APPEND_UTF8(&c, "salt", salt64);
        BSON_APPEND_UTF8(&c, "storedKey", stored64);
        BSON_APPEND_UTF8(&c, "serverKey", server64);
        bson_free(salt64);
        bson_free(stored64);
        bson_free(server64);
        bson_append_document_end(out, &c);
    }
    return 0;
}

/* ---- the conversation ------------------------------------------------------------ */

struct sbl_scram {
    const mech_t *m;
    char user[256];
    char db[128];
    int step;  /* 0: server-first sent; 1: server-final sent; 2: done; -1: failed */
    uint8_t stored[MAX_HASH], server[MAX_HASH];
    char *client_first_bare;
    char *server_first;
    char *nonce;      /* client nonce + server nonce */
    char *gs2_header; /* "n,," etc., as the client sent it */
};

static uint8_t fake_secret[32];
static pthread_once_t fake_once = PTHREAD_ONCE_INIT;

static void fake_init(void)
{
    RAND_bytes(fake_secret, sizeof(fake_secret));
}

static int bad(sbl_err_t *err, const char *what)
{
    return sbl_err_set(err, SBL_E_BadValue, "Invalid SCRAM message: %s", what);
}

/* Decode a SCRAM saslname ("=2C" -> ",", "=3D" -> "=") of n bytes into out. */
static int decode_saslname(const char *in, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        if (c == '=') {
            if (i + 2 >= n)
                return -1;
            if (in[i + 1] == '2' && in[i + 2] == 'C')
                c = ',';
            else if (in[i + 1] == '3' && in[i + 2] == 'D')
                c = '=';
            else
                return -1;
            i += 2;
        } else if (c == ',') {
            return -1;
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

/* Load user@db's credentials for the mechanism; false when there are none. */
static bool load_credentials(sbl_session_t *ss, sbl_scram_t *s, int *iterations, uint8_t *salt,
                             size_t *salt_len)
{
    bson_t doc;
    bool found = false, ok = false;
    sbl_err_t e;
    if (sbl_auth_user_get(ss, s->db, s->user, &doc, &found, &e) != 0 || !found)
        return false;
    bson_iter_t it, c;
    char path[64];
    snprintf(path, sizeof(path), "credentials.%s", s->m->name);
    if (bson_iter_init(&it, &doc) && bson_iter_find_descendant(&it, path, &c) &&
        BSON_ITER_HOLDS_DOCUMENT(&c)) {
        bson_iter_t f;
        int have = 0;
        bson_iter_recurse(&c, &f);
        while (bson_iter_next(&f)) {
            const char *k = bson_iter_key(&f);
            uint32_t len = 0;
            const char *v = BSON_ITER_HOLDS_UTF8(&f) ? bson_iter_utf8(&f, &len) : NULL;
            if (strcmp(k, "iterationCount") == 0 && BSON_ITER_HOLDS_NUMBER(&f)) {
                *iterations = (int)bson_iter_as_int64(&f);
                have |= 1;
            } else if (strcmp(k, "salt") == 0 && v != NULL) {
                int n = sbl_auth_unb64(v, len, salt, 64);
                if (n > 0) {
                    *salt_len = (size_t)n;
                    have |= 2;
                }
            } else if (strcmp(k, "storedKey") == 0 && v != NULL) {
                if (sbl_auth_unb64(v, len, s->stored, MAX_HASH) == (int)s->m->hlen)
                    have |= 4;
            } else if (strcmp(k, "serverKey") == 0 && v != NULL) {
                if (sbl_auth_unb64(v, len, s->server, MAX_HASH) == (int)s->m->hlen)
                    have |= 8;
            }
        }
        ok = have == 15 && *iterations > 0;
    }
    bson_destroy(&doc);
    return ok;
}

int sbl_auth_check_password(sbl_session_t *ss, const char *db, const char *user,
                             const char *password, bool *okp, sbl_err_t *err)
{
    static const char *const order[] = {"SCRAM-SHA-256", "SCRAM-SHA-1"};
    *okp = false;
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
        sbl_scram_t s;
        int iterations = 0;
        uint8_t salt[64], stored[MAX_HASH], server[MAX_HASH];
        size_t salt_len = 0;
        memset(&s, 0, sizeof(s));
        s.m = mech_find(order[i]);
        snprintf(s.user, sizeof(s.user), "%s", user);
        snprintf(s.db, sizeof(s.db), "%s", db);
        if (!load_credentials(ss, &s, &iterations, salt, &salt_len))
            continue;
        char *pw = NULL;
        SBL_RET(mech_password(s.m, user, password, &pw, err));
        derive_keys(s.m, pw, salt, salt_len, iterations, stored, server);
        OPENSSL_cleanse(pw, strlen(pw));
        bson_free(pw);
        *okp = CRYPTO_memcmp(stored, s.stored, s.m->hlen) == 0;
        return 0; /* the strongest mechanism the user has decides */
    }
    return 0;
}

static void fake_credentials(sbl_scram_t *s, int *iterations, uint8_t *salt, size_t *salt_len)
{
    uint8_t d[32];
    unsigned int dlen = 0;
    char *seed;
    pthread_once(&fake_once, fake_init);
    seed = bson_strdup_printf("%s\n%s\n%s", s->m->name, s->db, s->user);
    HMAC(EVP_sha256(), fake_secret, sizeof(fake_secret), (const uint8_t *)seed, strlen(seed), d,
         &dlen);
    bson_free(seed);
    *salt_len = s->m->salt_len;
    memcpy(salt, d, *salt_len);
    *iterations = s->m->iterations;
    RAND_bytes(s->stored, MAX_HASH);
    RAND_bytes(s->server, MAX_HASH);
}

int sbl_scram_start(sbl_session_t *ss, const char *db, const char *mechanism,
                    const uint8_t *payload, size_t len, sbl_scram_t **convp, uint8_t **outp,
                    size_t *outlenp, sbl_err_t *err)
{
    const mech_t *m = mech_find(mechanism);
    *convp = NULL;
    *outp = NULL;
    *outlenp = 0;
    if (m == NULL)
        return sbl_err_set(err, SBL_E_MechanismUnavailable,
                           "Received authentication for mechanism %s which is not enabled",
                           mechanism);
    char *msg = bson_malloc(len + 1);
    memcpy(msg, payload, len);
    msg[len] = '\0';
    int rc = 0;
    sbl_scram_t *s = bson_malloc0(sizeof(*s));
    s->m = m;
    bson_strncpy(s->db, db, sizeof(s->db));
    if (strlen(msg) != len) {
        rc = bad(err, "NUL byte in client-first");
        goto err;
    }
    /* gs2 header: cbind-flag "," [authzid] "," */
    if (!(msg[0] == 'n' || msg[0] == 'y') || msg[1] != ',') {
        rc = msg[0] == 'p' ? sbl_err_set(err, SBL_E_BadValue,
                                         "Server does not support channel binding")
                           : bad(err, "bad gs2 header");
        goto err;
    }
    char *c2 = strchr(msg + 2, ',');
    if (c2 == NULL) {
        rc = bad(err, "bad gs2 header");
        goto err;
    }
    char authzid[256] = "";
    if (c2 != msg + 2) {
        if (strncmp(msg + 2, "a=", 2) != 0 ||
            decode_saslname(msg + 4, (size_t)(c2 - msg - 4), authzid, sizeof(authzid)) != 0) {
            rc = bad(err, "bad authzid");
            goto err;
        }
    }
    s->gs2_header = bson_strndup(msg, (size_t)(c2 - msg + 1));
    const char *bare = c2 + 1;
    s->client_first_bare = bson_strdup(bare);
    if (strncmp(bare, "n=", 2) != 0) {
        rc = bad(err, strncmp(bare, "m=", 2) == 0 ? "mandatory extensions are not supported"
                                                  : "client-first must start with n=");
        goto err;
    }
    const char *uend = strchr(bare, ',');
    if (uend == NULL || strncmp(uend, ",r=", 3) != 0 ||
        decode_saslname(bare + 2, (size_t)(uend - bare - 2), s->user, sizeof(s->user)) != 0 ||
        s->user[0] == '\0') {
        rc = bad(err, "bad user name or missing nonce");
        goto err;
    }
    if (authzid[0] != '\0' && strcmp(authzid, s->user) != 0) {
        rc = sbl_err_set(err, SBL_E_BadValue,
                         "SCRAM user name %s does not match authzid %s", s->user, authzid);
        goto err;
    }
    const char *cnonce = uend + 3;
    size_t cnlen = strcspn(cnonce, ",");
    if (cnlen == 0) {
        rc = bad(err, "empty client nonce");
        goto err;
    }
    for (size_t i = 0; i < cnlen; i++)
        if (cnonce[i] < 0x21 || cnonce[i] > 0x7E) {
            rc = bad(err, "bad client nonce");
            goto err;
        }

    int iterations = 0;
    uint8_t salt[64];
    size_t salt_len = 0;
    if (!load_credentials(ss, s, &iterations, salt, &salt_len))
        fake_credentials(s, &iterations, salt, &salt_len);

    uint8_t raw[NONCE_BYTES];
    RAND_bytes(raw, sizeof(raw));
    char *snonce = sbl_auth_b64(raw, sizeof(raw));
    s->nonce = bson_strdup_printf("%.*s%s", (int)cnlen, cnonce, snonce);
    bson_free(snonce);
    char *salt64 = sbl_auth_b64(salt, salt_len);
    s->server_first = bson_strdup_printf("r=%s,s=%s,i=%d", s->nonce, salt64, iterations);
    bson_free(salt64);
    *outlenp = strlen(s->server_first);
    *outp = (uint8_t *)bson_strdup(s->server_first);
    *convp = s;
    bson_free(msg);
    return 0;
err:
    bson_free(msg);
    sbl_scram_free(s);
    return rc;
}

static int auth_failed(sbl_scram_t *s, sbl_err_t *err)
{
    s->step = -1;
    return sbl_err_set(err, SBL_E_AuthenticationFailed, "Authentication failed.");
}

int sbl_scram_step(sbl_scram_t *s, const uint8_t *payload, size_t len, bool skip_empty_exchange,
                   uint8_t **outp, size_t *outlenp, bool *donep, sbl_err_t *err)
{
    *outp = NULL;
    *outlenp = 0;
    *donep = false;
    if (s->step == 1) {
        /* The client's empty last message. */
        s->step = 2;
        *outp = (uint8_t *)bson_strdup("");
        *donep = true;
        return 0;
    }
    if (s->step != 0)
        return sbl_err_set(err, SBL_E_ProtocolError, "SCRAM conversation is already %s",
                           s->step == 2 ? "complete" : "failed");

    char *msg = bson_malloc(len + 1);
    memcpy(msg, payload, len);
    msg[len] = '\0';
    int rc = 0;
    if (strlen(msg) != len || strncmp(msg, "c=", 2) != 0) {
        rc = bad(err, "client-final must start with c=");
        goto err;
    }
    const char *pp = strstr(msg, ",p=");
    const char *rp = strchr(msg, ',');
    if (pp == NULL || rp == NULL || strncmp(rp, ",r=", 3) != 0 || strchr(pp + 3, ',') != NULL) {
        rc = bad(err, "client-final must be c=...,r=...,p=...");
        goto err;
    }
    /* Channel binding: base64 of the gs2 header the client sent first. */
    char *cb = sbl_auth_b64((const uint8_t *)s->gs2_header, strlen(s->gs2_header));
    bool cb_ok = (size_t)(rp - msg - 2) == strlen(cb) && strncmp(msg + 2, cb, strlen(cb)) == 0;
    bson_free(cb);
    const char *nonce = rp + 3;
    size_t nlen = strcspn(nonce, ",");
    bool nonce_ok = nlen == strlen(s->nonce) && CRYPTO_memcmp(nonce, s->nonce, nlen) == 0;
    uint8_t proof[MAX_HASH + 3];
    int plen = sbl_auth_unb64(pp + 3, strlen(pp + 3), proof, sizeof(proof));
    if (plen < 0) {
        rc = bad(err, "bad proof encoding");
        goto err;
    }
    if (!cb_ok || !nonce_ok || (size_t)plen != s->m->hlen) {
        rc = auth_failed(s, err);
        goto err;
    }

    const mech_t *m = s->m;
    char *auth_msg = bson_strdup_printf("%s,%s,%.*s", s->client_first_bare, s->server_first,
                                        (int)(pp - msg), msg);
    uint8_t sig[MAX_HASH], key[MAX_HASH], h[MAX_HASH];
    hmac(m, s->stored, m->hlen, auth_msg, strlen(auth_msg), sig);
    for (size_t i = 0; i < m->hlen; i++)
        key[i] = proof[i] ^ sig[i];
    EVP_Digest(key, m->hlen, h, NULL, m->md(), NULL);
    if (CRYPTO_memcmp(h, s->stored, m->hlen) != 0) {
        bson_free(auth_msg);
        rc = auth_failed(s, err);
        goto err;
    }
    hmac(m, s->server, m->hlen, auth_msg, strlen(auth_msg), sig);
    bson_free(auth_msg);
    char *v = sbl_auth_b64(sig, m->hlen);
    char *out = bson_strdup_printf("v=%s", v);
    bson_free(v);
    *outp = (uint8_t *)out;
    *outlenp = strlen(out);
    s->step = skip_empty_exchange ? 2 : 1;
    *donep = skip_empty_exchange;
err:
    bson_free(msg);
    return rc;
}

const char *sbl_scram_user(const sbl_scram_t *s)
{
    return s->user;
}

const char *sbl_scram_db(const sbl_scram_t *s)
{
    return s->db;
}

const char *sbl_scram_mechanism(const sbl_scram_t *s)
{
    return s->m->name;
}

void sbl_scram_free(sbl_scram_t *s)
{
    if (s == NULL)
        return;
    bson_free(s->client_first_bare);
    bson_free(s->server_first);
    bson_free(s->nonce);
    bson_free(s->gs2_header);
    OPENSSL_cleanse(s, sizeof(*s));
    bson_free(s);
}

/* ---- the client side (SCRAM-SHA-256), for a cluster member's own connections ---- */

struct sbl_scram_client {
    char *pw;          /* SASLprep'd password */
    char *first_bare;  /* n=user,r=cnonce */
    char *cnonce;
    uint8_t server_key[MAX_HASH];
    char *auth_message;
};

void sbl_scram_client_free(sbl_scram_client_t *c)
{
    if (c == NULL)
        return;
    if (c->pw != NULL)
        OPENSSL_cleanse(c->pw, strlen(c->pw));
    bson_free(c->pw);
    bson_free(c->first_bare);
    bson_free(c->cnonce);
    bson_free(c->auth_message);
    OPENSSL_cleanse(c->server_key, sizeof(c->server_key));
    bson_free(c);
}

int sbl_scram_client_new(const char *user, const char *password, sbl_scram_client_t **cp,
                         char **firstp, sbl_err_t *err)
{
    *cp = NULL;
    *firstp = NULL;
    sbl_scram_client_t *c = bson_malloc0(sizeof(*c));
    if (sbl_saslprep(password, &c->pw, err) != 0) {
        bson_free(c);
        return err->code;
    }
    uint8_t raw[NONCE_BYTES];
    RAND_bytes(raw, sizeof(raw));
    c->cnonce = sbl_auth_b64(raw, sizeof(raw));
    /* saslname: ',' and '=' escaped as RFC 5802 says */
    size_t n = strlen(user);
    char *esc = bson_malloc(3 * n + 1), *o = esc;
    for (const char *p = user; *p; p++) {
        if (*p == ',')
            memcpy(o, "=2C", 3), o += 3;
        else if (*p == '=')
            memcpy(o, "=3D", 3), o += 3;
        else
            *o++ = *p;
    }
    *o = '\0';
    c->first_bare = bson_strdup_printf("n=%s,r=%s", esc, c->cnonce);
    bson_free(esc);
    *firstp = bson_strdup_printf("n,,%s", c->first_bare);
    *cp = c;
    return 0;
}

/* The value of attribute "k=" in a SCRAM message (up to the next ','), or NULL. */
static char *attr_of(const char *msg, char k)
{
    for (const char *p = msg; p != NULL && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        if (p[0] == k && p[1] == '=')
            return bson_strndup(p + 2, strcspn(p + 2, ","));
    }
    return NULL;
}

/*
 * The client's keys per (password, salt, iterations), as drivers and
 * mongod's own client cache them: PBKDF2's 15,000 rounds (~30 ms of CPU
 * under load) ran for every connection a router dialed to a shard, and a
 * router under many new clients dials often (docs/sharding.md, "The
 * router's cost").  The password is kept as its SHA-256 only.
 */
#define CKEY_CACHE 8

typedef struct ckey_entry {
    bool used;
    uint8_t pw_hash[32];
    uint8_t salt[128];
    int salt_len, iterations;
    uint8_t ckey[MAX_HASH], skey[MAX_HASH];
} ckey_entry_t;

static ckey_entry_t ckey_cache[CKEY_CACHE];
static unsigned ckey_next;
static int64_t ckey_derived;
static pthread_mutex_t ckey_lock = PTHREAD_MUTEX_INITIALIZER;

int64_t sbl_scram_client_derivations(void)
{
    return __atomic_load_n(&ckey_derived, __ATOMIC_RELAXED);
}

/* ClientKey and ServerKey for pw, salt and iterations: cached, or derived. */
static void client_keys(const mech_t *m, const char *pw, const uint8_t *salt, int salt_len,
                        int iterations, uint8_t *ckey, uint8_t *skey)
{
    uint8_t ph[32];
    EVP_Digest(pw, strlen(pw), ph, NULL, EVP_sha256(), NULL);
    bool fits = salt_len <= (int)sizeof(ckey_cache[0].salt);
    pthread_mutex_lock(&ckey_lock);
    for (int k = 0; fits && k < CKEY_CACHE; k++) {
        ckey_entry_t *e = &ckey_cache[k];
        if (e->used && e->iterations == iterations && e->salt_len == salt_len &&
            CRYPTO_memcmp(e->pw_hash, ph, 32) == 0 && memcmp(e->salt, salt, salt_len) == 0) {
            memcpy(ckey, e->ckey, m->hlen);
            memcpy(skey, e->skey, m->hlen);
            pthread_mutex_unlock(&ckey_lock);
            return;
        }
    }
    pthread_mutex_unlock(&ckey_lock);
    uint8_t salted[MAX_HASH];
    PKCS5_PBKDF2_HMAC(pw, (int)strlen(pw), salt, salt_len, iterations, m->md(), (int)m->hlen,
                      salted);
    hmac(m, salted, m->hlen, "Client Key", 10, ckey);
    hmac(m, salted, m->hlen, "Server Key", 10, skey);
    OPENSSL_cleanse(salted, sizeof(salted));
    __atomic_add_fetch(&ckey_derived, 1, __ATOMIC_RELAXED);
    if (!fits)
        return;
    pthread_mutex_lock(&ckey_lock);
    ckey_entry_t *e = &ckey_cache[ckey_next++ % CKEY_CACHE];
    e->used = true;
    memcpy(e->pw_hash, ph, 32);
    memcpy(e->salt, salt, salt_len);
    e->salt_len = salt_len;
    e->iterations = iterations;
    memcpy(e->ckey, ckey, m->hlen);
    memcpy(e->skey, skey, m->hlen);
    pthread_mutex_unlock(&ckey_lock);
}

int sbl_scram_client_step(sbl_scram_client_t *c, const uint8_t *in, size_t len, char **outp,
                          sbl_err_t *err)
{
    const mech_t *m = mech_find("SCRAM-SHA-256");
    *outp = NULL;
    char *sf = bson_strndup((const char *)in, len);
    char *r = attr_of(sf, 'r'), *s64 = attr_of(sf, 's'), *i = attr_of(sf, 'i');
    int rc = 0;
    uint8_t salt[128];
    int salt_len = s64 != NULL ? sbl_auth_unb64(s64, strlen(s64), salt, sizeof(salt)) : -1;
    int iterations = i != NULL ? atoi(i) : 0;
    if (r == NULL || strncmp(r, c->cnonce, strlen(c->cnonce)) != 0 || salt_len <= 0 ||
        iterations < 4096) {
        rc = sbl_err_set(err, SBL_E_AuthenticationFailed, "bad SCRAM server-first message");
        goto out;
    }
    uint8_t ckey[MAX_HASH], stored[MAX_HASH], sig[MAX_HASH], proof[MAX_HASH];
    client_keys(m, c->pw, salt, salt_len, iterations, ckey, c->server_key);
    EVP_Digest(ckey, m->hlen, stored, NULL, m->md(), NULL);
    char *without_proof = bson_strdup_printf("c=biws,r=%s", r);
    c->auth_message = bson_strdup_printf("%s,%s,%s", c->first_bare, sf, without_proof);
    hmac(m, stored, m->hlen, c->auth_message, strlen(c->auth_message), sig);
    for (size_t k = 0; k < m->hlen; k++)
        proof[k] = ckey[k] ^ sig[k];
    char *p64 = sbl_auth_b64(proof, m->hlen);
    *outp = bson_strdup_printf("%s,p=%s", without_proof, p64);
    bson_free(p64);
    bson_free(without_proof);
    OPENSSL_cleanse(ckey, sizeof(ckey));
out:
    bson_free(sf);
    bson_free(r);
    bson_free(s64);
    bson_free(i);
    return rc;
}

int sbl_scram_client_verify(sbl_scram_client_t *c, const uint8_t *in, size_t len, sbl_err_t *err)
{
    const mech_t *m = mech_find("SCRAM-SHA-256");
    char *msg = bson_strndup((const char *)in, len);
    char *v = attr_of(msg, 'v');
    uint8_t want[MAX_HASH], got[MAX_HASH];
    int n = v != NULL ? sbl_auth_unb64(v, strlen(v), got, sizeof(got)) : -1;
    bool ok = false;
    if (c->auth_message != NULL && n == (int)m->hlen) {
        hmac(m, c->server_key, m->hlen, c->auth_message, strlen(c->auth_message), want);
        ok = CRYPTO_memcmp(want, got, m->hlen) == 0;
    }
    bson_free(msg);
    bson_free(v);
    return ok ? 0 : sbl_err_set(err, SBL_E_AuthenticationFailed, "bad SCRAM server signature");
}

/* ---- the SASL commands' fields (auth.h) ------------------------------------ */

int sbl_sasl_payload(const bson_t *cmd, const uint8_t **datap, uint32_t *lenp, sbl_err_t *err)
{
    bson_iter_t it;
    bson_subtype_t st;
    if (!bson_iter_init_find(&it, cmd, "payload"))
        return sbl_err_set(err, SBL_E_BadValue, "Missing required field 'payload'");
    if (BSON_ITER_HOLDS_BINARY(&it)) {
        bson_iter_binary(&it, &st, lenp, datap);
        return 0;
    }
    if (BSON_ITER_HOLDS_UTF8(&it)) {
        *datap = (const uint8_t *)bson_iter_utf8(&it, lenp);
        return 0;
    }
    return sbl_err_set(err, SBL_E_TypeMismatch,
                       "BSON field 'payload' is the wrong type, expected type 'binData'");
}

bool sbl_sasl_skip_empty(const bson_t *cmd)
{
    bson_iter_t it, o;
    if (bson_iter_init_find(&it, cmd, "options") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &o) && bson_iter_find(&o, "skipEmptyExchange"))
        return bson_iter_as_bool(&o);
    return false;
}

int sbl_auth_fail_delay_ms(int failures)
{
    int64_t ms = (int64_t)AUTH_FAIL_DELAY_MS * (failures > 0 ? failures : 1);
    return ms > AUTH_FAIL_DELAY_MAX_MS ? AUTH_FAIL_DELAY_MAX_MS : (int)ms;
}

void sbl_sasl_append_reply(bson_t *r, bool done, const uint8_t *out, size_t len)
{
    BSON_APPEND_INT32(r, "conversationId", SBL_SASL_CONVERSATION_ID);
    BSON_APPEND_BOOL(r, "done", done);
    bson_append_binary(r, "payload", -1, BSON_SUBTYPE_BINARY, out, (uint32_t)len);
}
