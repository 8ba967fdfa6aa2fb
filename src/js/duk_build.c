/*
 * duk_build.c: Duktape 2.7, compiled from the source Debian's duktape-dev
 * ships (/usr/share/duktape/duktape.c) with Debian's own duk_config.h plus
 * the two options Debian's prebuilt libduktape lacks and a server needs: the
 * interrupt counter and the execution-timeout check (js_int.h), so a runaway
 * script is stopped by its deadline instead of holding a worker forever.
 *
 * What must stay true: every file that includes duktape.h goes through
 * js_int.h, so the library and its callers see the same configuration.
 */
/* duk_config.h chooses the platform's date and time providers only when it
 * is included while compiling Duktape itself. */
#define DUK_COMPILING_DUKTAPE
#include "js/js_int.h"

#include <duktape.c>
