/*
 * errors.c: code to codeName lookup and the helpers that fill sbl_err_t.
 */
#include "common/errors.h"

#include <stdio.h>
#include <string.h>

const char *sbl_err_name(int code)
{
    switch (code) {
#define SBL_ERR_CASE(name, c)                                                                      \
    case c:                                                                                        \
        return #name;
        SBL_ERROR_CODES(SBL_ERR_CASE)
#undef SBL_ERR_CASE
    default: {
        /* MongoDB names codes without a name of their own "Location<code>". */
        static _Thread_local char name[32];
        snprintf(name, sizeof(name), "Location%d", code);
        return name;
    }
    }
}

int sbl_err_set(sbl_err_t *err, int code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}

void sbl_err_clear(sbl_err_t *err)
{
    if (err != NULL) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}
