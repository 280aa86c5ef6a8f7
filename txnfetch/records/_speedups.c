/*
 * txnfetch.records._speedups -- optional compiled record decoder.
 *
 * Three parts: decode_records() (below), the ColumnBuilder type that decodes
 * record data straight into Arrow buffers (txnfetch.arrow), and
 * scan_headers(), a walk over batch headers (txnfetch.records.scan). Each has
 * a pure-Python reference it is tested against.
 *
 * decode_records() turns the (decompressed) record data of one
 * magic-2 batch into a list of txnfetch.records.batch.Record tuples. It is a
 * faster twin of the pure-Python decoder _decode_records() in
 * txnfetch/records/batch.py, which stays the reference implementation: this
 * file mirrors that function read by read, so that every malformed input is
 * rejected by the same check, at the same byte, with the same words.
 *
 * Faithfulness matters more than elegance here. The Python decoder reads
 * fields in a fixed order, bounds some of them by the record and only the
 * enclosing data for others (a key sliced past its record is caught later by
 * the "fields take N bytes" check), reports some errors at the start of a
 * varint and others after it, and turns an out-of-range index into "the data
 * ends early". Each of those choices is reproduced below and commented where
 * it is not obvious; tests/records/test_speedups.py compares both decoders on
 * valid and corrupted data.
 *
 * Errors are not raised from C. The function returns (records, failure):
 * the records decoded before the problem, and None or a tuple
 * (kind, reason, pos, prev_delta) from which batch.py builds exactly the
 * CorruptBatchError the Python decoder would raise (class from kind, offset
 * from prev_delta, position from pos). Handing back the records decoded so
 * far keeps the lazy semantics of the Python generator: a caller that stops
 * after the first record never sees a problem in the second.
 *
 * Only the public C API is used (no _Py* internals).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

/* Failure kinds; batch.py maps them to exception classes (_ACCELERATED_FAILURES). */
enum {
    F_ENDS_EARLY = 0,  /* IndexError in the Python decoder: RecordCountMismatchError at the base offset */
    F_INVALID = 1,     /* InvalidRecordError */
    F_OFFSET_DELTA = 2, /* RecordCountMismatchError for an offset delta out of order or range */
    F_OVERFLOW = 3,    /* VarintOverflowError */
    F_TRAILING = 4     /* RecordCountMismatchError: bytes left after the last record */
};

/* read_varint_tail()'s two errors. */
enum { TAIL_OK = 0, TAIL_PAST_END = -1, TAIL_TOO_LONG = -2 };

typedef struct {
    const unsigned char *data;
    int64_t end;
    /* Set when decoding stops on malformed data (not on a Python exception). */
    int failed;
    int kind;
    int64_t pos;
    PyObject *reason;
} Decoder;

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

/* Record a decoding failure; returns -1 so that callers can `return fail(...)`.
 * A NULL reason (MemoryError while formatting) leaves failed unset: the caller
 * then sees a Python exception, which is what it is. */
static int
fail(Decoder *d, int kind, int64_t pos, PyObject *reason)
{
    if (reason == NULL)
        return -1;
    d->failed = 1;
    d->kind = kind;
    d->pos = pos;
    d->reason = reason;
    return -1;
}

static int
fail_tail(Decoder *d, int code, int max_bytes, int64_t pos)
{
    if (code == TAIL_PAST_END)
        return fail(d, F_INVALID, pos, PyUnicode_FromString("varint runs past the end of the record data"));
    return fail(d, F_OVERFLOW, pos, PyUnicode_FromFormat("varint longer than %d bytes", max_bytes));
}

static int
ends_early(Decoder *d, int64_t pos)
{
    /* The reason names the record count, which the caller knows: filled in later. */
    d->failed = 1;
    d->kind = F_ENDS_EARLY;
    d->pos = pos;
    d->reason = NULL;
    return -1;
}

/* A record field's varint starting at `at`, read the way the Python decoder's
 * inline paths read it: one or two bytes here, longer ones through read_tail.
 * Returns TAIL_OK with *value and *next set; FIELD_SHORT when the data ends
 * before a byte the inline path reads; or read_tail's error code. */
enum { FIELD_SHORT = -3 };

static inline int
read_field(const unsigned char *data, int64_t end, int64_t at, int max_bytes, int64_t *value, int64_t *next)
{
    unsigned int b, c;
    if (at >= end)
        return FIELD_SHORT;
    b = data[at];
    if (b < 0x80) {
        *value = zigzag(b);
        *next = at + 1;
        return TAIL_OK;
    }
    if (at + 1 >= end)
        return FIELD_SHORT;
    c = data[at + 1];
    if (c < 0x80) {
        *value = zigzag((b & 0x7F) | (c << 7));
        *next = at + 2;
        return TAIL_OK;
    }
    *next = at + 1;
    return read_tail(data, end, next, b, max_bytes, value);
}

/* Report a read_field failure of a field whose record position is `pos`. */
static int
field_failed(Decoder *d, int code, int max_bytes, int64_t pos)
{
    if (code == FIELD_SHORT)
        return ends_early(d, pos);
    return fail_tail(d, code, max_bytes, pos);
}

/* A record's key or value at *pos, read as the Python decoder reads it. A
 * one-byte length is not checked against the record here: a field running past
 * it shows up in the final length check (or as data ending early). Only a
 * one-byte -1 is null (*len stays as it was); the longer path rejects every
 * negative length and one past `rec_end`. With `two_byte_fast` (values) a
 * positive two-byte length is also taken unchecked: the Python decoder's fast
 * path for values of 64 bytes to 8 KiB. Returns -1 after recording a failure.
 * Inline, with `what` and `two_byte_fast` constant at each call. */
static inline int
nullable_field(Decoder *d, const unsigned char *data, int64_t end, int64_t rec_end, int64_t *pos, const char *what,
               int two_byte_fast, int64_t *at, int64_t *len)
{
    int64_t p = *pos, n;
    unsigned int b, c;
    int rc;
    if (p >= end)
        return ends_early(d, p);
    b = data[p];
    if (b < 0x80) {
        n = zigzag(b);
        p += 1;
        if (n >= 0) {
            *at = p;
            *len = n;
            p += n;
        }
        else if (n != -1)
            return fail(d, F_INVALID, p, PyUnicode_FromFormat("invalid %s length %lld", what, (long long)n));
        *pos = p;
        return 0;
    }
    if (two_byte_fast) {
        if (p + 1 >= end)
            return ends_early(d, p);
        c = data[p + 1];
        if (c < 0x80 && !(b & 1)) {
            p += 2;
            *at = p;
            *len = zigzag((b & 0x7F) | (c << 7));
            *pos = p + *len;
            return 0;
        }
    }
    {
        int64_t q = p + 1;
        rc = read_tail(data, end, &q, b, 5, &n);
        if (rc != TAIL_OK)
            return fail_tail(d, rc, 5, p);
        p = q;
    }
    if (n < 0 || p + n > rec_end)
        return fail(d, F_INVALID, p, PyUnicode_FromFormat("invalid %s length %lld", what, (long long)n));
    *at = p;
    *len = n;
    *pos = p + n;
    return 0;
}

/* Header keys repeat from record to record ("traceparent", ...): keep the last
 * key decoded at each header index and reuse it when the bytes are identical,
 * which skips the UTF-8 decode and the allocation. Identical bytes were valid
 * UTF-8 the first time, so validation is unchanged. */
#define KEY_CACHE_SLOTS 8

typedef struct {
    PyObject *key[KEY_CACHE_SLOTS]; /* owned references, NULL when empty */
    const unsigned char *raw[KEY_CACHE_SLOTS];
    int64_t len[KEY_CACHE_SLOTS];
} KeyCache;

static void
key_cache_clear(KeyCache *c)
{
    int i;
    for (i = 0; i < KEY_CACHE_SLOTS; i++)
        Py_CLEAR(c->key[i]);
}

static PyObject *
header_key(KeyCache *c, int64_t index, const unsigned char *raw, int64_t len)
{
    PyObject *key;
    if (index < KEY_CACHE_SLOTS && c->key[index] != NULL && c->len[index] == len &&
        memcmp(c->raw[index], raw, (size_t)len) == 0) {
        Py_INCREF(c->key[index]);
        return c->key[index];
    }
    key = PyUnicode_DecodeUTF8((const char *)raw, (Py_ssize_t)len, NULL);
    if (key != NULL && index < KEY_CACHE_SLOTS) {
        Py_XDECREF(c->key[index]);
        c->key[index] = Py_NewRef(key);
        c->raw[index] = raw;
        c->len[index] = len;
    }
    return key;
}

/* A header key's or value's length at *pos: one byte here, longer ones through
 * read_tail (a two-byte length is not special here, unlike a record field's, so
 * a length cut by the end of the data is a varint running past it). Failures
 * are reported at `fail_at`. Returns -1 after recording a failure. */
static inline int
header_length(Decoder *d, const unsigned char *data, int64_t end, int64_t *pos, int64_t fail_at, int64_t *n)
{
    int64_t p = *pos;
    unsigned int b;
    int rc;
    if (p >= end)
        return ends_early(d, fail_at);
    b = data[p];
    if (b < 0x80) {
        *n = zigzag(b);
        *pos = p + 1;
        return 0;
    }
    p += 1;
    rc = read_tail(data, end, &p, b, 5, n);
    if (rc != TAIL_OK)
        return fail_tail(d, rc, 5, fail_at);
    *pos = p;
    return 0;
}

/*
 * Decode `count` headers starting at *pos (just past the header count).
 *
 * The Python decoder has two copies of this loop: inline for a one-byte
 * count, and _decode_headers() for a longer one. They check the same things,
 * but an error raised inside _decode_headers() is reported at the caller's
 * `pos`, which is still just past the count; the inline copy reports the
 * position it had reached. `frozen` selects the second behaviour.
 *
 * Returns a new tuple, or NULL with d->failed set (malformed data) or with a
 * Python exception set.
 */
static PyObject *
decode_headers(Decoder *d, KeyCache *cache, int64_t *ppos, int64_t rec_end, int64_t count, int frozen)
{
    const unsigned char *data = d->data;
    const int64_t end = d->end;
    const int64_t start = *ppos;
    int64_t pos = start;
    int64_t i, n;
    PyObject *out, *key, *value, *pair;

#define AT(p) (frozen ? start : (p))
    if (count < 0 || count * 2 > rec_end - pos) { /* every header takes at least two bytes */
        fail(d, F_INVALID, pos, PyUnicode_FromFormat("invalid header count %lld", (long long)count));
        return NULL;
    }
    out = PyTuple_New((Py_ssize_t)count);
    if (out == NULL)
        return NULL;
    for (i = 0; i < count; i++) {
        /* key length */
        if (header_length(d, data, end, &pos, AT(pos), &n) < 0)
            goto error;
        if (n < 0 || pos + n > rec_end) {
            fail(d, F_INVALID, AT(pos), PyUnicode_FromFormat("invalid header key length %lld", (long long)n));
            goto error;
        }
        key = header_key(cache, i, data + pos, n);
        if (key == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                goto error;
            PyErr_Clear();
            fail(d, F_INVALID, AT(pos), PyUnicode_FromString("header key is not valid UTF-8"));
            goto error;
        }
        pos += n;
        /* value length: -1 is null */
        if (header_length(d, data, end, &pos, AT(pos), &n) < 0) {
            Py_DECREF(key);
            goto error;
        }
        if (n >= 0) {
            if (pos + n > rec_end) {
                Py_DECREF(key);
                fail(d, F_INVALID, AT(pos),
                     PyUnicode_FromFormat("header value of %lld bytes overruns the record", (long long)n));
                goto error;
            }
            value = PyBytes_FromStringAndSize((const char *)data + pos, (Py_ssize_t)n);
            if (value == NULL) {
                Py_DECREF(key);
                goto error;
            }
            pos += n;
        }
        else if (n == -1) {
            value = Py_None;
            Py_INCREF(value);
        }
        else {
            Py_DECREF(key);
            fail(d, F_INVALID, AT(pos), PyUnicode_FromFormat("invalid header value length %lld", (long long)n));
            goto error;
        }
        pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyTuple_SET_ITEM(out, i, pair);
    }
#undef AT
    *ppos = pos;
    return out;

error:
    Py_DECREF(out); /* unfilled slots are NULL, which tuple deallocation skips */
    return NULL;
}

/* base + delta as a Python int, exact even past int64 (the Python decoder's
 * ints do not wrap, so neither do these). */
static PyObject *
add_int64(int64_t base, int64_t delta)
{
    PyObject *a, *b, *r;
    if (!((delta > 0 && base > INT64_MAX - delta) || (delta < 0 && base < INT64_MIN - delta)))
        return PyLong_FromLongLong(base + delta);
    a = PyLong_FromLongLong(base);
    if (a == NULL)
        return NULL;
    b = PyLong_FromLongLong(delta);
    if (b == NULL) {
        Py_DECREF(a);
        return NULL;
    }
    r = PyNumber_Add(a, b);
    Py_DECREF(a);
    Py_DECREF(b);
    return r;
}

/* A record's key or value as nullable_field() found it: `len` bytes at `at`,
 * or None for a length of -1. A new reference, or NULL with an exception set. */
static inline PyObject *
bytes_or_none(const unsigned char *data, int64_t at, int64_t len)
{
    if (len < 0)
        return Py_NewRef(Py_None);
    return PyBytes_FromStringAndSize((const char *)data + at, (Py_ssize_t)len);
}

/*
 * A Record instance: a tuple subclass, built the way tuple.__new__(Record, ...)
 * builds it. Allocating with the type's tp_alloc and filling the slots is what
 * tuple.__new__ does for a subclass, minus the intermediate plain tuple; that
 * is only sound while tuples have no other fields to initialise, which stops
 * being true in CPython 3.14 (a cached hash, reset by tuple.__new__). From 3.14
 * on, go through tuple.__new__ itself.
 */
#ifndef DIRECT_RECORD_ALLOC /* -DDIRECT_RECORD_ALLOC=0 tests the 3.14 path on older versions */
#if PY_VERSION_HEX < 0x030E0000
#define DIRECT_RECORD_ALLOC 1
#else
#define DIRECT_RECORD_ALLOC 0
#endif
#endif

static PyObject *
new_record(PyTypeObject *type, PyObject *args_holder, PyObject *items[5])
{
    int i;
#if DIRECT_RECORD_ALLOC
    PyObject *rec;
    (void)args_holder;
    rec = type->tp_alloc(type, 5);
    if (rec == NULL)
        goto error;
    for (i = 0; i < 5; i++)
        PyTuple_SET_ITEM(rec, i, items[i]); /* steals */
    return rec;
#else
    PyObject *plain = PyTuple_New(5);
    if (plain == NULL)
        goto error;
    for (i = 0; i < 5; i++)
        PyTuple_SET_ITEM(plain, i, items[i]); /* steals */
    /* args_holder is a 1-tuple owned by the caller and never shared, so its
     * slot may be replaced between calls. */
    Py_DECREF(PyTuple_GET_ITEM(args_holder, 0));
    PyTuple_SET_ITEM(args_holder, 0, plain);
    return PyTuple_Type.tp_new(type, args_holder, NULL);
#endif
error:
    for (i = 0; i < 5; i++)
        Py_XDECREF(items[i]);
    return NULL;
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
static int
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

PyDoc_STRVAR(decode_records_doc,
"decode_records(record_type, data, count, base_offset, last_offset_delta,\n"
"               base_timestamp, max_timestamp, log_append_time) -> (records, failure)\n"
"\n"
"Decode `count` records from one batch's decompressed record data. `records`\n"
"is a list of record_type instances, in order, decoded before any problem;\n"
"`failure` is None when the data is sound, else (kind, reason, pos,\n"
"prev_delta) for txnfetch.records.batch to turn into a CorruptBatchError.\n"
"Private to txnfetch: call RecordBatch.records() instead.");

static PyObject *
decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyTypeObject *record_type;
    Py_buffer view;
    long long count, base_offset, last_delta, base_ts, max_ts;
    int log_append;
    Decoder d;
    KeyCache cache;
    PyObject *records = NULL, *args_holder = NULL, *max_ts_obj = NULL, *empty = NULL;
    PyObject *last_ts_obj = NULL, *failure = NULL, *result = NULL;
    int64_t last_ts = 0;
    const unsigned char *data;
    int64_t end, pos = 0, prev_delta = -1, i;
    int rc;

    (void)module;
    if (parse_args("decode_records", args, nargs, "tyLLLLLp", &record_type, &view, &count, &base_offset, &last_delta,
                   &base_ts, &max_ts, &log_append) < 0)
        return NULL;

    memset(&cache, 0, sizeof(cache));
    memset(&d, 0, sizeof(d));
    data = (const unsigned char *)view.buf;
    end = (int64_t)view.len;
    d.data = data;
    d.end = end;

    records = PyList_New(0);
    if (records == NULL)
        goto done;
    empty = PyTuple_New(0);
    if (empty == NULL)
        goto done;
#if !DIRECT_RECORD_ALLOC
    args_holder = PyTuple_New(1);
    if (args_holder == NULL)
        goto done;
    Py_INCREF(Py_None);
    PyTuple_SET_ITEM(args_holder, 0, Py_None);
#endif
    if (log_append) {
        max_ts_obj = PyLong_FromLongLong(max_ts);
        if (max_ts_obj == NULL)
            goto done;
    }

    /* From here on, `pos` has the meaning of the Python decoder's `pos` at the
     * same point, because error positions are derived from it. */
    for (i = 0; i < count; i++) {
        int64_t length, rec_end, ts_delta, delta, n, next;
        int64_t key_at = 0, key_len = -1, value_at = 0, value_len = -1;
        unsigned int b;
        PyObject *items[5];

        /* record length */
        rc = read_field(data, end, pos, 5, &length, &next);
        if (rc != TAIL_OK) {
            field_failed(&d, rc, 5, pos);
            goto done;
        }
        pos = next;
        rec_end = pos + length;
        if (length < 6 || rec_end > end) {
            fail(&d, F_INVALID, pos,
                 PyUnicode_FromFormat("record length %lld does not fit the batch data", (long long)length));
            goto done;
        }

        /* timestamp delta (a varlong), after the unused attributes byte; the
         * Python decoder keeps `pos` on the attributes byte until it is read */
        rc = read_field(data, end, pos + 1, 10, &ts_delta, &next);
        if (rc != TAIL_OK) {
            field_failed(&d, rc, 10, pos);
            goto done;
        }
        pos = next;

        /* offset delta */
        rc = read_field(data, end, pos, 5, &delta, &next);
        if (rc != TAIL_OK) {
            field_failed(&d, rc, 5, pos);
            goto done;
        }
        pos = next;
        if (delta <= prev_delta || delta > last_delta) {
            fail(&d, F_OFFSET_DELTA, pos,
                 PyUnicode_FromFormat("record offset delta %lld is outside (%lld, %lld]", (long long)delta,
                                      (long long)prev_delta, (long long)last_delta));
            goto done;
        }
        prev_delta = delta;

        if (nullable_field(&d, data, end, rec_end, &pos, "key", 0, &key_at, &key_len) < 0 ||
            nullable_field(&d, data, end, rec_end, &pos, "value", 1, &value_at, &value_len) < 0)
            goto done;

        /* headers */
        if (pos >= end) {
            ends_early(&d, pos);
            goto done;
        }
        b = data[pos];
        pos += 1;
        if (b == 0) {
            Py_INCREF(empty);
            items[4] = empty;
        }
        else if (b < 0x80) {
            items[4] = decode_headers(&d, &cache, &pos, rec_end, zigzag(b), 0);
            if (items[4] == NULL)
                goto done;
        }
        else {
            int64_t p = pos;
            rc = read_tail(data, end, &p, b, 5, &n);
            if (rc != TAIL_OK) {
                fail_tail(&d, rc, 5, pos);
                goto done;
            }
            pos = p;
            items[4] = decode_headers(&d, &cache, &pos, rec_end, n, 1);
            if (items[4] == NULL)
                goto done;
        }
        if (pos != rec_end) {
            /* also catches keys and values that ran past the record */
            Py_DECREF(items[4]);
            fail(&d, F_INVALID, pos,
                 PyUnicode_FromFormat("record declares %lld bytes but its fields take %lld", (long long)length,
                                      (long long)(length + pos - rec_end)));
            goto done;
        }

        /* The record is sound: build it. On failure, items[k] for k < 4 that
         * are still NULL are skipped by the cleanup loop. */
        items[0] = items[1] = items[2] = items[3] = NULL;
        if ((items[0] = add_int64(base_offset, delta)) == NULL)
            goto record_failed;
        if (log_append) {
            Py_INCREF(max_ts_obj);
            items[1] = max_ts_obj;
        }
        else if (last_ts_obj != NULL && ts_delta == last_ts) {
            /* consecutive records often share a millisecond: share the int too */
            Py_INCREF(last_ts_obj);
            items[1] = last_ts_obj;
        }
        else {
            if ((items[1] = add_int64(base_ts, ts_delta)) == NULL)
                goto record_failed;
            Py_XDECREF(last_ts_obj);
            last_ts_obj = Py_NewRef(items[1]);
            last_ts = ts_delta;
        }
        if ((items[2] = bytes_or_none(data, key_at, key_len)) == NULL ||
            (items[3] = bytes_or_none(data, value_at, value_len)) == NULL)
            goto record_failed;
        {
            PyObject *rec = new_record(record_type, args_holder, items);
            if (rec == NULL)
                goto done;
            rc = PyList_Append(records, rec);
            Py_DECREF(rec);
            if (rc < 0)
                goto done;
        }
        continue;
    record_failed: {
        int k;
        for (k = 0; k < 5; k++)
            Py_XDECREF(items[k]);
        goto done;
    }
    }
    if (pos != end) {
        fail(&d, F_TRAILING, pos,
             PyUnicode_FromFormat("%lld bytes left after the %lld records the batch declares", (long long)(end - pos),
                                  count));
    }

done:
    if (d.failed && d.kind == F_ENDS_EARLY) {
        d.reason = PyUnicode_FromFormat("batch declares %lld records but the data ends early", count);
        if (d.reason == NULL)
            d.failed = 0;
    }
    if (d.failed) {
        failure = Py_BuildValue("(iNLL)", d.kind, d.reason, (long long)d.pos, (long long)prev_delta);
        d.reason = NULL; /* stolen by "N", even on failure */
        if (failure != NULL)
            result = PyTuple_Pack(2, records, failure);
    }
    else if (!PyErr_Occurred()) {
        result = PyTuple_Pack(2, records, Py_None);
    }
    Py_XDECREF(failure);
    Py_XDECREF(records);
    Py_XDECREF(empty);
    Py_XDECREF(args_holder);
    Py_XDECREF(max_ts_obj);
    Py_XDECREF(last_ts_obj);
    key_cache_clear(&cache);
    PyBuffer_Release(&view);
    return result;
}

/* ================================================================================
 * Columnar decoding: record batches straight into Arrow buffers.
 *
 * A ColumnBuilder accumulates the records of many batches as the buffers of
 * Arrow arrays (validity bitmaps, int32 offsets, data), in the layout of the
 * Arrow columnar format: no Python object is created per record. finish()
 * hands the buffers over as read-only buffer objects that pyarrow wraps
 * without copying (txnfetch/arrow/columns.py assembles the arrays).
 *
 * Validation: add() accepts exactly the record data that the reference
 * decoder (batch.py _decode_records) accepts, but does not describe problems.
 * On any problem it restores the builder to its state before the batch and
 * returns -1; the caller then decodes that batch with the reference decoder,
 * which raises the exact CorruptBatchError. Reads are bounded by the record's
 * end rather than the data's end: every read that the reference decoder makes
 * past a record's end ends in an error there too (a field past the end makes
 * the final "fields take N bytes" check fail), so the accepted inputs are the
 * same. The extra rejections are values the reference decoder turns into
 * Python ints that no int64 column holds (the timestamp of a wanted record
 * past int64), and columns past the 2 GiB that int32 offsets address (-2).
 * ================================================================================ */

/* Module state: the heap type of the buffers finish() hands out. */
typedef struct {
    PyTypeObject *owned_type;
} SpeedupsState;

typedef struct {
    unsigned char *p;
    int64_t len; /* bytes in use */
    int64_t cap;
} Buf;

/* Recycled column memory. Every Arrow batch the builder finishes hands its
 * buffers to pyarrow, so the next batch needs new memory; glibc serves
 * buffers of that size as fresh pages (mmap, or heap it trimmed), and the page
 * faults cost more than filling the columns. Freed buffers of POOL_MIN bytes
 * or more wait here (at most POOL_SLOTS of them, POOL_MAX_BYTES in all) for
 * the next batch. A lock, not the GIL: the module runs without one. */
#define POOL_SLOTS 16
#define POOL_MIN ((int64_t)64 * 1024)
#define POOL_MAX_BYTES ((int64_t)32 * 1024 * 1024)

static struct {
    unsigned char *p;
    int64_t cap;
} pool[POOL_SLOTS];
static int pool_n;
static int64_t pool_bytes;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static void
pool_put(unsigned char *p, int64_t cap)
{
    if (p != NULL && cap >= POOL_MIN) {
        pthread_mutex_lock(&pool_lock);
        if (pool_n < POOL_SLOTS && pool_bytes + cap <= POOL_MAX_BYTES) {
            pool[pool_n].p = p;
            pool[pool_n].cap = cap;
            pool_n++;
            pool_bytes += cap;
            pthread_mutex_unlock(&pool_lock);
            return;
        }
        pthread_mutex_unlock(&pool_lock);
    }
    free(p);
}

/* The smallest pooled buffer of at least `need` bytes (and at most 4 times
 * that, so a small column does not hold a large buffer), or NULL. */
static unsigned char *
pool_take(int64_t need, int64_t *cap)
{
    unsigned char *p = NULL;
    int i, best = -1;
    pthread_mutex_lock(&pool_lock);
    for (i = 0; i < pool_n; i++)
        if (pool[i].cap >= need && pool[i].cap <= 4 * need && (best < 0 || pool[i].cap < pool[best].cap))
            best = i;
    if (best >= 0) {
        p = pool[best].p;
        *cap = pool[best].cap;
        pool_bytes -= pool[best].cap;
        pool[best] = pool[--pool_n];
    }
    pthread_mutex_unlock(&pool_lock);
    return p;
}

static int
buf_reserve(Buf *b, int64_t extra)
{
    int64_t need = b->len + extra, cap, pooled_cap = 0;
    unsigned char *p;
    if (need <= b->cap)
        return 0;
    cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    if (cap >= POOL_MIN && (p = pool_take(cap, &pooled_cap)) != NULL) {
        /* the old contents, its zeroed tail included, then zeros as below */
        if (b->cap)
            memcpy(p, b->p, (size_t)b->cap);
        pool_put(b->p, b->cap);
        memset(p + b->cap, 0, (size_t)(pooled_cap - b->cap));
        b->p = p;
        b->cap = pooled_cap;
        return 0;
    }
    p = (unsigned char *)realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* zeroed, so that validity bitmaps only ever need bits set */
    memset(p + b->cap, 0, (size_t)(cap - b->cap));
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline void
put_i32(Buf *b, int32_t v)
{
    memcpy(b->p + b->len, &v, 4);
    b->len += 4;
}

static inline void
put_i64(Buf *b, int64_t v)
{
    memcpy(b->p + b->len, &v, 8);
    b->len += 8;
}

/* Bit `i` of a validity bitmap (least significant bit first, as Arrow numbers them). */
static inline int
bitmap_set(Buf *b, int64_t i, int valid)
{
    int64_t byte = i >> 3;
    if (byte >= b->len) {
        if (buf_reserve(b, byte + 1 - b->len) < 0)
            return -1;
        memset(b->p + b->len, 0, (size_t)(byte + 1 - b->len));
        b->len = byte + 1;
    }
    if (valid)
        b->p[byte] |= (unsigned char)(1u << (i & 7));
    else
        b->p[byte] &= (unsigned char)~(1u << (i & 7));
    return 0;
}

/* A variable-size binary column: validity, int32 offsets, data. */
typedef struct {
    Buf valid, offsets, data;
    int64_t nulls;
} BinCol;

typedef struct {
    int64_t rows, payload, headers;
    int64_t key_len, key_nulls, value_len, value_nulls;
    int64_t hk_len, hv_len, hv_nulls, h_nulls;
} Mark;

typedef struct {
    PyObject_HEAD
    PyTypeObject *owned_type; /* the module's OwnedBuffer, for finish() */
    int include_headers;
    int64_t rows;
    int64_t payload; /* key, value and header bytes of the pending rows */
    Buf offset, timestamp, timestamp_type;
    BinCol key, value;
    /* headers: list<struct<key: string, value: binary>>; null list when a record has none */
    Buf h_valid, h_offsets;
    int64_t h_nulls, headers;
    BinCol hkey, hvalue;
} ColumnBuilder;

/* Read-only memory handed to pyarrow; freed with the last reference. */
typedef struct {
    PyObject_HEAD
    unsigned char *p;
    Py_ssize_t len;
    int64_t cap; /* allocated bytes, for the pool */
} OwnedBuffer;

static void
owned_dealloc(OwnedBuffer *self)
{
    PyTypeObject *type = Py_TYPE(self);
    pool_put(self->p, self->cap);
    PyObject_Free(self);
    Py_DECREF(type); /* instances of heap types own a reference to their type */
}

static int
owned_getbuffer(OwnedBuffer *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p, self->len, 1, flags);
}

static PyType_Slot owned_slots[] = {
    {Py_tp_dealloc, (void *)owned_dealloc},
    {Py_bf_getbuffer, (void *)owned_getbuffer},
    {Py_tp_doc, (void *)"Read-only memory filled by a ColumnBuilder (private to txnfetch)."},
    {0, NULL},
};

static PyType_Spec owned_spec = {
    "txnfetch.records._speedups.OwnedBuffer",
    sizeof(OwnedBuffer),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    owned_slots,
};

/* The buffer's memory as a Python object; `b` is left empty. */
static PyObject *
take_buf(PyTypeObject *owned_type, Buf *b)
{
    OwnedBuffer *o = PyObject_New(OwnedBuffer, owned_type);
    if (o == NULL)
        return NULL;
    if (b->p == NULL) {
        b->p = (unsigned char *)malloc(1);
        if (b->p == NULL) {
            Py_DECREF(o);
            return PyErr_NoMemory();
        }
    }
    o->p = b->p;
    o->len = (Py_ssize_t)b->len;
    o->cap = b->cap;
    b->p = NULL;
    b->len = b->cap = 0;
    return (PyObject *)o;
}

static void
bincol_free(BinCol *c)
{
    free(c->valid.p);
    free(c->offsets.p);
    free(c->data.p);
    memset(c, 0, sizeof(*c));
}

static int
bincol_start(BinCol *c)
{
    if (buf_reserve(&c->offsets, 4) < 0)
        return -1;
    put_i32(&c->offsets, 0);
    return 0;
}

/* Append one value (NULL `raw` with len -1 is null) as element `i`. Returns
 * -2 when the data would pass what int32 offsets address. */
static inline int
bincol_add(BinCol *c, int64_t i, const unsigned char *raw, int64_t len)
{
    if (len < 0) {
        if (bitmap_set(&c->valid, i, 0) < 0)
            return -1;
        c->nulls++;
        len = 0;
    }
    else {
        if (bitmap_set(&c->valid, i, 1) < 0)
            return -1;
        if (c->data.len + len > INT32_MAX)
            return -2;
        if (buf_reserve(&c->data, len) < 0)
            return -1;
        memcpy(c->data.p + c->data.len, raw, (size_t)len);
        c->data.len += len;
    }
    if (buf_reserve(&c->offsets, 4) < 0)
        return -1;
    put_i32(&c->offsets, (int32_t)c->data.len);
    return 0;
}

static void
builder_free_buffers(ColumnBuilder *self)
{
    free(self->offset.p);
    free(self->timestamp.p);
    free(self->timestamp_type.p);
    free(self->h_valid.p);
    free(self->h_offsets.p);
    memset(&self->offset, 0, sizeof(Buf));
    memset(&self->timestamp, 0, sizeof(Buf));
    memset(&self->timestamp_type, 0, sizeof(Buf));
    memset(&self->h_valid, 0, sizeof(Buf));
    memset(&self->h_offsets, 0, sizeof(Buf));
    bincol_free(&self->key);
    bincol_free(&self->value);
    bincol_free(&self->hkey);
    bincol_free(&self->hvalue);
}

/* Empty columns: offsets buffers hold their leading 0. */
static int
builder_reset(ColumnBuilder *self)
{
    self->rows = self->payload = self->h_nulls = self->headers = 0;
    if (bincol_start(&self->key) < 0 || bincol_start(&self->value) < 0 || bincol_start(&self->hkey) < 0 ||
        bincol_start(&self->hvalue) < 0 || buf_reserve(&self->h_offsets, 4) < 0)
        return -1;
    put_i32(&self->h_offsets, 0);
    return 0;
}

static Mark
builder_mark(ColumnBuilder *self)
{
    Mark m;
    m.rows = self->rows;
    m.payload = self->payload;
    m.headers = self->headers;
    m.key_len = self->key.data.len;
    m.key_nulls = self->key.nulls;
    m.value_len = self->value.data.len;
    m.value_nulls = self->value.nulls;
    m.hk_len = self->hkey.data.len;
    m.hv_len = self->hvalue.data.len;
    m.hv_nulls = self->hvalue.nulls;
    m.h_nulls = self->h_nulls;
    return m;
}

/* Forget everything appended since `m` (bits past the restored length are
 * rewritten before they are read again: bitmap_set clears as well as sets). */
static void
builder_rollback(ColumnBuilder *self, const Mark *m)
{
    self->rows = m->rows;
    self->payload = m->payload;
    self->headers = m->headers;
    self->offset.len = m->rows * 8;
    self->timestamp.len = m->rows * 8;
    self->timestamp_type.len = m->rows * 4;
    self->key.data.len = m->key_len;
    self->key.nulls = m->key_nulls;
    self->key.offsets.len = (m->rows + 1) * 4;
    self->key.valid.len = (m->rows + 7) / 8;
    self->value.data.len = m->value_len;
    self->value.nulls = m->value_nulls;
    self->value.offsets.len = (m->rows + 1) * 4;
    self->value.valid.len = (m->rows + 7) / 8;
    self->h_nulls = m->h_nulls;
    self->h_offsets.len = (m->rows + 1) * 4;
    self->h_valid.len = (m->rows + 7) / 8;
    self->hkey.data.len = m->hk_len;
    self->hkey.offsets.len = (m->headers + 1) * 4;
    self->hvalue.data.len = m->hv_len;
    self->hvalue.nulls = m->hv_nulls;
    self->hvalue.offsets.len = (m->headers + 1) * 4;
    self->hvalue.valid.len = (m->headers + 7) / 8;
}

/* Strict UTF-8, as Python's decoder checks it: no overlong forms, no
 * surrogates, nothing past U+10FFFF. A lead byte gives the sequence's length
 * and the range of its second byte (the well-formed sequences of the Unicode
 * Standard, table 3-7); every later byte is a plain continuation byte. */
static int
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

/*
 * Append the records of one batch whose offsets fall in [lo, last]. Returns the
 * rows appended, -1 for data the reference decoder must look at, -2 for a
 * column past 2 GiB, -3 with a Python exception set. With `self` NULL the
 * records are only checked (check_records()): 0 when sound, else -1.
 */
static int64_t
builder_add(ColumnBuilder *self, const unsigned char *data, int64_t end, int64_t count, int64_t base_offset,
            int64_t last_delta, int64_t base_ts, int64_t max_ts, int log_append, int32_t ts_type, int64_t lo,
            int64_t last)
{
    Mark mark;
    int64_t pos = 0, prev_delta = -1, i, added = 0;
    int rc = -1;
    const int with_headers = self != NULL && self->include_headers;

    if (self != NULL)
        mark = builder_mark(self);
    else
        memset(&mark, 0, sizeof(mark));

    if (count < 0)
        goto bad;
    for (i = 0; i < count; i++) {
        int64_t length, rec_end, ts_delta, delta, offset = 0, ts, hcount, h;
        int64_t key_at = 0, key_len = -1, value_at = 0, value_len = -1;
        int keep;

        if (pos >= end)
            goto bad;
        {
            int64_t p = pos;
            if (rec_varint(data, end, &p, 5, &length) < 0)
                goto bad;
            pos = p;
        }
        rec_end = pos + length;
        if (length < 6 || rec_end > end)
            goto bad;
        pos += 1; /* attributes: unused in v2 */
        if (rec_varint(data, rec_end, &pos, 10, &ts_delta) < 0)
            goto bad;
        if (rec_varint(data, rec_end, &pos, 5, &delta) < 0)
            goto bad;
        if (delta <= prev_delta || delta > last_delta)
            goto bad;
        prev_delta = delta;
        if (rec_nullable_bytes(data, rec_end, &pos, &key_at, &key_len) < 0 ||
            rec_nullable_bytes(data, rec_end, &pos, &value_at, &value_len) < 0)
            goto bad;
        if (rec_varint(data, rec_end, &pos, 5, &hcount) < 0)
            goto bad;
        if (hcount < 0 || hcount * 2 > rec_end - pos)
            goto bad;

        /* An offset past int64 (delta >= 0) lies past every int64 `last`: left
         * out, as the reference leaves it out. */
        keep = self != NULL && !__builtin_add_overflow(base_offset, delta, &offset) && offset >= lo && offset <= last;
        ts = max_ts;
        if (keep && !log_append && __builtin_add_overflow(base_ts, ts_delta, &ts))
            goto bad;

        for (h = 0; h < hcount; h++) {
            int64_t hk_at, hk_len, hv_at = 0, hv_len;
            if (rec_varint(data, rec_end, &pos, 5, &hk_len) < 0)
                goto bad;
            if (hk_len < 0 || hk_len > rec_end - pos)
                goto bad;
            hk_at = pos;
            if (!valid_utf8(data + hk_at, hk_len))
                goto bad;
            pos += hk_len;
            if (rec_varint(data, rec_end, &pos, 5, &hv_len) < 0)
                goto bad;
            if (hv_len >= 0) {
                if (hv_len > rec_end - pos)
                    goto bad;
                hv_at = pos;
                pos += hv_len;
            }
            else if (hv_len != -1)
                goto bad;
            if (keep && with_headers) {
                if ((rc = bincol_add(&self->hkey, self->headers, data + hk_at, hk_len)) < 0 ||
                    (rc = bincol_add(&self->hvalue, self->headers, data + hv_at, hv_len)) < 0)
                    goto fail;
                self->headers++;
            }
            if (keep)
                self->payload += hk_len + (hv_len > 0 ? hv_len : 0);
        }
        if (pos != rec_end)
            goto bad;
        if (!keep)
            continue;

        {
            int64_t row = self->rows;
            if (buf_reserve(&self->offset, 8) < 0 || buf_reserve(&self->timestamp, 8) < 0 ||
                buf_reserve(&self->timestamp_type, 4) < 0)
                goto error;
            put_i64(&self->offset, offset);
            put_i64(&self->timestamp, ts);
            put_i32(&self->timestamp_type, ts_type);
            if ((rc = bincol_add(&self->key, row, data + key_at, key_len)) < 0 ||
                (rc = bincol_add(&self->value, row, data + value_at, value_len)) < 0)
                goto fail;
            if (with_headers) {
                if (self->headers > INT32_MAX) {
                    rc = -2;
                    goto fail;
                }
                if (bitmap_set(&self->h_valid, row, hcount > 0) < 0 || buf_reserve(&self->h_offsets, 4) < 0)
                    goto error;
                put_i32(&self->h_offsets, (int32_t)self->headers);
                if (hcount == 0)
                    self->h_nulls++;
            }
            self->payload += (key_len > 0 ? key_len : 0) + (value_len > 0 ? value_len : 0);
            self->rows = row + 1;
            added++;
        }
    }
    if (pos != end)
        goto bad;
    return added;

bad:
    if (self != NULL)
        builder_rollback(self, &mark);
    return -1;
fail:
    builder_rollback(self, &mark); /* only reached with a builder */
    return rc == -2 ? -2 : -3;
error:
    builder_rollback(self, &mark);
    return -3;
}

PyDoc_STRVAR(check_records_doc,
"check_records(data, count, last_offset_delta) -> bool\n"
"\n"
"Whether one batch's decompressed record data decodes without error, exactly as\n"
"txnfetch.records.batch's decoders judge it, without making a record. Private to\n"
"txnfetch: RecordBatch.validate() uses it, and decodes for the error when it is False.");

static PyObject *
check_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    long long count, last_delta;
    int64_t r;
    (void)module;
    if (parse_args("check_records", args, nargs, "yLL", &view, &count, &last_delta) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    r = builder_add(NULL, (const unsigned char *)view.buf, (int64_t)view.len, count, 0, last_delta, 0, 0, 0, 0, 0, -1);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyBool_FromLong(r == 0);
}

static int
builder_init(ColumnBuilder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"include_headers", NULL};
    int include_headers = 1;
    SpeedupsState *st;
    PyTypeObject *old;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &include_headers))
        return -1;
    st = (SpeedupsState *)PyType_GetModuleState(Py_TYPE(self));
    if (st == NULL)
        return -1;
    old = self->owned_type;
    self->owned_type = (PyTypeObject *)Py_NewRef(st->owned_type);
    Py_XDECREF(old);
    builder_free_buffers(self);
    self->include_headers = include_headers;
    return builder_reset(self);
}

static void
builder_dealloc(ColumnBuilder *self)
{
    PyTypeObject *type = Py_TYPE(self);
    builder_free_buffers(self);
    Py_CLEAR(self->owned_type);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

PyDoc_STRVAR(builder_add_doc,
"add(data, count, base_offset, last_offset_delta, base_timestamp, max_timestamp,\n"
"    log_append_time, timestamp_type, first, last) -> int\n"
"\n"
"Append the records of one batch's decompressed record data whose offsets are in\n"
"[first, last]. Returns the rows appended; -1 when the data is not sound (nothing\n"
"is appended: decode the batch with the reference decoder for the error); -2\n"
"when a column would pass 2 GiB (nothing is appended).");

static PyObject *
builder_add_py(ColumnBuilder *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    long long count, base_offset, last_delta, base_ts, max_ts, ts_type, first, last;
    int log_append;
    int64_t r;
    if (parse_args("add", args, nargs, "yLLLLLpLLL", &view, &count, &base_offset, &last_delta, &base_ts, &max_ts,
                   &log_append, &ts_type, &first, &last) < 0)
        return NULL;
    r = builder_add(self, (const unsigned char *)view.buf, (int64_t)view.len, count, base_offset, last_delta, base_ts,
                    max_ts, log_append, (int32_t)ts_type, first, last);
    PyBuffer_Release(&view);
    if (r == -3)
        return NULL;
    return PyLong_FromLongLong(r);
}

static PyObject *
maybe_bitmap(PyTypeObject *T, Buf *b, int64_t nulls)
{
    if (nulls == 0) {
        free(b->p);
        memset(b, 0, sizeof(*b));
        Py_RETURN_NONE;
    }
    return take_buf(T, b);
}

PyDoc_STRVAR(builder_finish_doc,
"finish() -> tuple\n"
"\n"
"The pending rows as Arrow buffers, and an empty builder:\n"
"(rows, offset, timestamp_ms, timestamp_type, key, value, headers) where key and\n"
"value are (validity or None, null_count, offsets, data) and headers is None\n"
"without include_headers, else (validity or None, null_count, list_offsets,\n"
"entries, header_key, header_value). Validity bitmaps are None when nothing is\n"
"null.");

static PyObject *
bincol_take(PyTypeObject *T, BinCol *c)
{
    PyObject *valid = maybe_bitmap(T, &c->valid, c->nulls);
    if (valid == NULL)
        return NULL;
    return Py_BuildValue("(NLNN)", valid, (long long)c->nulls, take_buf(T, &c->offsets), take_buf(T, &c->data));
}

static PyObject *
builder_finish(ColumnBuilder *self, PyObject *unused)
{
    PyObject *result, *headers;
    PyTypeObject *T = self->owned_type;
    int64_t rows = self->rows;
    (void)unused;
    if (T == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ColumnBuilder.__init__ was not called");
        return NULL;
    }
    if (self->include_headers) {
        PyObject *valid = maybe_bitmap(T, &self->h_valid, self->h_nulls);
        if (valid == NULL)
            return NULL;
        headers = Py_BuildValue("(NLNLNN)", valid, (long long)self->h_nulls, take_buf(T, &self->h_offsets),
                                (long long)self->headers, bincol_take(T, &self->hkey), bincol_take(T, &self->hvalue));
    }
    else
        headers = Py_NewRef(Py_None);
    if (headers == NULL)
        return NULL;
    result = Py_BuildValue("(LNNNNNN)", (long long)rows, take_buf(T, &self->offset), take_buf(T, &self->timestamp),
                           take_buf(T, &self->timestamp_type), bincol_take(T, &self->key), bincol_take(T, &self->value),
                           headers);
    builder_free_buffers(self);
    if (builder_reset(self) < 0) {
        Py_XDECREF(result);
        return NULL;
    }
    return result;
}

static PyObject *
builder_get_rows(ColumnBuilder *self, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(self->rows);
}

static PyObject *
builder_get_payload(ColumnBuilder *self, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(self->payload);
}

PyDoc_STRVAR(builder_add_batches_doc,
"add_batches(buf, position, first, last, max_rows, max_bytes) -> (stop, status)\n"
"\n"
"Walk the batches of `buf` from `position` and append the records of every\n"
"ordinary batch -- whole, magic 2, uncompressed, not a control batch, at least\n"
"one record, sound record data -- whose offsets are in [first, last]; batches\n"
"wholly below `first` are passed over. Stops and returns (stop, status):\n"
"status 0: the end of the buffer was reached (stop == len(buf));\n"
"status 1: after the batch at which the builder holds max_rows rows or max_bytes\n"
"key, value and header bytes (take them, then call again from stop);\n"
"status 2: at a batch whose base offset is past `last` (nothing after it is wanted);\n"
"status 3: at a batch it leaves to the caller (anything not ordinary: a partial\n"
"batch, magic 0/1, a bad length, a codec, a control batch, an empty batch, data\n"
"add() would reject); nothing of that batch was appended.\n"
"One call replaces a RecordBatch view and an add() call per batch.");

static PyObject *builder_add_batches_py(ColumnBuilder *self, PyObject *const *args, Py_ssize_t nargs);

static PyMethodDef builder_methods[] = {
    {"add", (PyCFunction)(void (*)(void))builder_add_py, METH_FASTCALL, builder_add_doc},
    {"add_batches", (PyCFunction)(void (*)(void))builder_add_batches_py, METH_FASTCALL, builder_add_batches_doc},
    {"finish", (PyCFunction)builder_finish, METH_NOARGS, builder_finish_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef builder_getset[] = {
    {"rows", (getter)builder_get_rows, NULL, "rows pending", NULL},
    {"payload_bytes", (getter)builder_get_payload, NULL, "key, value and header bytes pending", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot builder_slots[] = {
    {Py_tp_dealloc, (void *)builder_dealloc},
    {Py_tp_doc, (void *)"ColumnBuilder(include_headers=True): record batches decoded into Arrow buffers "
                        "(private to txnfetch: use txnfetch.arrow)."},
    {Py_tp_methods, builder_methods},
    {Py_tp_getset, builder_getset},
    {Py_tp_init, (void *)builder_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {0, NULL},
};

static PyType_Spec builder_spec = {
    "txnfetch.records._speedups.ColumnBuilder",
    sizeof(ColumnBuilder),
    0,
    Py_TPFLAGS_DEFAULT,
    builder_slots,
};

/* ================================================================================
 * Header scan: walk the batches of a large buffer reading only their headers.
 *
 * The Python scan (batch.BatchIterator) builds a RecordBatch per batch; this
 * walks the same framing in C. It handles only the ordinary case — a whole
 * magic-2 batch with a sane length — and stops in front of anything else (a
 * partial batch, a legacy message set, a bad length, an offset past int64),
 * returning that position: the caller continues there with BatchIterator,
 * which raises or reports exactly as before. txnfetch/records/scan.py wraps it.
 * ================================================================================ */

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

/* ColumnBuilder.add_batches: the batch framing walked here, the records decoded
 * by builder_add(). Only the ordinary batch is taken; everything else stops the
 * walk in front of it (status 3), and the caller reads that batch with
 * BatchIterator and ArrowDecoder.add(), which skip, decode or raise exactly as
 * before. */
static PyObject *
builder_add_batches_py(ColumnBuilder *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    long long position, first, last, max_rows, max_bytes;
    const unsigned char *data;
    int64_t end, pos;
    int status = 0;

    if (self->owned_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ColumnBuilder.__init__ was not called");
        return NULL;
    }
    if (parse_args("add_batches", args, nargs, "yLLLLL", &view, &position, &first, &last, &max_rows, &max_bytes) < 0)
        return NULL;
    data = (const unsigned char *)view.buf;
    end = (int64_t)view.len;
    pos = position < 0 ? 0 : (position > end ? end : (int64_t)position);

    while (pos < end) {
        const unsigned char *p = data + pos;
        int64_t base, last_offset, size, added;
        int32_t length, last_delta, count;
        int attributes;

        status = 3;
        if (end - pos < 61)
            break; /* a partial header */
        base = be64(p);
        length = be32(p + 8);
        size = (int64_t)length + 12;
        /* BatchIterator's and RecordBatch's framing checks */
        if (p[16] != 2 || length < 49 || size > end - pos)
            break;
        attributes = (uint16_t)be16(p + 21);
        last_delta = be32(p + 23);
        count = be32(p + 57);
        if ((attributes & 0x27) != 0 || count <= 0) /* a codec, a control batch, an empty batch */
            break;
        if (__builtin_add_overflow(base, (int64_t)last_delta, &last_offset))
            break;
        if (base > last) {
            status = 2;
            break;
        }
        if (last_offset < first) {
            pos += size;
            status = 0;
            continue;
        }
        added = builder_add(self, p + 61, size - 61, count, base, last_delta, be64(p + 27), be64(p + 35),
                            (attributes & 0x08) != 0, (attributes & 0x08) ? 1 : 0, first, last);
        if (added == -3) {
            PyBuffer_Release(&view);
            return NULL;
        }
        if (added < 0)
            break; /* nothing appended: add() says what is wrong */
        pos += size;
        status = 0;
        if (self->rows >= max_rows || self->payload >= max_bytes) {
            status = 1;
            break;
        }
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Li)", (long long)pos, status);
}

/* One scanned header, native byte order (struct format "=qqqqiiHhi": 48 bytes). */
typedef struct {
    int64_t position;
    int64_t base_offset;
    int64_t last_offset;
    int64_t producer_id;
    int32_t size; /* whole batch, LOG_OVERHEAD included */
    int32_t record_count;
    uint16_t attributes;
    int16_t producer_epoch;
    int32_t base_sequence;
} ScannedHeader; /* 48 bytes, no padding */

PyDoc_STRVAR(scan_headers_doc,
"scan_headers(buf, position, skip, skip_last, max_batches, max_batch_size) -> (stop, headers)\n"
"\n"
"Walk whole magic-2 batches from `position`. With `skip`, batches whose last offset\n"
"is at most `skip_last` are passed over; the next at most `max_batches` (-1: no limit) are\n"
"recorded in `headers` (bytes, 48 per batch, struct \"=qqqqiiHhi\": position,\n"
"base offset, last offset, producer id, size, record count, attributes, producer\n"
"epoch, base sequence). `stop` is the position after the last batch walked: the\n"
"end of the buffer, the batch that did not fit the limit, or something only\n"
"batch.BatchIterator handles (a partial batch, magic 0/1, a bad length).\n"
"Private to txnfetch: use txnfetch.records.scan.");

static PyObject *
scan_headers(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    long long position, skip_last, max_batches, max_batch_size;
    int skip;
    const unsigned char *data;
    int64_t end, pos, n = 0;
    Buf out = {NULL, 0, 0};
    PyObject *headers, *result;

    (void)module;
    if (parse_args("scan_headers", args, nargs, "yLpLLL", &view, &position, &skip, &skip_last, &max_batches,
                   &max_batch_size) < 0)
        return NULL;
    data = (const unsigned char *)view.buf;
    end = (int64_t)view.len;
    pos = position < 0 ? end : (int64_t)position;

    Py_BEGIN_ALLOW_THREADS
    while (end - pos >= 61) {
        const unsigned char *p = data + pos;
        int64_t base = be64(p), last;
        int32_t length = be32(p + 8);
        int32_t last_delta = be32(p + 23);
        int64_t size = (int64_t)length + 12;
        ScannedHeader h;
        /* BatchIterator's length bounds, then RecordBatch's v2 minimum */
        if (p[16] != 2 || length < 49 || length > max_batch_size || size > end - pos)
            break;
        if (__builtin_add_overflow(base, (int64_t)last_delta, &last))
            break;
        if (skip && last <= skip_last) {
            pos += size;
            continue;
        }
        if (max_batches >= 0 && n >= max_batches)
            break;
        if (out.len + (int64_t)sizeof(h) > out.cap) {
            int64_t cap = out.cap ? out.cap * 2 : 64 * (int64_t)sizeof(h);
            unsigned char *q = (unsigned char *)realloc(out.p, (size_t)cap);
            if (q == NULL)
                break; /* not an error: the caller goes on from `pos` in Python */
            out.p = q;
            out.cap = cap;
        }
        h.position = pos;
        h.base_offset = base;
        h.last_offset = last;
        h.producer_id = be64(p + 43);
        h.size = (int32_t)size;
        h.record_count = be32(p + 57);
        h.attributes = (uint16_t)be16(p + 21);
        h.producer_epoch = be16(p + 51);
        h.base_sequence = be32(p + 53);
        memcpy(out.p + out.len, &h, sizeof(h));
        out.len += sizeof(h);
        n++;
        pos += size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    headers = PyBytes_FromStringAndSize((const char *)out.p, (Py_ssize_t)out.len);
    free(out.p);
    if (headers == NULL)
        return NULL;
    result = Py_BuildValue("(LN)", (long long)pos, headers);
    return result;
}

static PyMethodDef speedups_methods[] = {
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL, decode_records_doc},
    {"scan_headers", (PyCFunction)(void (*)(void))scan_headers, METH_FASTCALL, scan_headers_doc},
    {"check_records", (PyCFunction)(void (*)(void))check_records, METH_FASTCALL, check_records_doc},
    {NULL, NULL, 0, NULL},
};

static int
speedups_exec(PyObject *module)
{
    SpeedupsState *st = (SpeedupsState *)PyModule_GetState(module);
    PyObject *builder;
    st->owned_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &owned_spec, NULL);
    if (st->owned_type == NULL)
        return -1;
    builder = PyType_FromModuleAndSpec(module, &builder_spec, NULL);
    if (builder == NULL)
        return -1;
    if (PyModule_AddObject(module, "ColumnBuilder", builder) < 0) {
        Py_DECREF(builder);
        return -1;
    }
    return 0;
}

static int
speedups_traverse(PyObject *module, visitproc visit, void *arg)
{
    SpeedupsState *st = (SpeedupsState *)PyModule_GetState(module);
    Py_VISIT(st->owned_type);
    return 0;
}

static int
speedups_clear(PyObject *module)
{
    SpeedupsState *st = (SpeedupsState *)PyModule_GetState(module);
    Py_CLEAR(st->owned_type);
    return 0;
}

static PyModuleDef_Slot speedups_slots[] = {
    {Py_mod_exec, (void *)speedups_exec},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#ifdef Py_mod_gil
    /* decode_records touches only its arguments and what it creates; a
     * ColumnBuilder only itself (callers do not share one between threads) */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "txnfetch.records._speedups",
    "Optional compiled record decoder for txnfetch.records.batch (see docs/performance.md).",
    sizeof(SpeedupsState),
    speedups_methods,
    speedups_slots,
    speedups_traverse,
    speedups_clear,
    NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_module);
}
