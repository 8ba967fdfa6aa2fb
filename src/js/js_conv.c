/*
 * js_conv.c: BSON <-> JavaScript values, and the prelude that defines the
 * types mongod's JavaScript has (ObjectId, NumberLong, NumberInt,
 * NumberDecimal, BinData, Timestamp, MinKey, MaxKey) and its helpers
 * (Array.sum, Array.avg, tojson ...).
 *
 * What must stay true:
 *  - Both directions run inside a protected call (duk_safe_call or a native
 *    function called from JavaScript): pushing may throw (out of memory).
 *  - A value of a shell type keeps its exact BSON value in a non-enumerable
 *    property (__v, __b64), so int64 and decimal values survive a round trip
 *    that a JavaScript number would round.
 *  - Numbers go back as doubles, as mongod's do; undefined as null.
 */
#include "js/js_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JS_MAX_DEPTH 150

const char js_prelude[] =
    "(function(g){\n"
    "function hidden(o,k,v){Object.defineProperty(o,k,{value:v});}\n"
    "function ObjectId(s){if(!(this instanceof ObjectId))return new ObjectId(s);\n"
    " if(s===undefined){var h=Math.floor(Date.now()/1000).toString(16);while(h.length<8)h='0'+h;\n"
    "  for(var i=0;i<16;i++)h+=Math.floor(Math.random()*16).toString(16);s=h;}\n"
    " if(typeof s!=='string'||!/^[0-9a-fA-F]{24}$/.test(s))throw new Error('invalid object id: '+s);\n"
    " this.str=s.toLowerCase();}\n"
    "ObjectId.prototype.toString=function(){return 'ObjectId(\"'+this.str+'\")';};\n"
    "ObjectId.prototype.tojson=ObjectId.prototype.toString;\n"
    "ObjectId.prototype.toJSON=function(){return {$oid:this.str};};\n"
    "ObjectId.prototype.valueOf=function(){return this.str;};\n"
    "ObjectId.prototype.equals=function(o){return o instanceof ObjectId&&o.str===this.str;};\n"
    "ObjectId.prototype.getTimestamp=function(){return new Date(parseInt(this.str.substr(0,8),16)*1000);};\n"
    "function trunc(v){v=Number(v);return v<0?Math.ceil(v):Math.floor(v);}\n"
    "function NumberLong(v){if(!(this instanceof NumberLong))return new NumberLong(v);\n"
    " if(v===undefined)v=0;var s=typeof v==='string'?v:String(trunc(v));\n"
    " if(!/^-?[0-9]+$/.test(s))throw new Error('could not convert \"'+s+'\" to NumberLong');\n"
    " hidden(this,'__v',s);this.floatApprox=Number(s);}\n"
    "NumberLong.prototype.valueOf=function(){return this.floatApprox;};\n"
    "NumberLong.prototype.toNumber=NumberLong.prototype.valueOf;\n"
    "NumberLong.prototype.toString=function(){return Math.abs(this.floatApprox)<9007199254740992?"
    "'NumberLong('+this.__v+')':'NumberLong(\"'+this.__v+'\")';};\n"
    "NumberLong.prototype.tojson=NumberLong.prototype.toString;\n"
    "NumberLong.prototype.toJSON=function(){return {$numberLong:this.__v};};\n"
    "NumberLong.prototype.equals=function(o){return o instanceof NumberLong&&o.__v===this.__v;};\n"
    "function NumberInt(v){if(!(this instanceof NumberInt))return new NumberInt(v);\n"
    " hidden(this,'__v',v===undefined?0:(trunc(v)|0));}\n"
    "NumberInt.prototype.valueOf=function(){return this.__v;};\n"
    "NumberInt.prototype.toNumber=NumberInt.prototype.valueOf;\n"
    "NumberInt.prototype.toString=function(){return 'NumberInt('+this.__v+')';};\n"
    "NumberInt.prototype.tojson=NumberInt.prototype.toString;\n"
    "NumberInt.prototype.toJSON=function(){return this.__v;};\n"
    "function NumberDecimal(v){if(!(this instanceof NumberDecimal))return new NumberDecimal(v);\n"
    " hidden(this,'__v',v===undefined?'0':String(v));}\n"
    "NumberDecimal.prototype.valueOf=function(){return Number(this.__v);};\n"
    "NumberDecimal.prototype.toString=function(){return 'NumberDecimal(\"'+this.__v+'\")';};\n"
    "NumberDecimal.prototype.tojson=NumberDecimal.prototype.toString;\n"
    "NumberDecimal.prototype.toJSON=function(){return {$numberDecimal:this.__v};};\n"
    "function BinData(t,b64){if(!(this instanceof BinData))return new BinData(t,b64);\n"
    " hidden(this,'__t',t|0);hidden(this,'__b64',String(b64));}\n"
    "BinData.prototype.base64=function(){return this.__b64;};\n"
    "BinData.prototype.subtype=function(){return this.__t;};\n"
    "BinData.prototype.length=function(){var s=this.__b64,n=s.length*3/4;\n"
    " if(s.charAt(s.length-1)==='=')n--;if(s.charAt(s.length-2)==='=')n--;return n;};\n"
    "BinData.prototype.toString=function(){return 'BinData('+this.__t+',\"'+this.__b64+'\")';};\n"
    "BinData.prototype.tojson=BinData.prototype.toString;\n"
    "function Timestamp(t,i){if(!(this instanceof Timestamp))return new Timestamp(t,i);\n"
    " this.t=t===undefined?0:t;this.i=i===undefined?0:i;}\n"
    "Timestamp.prototype.toString=function(){return 'Timestamp('+this.t+', '+this.i+')';};\n"
    "Timestamp.prototype.tojson=Timestamp.prototype.toString;\n"
    "function MinKey(){if(!(this instanceof MinKey))return new MinKey();}\n"
    "MinKey.prototype.toString=function(){return '{ \"$minKey\" : 1 }';};\n"
    "MinKey.prototype.tojson=MinKey.prototype.toString;\n"
    "function MaxKey(){if(!(this instanceof MaxKey))return new MaxKey();}\n"
    "MaxKey.prototype.toString=function(){return '{ \"$maxKey\" : 1 }';};\n"
    "MaxKey.prototype.tojson=MaxKey.prototype.toString;\n"
    "g.ObjectId=ObjectId;g.NumberLong=NumberLong;g.NumberInt=NumberInt;\n"
    "g.NumberDecimal=NumberDecimal;g.BinData=BinData;g.Timestamp=Timestamp;\n"
    "g.MinKey=MinKey;g.MaxKey=MaxKey;\n"
    "Array.sum=function(a){if(a.length===0)return null;var s=a[0];\n"
    " for(var i=1;i<a.length;i++)s+=a[i];return s;};\n"
    "Array.avg=function(a){if(a.length===0)return null;return Array.sum(a)/a.length;};\n"
    "Array.contains=function(a,x){for(var i=0;i<a.length;i++)if(a[i]===x)return true;return false;};\n"
    "Array.unique=function(a){var u=[];for(var i=0;i<a.length;i++)"
    "if(!Array.contains(u,a[i]))u.push(a[i]);return u;};\n"
    "Array.stdDev=function(a){var m=Array.avg(a),s=0;for(var i=0;i<a.length;i++)"
    "s+=(a[i]-m)*(a[i]-m);return Math.sqrt(s/a.length);};\n"
    "g.tojson=function(x){return typeof x==='object'&&x!==null&&typeof x.tojson==='function'?"
    "x.tojson():JSON.stringify(x);};\n"
    "g.tojsononeline=g.tojson;\n"
    "g.isString=function(x){return typeof x==='string';};\n"
    "g.isNumber=function(x){return typeof x==='number';};\n"
    "g.isObject=function(x){return typeof x==='object';};\n"
    "g.print=function(){};g.printjson=function(){};\n"
    "})(this);\n";

/* ---- base64 (BinData) ---------------------------------------------------- */

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void push_base64(duk_context *ctx, const uint8_t *p, uint32_t n)
{
    size_t outn = ((size_t)n + 2) / 3 * 4;
    char *o = duk_push_fixed_buffer(ctx, outn ? outn : 1);
    size_t j = 0;
    for (uint32_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        o[j++] = b64chars[(v >> 18) & 63];
        o[j++] = b64chars[(v >> 12) & 63];
        o[j++] = i + 1 < n ? b64chars[(v >> 6) & 63] : '=';
        o[j++] = i + 2 < n ? b64chars[v & 63] : '=';
    }
    duk_push_lstring(ctx, o, j);
    duk_remove(ctx, -2);
}

static int b64val(char c)
{
    const char *p = c ? strchr(b64chars, c) : NULL;
    return p ? (int)(p - b64chars) : -1;
}

/* Decode s into a new buffer (*outp, *outn); false when s is not base64. */
static bool base64_decode(const char *s, size_t n, uint8_t **outp, uint32_t *outn)
{
    uint8_t *o = bson_malloc(n / 4 * 3 + 3);
    uint32_t acc = 0, bits = 0, j = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=')
            break;
        int v = b64val(s[i]);
        if (v < 0) {
            bson_free(o);
            return false;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[j++] = (uint8_t)(acc >> bits);
        }
    }
    *outp = o;
    *outn = j;
    return true;
}

/* ---- BSON -> JavaScript --------------------------------------------------- */

/* new <ctor>(...) with the arguments already pushed above the constructor. */
static void push_ctor(duk_context *ctx, const char *name)
{
    duk_get_global_string(ctx, name);
}

void js_push_value(duk_context *ctx, const bson_value_t *v, int depth)
{
    char buf[64];
    bson_t d;

    switch (v->value_type) {
    case BSON_TYPE_DOUBLE:
        duk_push_number(ctx, v->value.v_double);
        break;
    case BSON_TYPE_INT32:
        duk_push_int(ctx, v->value.v_int32);
        break;
    case BSON_TYPE_INT64:
        push_ctor(ctx, "NumberLong");
        snprintf(buf, sizeof(buf), "%" PRId64, v->value.v_int64);
        duk_push_string(ctx, buf);
        duk_new(ctx, 1);
        break;
    case BSON_TYPE_DECIMAL128:
        push_ctor(ctx, "NumberDecimal");
        bson_decimal128_to_string(&v->value.v_decimal128, buf);
        duk_push_string(ctx, buf);
        duk_new(ctx, 1);
        break;
    case BSON_TYPE_UTF8:
        duk_push_lstring(ctx, v->value.v_utf8.str, v->value.v_utf8.len);
        break;
    case BSON_TYPE_SYMBOL:
        duk_push_lstring(ctx, v->value.v_symbol.symbol, v->value.v_symbol.len);
        break;
    case BSON_TYPE_CODE:
        duk_push_lstring(ctx, v->value.v_code.code, v->value.v_code.code_len);
        break;
    case BSON_TYPE_CODEWSCOPE:
        duk_push_lstring(ctx, v->value.v_codewscope.code, v->value.v_codewscope.code_len);
        break;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        if (depth >= JS_MAX_DEPTH ||
            !bson_init_static(&d, v->value.v_doc.data, v->value.v_doc.data_len)) {
            duk_push_null(ctx);
            break;
        }
        js_push_doc(ctx, &d, v->value_type == BSON_TYPE_ARRAY, depth + 1);
        break;
    case BSON_TYPE_BOOL:
        duk_push_boolean(ctx, v->value.v_bool);
        break;
    case BSON_TYPE_NULL:
        duk_push_null(ctx);
        break;
    case BSON_TYPE_OID:
        push_ctor(ctx, "ObjectId");
        bson_oid_to_string(&v->value.v_oid, buf);
        duk_push_string(ctx, buf);
        duk_new(ctx, 1);
        break;
    case BSON_TYPE_DATE_TIME:
        push_ctor(ctx, "Date");
        duk_push_number(ctx, (double)v->value.v_datetime);
        duk_new(ctx, 1);
        break;
    case BSON_TYPE_BINARY:
        push_ctor(ctx, "BinData");
        duk_push_int(ctx, v->value.v_binary.subtype);
        push_base64(ctx, v->value.v_binary.data, v->value.v_binary.data_len);
        duk_new(ctx, 2);
        break;
    case BSON_TYPE_REGEX: {
        char fl[4];
        size_t n = 0;
        for (const char *o = v->value.v_regex.options; *o && n < 3; o++)
            if (*o == 'i' || *o == 'm')
                fl[n++] = *o;
        fl[n] = '\0';
        push_ctor(ctx, "RegExp");
        duk_push_string(ctx, v->value.v_regex.regex);
        duk_push_string(ctx, fl);
        duk_new(ctx, 2);
        break;
    }
    case BSON_TYPE_TIMESTAMP:
        push_ctor(ctx, "Timestamp");
        duk_push_uint(ctx, v->value.v_timestamp.timestamp);
        duk_push_uint(ctx, v->value.v_timestamp.increment);
        duk_new(ctx, 2);
        break;
    case BSON_TYPE_MINKEY:
        push_ctor(ctx, "MinKey");
        duk_new(ctx, 0);
        break;
    case BSON_TYPE_MAXKEY:
        push_ctor(ctx, "MaxKey");
        duk_new(ctx, 0);
        break;
    case BSON_TYPE_UNDEFINED:
    default:
        duk_push_undefined(ctx);
        break;
    }
}

void js_push_doc(duk_context *ctx, const bson_t *doc, bool array, int depth)
{
    bson_iter_t it;
    duk_uarridx_t i = 0;

    duk_require_stack(ctx, 8);
    if (array)
        duk_push_array(ctx);
    else
        duk_push_object(ctx);
    if (!bson_iter_init(&it, doc))
        return;
    while (bson_iter_next(&it)) {
        js_push_value(ctx, bson_iter_value(&it), depth);
        if (array)
            duk_put_prop_index(ctx, -2, i++);
        else
            duk_put_prop_lstring(ctx, -2, bson_iter_key(&it), bson_iter_key_len(&it));
    }
}

/* ---- JavaScript -> BSON --------------------------------------------------- */

static bool is_a(duk_context *ctx, duk_idx_t idx, const char *ctor)
{
    bool r = false;
    if (duk_get_global_string(ctx, ctor) && duk_is_callable(ctx, -1))
        r = duk_instanceof(ctx, idx, -1);
    duk_pop(ctx);
    return r;
}

/* The string property name of the object at idx (owned by the stack until popped). */
static const char *get_str_prop(duk_context *ctx, duk_idx_t idx, const char *name, size_t *lenp)
{
    duk_get_prop_string(ctx, idx, name);
    return duk_safe_to_lstring(ctx, -1, lenp);
}

static bool append_object(duk_context *ctx, duk_idx_t idx, bson_t *b, const char *key, int klen,
                          int depth, char *msg, size_t msglen)
{
    size_t n;
    const char *s;
    bool ok = true;

    if (is_a(ctx, idx, "ObjectId")) {
        s = get_str_prop(ctx, idx, "str", &n);
        bson_oid_t oid;
        if (!bson_oid_is_valid(s, n) || n != 24) {
            snprintf(msg, msglen, "invalid ObjectId: %s", s);
            ok = false;
        } else {
            bson_oid_init_from_string(&oid, s);
            bson_append_oid(b, key, klen, &oid);
        }
        duk_pop(ctx);
        return ok;
    }
    if (is_a(ctx, idx, "Date")) {
        duk_get_prop_string(ctx, idx, "getTime");
        duk_dup(ctx, idx);
        duk_call_method(ctx, 0);
        double ms = duk_get_number(ctx, -1);
        duk_pop(ctx);
        bson_append_date_time(b, key, klen, ms == ms ? (int64_t)ms : INT64_MIN);
        return true;
    }
    if (is_a(ctx, idx, "NumberLong")) {
        s = get_str_prop(ctx, idx, "__v", &n);
        bson_append_int64(b, key, klen, strtoll(s, NULL, 10));
        duk_pop(ctx);
        return true;
    }
    if (is_a(ctx, idx, "NumberInt")) {
        duk_get_prop_string(ctx, idx, "__v");
        bson_append_int32(b, key, klen, duk_to_int32(ctx, -1));
        duk_pop(ctx);
        return true;
    }
    if (is_a(ctx, idx, "NumberDecimal")) {
        bson_decimal128_t dec;
        s = get_str_prop(ctx, idx, "__v", &n);
        if (!bson_decimal128_from_string(s, &dec)) {
            snprintf(msg, msglen, "invalid NumberDecimal: %s", s);
            ok = false;
        } else {
            bson_append_decimal128(b, key, klen, &dec);
        }
        duk_pop(ctx);
        return ok;
    }
    if (is_a(ctx, idx, "BinData")) {
        uint8_t *data;
        uint32_t dn;
        duk_get_prop_string(ctx, idx, "__t");
        int t = duk_to_int(ctx, -1);
        duk_pop(ctx);
        s = get_str_prop(ctx, idx, "__b64", &n);
        if (!base64_decode(s, n, &data, &dn)) {
            snprintf(msg, msglen, "invalid BinData base64");
            ok = false;
        } else {
            bson_append_binary(b, key, klen, (bson_subtype_t)t, data, dn);
            bson_free(data);
        }
        duk_pop(ctx);
        return ok;
    }
    if (is_a(ctx, idx, "Timestamp")) {
        duk_get_prop_string(ctx, idx, "t");
        uint32_t t = duk_to_uint32(ctx, -1);
        duk_get_prop_string(ctx, idx, "i");
        uint32_t i = duk_to_uint32(ctx, -1);
        duk_pop_2(ctx);
        bson_append_timestamp(b, key, klen, t, i);
        return true;
    }
    if (is_a(ctx, idx, "MinKey")) {
        bson_append_minkey(b, key, klen);
        return true;
    }
    if (is_a(ctx, idx, "MaxKey")) {
        bson_append_maxkey(b, key, klen);
        return true;
    }
    if (is_a(ctx, idx, "RegExp")) {
        char fl[3];
        size_t nf = 0;
        duk_get_prop_string(ctx, idx, "ignoreCase");
        if (duk_to_boolean(ctx, -1))
            fl[nf++] = 'i';
        duk_get_prop_string(ctx, idx, "multiline");
        if (duk_to_boolean(ctx, -1))
            fl[nf++] = 'm';
        fl[nf] = '\0';
        duk_pop_2(ctx);
        s = get_str_prop(ctx, idx, "source", &n);
        bson_append_regex(b, key, klen, s, fl);
        duk_pop(ctx);
        return true;
    }
    if (depth >= JS_MAX_DEPTH) {
        snprintf(msg, msglen, "JavaScript object nested more than %d levels (cyclic?)",
                 JS_MAX_DEPTH);
        return false;
    }
    bson_t child;
    bool array = duk_is_array(ctx, idx);
    duk_require_stack(ctx, 8); /* each level holds an enumerator, a key and a value */
    if (array) {
        duk_size_t len = duk_get_length(ctx, idx);
        char ibuf[16];
        const char *ik;
        bson_append_array_begin(b, key, klen, &child);
        for (duk_size_t i = 0; i < len && ok; i++) {
            size_t kl = bson_uint32_to_string((uint32_t)i, &ik, ibuf, sizeof(ibuf));
            duk_get_prop_index(ctx, idx, (duk_uarridx_t)i);
            ok = js_append_value(ctx, -1, &child, ik, (int)kl, depth + 1, msg, msglen);
            duk_pop(ctx);
        }
        bson_append_array_end(b, &child);
        return ok;
    }
    bson_append_document_begin(b, key, klen, &child);
    duk_enum(ctx, idx, DUK_ENUM_OWN_PROPERTIES_ONLY);
    while (ok && duk_next(ctx, -1, 1)) {
        const char *k = duk_get_lstring(ctx, -2, &n);
        ok = js_append_value(ctx, -1, &child, k, (int)n, depth + 1, msg, msglen);
        duk_pop_2(ctx);
    }
    duk_pop(ctx);
    bson_append_document_end(b, &child);
    return ok;
}

bool js_append_value(duk_context *ctx, duk_idx_t idx, bson_t *b, const char *key, int klen,
                     int depth, char *msg, size_t msglen)
{
    size_t n;
    const char *s;

    idx = duk_normalize_index(ctx, idx);
    switch (duk_get_type(ctx, idx)) {
    case DUK_TYPE_NONE:
    case DUK_TYPE_UNDEFINED:
    case DUK_TYPE_NULL:
        bson_append_null(b, key, klen);
        return true;
    case DUK_TYPE_BOOLEAN:
        bson_append_bool(b, key, klen, duk_get_boolean(ctx, idx));
        return true;
    case DUK_TYPE_NUMBER:
        bson_append_double(b, key, klen, duk_get_number(ctx, idx));
        return true;
    case DUK_TYPE_STRING:
        s = duk_get_lstring(ctx, idx, &n);
        bson_append_utf8(b, key, klen, s, (int)n);
        return true;
    case DUK_TYPE_OBJECT:
        if (duk_is_function(ctx, idx)) {
            s = duk_safe_to_lstring(ctx, idx, &n);
            bson_append_code(b, key, klen, s);
            return true;
        }
        if (duk_is_buffer_data(ctx, idx)) {
            duk_size_t bn;
            void *p = duk_get_buffer_data(ctx, idx, &bn);
            bson_append_binary(b, key, klen, BSON_SUBTYPE_BINARY, p, (uint32_t)bn);
            return true;
        }
        return append_object(ctx, idx, b, key, klen, depth, msg, msglen);
    case DUK_TYPE_BUFFER: {
        duk_size_t bn;
        void *p = duk_get_buffer_data(ctx, idx, &bn);
        bson_append_binary(b, key, klen, BSON_SUBTYPE_BINARY, p, (uint32_t)bn);
        return true;
    }
    case DUK_TYPE_LIGHTFUNC:
        bson_append_code(b, key, klen, "function() { [native code] }");
        return true;
    default:
        bson_append_null(b, key, klen);
        return true;
    }
}
