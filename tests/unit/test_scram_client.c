/*
 * test_scram_client.c: src/auth's SCRAM-SHA-256 client (what sable-router's
 * own shard connections authenticate with) against src/auth's server
 * conversation, with the user held in memory through sbl_auth_set_lookup
 * (as the router's users come from the config servers): the right password
 * completes both sides and the client accepts the server's signature; a
 * wrong password fails at the server with AuthenticationFailed; a tampered
 * server signature or a server nonce not extending the client's is refused
 * by the client.
 */
#include "auth/auth.h"
#include "check.h"
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bson_t *user_doc;

static int lookup(bool roles, const char *db, const char *name, bson_t *doc, bool *foundp,
                  sbl_err_t *err)
{
    (void)err;
    *foundp = !roles && strcmp(db, "admin") == 0 && strcmp(name, "u,=1") == 0;
    if (*foundp)
        bson_copy_to(user_doc, doc);
    return 0;
}

/* One whole conversation; returns the server's or the client's error code, 0 on success. */
static int converse(const char *password, bool tamper_signature, bool tamper_nonce)
{
    sbl_err_t err = {0};
    sbl_scram_client_t *cl = NULL;
    sbl_scram_t *sv = NULL;
    char *first = NULL, *final = NULL;
    uint8_t *out = NULL;
    size_t outlen = 0;
    bool done = false;
    int rc = sbl_scram_client_new("u,=1", password, &cl, &first, &err);
    if (rc == 0)
        rc = sbl_scram_start(NULL, "admin", "SCRAM-SHA-256", (const uint8_t *)first,
                             strlen(first), &sv, &out, &outlen, &err);
    if (rc == 0) {
        if (tamper_nonce)
            out[2] ^= 1; /* "r=" + the client's nonce: changed */
        rc = sbl_scram_client_step(cl, out, outlen, &final, &err);
    }
    bson_free(out);
    out = NULL;
    if (rc == 0)
        rc = sbl_scram_step(sv, (const uint8_t *)final, strlen(final), true, &out, &outlen,
                            &done, &err);
    if (rc == 0) {
        CHECK(done);
        if (tamper_signature)
            out[2] = out[2] == 'A' ? 'B' : 'A'; /* first signature character */
        rc = sbl_scram_client_verify(cl, out, outlen, &err);
    }
    bson_free(out);
    bson_free(first);
    bson_free(final);
    sbl_scram_free(sv);
    sbl_scram_client_free(cl);
    return rc;
}

int main(void)
{
    static sbl_options_t opts;
    sbl_server_init(&opts);
    sbl_auth_set_lookup(lookup);
    sbl_err_t err = {0};
    bson_t creds = BSON_INITIALIZER;
    CHECK(sbl_auth_make_credentials("u,=1", "pa\xc2\xa0ss", true, true, &creds, &err) == 0);
    user_doc = bson_new();
    BSON_APPEND_UTF8(user_doc, "_id", "admin.u,=1");
    BSON_APPEND_UTF8(user_doc, "user", "u,=1");
    BSON_APPEND_UTF8(user_doc, "db", "admin");
    BSON_APPEND_DOCUMENT(user_doc, "credentials", &creds);
    bson_destroy(&creds);

    /* SASLprep maps the no-break space to a space on both sides */
    CHECK(converse("pa\xc2\xa0ss", false, false) == 0);
    int64_t derived = sbl_scram_client_derivations();
    CHECK(converse("pa ss", false, false) == 0);
    /* the same password, salt and iterations: the keys come from the cache */
    CHECK(sbl_scram_client_derivations() == derived);
    CHECK(converse("wrong", false, false) == SBL_E_AuthenticationFailed);
    CHECK(sbl_scram_client_derivations() == derived + 1);
    CHECK(converse("pa ss", false, false) == 0);
    CHECK(converse("pa ss", true, false) == SBL_E_AuthenticationFailed);
    CHECK(converse("pa ss", false, true) == SBL_E_AuthenticationFailed);
    bson_destroy(user_doc);
    return CHECK_DONE("test_scram_client");
}
