/*
 * expr_date.c: date operators ($dateToString with MongoDB's format
 * specifiers, $year ... $millisecond, $week, $isoWeek, $dateFromString,
 * $dateFromParts, $dateToParts, $dateAdd/$dateSubtract/$dateDiff) and type
 * operators ($type, $convert and the $to* shortcuts, $isNumber).
 *
 * What must stay true: dates are milliseconds since the epoch in UTC; a
 * timezone is "UTC"/"GMT"/"Z" or a fixed offset ("+04:30", "-0800"), other
 * Olson names are refused with 40485 (no tz database is consulted), and
 * failed conversions are ConversionFailure 241 unless onError is given.
 */
#include "doc/doc.h"
#include "expr/expr_int.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- calendar ------------------------------------------------------------------------- */

typedef struct tm_parts {
    int64_t year;
    int month, day, hour, minute, second, ms, wday, yday; /* wday 0 = Sunday, yday 0-based */
} tm_parts_t;

static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static bool is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static void split_ms(int64_t ms, tm_parts_t *t)
{
    int64_t days = ms >= 0 ? ms / 86400000 : -((-ms + 86399999) / 86400000);
    int64_t rem = ms - days * 86400000;
    t->ms = (int)(rem % 1000);
    t->second = (int)(rem / 1000 % 60);
    t->minute = (int)(rem / 60000 % 60);
    t->hour = (int)(rem / 3600000);
    t->wday = (int)(((days % 7) + 11) % 7); /* 1970-01-01 was a Thursday */
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t y = yoe + era * 400;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    t->day = (int)(doy - (153 * mp + 2) / 5 + 1);
    t->month = (int)(mp < 10 ? mp + 3 : mp - 9);
    t->year = y + (t->month <= 2);
    t->yday = (int)(days - days_from_civil(t->year, 1, 1));
}

static int64_t join_ms(int64_t y, int64_t mo, int64_t d, int64_t h, int64_t mi, int64_t s,
                       int64_t ms)
{
    /* normalise months so that out-of-range values carry, as $dateFromParts does */
    y += (mo - 1) >= 0 ? (mo - 1) / 12 : -((12 - mo) / 12);
    mo = ((mo - 1) % 12 + 12) % 12 + 1;
    return (days_from_civil(y, (int)mo, 1) + d - 1) * 86400000 + h * 3600000 + mi * 60000 +
           s * 1000 + ms;
}

/* Weeks in ISO year y (52 or 53). */
static int iso_weeks_in(int64_t y)
{
    int64_t p = (y + y / 4 - y / 100 + y / 400) % 7, q = ((y - 1) + (y - 1) / 4 - (y - 1) / 100 + (y - 1) / 400) % 7;
    return p == 4 || q == 3 ? 53 : 52;
}

/* ISO week-numbering year, week and weekday (1 = Monday). */
static void iso_week(const tm_parts_t *t, int64_t *isoyear, int *week, int *isodow)
{
    int dow = t->wday == 0 ? 7 : t->wday;
    int w = (t->yday + 1 - dow + 10) / 7;
    int64_t y = t->year;
    if (w < 1) {
        y--;
        w = iso_weeks_in(y);
    } else if (w > iso_weeks_in(y)) {
        y++;
        w = 1;
    }
    *isoyear = y;
    *week = w;
    *isodow = dow;
}

/* Parse a timezone into an offset in minutes. */
static int parse_tz(const bson_value_t *tz, int *offp, sbl_err_t *err)
{
    *offp = 0;
    if (tz->value_type == BSON_TYPE_EOD)
        return 0;
    if (tz->value_type != BSON_TYPE_UTF8)
        return sbl_err_set(err, 40517, "timezone must evaluate to a string, found %s",
                           sbl_type_name(tz->value_type));
    const char *s = tz->value.v_utf8.str;
    if (strcmp(s, "UTC") == 0 || strcmp(s, "GMT") == 0 || strcmp(s, "Z") == 0 ||
        strcmp(s, "Etc/UTC") == 0 || strcmp(s, "Etc/GMT") == 0)
        return 0;
    if ((s[0] == '+' || s[0] == '-') && isdigit((unsigned char)s[1]) &&
        isdigit((unsigned char)s[2])) {
        int h = (s[1] - '0') * 10 + (s[2] - '0'), m = 0;
        const char *p = s + 3;
        if (*p == ':')
            p++;
        if (isdigit((unsigned char)p[0]) && isdigit((unsigned char)p[1])) {
            m = (p[0] - '0') * 10 + (p[1] - '0');
            p += 2;
        }
        if (*p == '\0') {
            *offp = (s[0] == '-' ? -1 : 1) * (h * 60 + m);
            return 0;
        }
    }
    return sbl_err_set(err, 40485, "unrecognized time zone identifier: \"%s\"", s);
}

/* Milliseconds of a date-like value (date, timestamp, ObjectId). */
static bool date_ms(const bson_value_t *v, int64_t *ms)
{
    switch (v->value_type) {
    case BSON_TYPE_DATE_TIME:
        *ms = v->value.v_datetime;
        return true;
    case BSON_TYPE_TIMESTAMP:
        *ms = (int64_t)v->value.v_timestamp.timestamp * 1000;
        return true;
    case BSON_TYPE_OID:
        *ms = (int64_t)bson_oid_get_time_t(&v->value.v_oid) * 1000;
        return true;
    default:
        return false;
    }
}

/* Evaluate the date (kid 0) and timezone (kid tzi) into local parts. */
static int date_and_tz(const sbl_expr_t *e, size_t tzi, ectx_t *c, tm_parts_t *t, int64_t *msp,
                       bool *nullp, sbl_err_t *err)
{
    bson_value_t d, tz;
    int off = 0, rc;
    int64_t ms = 0;
    *nullp = false;
    SBL_RET(ex_kid(e, 0, c, &d, err));
    if ((rc = ex_kid(e, tzi, c, &tz, err)) != 0) {
        bson_value_destroy(&d);
        return rc;
    }
    if (v_nullish(&d) || (tz.value_type != BSON_TYPE_EOD && v_nullish(&tz))) {
        *nullp = true;
    } else if (!date_ms(&d, &ms)) {
        rc = sbl_err_set(err, 16006, "can't convert from BSON type %s to Date",
                         sbl_type_name(d.value_type));
    } else if ((rc = parse_tz(&tz, &off, err)) == 0) {
        split_ms(ms + (int64_t)off * 60000, t);
        if (msp)
            *msp = ms;
    }
    bson_value_destroy(&d);
    bson_value_destroy(&tz);
    return rc;
}

int op_datepart(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    tm_parts_t t;
    bool isnull;
    SBL_RET(date_and_tz(e, 1, c, &t, NULL, &isnull, err));
    if (isnull) {
        v_null(out);
        return 0;
    }
    const char *n = e->op->name + 1;
    int64_t iy;
    int iw, id;
    iso_week(&t, &iy, &iw, &id);
    if (strcmp(n, "year") == 0)
        v_i32(out, (int32_t)t.year);
    else if (strcmp(n, "month") == 0)
        v_i32(out, t.month);
    else if (strcmp(n, "dayOfMonth") == 0)
        v_i32(out, t.day);
    else if (strcmp(n, "dayOfWeek") == 0)
        v_i32(out, t.wday + 1);
    else if (strcmp(n, "dayOfYear") == 0)
        v_i32(out, t.yday + 1);
    else if (strcmp(n, "hour") == 0)
        v_i32(out, t.hour);
    else if (strcmp(n, "minute") == 0)
        v_i32(out, t.minute);
    else if (strcmp(n, "second") == 0)
        v_i32(out, t.second);
    else if (strcmp(n, "millisecond") == 0)
        v_i32(out, t.ms);
    else if (strcmp(n, "week") == 0)
        v_i32(out, (t.yday + 7 - t.wday) / 7);
    else if (strcmp(n, "isoWeek") == 0)
        v_i32(out, iw);
    else if (strcmp(n, "isoWeekYear") == 0)
        v_i64(out, iy);
    else if (strcmp(n, "isoDayOfWeek") == 0)
        v_i32(out, id);
    return 0;
}

static const char *const month_abbr[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char *const month_full[] = {"January", "February", "March",     "April",
                                         "May",     "June",     "July",      "August",
                                         "September", "October", "November", "December"};

/* Format local parts t (offset off minutes) with MongoDB's %-specifiers. */
static int format_date(const char *fmt, const tm_parts_t *t, int off, bson_string_t *s,
                       sbl_err_t *err)
{
    int64_t iy;
    int iw, id;
    iso_week(t, &iy, &iw, &id);
    for (const char *p = fmt; *p; p++) {
        if (*p != '%') {
            bson_string_append_c(s, *p);
            continue;
        }
        p++;
        switch (*p) {
        case 'Y': bson_string_append_printf(s, "%04lld", (long long)t->year); break;
        case 'm': bson_string_append_printf(s, "%02d", t->month); break;
        case 'd': bson_string_append_printf(s, "%02d", t->day); break;
        case 'H': bson_string_append_printf(s, "%02d", t->hour); break;
        case 'M': bson_string_append_printf(s, "%02d", t->minute); break;
        case 'S': bson_string_append_printf(s, "%02d", t->second); break;
        case 'L': bson_string_append_printf(s, "%03d", t->ms); break;
        case 'j': bson_string_append_printf(s, "%03d", t->yday + 1); break;
        case 'w': bson_string_append_printf(s, "%d", t->wday + 1); break;
        case 'u': bson_string_append_printf(s, "%d", id); break;
        case 'U': bson_string_append_printf(s, "%02d", (t->yday + 7 - t->wday) / 7); break;
        case 'V': bson_string_append_printf(s, "%02d", iw); break;
        case 'G': bson_string_append_printf(s, "%04lld", (long long)iy); break;
        case 'b': bson_string_append(s, month_abbr[t->month - 1]); break;
        case 'B': bson_string_append(s, month_full[t->month - 1]); break;
        case 'z':
            bson_string_append_printf(s, "%c%02d%02d", off < 0 ? '-' : '+', abs(off) / 60,
                                      abs(off) % 60);
            break;
        case 'Z': bson_string_append_printf(s, "%d", off); break;
        case '%': bson_string_append_c(s, '%'); break;
        case '\0':
            return sbl_err_set(err, 18535, "Unmatched '%%' at end of format string");
        default:
            return sbl_err_set(err, 18536, "Invalid format character '%%%c' in format string",
                               *p);
        }
    }
    return 0;
}

int op_dateToString(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t d, f, tz;
    int rc, off = 0;
    int64_t ms;
    v_missing(&f);
    v_missing(&tz);
    SBL_RET(ex_kid(e, 0, c, &d, err));
    if ((rc = ex_kid(e, 1, c, &f, err)) != 0 || (rc = ex_kid(e, 2, c, &tz, err)) != 0)
        goto done;
    if (f.value_type != BSON_TYPE_EOD && !v_nullish(&f) && f.value_type != BSON_TYPE_UTF8) {
        rc = sbl_err_set(err, 18533, "$dateToString requires that 'format' be a string, found: "
                                     "%s",
                         sbl_type_name(f.value_type));
        goto done;
    }
    if (v_nullish(&d)) {
        if (e->kids[3] != NULL)
            rc = ex_kid(e, 3, c, out, err);
        else
            v_null(out);
        goto done;
    }
    if ((f.value_type != BSON_TYPE_EOD && v_nullish(&f)) ||
        (tz.value_type != BSON_TYPE_EOD && v_nullish(&tz))) {
        v_null(out);
        goto done;
    }
    if ((rc = parse_tz(&tz, &off, err)) != 0)
        goto done;
    if (!date_ms(&d, &ms)) {
        rc = sbl_err_set(err, 16006, "can't convert from BSON type %s to Date",
                         sbl_type_name(d.value_type));
        goto done;
    }
    tm_parts_t t;
    split_ms(ms + (int64_t)off * 60000, &t);
    const char *fmt = f.value_type == BSON_TYPE_UTF8 ? f.value.v_utf8.str
                      : off == 0 && tz.value_type == BSON_TYPE_EOD ? "%Y-%m-%dT%H:%M:%S.%LZ"
                                                                 : "%Y-%m-%dT%H:%M:%S.%L";
    bson_string_t *s = bson_string_new(NULL);
    if ((rc = format_date(fmt, &t, off, s, err)) == 0)
        v_str(out, s->str, s->len);
    bson_string_free(s, true);
done:
    bson_value_destroy(&d);
    bson_value_destroy(&f);
    bson_value_destroy(&tz);
    return rc;
}

int op_dateToParts(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    tm_parts_t t;
    bool isnull;
    bson_value_t iso;
    SBL_RET(date_and_tz(e, 1, c, &t, NULL, &isnull, err));
    SBL_RET(ex_kid(e, 2, c, &iso, err));
    bool use_iso = sbl_expr_truthy(&iso);
    bson_value_destroy(&iso);
    if (isnull) {
        v_null(out);
        return 0;
    }
    bson_t d = BSON_INITIALIZER;
    if (use_iso) {
        int64_t iy;
        int iw, id;
        iso_week(&t, &iy, &iw, &id);
        bson_append_int32(&d, "isoWeekYear", -1, (int32_t)iy);
        bson_append_int32(&d, "isoWeek", -1, iw);
        bson_append_int32(&d, "isoDayOfWeek", -1, id);
    } else {
        bson_append_int32(&d, "year", -1, (int32_t)t.year);
        bson_append_int32(&d, "month", -1, t.month);
        bson_append_int32(&d, "day", -1, t.day);
    }
    bson_append_int32(&d, "hour", -1, t.hour);
    bson_append_int32(&d, "minute", -1, t.minute);
    bson_append_int32(&d, "second", -1, t.second);
    bson_append_int32(&d, "millisecond", -1, t.ms);
    v_take_doc(out, &d, false);
    return 0;
}

int op_dateFromParts(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    static const int64_t dflt[] = {1970, 1, 1, 0, 0, 0, 0, 0, 1, 1};
    int64_t p[10];
    bool isnull = false;
    for (size_t i = 0; i < 10; i++) {
        bson_value_t v;
        SBL_RET(ex_kid(e, i, c, &v, err));
        p[i] = dflt[i];
        if (v.value_type == BSON_TYPE_EOD)
            continue;
        if (v_nullish(&v))
            isnull = true;
        else if (!v_to_i64(&v, &p[i])) {
            bson_value_destroy(&v);
            return sbl_err_set(err, 40515, "'%s' must evaluate to an integer, found %s",
                               e->op->named[i], sbl_type_name(v.value_type));
        }
        bson_value_destroy(&v);
    }
    bson_value_t tz;
    int off = 0;
    SBL_RET(ex_kid(e, 10, c, &tz, err));
    int rc = v_nullish(&tz) && tz.value_type != BSON_TYPE_EOD ? 0 : parse_tz(&tz, &off, err);
    if (v_nullish(&tz) && tz.value_type != BSON_TYPE_EOD)
        isnull = true;
    bson_value_destroy(&tz);
    if (rc != 0)
        return rc;
    if (e->kids[0] == NULL && e->kids[7] == NULL)
        return sbl_err_set(err, 40516, "$dateFromParts requires either 'year' or 'isoWeekYear' "
                                       "to be present");
    if (isnull) {
        v_null(out);
        return 0;
    }
    int64_t ms;
    if (e->kids[7] != NULL) {
        /* ISO: Monday of week 1 is the Monday on or before Jan 4 */
        int64_t jan4 = days_from_civil(p[7], 1, 4);
        int64_t wd = ((jan4 % 7) + 11) % 7; /* 0 = Sunday */
        int64_t monday = jan4 - (wd == 0 ? 6 : wd - 1);
        int64_t day = monday + (p[8] - 1) * 7 + (p[9] - 1);
        ms = day * 86400000 + p[3] * 3600000 + p[4] * 60000 + p[5] * 1000 + p[6];
    } else {
        ms = join_ms(p[0], p[1], p[2], p[3], p[4], p[5], p[6]);
    }
    v_date(out, ms - (int64_t)off * 60000);
    return 0;
}

/* Parse s with a MongoDB format (NULL: ISO 8601 forms).  Returns false when it does not fit. */
static bool parse_date(const char *s, const char *fmt, int64_t *msp, bool *has_off, int *offp)
{
    int64_t y = 1970, mo = 1, d = 1, h = 0, mi = 0, sec = 0, ms = 0;
    int off = 0;
    *has_off = false;
    const char *p = s;
#define NUM(dst, maxd)                                                                             \
    do {                                                                                           \
        int nd_ = 0;                                                                               \
        int64_t v_ = 0;                                                                            \
        while (nd_ < (maxd) && isdigit((unsigned char)*p)) {                                       \
            v_ = v_ * 10 + (*p++ - '0');                                                           \
            nd_++;                                                                                 \
        }                                                                                          \
        if (nd_ == 0)                                                                              \
            return false;                                                                          \
        dst = v_;                                                                                  \
    } while (0)
    if (fmt == NULL) {
        NUM(y, 4);
        if (*p++ != '-')
            return false;
        NUM(mo, 2);
        if (*p++ != '-')
            return false;
        NUM(d, 2);
        if (*p == 'T' || *p == ' ') {
            p++;
            NUM(h, 2);
            if (*p++ != ':')
                return false;
            NUM(mi, 2);
            if (*p == ':') {
                p++;
                NUM(sec, 2);
                if (*p == '.') {
                    p++;
                    int nd = 0;
                    int64_t frac = 0;
                    while (isdigit((unsigned char)*p)) {
                        if (nd < 3) {
                            frac = frac * 10 + (*p - '0');
                            nd++;
                        }
                        p++;
                    }
                    while (nd++ < 3)
                        frac *= 10;
                    ms = frac;
                }
            }
        }
        if (*p == 'Z') {
            p++;
            *has_off = true;
        } else if (*p == '+' || *p == '-') {
            int sign = *p++ == '-' ? -1 : 1;
            int64_t oh = 0, om = 0;
            NUM(oh, 2);
            if (*p == ':')
                p++;
            if (isdigit((unsigned char)*p))
                NUM(om, 2);
            off = sign * (int)(oh * 60 + om);
            *has_off = true;
        }
        if (*p != '\0')
            return false;
    } else {
        for (const char *f = fmt; *f; f++) {
            if (*f != '%') {
                if (*p++ != *f)
                    return false;
                continue;
            }
            f++;
            switch (*f) {
            case 'Y': NUM(y, 4); break;
            case 'm': NUM(mo, 2); break;
            case 'd': NUM(d, 2); break;
            case 'H': NUM(h, 2); break;
            case 'M': NUM(mi, 2); break;
            case 'S': NUM(sec, 2); break;
            case 'L': NUM(ms, 3); break;
            case 'j': {
                int64_t yd;
                NUM(yd, 3);
                mo = 1;
                d = yd;
                break;
            }
            case 'z': {
                if (*p != '+' && *p != '-')
                    return false;
                int sign = *p++ == '-' ? -1 : 1;
                int64_t hm;
                NUM(hm, 4);
                off = sign * (int)(hm / 100 * 60 + hm % 100);
                *has_off = true;
                break;
            }
            case 'Z': {
                int sign = 1;
                int64_t m;
                if (*p == '-' || *p == '+')
                    sign = *p++ == '-' ? -1 : 1;
                NUM(m, 4);
                off = sign * (int)m;
                *has_off = true;
                break;
            }
            case '%':
                if (*p++ != '%')
                    return false;
                break;
            default:
                return false;
            }
        }
        if (*p != '\0')
            return false;
    }
#undef NUM
    if (mo < 1 || mo > 12 || d < 1 || d > 366 || h > 23 || mi > 59 || sec > 60)
        return false;
    if (fmt == NULL || strstr(fmt, "%j") == NULL) {
        static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        if (d > mdays[mo - 1] || (mo == 2 && d == 29 && !is_leap(y)))
            return false;
    }
    *msp = join_ms(y, mo, d, h, mi, sec, ms);
    *offp = off;
    return true;
}

int op_dateFromString(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t s, f, tz;
    int rc = 0, off = 0, soff = 0;
    int64_t ms;
    bool has_off;
    v_missing(&f);
    v_missing(&tz);
    SBL_RET(ex_kid(e, 0, c, &s, err));
    if ((rc = ex_kid(e, 1, c, &f, err)) != 0 || (rc = ex_kid(e, 2, c, &tz, err)) != 0)
        goto done;
    if (v_nullish(&s)) {
        if (e->kids[4] != NULL)
            rc = ex_kid(e, 4, c, out, err);
        else
            v_null(out);
        goto done;
    }
    if ((rc = parse_tz(&tz, &off, err)) != 0)
        goto done;
    if (s.value_type != BSON_TYPE_UTF8) {
        rc = sbl_err_set(err, SBL_E_ConversionFailure,
                         "$dateFromString requires that 'dateString' be a string, found: %s",
                         sbl_type_name(s.value_type));
    } else if (!parse_date(s.value.v_utf8.str,
                           f.value_type == BSON_TYPE_UTF8 ? f.value.v_utf8.str : NULL, &ms,
                           &has_off, &soff)) {
        rc = sbl_err_set(err, SBL_E_ConversionFailure,
                         "an incomplete date/time string has been found, with elements missing: "
                         "\"%s\"",
                         s.value.v_utf8.str);
    } else {
        if (has_off && tz.value_type != BSON_TYPE_EOD) {
            rc = sbl_err_set(err, 40554, "you cannot pass in a date/time string with GMT offset "
                                         "together with a timezone argument");
            goto done;
        }
        v_date(out, ms - (int64_t)(has_off ? soff : off) * 60000);
    }
    if (rc == SBL_E_ConversionFailure && e->kids[3] != NULL) {
        sbl_err_clear(err);
        rc = ex_kid(e, 3, c, out, err);
    }
done:
    bson_value_destroy(&s);
    bson_value_destroy(&f);
    bson_value_destroy(&tz);
    return rc;
}

/* Unit lengths in ms for $dateAdd / $dateDiff; months and years are calendar units. */
static int unit_ms(const char *u, int64_t *ms, int *months)
{
    *ms = 0;
    *months = 0;
    if (strcmp(u, "millisecond") == 0) *ms = 1;
    else if (strcmp(u, "second") == 0) *ms = 1000;
    else if (strcmp(u, "minute") == 0) *ms = 60000;
    else if (strcmp(u, "hour") == 0) *ms = 3600000;
    else if (strcmp(u, "day") == 0) *ms = 86400000;
    else if (strcmp(u, "week") == 0) *ms = 7 * 86400000LL;
    else if (strcmp(u, "month") == 0) *months = 1;
    else if (strcmp(u, "quarter") == 0) *months = 3;
    else if (strcmp(u, "year") == 0) *months = 12;
    else return -1;
    return 0;
}

static int date_add(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, int sign)
{
    bson_value_t d, u, a;
    int64_t ms, amount, ums;
    int months, rc = 0;
    v_missing(&u);
    v_missing(&a);
    SBL_RET(ex_kid(e, 0, c, &d, err));
    if ((rc = ex_kid(e, 1, c, &u, err)) != 0 || (rc = ex_kid(e, 2, c, &a, err)) != 0)
        goto done;
    if (v_nullish(&d) || v_nullish(&u) || v_nullish(&a)) {
        v_null(out);
        goto done;
    }
    if (!date_ms(&d, &ms)) {
        rc = sbl_err_set(err, 5166403, "%s requires startDate to be convertible to a date",
                         e->op->name);
        goto done;
    }
    if (u.value_type != BSON_TYPE_UTF8 || unit_ms(u.value.v_utf8.str, &ums, &months) != 0) {
        rc = sbl_err_set(err, 5439014, "%s requires 'unit' to be a valid time unit",
                         e->op->name);
        goto done;
    }
    if (!v_to_i64(&a, &amount)) {
        rc = sbl_err_set(err, 5166405, "%s expects integer amount of time units", e->op->name);
        goto done;
    }
    amount *= sign;
    if (months == 0) {
        v_date(out, ms + amount * ums);
    } else {
        tm_parts_t t;
        split_ms(ms, &t);
        int64_t total = t.year * 12 + (t.month - 1) + amount * months;
        int64_t ny = total >= 0 ? total / 12 : -((-total + 11) / 12);
        int nm = (int)(total - ny * 12) + 1;
        static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        int maxd = mdays[nm - 1] + (nm == 2 && is_leap(ny));
        int day = t.day > maxd ? maxd : t.day;
        v_date(out, join_ms(ny, nm, day, t.hour, t.minute, t.second, t.ms));
    }
done:
    bson_value_destroy(&d);
    bson_value_destroy(&u);
    bson_value_destroy(&a);
    return rc;
}

int op_dateAdd(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return date_add(e, c, out, err, 1);
}

int op_dateSubtract(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return date_add(e, c, out, err, -1);
}

int op_dateDiff(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a, b, u;
    int64_t ma, mb, ums;
    int months, rc = 0;
    v_missing(&b);
    v_missing(&u);
    SBL_RET(ex_kid(e, 0, c, &a, err));
    if ((rc = ex_kid(e, 1, c, &b, err)) != 0 || (rc = ex_kid(e, 2, c, &u, err)) != 0)
        goto done;
    if (v_nullish(&a) || v_nullish(&b) || v_nullish(&u)) {
        v_null(out);
        goto done;
    }
    if (!date_ms(&a, &ma) || !date_ms(&b, &mb)) {
        rc = sbl_err_set(err, 5166307, "$dateDiff requires startDate and endDate to be dates");
        goto done;
    }
    if (u.value_type != BSON_TYPE_UTF8 || unit_ms(u.value.v_utf8.str, &ums, &months) != 0) {
        rc = sbl_err_set(err, 5439013, "$dateDiff requires 'unit' to be a valid time unit");
        goto done;
    }
    tm_parts_t ta, tb;
    split_ms(ma, &ta);
    split_ms(mb, &tb);
    if (months != 0) {
        int64_t m = (tb.year * 12 + tb.month) - (ta.year * 12 + ta.month);
        v_i64(out, m / months);
    } else {
        /* count unit boundaries crossed, as MongoDB does */
        int64_t fa, fb;
        if (strcmp(u.value.v_utf8.str, "week") == 0) {
            int64_t da = (ma >= 0 ? ma / 86400000 : (ma - 86399999) / 86400000) - ta.wday;
            int64_t db = (mb >= 0 ? mb / 86400000 : (mb - 86399999) / 86400000) - tb.wday;
            v_i64(out, (db - da) / 7);
            goto done;
        }
        fa = ma >= 0 ? ma / ums : (ma - ums + 1) / ums;
        fb = mb >= 0 ? mb / ums : (mb - ums + 1) / ums;
        v_i64(out, fb - fa);
    }
done:
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    bson_value_destroy(&u);
    return rc;
}

/* ---- types --------------------------------------------------------------------------- */

int op_type(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t v;
    SBL_RET(ex_kid(e, 0, c, &v, err));
    const char *n = sbl_type_name(v.value_type);
    v_str(out, n, strlen(n));
    bson_value_destroy(&v);
    return 0;
}

int op_isNumber(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t v;
    SBL_RET(ex_kid(e, 0, c, &v, err));
    v_bool(out, v_is_num(&v));
    bson_value_destroy(&v);
    return 0;
}

static int ts_part(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool inc)
{
    bson_value_t v;
    SBL_RET(ex_kid(e, 0, c, &v, err));
    int rc = 0;
    if (v_nullish(&v))
        v_null(out);
    else if (v.value_type != BSON_TYPE_TIMESTAMP)
        rc = sbl_err_set(err, 5687301, "Argument to %s must be a timestamp, but is %s",
                         e->op->name, sbl_type_name(v.value_type));
    else
        v_i64(out, inc ? v.value.v_timestamp.increment : v.value.v_timestamp.timestamp);
    bson_value_destroy(&v);
    return rc;
}

int op_tsSecond(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return ts_part(e, c, out, err, false);
}

int op_tsIncrement(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return ts_part(e, c, out, err, true);
}

/* The shortest decimal form of d that reads back as d (MongoDB prints doubles this way). */
static void double_str(double d, char *buf, size_t n)
{
    if (isnan(d)) {
        snprintf(buf, n, "NaN");
        return;
    }
    if (isinf(d)) {
        snprintf(buf, n, d > 0 ? "Infinity" : "-Infinity");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            return;
    }
}

static int conv_fail(sbl_err_t *err, const bson_value_t *in, bson_type_t to)
{
    return sbl_err_set(err, SBL_E_ConversionFailure,
                       "Unsupported conversion from %s to %s in $convert with no onError value",
                       sbl_type_name(in->value_type), sbl_type_name(to));
}

static int parse_num_str(const bson_value_t *in, bson_type_t to, bson_value_t *out, sbl_err_t *err)
{
    const char *s = in->value.v_utf8.str;
    char *end = NULL;
    errno = 0;
    if (to == BSON_TYPE_INT32 || to == BSON_TYPE_INT64) {
        long long x = strtoll(s, &end, 10);
        if (s[0] == '\0' || *end != '\0' || errno != 0 || isspace((unsigned char)s[0]) ||
            (to == BSON_TYPE_INT32 && (x < INT32_MIN || x > INT32_MAX)))
            return sbl_err_set(err, SBL_E_ConversionFailure,
                               "Failed to parse number '%s' in $convert with no onError value: "
                               "Did not consume whole string.",
                               s);
        if (to == BSON_TYPE_INT32)
            v_i32(out, (int32_t)x);
        else
            v_i64(out, x);
        return 0;
    }
    if (to == BSON_TYPE_DECIMAL128) {
        bson_decimal128_t d;
        if (!bson_decimal128_from_string(s, &d) || (strcmp(s, "NaN") != 0 && strstr(s, "NaN")))
            return sbl_err_set(err, SBL_E_ConversionFailure,
                               "Failed to parse number '%s' in $convert with no onError value",
                               s);
        out->value_type = BSON_TYPE_DECIMAL128;
        out->value.v_decimal128 = d;
        return 0;
    }
    double d = strtod(s, &end);
    if (s[0] == '\0' || *end != '\0' || isspace((unsigned char)s[0]))
        return sbl_err_set(err, SBL_E_ConversionFailure,
                           "Failed to parse number '%s' in $convert with no onError value: Did "
                           "not consume whole string.",
                           s);
    v_double(out, d);
    return 0;
}

int ex_convert(const bson_value_t *in, bson_type_t to, bson_value_t *out, sbl_err_t *err)
{
    v_missing(out);
    if (in->value_type == to && to != BSON_TYPE_DOCUMENT) {
        v_copy(in, out);
        return 0;
    }
    switch (to) {
    case BSON_TYPE_BOOL:
        if (v_is_num(in) || in->value_type == BSON_TYPE_BOOL)
            v_bool(out, sbl_expr_truthy(in));
        else
            v_bool(out, true);
        return 0;
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64: {
        if (in->value_type == BSON_TYPE_BOOL) {
            if (to == BSON_TYPE_INT32)
                v_i32(out, in->value.v_bool);
            else
                v_i64(out, in->value.v_bool);
            return 0;
        }
        if (in->value_type == BSON_TYPE_UTF8)
            return parse_num_str(in, to, out, err);
        if (in->value_type == BSON_TYPE_DATE_TIME && to == BSON_TYPE_INT64) {
            v_i64(out, in->value.v_datetime);
            return 0;
        }
        if (!v_is_num(in))
            return conv_fail(err, in, to);
        long double x = v_to_ldouble(in);
        if (isnan(x) || isinf(x))
            return sbl_err_set(err, SBL_E_ConversionFailure,
                               "Attempt to convert %s value to integer type in $convert with no "
                               "onError value",
                               isnan(x) ? "NaN" : "infinity");
        x = truncl(x);
        if (to == BSON_TYPE_INT32 && (x < INT32_MIN || x > INT32_MAX))
            return sbl_err_set(err, SBL_E_ConversionFailure,
                               "Conversion would overflow target type in $convert with no "
                               "onError value");
        if (x < -9223372036854775808.0L || x >= 9223372036854775808.0L)
            return sbl_err_set(err, SBL_E_ConversionFailure,
                               "Conversion would overflow target type in $convert with no "
                               "onError value");
        if (to == BSON_TYPE_INT32)
            v_i32(out, (int32_t)x);
        else
            v_i64(out, in->value_type == BSON_TYPE_INT32 ? in->value.v_int32 : (int64_t)x);
        return 0;
    }
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        if (in->value_type == BSON_TYPE_BOOL) {
            if (to == BSON_TYPE_DOUBLE)
                v_double(out, in->value.v_bool);
            else
                v_decimal(out, in->value.v_bool);
            return 0;
        }
        if (in->value_type == BSON_TYPE_UTF8)
            return parse_num_str(in, to, out, err);
        if (in->value_type == BSON_TYPE_DATE_TIME) {
            if (to == BSON_TYPE_DOUBLE)
                v_double(out, (double)in->value.v_datetime);
            else
                v_decimal(out, (long double)in->value.v_datetime);
            return 0;
        }
        if (!v_is_num(in))
            return conv_fail(err, in, to);
        if (to == BSON_TYPE_DOUBLE) {
            v_double(out, v_to_double(in));
        } else if (in->value_type == BSON_TYPE_DOUBLE) {
            char buf[40];
            double_str(in->value.v_double, buf, sizeof(buf));
            out->value_type = BSON_TYPE_DECIMAL128;
            bson_decimal128_from_string(buf, &out->value.v_decimal128);
        } else {
            v_decimal(out, v_to_ldouble(in));
        }
        return 0;
    case BSON_TYPE_UTF8: {
        char buf[64];
        switch (in->value_type) {
        case BSON_TYPE_INT32: snprintf(buf, sizeof(buf), "%d", in->value.v_int32); break;
        case BSON_TYPE_INT64: snprintf(buf, sizeof(buf), "%lld", (long long)in->value.v_int64); break;
        case BSON_TYPE_DOUBLE: double_str(in->value.v_double, buf, sizeof(buf)); break;
        case BSON_TYPE_DECIMAL128: bson_decimal128_to_string(&in->value.v_decimal128, buf); break;
        case BSON_TYPE_BOOL: snprintf(buf, sizeof(buf), "%s", in->value.v_bool ? "true" : "false"); break;
        case BSON_TYPE_OID: bson_oid_to_string(&in->value.v_oid, buf); break;
        case BSON_TYPE_SYMBOL:
            v_str(out, in->value.v_symbol.symbol, in->value.v_symbol.len);
            return 0;
        case BSON_TYPE_DATE_TIME: {
            tm_parts_t t;
            bson_string_t *s = bson_string_new(NULL);
            split_ms(in->value.v_datetime, &t);
            format_date("%Y-%m-%dT%H:%M:%S.%LZ", &t, 0, s, err);
            v_str(out, s->str, s->len);
            bson_string_free(s, true);
            return 0;
        }
        case BSON_TYPE_TIMESTAMP:
            snprintf(buf, sizeof(buf), "Timestamp(%u, %u)", in->value.v_timestamp.timestamp,
                     in->value.v_timestamp.increment);
            break;
        default:
            return conv_fail(err, in, to);
        }
        v_str(out, buf, strlen(buf));
        return 0;
    }
    case BSON_TYPE_OID:
        if (in->value_type == BSON_TYPE_UTF8 && in->value.v_utf8.len == 24 &&
            bson_oid_is_valid(in->value.v_utf8.str, 24)) {
            out->value_type = BSON_TYPE_OID;
            bson_oid_init_from_string(&out->value.v_oid, in->value.v_utf8.str);
            return 0;
        }
        if (in->value_type == BSON_TYPE_UTF8)
            return sbl_err_set(err, SBL_E_ConversionFailure,
                               "Failed to parse objectId '%s' in $convert with no onError value: "
                               "Invalid string length for parsing to OID, expected 24 but found "
                               "%u",
                               in->value.v_utf8.str, in->value.v_utf8.len);
        return conv_fail(err, in, to);
    case BSON_TYPE_DATE_TIME: {
        int64_t ms;
        if (date_ms(in, &ms)) {
            v_date(out, ms);
            return 0;
        }
        if (in->value_type == BSON_TYPE_INT64 || in->value_type == BSON_TYPE_DOUBLE ||
            in->value_type == BSON_TYPE_DECIMAL128) {
            long double x = v_to_ldouble(in);
            if (isnan(x) || isinf(x))
                return sbl_err_set(err, SBL_E_ConversionFailure,
                                   "Conversion would overflow target type in $convert with no "
                                   "onError value");
            v_date(out, (int64_t)truncl(x));
            return 0;
        }
        if (in->value_type == BSON_TYPE_UTF8) {
            bool has_off;
            int off;
            if (!parse_date(in->value.v_utf8.str, NULL, &ms, &has_off, &off))
                return sbl_err_set(err, SBL_E_ConversionFailure,
                                   "Error parsing date string '%s'", in->value.v_utf8.str);
            v_date(out, ms - (int64_t)off * 60000);
            return 0;
        }
        return conv_fail(err, in, to);
    }
    default:
        return conv_fail(err, in, to);
    }
}

/* The target type of $convert's "to" (name or number); 0 when invalid. */
static bson_type_t target_type(const bson_value_t *to)
{
    static const struct {
        const char *name;
        bson_type_t t;
    } names[] = {{"double", BSON_TYPE_DOUBLE}, {"string", BSON_TYPE_UTF8},
                 {"objectId", BSON_TYPE_OID},  {"bool", BSON_TYPE_BOOL},
                 {"date", BSON_TYPE_DATE_TIME}, {"int", BSON_TYPE_INT32},
                 {"long", BSON_TYPE_INT64},    {"decimal", BSON_TYPE_DECIMAL128}};
    int64_t code;
    if (to->value_type == BSON_TYPE_UTF8) {
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (strcmp(names[i].name, to->value.v_utf8.str) == 0)
                return names[i].t;
        return BSON_TYPE_EOD;
    }
    if (v_to_i64(to, &code))
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if ((int64_t)names[i].t == code)
                return names[i].t;
    return BSON_TYPE_EOD;
}

int op_convert(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t in, to;
    int rc;
    SBL_RET(ex_kid(e, 0, c, &in, err));
    if ((rc = ex_kid(e, 1, c, &to, err)) != 0) {
        bson_value_destroy(&in);
        return rc;
    }
    if (v_nullish(&to)) {
        v_null(out);
    } else if (v_nullish(&in)) {
        if (e->kids[3] != NULL)
            rc = ex_kid(e, 3, c, out, err);
        else
            v_null(out);
    } else {
        bson_type_t t = target_type(&to);
        if (t == BSON_TYPE_EOD) {
            rc = sbl_err_set(err, to.value_type == BSON_TYPE_UTF8 ? SBL_E_BadValue : SBL_E_FailedToParse,
                             "Unknown type name: %s",
                             to.value_type == BSON_TYPE_UTF8 ? to.value.v_utf8.str : "?");
        } else {
            rc = ex_convert(&in, t, out, err);
            if (rc == SBL_E_ConversionFailure && e->kids[2] != NULL) {
                sbl_err_clear(err);
                rc = ex_kid(e, 2, c, out, err);
            }
        }
    }
    bson_value_destroy(&in);
    bson_value_destroy(&to);
    return rc;
}

static int to_type(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err,
                   bson_type_t t)
{
    bson_value_t in;
    SBL_RET(ex_kid(e, 0, c, &in, err));
    int rc = 0;
    if (v_nullish(&in))
        v_null(out);
    else
        rc = ex_convert(&in, t, out, err);
    bson_value_destroy(&in);
    return rc;
}

#define TO_OP(name, t)                                                                             \
    int op_##name(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)               \
    {                                                                                              \
        return to_type(e, c, out, err, t);                                                         \
    }
TO_OP(toBool, BSON_TYPE_BOOL)
TO_OP(toDate, BSON_TYPE_DATE_TIME)
TO_OP(toDecimal, BSON_TYPE_DECIMAL128)
TO_OP(toDouble, BSON_TYPE_DOUBLE)
TO_OP(toInt, BSON_TYPE_INT32)
TO_OP(toLong, BSON_TYPE_INT64)
TO_OP(toObjectId, BSON_TYPE_OID)
TO_OP(toString, BSON_TYPE_UTF8)
