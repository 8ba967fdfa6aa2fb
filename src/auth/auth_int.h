/*
 * auth_int.h: what the files of src/auth share; private to the module.
 */
#ifndef SBL_AUTH_INT_H
#define SBL_AUTH_INT_H

#include <bson/bson.h>
#include <stddef.h>
#include <stdint.h>

/* Base64 of len bytes; bson_malloc'd, NUL-terminated. */
char *sbl_auth_b64(const uint8_t *in, size_t len);
/* Decode n base64 chars into out (capacity cap); the decoded length or -1. */
int sbl_auth_unb64(const char *in, size_t n, uint8_t *out, size_t cap);

/* The string field name of doc, or NULL. */
const char *sbl_auth_str(const bson_t *doc, const char *name);

#endif
