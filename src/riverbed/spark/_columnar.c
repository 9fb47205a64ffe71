/*
 * riverbed.spark._columnar: the records of Kafka v2 record batches -> Arrow buffers.
 *
 * decode(batches, lo, hi, with_headers) takes a list of already CRC-checked and
 * decompressed batches, each a tuple
 *     (records: bytes-like, base_offset, first_timestamp, max_timestamp,
 *      log_append_time: int, records_count, last_offset_delta)
 * and decodes every record (KIP-98's record format, see riverbed/protocol/records.py) in
 * one pass, writing the records whose offset is in [lo, hi) straight into the buffers of
 * the Arrow arrays of the source's schema:
 *     offset int64, timestamp int64 (microseconds), timestampType int32,
 *     key and value binary (validity bitmap, int32 offsets, data),
 *     and with headers: list offsets int32, header key utf8 (offsets, data),
 *     header value binary (validity, offsets, data).
 * It returns (rows, offsets, timestamps, timestampTypes, then key and value each as
 * (validity, offsets, null count, data), then header list offsets, header key offsets and
 * data, header value (validity, offsets, null count, data)): bytearrays that Python wraps with
 * pyarrow.Array.from_buffers without a copy.
 *
 * Every length is checked against the bytes that remain before anything is read or
 * copied; malformed input raises DecodeError naming the offset of the record (or of the
 * batch when the record's offset is not known yet). Nothing here can read or write out of
 * bounds: the outputs are sized from the inputs before decoding (a record of n bytes
 * yields at most n bytes of key + value + header data, and a header needs >= 2 bytes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *DecodeError;

/* The caller bounds one call's input well below this (int32 Arrow offsets). */
#define INPUT_BYTES_MAX 0x7fffff00LL
#define TIMESTAMP_MS_MAX (INT64_MAX / 1000)

typedef struct {
    char *data;
    Py_ssize_t len;
} Buf;

typedef struct {
    PyObject *obj; /* bytearray */
    char *p;
    Py_ssize_t used;
} Out;

/* One bytearray per Arrow buffer, in the order decode() returns them. */
enum {
    OFFSETS, TIMESTAMPS, TS_TYPES,
    KEY_VALID, KEY_OFFS, KEY_DATA,
    VAL_VALID, VAL_OFFS, VAL_DATA,
    HDR_OFFS, HKEY_OFFS, HKEY_DATA, HVAL_VALID, HVAL_OFFS, HVAL_DATA,
    N_OUTS
};

typedef struct {
    Out o[N_OUTS];
    int64_t rows, key_nulls, val_nulls, headers, hval_nulls;
    int with_headers;
} Columns;

/* The batch being decoded, for error messages. */
typedef struct {
    int64_t base_offset;
    int64_t record_offset; /* -1 until the record's offsetDelta is read */
} Where;

static int fail(const Where *w, const char *what)
{
    if (w->record_offset >= 0)
        PyErr_Format(DecodeError, "record at offset %lld (batch at offset %lld): %s",
                     (long long)w->record_offset, (long long)w->base_offset, what);
    else
        PyErr_Format(DecodeError, "record batch at offset %lld: %s",
                     (long long)w->base_offset, what);
    return -1;
}

/* zigzag varint of at most max_bytes bytes ending before end */
static inline int read_varint(const uint8_t **pp, const uint8_t *end, int max_bytes,
                              int64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t z = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        if (shift == 63 && b > 1)
            return -2; /* beyond 64 bits: Kafka's ByteUtils.readVarlong refuses it too */
        z |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
            *pp = p;
            return 0;
        }
        shift += 7;
    }
    return -2;
}

static int varint_or_fail(const uint8_t **pp, const uint8_t *end, int max_bytes,
                          int64_t *out, const Where *w, const char *what)
{
    int rc = read_varint(pp, end, max_bytes, out);
    if (rc == 0)
        return 0;
    char msg[96];
    snprintf(msg, sizeof msg, rc == -1 ? "truncated varint in %s" : "varint too long in %s",
             what);
    return fail(w, msg);
}

static int out_new(Out *o, Py_ssize_t size)
{
    o->obj = PyByteArray_FromStringAndSize(NULL, size > 0 ? size : 0);
    if (o->obj == NULL)
        return -1;
    o->p = PyByteArray_AS_STRING(o->obj);
    o->used = 0;
    return 0;
}

static void out_clear(Out *o) { Py_CLEAR(o->obj); }

static inline void put_i32(Out *o, int32_t v)
{
    memcpy(o->p + o->used, &v, 4);
    o->used += 4;
}

static inline void put_i64(Out *o, int64_t v)
{
    memcpy(o->p + o->used, &v, 8);
    o->used += 8;
}

static inline void put_bytes(Out *o, const uint8_t *src, int64_t n)
{
    memcpy(o->p + o->used, src, (size_t)n);
    o->used += (Py_ssize_t)n;
}

/* validity bitmaps are zeroed up front; set bit i for a present value */
static inline void set_valid(Out *o, int64_t i) { o->p[i >> 3] |= (char)(1u << (i & 7)); }

static int utf8_valid(const uint8_t *s, int64_t n)
{
    int64_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int need;
        uint32_t cp;
        if ((c & 0xe0) == 0xc0) {
            need = 1;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            need = 2;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            need = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + need >= n)
            return 0;
        for (int k = 1; k <= need; k++) {
            uint8_t cc = s[i + k];
            if ((cc & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (cc & 0x3f);
        }
        /* overlong forms, surrogates and values past U+10FFFF are not UTF-8 */
        if ((need == 1 && cp < 0x80) || (need == 2 && cp < 0x800) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += need + 1;
    }
    return 1;
}

/* A length-prefixed byte string (-1 = null). Sets *len (-1 for null) and *src. */
static int read_blob(const uint8_t **pp, const uint8_t *end, int64_t *len, const uint8_t **src,
                     const Where *w, const char *what)
{
    if (varint_or_fail(pp, end, 5, len, w, what) < 0)
        return -1;
    if (*len == -1)
        return 0;
    if (*len < 0 || *len > end - *pp) {
        char msg[96];
        snprintf(msg, sizeof msg, "bad %s length %lld", what, (long long)*len);
        return fail(w, msg);
    }
    *src = *pp;
    *pp += *len;
    return 0;
}

static int emit_blob(Columns *c, Out *valid, Out *offs, Out *data, int64_t index,
                     int64_t len, const uint8_t *src, int64_t *nulls)
{
    if (len >= 0) {
        set_valid(valid, index);
        put_bytes(data, src, len);
    } else {
        (*nulls)++;
    }
    put_i32(offs, (int32_t)data->used);
    (void)c;
    return 0;
}

static int decode_headers(Columns *c, const uint8_t **pp, const uint8_t *rec_end, int emit,
                          const Where *w)
{
    int64_t count;
    if (varint_or_fail(pp, rec_end, 5, &count, w, "header count") < 0)
        return -1;
    if (count < 0 || count * 2 > rec_end - *pp) {
        char msg[64];
        snprintf(msg, sizeof msg, "bad header count %lld", (long long)count);
        return fail(w, msg);
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t klen, vlen;
        const uint8_t *ksrc = NULL, *vsrc = NULL;
        if (read_blob(pp, rec_end, &klen, &ksrc, w, "header key") < 0)
            return -1;
        if (klen < 0)
            return fail(w, "null header key");
        if (!utf8_valid(ksrc, klen))
            return fail(w, "header key is not UTF-8");
        if (read_blob(pp, rec_end, &vlen, &vsrc, w, "header value") < 0)
            return -1;
        if (emit) {
            put_bytes(&c->o[HKEY_DATA], ksrc, klen);
            put_i32(&c->o[HKEY_OFFS], (int32_t)c->o[HKEY_DATA].used);
            emit_blob(c, &c->o[HVAL_VALID], &c->o[HVAL_OFFS], &c->o[HVAL_DATA], c->headers, vlen, vsrc,
                      &c->hval_nulls);
            c->headers++;
        }
    }
    return 0;
}

typedef struct {
    int64_t base_offset, first_ts, max_ts, log_append, count, last_offset_delta;
} BatchInfo;

static int decode_batch(Columns *c, const Buf *in, const BatchInfo *b, int64_t lo, int64_t hi)
{
    const uint8_t *p = (const uint8_t *)in->data;
    const uint8_t *end = p + in->len;
    Where w = {b->base_offset, -1};
    int32_t ts_type = b->log_append ? 1 : 0;
    for (int64_t r = 0; r < b->count; r++) {
        int64_t length, ts_delta, off_delta;
        w.record_offset = -1;
        if (varint_or_fail(&p, end, 5, &length, &w, "record length") < 0)
            return -1;
        /* attributes, timestampDelta, offsetDelta, key, value, header count: >= 6 bytes */
        if (length < 6 || length > end - p) {
            char msg[64];
            snprintf(msg, sizeof msg, "bad record length %lld", (long long)length);
            return fail(&w, msg);
        }
        const uint8_t *rec_end = p + length;
        p++; /* attributes: unused */
        if (varint_or_fail(&p, rec_end, 10, &ts_delta, &w, "timestampDelta") < 0)
            return -1;
        if (varint_or_fail(&p, rec_end, 5, &off_delta, &w, "offsetDelta") < 0)
            return -1;
        if (off_delta < 0 || off_delta > b->last_offset_delta) {
            char msg[96];
            snprintf(msg, sizeof msg, "offsetDelta %lld outside 0..%lld", (long long)off_delta,
                     (long long)b->last_offset_delta);
            return fail(&w, msg);
        }
        int64_t offset = b->base_offset + off_delta;
        w.record_offset = offset;
        int64_t klen, vlen;
        const uint8_t *ksrc = NULL, *vsrc = NULL;
        if (read_blob(&p, rec_end, &klen, &ksrc, &w, "key") < 0)
            return -1;
        if (read_blob(&p, rec_end, &vlen, &vsrc, &w, "value") < 0)
            return -1;
        int emit = offset >= lo && offset < hi;
        if (decode_headers(c, &p, rec_end, emit && c->with_headers, &w) < 0)
            return -1;
        if (p != rec_end)
            return fail(&w, "record length disagrees with its fields");
        if (!emit)
            continue;
        int64_t ts;
        if (b->log_append) {
            ts = b->max_ts;
        } else {
            /* wrapping add, as the Java client's long arithmetic */
            ts = (int64_t)((uint64_t)b->first_ts + (uint64_t)ts_delta);
        }
        if (ts > TIMESTAMP_MS_MAX || ts < -TIMESTAMP_MS_MAX)
            return fail(&w, "timestamp out of the range of Spark's timestamps");
        int64_t row = c->rows++;
        put_i64(&c->o[OFFSETS], offset);
        put_i64(&c->o[TIMESTAMPS], ts * 1000);
        put_i32(&c->o[TS_TYPES], ts_type);
        emit_blob(c, &c->o[KEY_VALID], &c->o[KEY_OFFS], &c->o[KEY_DATA], row, klen, ksrc, &c->key_nulls);
        emit_blob(c, &c->o[VAL_VALID], &c->o[VAL_OFFS], &c->o[VAL_DATA], row, vlen, vsrc, &c->val_nulls);
        if (c->with_headers)
            put_i32(&c->o[HDR_OFFS], (int32_t)c->headers);
    }
    if (p != end) {
        char msg[96];
        w.record_offset = -1;
        snprintf(msg, sizeof msg, "%lld bytes after its %lld records", (long long)(end - p),
                 (long long)b->count);
        return fail(&w, msg);
    }
    return 0;
}

static int alloc_columns(Columns *c, int64_t rows, int64_t bytes)
{
    int64_t bitmap = (rows + 7) / 8;
    int64_t hmax = c->with_headers ? bytes / 2 : 0;
    int64_t hbitmap = (hmax + 7) / 8;
    if (out_new(&c->o[OFFSETS], rows * 8) || out_new(&c->o[TIMESTAMPS], rows * 8) ||
        out_new(&c->o[TS_TYPES], rows * 4) || out_new(&c->o[KEY_VALID], bitmap) ||
        out_new(&c->o[KEY_OFFS], (rows + 1) * 4) || out_new(&c->o[KEY_DATA], bytes) ||
        out_new(&c->o[VAL_VALID], bitmap) || out_new(&c->o[VAL_OFFS], (rows + 1) * 4) ||
        out_new(&c->o[VAL_DATA], bytes) ||
        out_new(&c->o[HDR_OFFS], c->with_headers ? (rows + 1) * 4 : 0) ||
        out_new(&c->o[HKEY_OFFS], c->with_headers ? (hmax + 1) * 4 : 0) ||
        out_new(&c->o[HKEY_DATA], c->with_headers ? bytes : 0) ||
        out_new(&c->o[HVAL_VALID], hbitmap) ||
        out_new(&c->o[HVAL_OFFS], c->with_headers ? (hmax + 1) * 4 : 0) ||
        out_new(&c->o[HVAL_DATA], c->with_headers ? bytes : 0))
        return -1;
    memset(c->o[KEY_VALID].p, 0, (size_t)bitmap);
    memset(c->o[VAL_VALID].p, 0, (size_t)bitmap);
    memset(c->o[HVAL_VALID].p, 0, (size_t)hbitmap);
    put_i32(&c->o[KEY_OFFS], 0);
    put_i32(&c->o[VAL_OFFS], 0);
    if (c->with_headers) {
        put_i32(&c->o[HDR_OFFS], 0);
        put_i32(&c->o[HKEY_OFFS], 0);
        put_i32(&c->o[HVAL_OFFS], 0);
    }
    return 0;
}

static PyObject *build_result(Columns *c)
{
    /* every buffer is cut to what was written (allocated for the upper bounds) */
    c->o[KEY_VALID].used = (c->rows + 7) / 8;
    c->o[VAL_VALID].used = (c->rows + 7) / 8;
    c->o[HVAL_VALID].used = (c->headers + 7) / 8;
    for (int i = 0; i < N_OUTS; i++)
        if (PyByteArray_Resize(c->o[i].obj, c->o[i].used) < 0)
            return NULL;
    Out *o = c->o;
    return Py_BuildValue("(LOOOOOLOOOLOOOOOOLO)", (long long)c->rows, o[OFFSETS].obj,
                         o[TIMESTAMPS].obj, o[TS_TYPES].obj, o[KEY_VALID].obj, o[KEY_OFFS].obj,
                         (long long)c->key_nulls, o[KEY_DATA].obj, o[VAL_VALID].obj,
                         o[VAL_OFFS].obj, (long long)c->val_nulls, o[VAL_DATA].obj,
                         o[HDR_OFFS].obj, o[HKEY_OFFS].obj, o[HKEY_DATA].obj, o[HVAL_VALID].obj,
                         o[HVAL_OFFS].obj, (long long)c->hval_nulls, o[HVAL_DATA].obj);
}

static int parse_batch(PyObject *item, Py_buffer *view, BatchInfo *b)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 7) {
        PyErr_SetString(PyExc_TypeError, "each batch must be a 7-tuple");
        return -1;
    }
    if (!PyArg_ParseTuple(item, "y*LLLLLL", view, &b->base_offset, &b->first_ts, &b->max_ts,
                          &b->log_append, &b->count, &b->last_offset_delta))
        return -1;
    if (b->count < 0 || b->last_offset_delta < 0 || b->count > b->last_offset_delta + 1) {
        PyBuffer_Release(view);
        Where w = {b->base_offset, -1};
        return fail(&w, "impossible recordsCount / lastOffsetDelta");
    }
    return 0;
}

static PyObject *decode(PyObject *self, PyObject *args)
{
    PyObject *batches;
    long long lo, hi;
    int with_headers;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!LLp", &PyList_Type, &batches, &lo, &hi, &with_headers))
        return NULL;
    Py_ssize_t nb = PyList_GET_SIZE(batches);
    int64_t rows = 0, bytes = 0;
    for (Py_ssize_t i = 0; i < nb; i++) {
        Py_buffer view;
        BatchInfo b;
        if (parse_batch(PyList_GET_ITEM(batches, i), &view, &b) < 0)
            return NULL;
        rows += b.count;
        bytes += view.len;
        PyBuffer_Release(&view);
        /* records of 7+ bytes each: more than that is malformed, found while decoding */
        if (bytes > INPUT_BYTES_MAX || rows > INPUT_BYTES_MAX / 7 + nb) {
            PyErr_SetString(PyExc_ValueError, "one decode call takes under 2 GiB of records");
            return NULL;
        }
    }
    Columns c;
    memset(&c, 0, sizeof c);
    c.with_headers = with_headers;
    PyObject *result = NULL;
    if (alloc_columns(&c, rows, bytes) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < nb; i++) {
        Py_buffer view;
        BatchInfo b;
        if (parse_batch(PyList_GET_ITEM(batches, i), &view, &b) < 0)
            goto done;
        Buf in = {(char *)view.buf, view.len};
        int rc = decode_batch(&c, &in, &b, lo, hi);
        PyBuffer_Release(&view);
        if (rc < 0)
            goto done;
    }
    result = build_result(&c);
done:
    for (int i = 0; i < N_OUTS; i++)
        out_clear(&c.o[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(batches, lo, hi, with_headers) -> tuple of Arrow buffers (see the C source)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_columnar", "Kafka record batches -> Arrow buffers.", -1, methods,
};

PyMODINIT_FUNC PyInit__columnar(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    DecodeError = PyErr_NewException("riverbed.spark._columnar.DecodeError", PyExc_ValueError,
                                     NULL);
    if (DecodeError == NULL || PyModule_AddObject(m, "DecodeError", DecodeError) < 0) {
        Py_XDECREF(DecodeError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(DecodeError);
    return m;
}
