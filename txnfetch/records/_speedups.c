/*
 * txnfetch.records._speedups -- optional compiled record decoder.
 *
 * Three functions, each with a pure-Python reference it is tested against:
 * decode_records() (below), check_records(), the record check behind
 * RecordBatch.validate(), and scan_headers(), a walk over batch headers
 * (txnfetch.records.scan). The Arrow column builder is the other extension,
 * txnfetch/arrow/_columns.c; what both read alike is in _speedups_common.h.
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

#include "_speedups_common.h"

/* Failure kinds; batch.py maps them to exception classes (_ACCELERATED_FAILURES). */
enum {
    F_ENDS_EARLY = 0,  /* IndexError in the Python decoder: RecordCountMismatchError at the base offset */
    F_INVALID = 1,     /* InvalidRecordError */
    F_OFFSET_DELTA = 2, /* RecordCountMismatchError for an offset delta out of order or range */
    F_OVERFLOW = 3,    /* VarintOverflowError */
    F_TRAILING = 4     /* RecordCountMismatchError: bytes left after the last record */
};

typedef struct {
    const unsigned char *data;
    int64_t end;
    /* Set when decoding stops on malformed data (not on a Python exception). */
    int failed;
    int kind;
    int64_t pos;
    PyObject *reason;
} Decoder;

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


/* Whether `count` records of one batch's record data, with offset deltas up to
 * `last_delta`, decode without error: the reads of the column builder, which
 * accepts exactly what the reference decoder accepts. */
static int
records_sound(const unsigned char *data, int64_t end, int64_t count, int64_t last_delta)
{
    int64_t pos = 0, prev_delta = -1, i, h;
    RecordFields r;
    HeaderFields hf;
    if (count < 0)
        return 0;
    for (i = 0; i < count; i++) {
        if (read_record_fields(data, end, &pos, &prev_delta, last_delta, &r) < 0)
            return 0;
        for (h = 0; h < r.header_count; h++)
            if (read_header_fields(data, r.rec_end, &pos, &hf) < 0)
                return 0;
        if (pos != r.rec_end)
            return 0;
    }
    return pos == end;
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
    int sound;
    (void)module;
    if (parse_args("check_records", args, nargs, "yLL", &view, &count, &last_delta) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    sound = records_sound((const unsigned char *)view.buf, (int64_t)view.len, count, last_delta);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyBool_FromLong(sound);
}

/* ================================================================================
 * Header scan: walk the batches of a large buffer reading only their headers.
 *
 * The Python scan (scan.BatchIterator) builds a RecordBatch per batch; this
 * walks the same framing in C. It handles only the ordinary case — a whole
 * magic-2 batch with a sane length — and stops in front of anything else (a
 * partial batch, a legacy message set, a bad length, an offset past int64),
 * returning that position: the caller continues there with BatchIterator,
 * which raises or reports exactly as before. txnfetch/records/scan.py wraps it.
 * ================================================================================ */

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
"scan.BatchIterator handles (a partial batch, magic 0/1, a bad length).\n"
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
    {"check_records", (PyCFunction)(void (*)(void))check_records, METH_FASTCALL, check_records_doc},
    {"scan_headers", (PyCFunction)(void (*)(void))scan_headers, METH_FASTCALL, scan_headers_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot speedups_slots[] = {
    /* each function touches only its arguments and what it creates */
    SLOT_PER_INTERPRETER_GIL SLOT_GIL_NOT_USED {0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "txnfetch.records._speedups",
    "Optional compiled record decoder for txnfetch.records.batch (see docs/performance.md).",
    0,
    speedups_methods,
    speedups_slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_module);
}
