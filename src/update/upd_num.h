/*
 * upd_num.h: private to src/update.  Arithmetic for $inc and $mul with
 * MongoDB's numeric promotion, including a small exact decimal128 path.
 *
 * What must stay true: int32 op int32 yields int32 unless it overflows
 * (then int64); int64 overflow is reported as failure, never wrapped; any
 * double operand gives a double; any decimal128 operand gives a decimal128.
 */
#ifndef SBL_UPD_NUM_H
#define SBL_UPD_NUM_H

#include <bson/bson.h>
#include <stdbool.h>

/* The zero of the given numeric type ($mul on a missing field). */
void upd_num_zero(bson_type_t like, bson_value_t *out);
/* out = x + y (mul false) or x * y (mul true); false on int64 overflow. */
bool upd_num_arith(bool mul, const bson_value_t *x, const bson_value_t *y, bson_value_t *out);
/* Convert any numeric value to a double value; false for non-numbers. */
bool upd_num_to_double(const bson_value_t *v, bson_value_t *out);

#endif
