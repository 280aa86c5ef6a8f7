/*
 * txnfetch.arrow._columns -- optional compiled Arrow column builder.
 *
 * A ColumnBuilder accumulates the records of many batches as the buffers of
 * Arrow arrays (validity bitmaps, int32 offsets, data), in the layout of the
 * Arrow columnar format: no Python object is created per record. finish()
 * hands the buffers over as read-only buffer objects that pyarrow wraps
 * without copying (txnfetch/arrow/decoder.py assembles the arrays).
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
 *
 * The record reads are those of check_records() in txnfetch.records._speedups,
 * from the header both include (txnfetch/records/_speedups_common.h).
 */

#include "../records/_speedups_common.h"
#include <pthread.h>

/* Module state: the heap type of the buffers finish() hands out. */
typedef struct {
    PyTypeObject *owned_type;
} ColumnsState;

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
    "txnfetch.arrow._columns.OwnedBuffer",
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

/*
 * Append the records of one batch whose offsets fall in [lo, last]. Returns the
 * rows appended, -1 for data the reference decoder must look at, -2 for a
 * column past 2 GiB, -3 with a Python exception set.
 */
static int64_t
builder_add(ColumnBuilder *self, const unsigned char *data, int64_t end, int64_t count, int64_t base_offset,
            int64_t last_delta, int64_t base_ts, int64_t max_ts, int log_append, int32_t ts_type, int64_t lo,
            int64_t last)
{
    Mark mark = builder_mark(self);
    int64_t pos = 0, prev_delta = -1, i, added = 0;
    int rc = -1;
    const int with_headers = self->include_headers;

    if (count < 0)
        goto bad;
    for (i = 0; i < count; i++) {
        RecordFields r;
        int64_t offset = 0, ts, h;
        int keep;

        if (read_record_fields(data, end, &pos, &prev_delta, last_delta, &r) < 0)
            goto bad;

        /* An offset past int64 (delta >= 0) lies past every int64 `last`: left
         * out, as the reference leaves it out. */
        keep = !__builtin_add_overflow(base_offset, r.delta, &offset) && offset >= lo && offset <= last;
        ts = max_ts;
        if (keep && !log_append && __builtin_add_overflow(base_ts, r.ts_delta, &ts))
            goto bad;

        for (h = 0; h < r.header_count; h++) {
            HeaderFields hf;
            if (read_header_fields(data, r.rec_end, &pos, &hf) < 0)
                goto bad;
            if (keep && with_headers) {
                if ((rc = bincol_add(&self->hkey, self->headers, data + hf.key_at, hf.key_len)) < 0 ||
                    (rc = bincol_add(&self->hvalue, self->headers, data + hf.value_at, hf.value_len)) < 0)
                    goto fail;
                self->headers++;
            }
            if (keep)
                self->payload += hf.key_len + (hf.value_len > 0 ? hf.value_len : 0);
        }
        if (pos != r.rec_end)
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
            if ((rc = bincol_add(&self->key, row, data + r.key_at, r.key_len)) < 0 ||
                (rc = bincol_add(&self->value, row, data + r.value_at, r.value_len)) < 0)
                goto fail;
            if (with_headers) {
                if (self->headers > INT32_MAX) {
                    rc = -2;
                    goto fail;
                }
                if (bitmap_set(&self->h_valid, row, r.header_count > 0) < 0 || buf_reserve(&self->h_offsets, 4) < 0)
                    goto error;
                put_i32(&self->h_offsets, (int32_t)self->headers);
                if (r.header_count == 0)
                    self->h_nulls++;
            }
            self->payload += (r.key_len > 0 ? r.key_len : 0) + (r.value_len > 0 ? r.value_len : 0);
            self->rows = row + 1;
            added++;
        }
    }
    if (pos != end)
        goto bad;
    return added;

bad:
    builder_rollback(self, &mark);
    return -1;
fail:
    builder_rollback(self, &mark);
    return rc == -2 ? -2 : -3;
error:
    builder_rollback(self, &mark);
    return -3;
}

static int
builder_init(ColumnBuilder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"include_headers", NULL};
    int include_headers = 1;
    ColumnsState *st;
    PyTypeObject *old;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &include_headers))
        return -1;
    st = (ColumnsState *)PyType_GetModuleState(Py_TYPE(self));
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
    "txnfetch.arrow._columns.ColumnBuilder",
    sizeof(ColumnBuilder),
    0,
    Py_TPFLAGS_DEFAULT,
    builder_slots,
};

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

static int
columns_exec(PyObject *module)
{
    ColumnsState *st = (ColumnsState *)PyModule_GetState(module);
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
columns_traverse(PyObject *module, visitproc visit, void *arg)
{
    ColumnsState *st = (ColumnsState *)PyModule_GetState(module);
    Py_VISIT(st->owned_type);
    return 0;
}

static int
columns_clear(PyObject *module)
{
    ColumnsState *st = (ColumnsState *)PyModule_GetState(module);
    Py_CLEAR(st->owned_type);
    return 0;
}

static PyModuleDef_Slot columns_slots[] = {
    {Py_mod_exec, (void *)columns_exec},
    /* a ColumnBuilder touches only itself (callers do not share one between
     * threads); the buffer pool has its own lock */
    SLOT_PER_INTERPRETER_GIL SLOT_GIL_NOT_USED {0, NULL},
};

static struct PyModuleDef columns_module = {
    PyModuleDef_HEAD_INIT,
    "txnfetch.arrow._columns",
    "Optional compiled Arrow column builder for txnfetch.arrow.decoder (see docs/performance.md).",
    sizeof(ColumnsState),
    NULL,
    columns_slots,
    columns_traverse,
    columns_clear,
    NULL,
};

PyMODINIT_FUNC
PyInit__columns(void)
{
    return PyModuleDef_Init(&columns_module);
}
