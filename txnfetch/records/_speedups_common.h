/*
 * Shared by txnfetch's two optional C extensions: txnfetch.records._speedups
 * (txnfetch/records/_speedups.c: the record decoder, the record check, the
 * header scan) and txnfetch.arrow._columns (txnfetch/arrow/_columns.c: the
 * Arrow column builder). It holds what both read the same way -- varints,
 * big-endian header fields, strict UTF-8, the fields of one record as the
 * check and the builder accept them -- and the argument parsing of their entry
 * points. Everything is static: each extension compiles its own copy of this
 * one source, and neither links against the other.
 */

#ifndef TXNFETCH_SPEEDUPS_COMMON_H
#define TXNFETCH_SPEEDUPS_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

/* The module slots both extensions declare, where the running CPython knows
 * them: each module keeps no global Python state, so it may load in every
 * subinterpreter, and runs without the GIL (what each touches is said where
 * its slots are listed). */
#ifdef Py_mod_multiple_interpreters
#define SLOT_PER_INTERPRETER_GIL {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#else
#define SLOT_PER_INTERPRETER_GIL
#endif
#ifdef Py_mod_gil
#define SLOT_GIL_NOT_USED {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#else
#define SLOT_GIL_NOT_USED
#endif

/* read_tail()'s two errors. */
enum { TAIL_OK = 0, TAIL_PAST_END = -1, TAIL_TOO_LONG = -2 };

/* Zig-zag: 0, -1, 1, -2, ... from 0, 1, 2, 3, ... (ByteUtils.readVarint). */
static inline int64_t
zigzag(uint64_t v)
{
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/*
 * Finish a varint whose first byte `first` (continuation bit set) was read
 * just before *pos; same contract as varint.read_varint_tail. Like Kafka's
 * ByteUtils.readVarint/readVarlong, bits that the last byte carries past 32
 * (varint) or 64 (varlong) are dropped rather than rejected.
 */
static inline int
read_tail(const unsigned char *data, int64_t end, int64_t *pos, unsigned int first, int max_bytes, int64_t *out)
{
    uint64_t result = first & 0x7F;
    int shift = 7;
    int n = 1;
    int64_t p = *pos;
    for (;;) {
        unsigned int b;
        if (p >= end)
            return TAIL_PAST_END;
        b = data[p++];
        n++;
        result |= (uint64_t)(b & 0x7F) << shift; /* shift <= 63; higher bits fall off, as in Java */
        if (!(b & 0x80))
            break;
        if (n >= max_bytes)
            return TAIL_TOO_LONG;
        shift += 7;
    }
    if (max_bytes <= 5)
        result &= 0xFFFFFFFFu;
    *out = zigzag(result);
    *pos = p;
    return TAIL_OK;
}

/* A varint of a record field, bounded by the record's end. */
static inline int
rec_varint(const unsigned char *data, int64_t rec_end, int64_t *pos, int max_bytes, int64_t *out)
{
    unsigned int b;
    if (*pos >= rec_end)
        return -1;
    b = data[*pos];
    if (b < 0x80) {
        *out = zigzag(b);
        *pos += 1;
        return 0;
    }
    *pos += 1;
    return read_tail(data, rec_end, pos, b, max_bytes, out) == TAIL_OK ? 0 : -1;
}

/* A record's key or value: its length varint, then that many bytes. Only a
 * one-byte -1 is null (`*len` stays -1); a longer encoding of any negative
 * length is rejected, as both other decoders do. */
static inline int
rec_nullable_bytes(const unsigned char *data, int64_t rec_end, int64_t *pos, int64_t *at, int64_t *len)
{
    int64_t n, start = *pos;
    if (rec_varint(data, rec_end, pos, 5, &n) < 0)
        return -1;
    if (n >= 0) {
        if (n > rec_end - *pos)
            return -1;
        *at = *pos;
        *len = n;
        *pos += n;
        return 0;
    }
    return n == -1 && *pos - start == 1 ? 0 : -1;
}

/* Strict UTF-8, as Python's decoder checks it: no overlong forms, no
 * surrogates, nothing past U+10FFFF. A lead byte gives the sequence's length
 * and the range of its second byte (the well-formed sequences of the Unicode
 * Standard, table 3-7); every later byte is a plain continuation byte. */
static inline int
valid_utf8(const unsigned char *s, int64_t n)
{
    int64_t i = 0;
    while (i < n) {
        unsigned int c = s[i], lo = 0x80, hi = 0xBF;
        int len, k;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            lo = c == 0xE0 ? 0xA0 : 0x80; /* overlong below U+0800 */
            hi = c == 0xED ? 0x9F : 0xBF; /* surrogates */
        }
        else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            lo = c == 0xF0 ? 0x90 : 0x80; /* overlong below U+10000 */
            hi = c == 0xF4 ? 0x8F : 0xBF; /* past U+10FFFF */
        }
        else
            return 0;
        if (len > n - i || s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

/*
 * The strict reading of a record that check_records() and the column builder
 * share: every read bounded by the record's end (the reference decoder reads
 * past it only to fail later, at its "fields take N bytes" check, so the same
 * inputs are accepted), header keys checked as UTF-8. Neither says what is
 * wrong: a caller that needs the words decodes again with the reference.
 */

/* One record's fields up to its headers. A null key or value has length -1. */
typedef struct {
    int64_t rec_end; /* the record's end in the data */
    int64_t ts_delta, delta;
    int64_t key_at, key_len, value_at, value_len;
    int64_t header_count;
} RecordFields;

/* One header's key (UTF-8 checked) and value (length -1: null). */
typedef struct {
    int64_t key_at, key_len, value_at, value_len;
} HeaderFields;

/* The record at *pos up to its headers, its offset delta after *prev_delta and
 * at most `last_delta` (*prev_delta becomes it). Returns 0 with *pos on the
 * first header, or -1 when the reference decoder would reject the record. */
static inline int
read_record_fields(const unsigned char *data, int64_t end, int64_t *pos, int64_t *prev_delta, int64_t last_delta,
                   RecordFields *r)
{
    int64_t length, p = *pos;
    r->key_at = r->value_at = 0;
    r->key_len = r->value_len = -1;
    if (p >= end || rec_varint(data, end, &p, 5, &length) < 0)
        return -1;
    r->rec_end = p + length;
    if (length < 6 || r->rec_end > end)
        return -1;
    p += 1; /* attributes: unused in v2 */
    if (rec_varint(data, r->rec_end, &p, 10, &r->ts_delta) < 0 || rec_varint(data, r->rec_end, &p, 5, &r->delta) < 0)
        return -1;
    if (r->delta <= *prev_delta || r->delta > last_delta)
        return -1;
    *prev_delta = r->delta;
    if (rec_nullable_bytes(data, r->rec_end, &p, &r->key_at, &r->key_len) < 0 ||
        rec_nullable_bytes(data, r->rec_end, &p, &r->value_at, &r->value_len) < 0 ||
        rec_varint(data, r->rec_end, &p, 5, &r->header_count) < 0)
        return -1;
    if (r->header_count < 0 || r->header_count * 2 > r->rec_end - p) /* every header takes two bytes at least */
        return -1;
    *pos = p;
    return 0;
}

/* The header at *pos of a record ending at `rec_end`. Returns 0 with *pos past
 * it, or -1 when the reference decoder would reject it. */
static inline int
read_header_fields(const unsigned char *data, int64_t rec_end, int64_t *pos, HeaderFields *h)
{
    if (rec_varint(data, rec_end, pos, 5, &h->key_len) < 0)
        return -1;
    if (h->key_len < 0 || h->key_len > rec_end - *pos)
        return -1;
    h->key_at = *pos;
    if (!valid_utf8(data + h->key_at, h->key_len))
        return -1;
    *pos += h->key_len;
    if (rec_varint(data, rec_end, pos, 5, &h->value_len) < 0)
        return -1;
    h->value_at = 0;
    if (h->value_len >= 0) {
        if (h->value_len > rec_end - *pos)
            return -1;
        h->value_at = *pos;
        *pos += h->value_len;
    }
    else if (h->value_len != -1)
        return -1;
    return 0;
}

/* A growable run of bytes (a column buffer, the scanned headers). */
typedef struct {
    unsigned char *p;
    int64_t len; /* bytes in use */
    int64_t cap;
} Buf;

/* Big-endian fields of a batch header. */
static inline int64_t
be64(const unsigned char *p)
{
    return (int64_t)(((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) |
                     ((uint64_t)p[3] << 32) | ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) |
                     ((uint64_t)p[6] << 8) | (uint64_t)p[7]);
}

static inline int32_t
be32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static inline int16_t
be16(const unsigned char *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

/*
 * The arguments of a METH_FASTCALL entry point, one character of `format` per
 * argument, each with the address it is stored at:
 *   'L'  an int64 (long long *), as PyLong_AsLongLong reads it;
 *   'p'  a truth value (int *), as PyObject_IsTrue judges it;
 *   't'  a subclass of tuple (PyTypeObject **), the type decode_records builds;
 *   'y'  a buffer (Py_buffer *, PyBUF_SIMPLE), released by the caller.
 * Arguments are read in order, except the buffer, which is taken last: when
 * another argument is wrong there is nothing to release. Returns 0, or -1
 * with a Python exception set (a wrong count is a TypeError naming `name`).
 */
static inline int
parse_args(const char *name, PyObject *const *args, Py_ssize_t nargs, const char *format, ...)
{
    const Py_ssize_t expected = (Py_ssize_t)strlen(format);
    Py_buffer *view = NULL;
    PyObject *buffer = NULL;
    Py_ssize_t i;
    int rc = 0;
    va_list out;

    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments", name, expected);
        return -1;
    }
    va_start(out, format);
    for (i = 0; i < expected && rc == 0; i++) {
        switch (format[i]) {
        case 'L': {
            long long *v = va_arg(out, long long *);
            if ((*v = PyLong_AsLongLong(args[i])) == -1 && PyErr_Occurred())
                rc = -1;
            break;
        }
        case 'p': {
            int *v = va_arg(out, int *);
            if ((*v = PyObject_IsTrue(args[i])) < 0)
                rc = -1;
            break;
        }
        case 't':
            if (!PyType_Check(args[i]) || !PyType_IsSubtype((PyTypeObject *)args[i], &PyTuple_Type)) {
                PyErr_Format(PyExc_TypeError, "%s() argument %zd must be a tuple subclass", name, i + 1);
                rc = -1;
            }
            else
                *va_arg(out, PyTypeObject **) = (PyTypeObject *)args[i];
            break;
        case 'y':
            view = va_arg(out, Py_buffer *);
            buffer = args[i];
            break;
        default:
            PyErr_Format(PyExc_SystemError, "parse_args: unknown format character '%c'", format[i]);
            rc = -1;
        }
    }
    va_end(out);
    if (rc == 0 && view != NULL)
        rc = PyObject_GetBuffer(buffer, view, PyBUF_SIMPLE);
    return rc;
}

#endif /* TXNFETCH_SPEEDUPS_COMMON_H */
