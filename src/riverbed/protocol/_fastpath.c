/*
 * riverbed.protocol._fastpath: specialised codecs for what a metadata snapshot is made of.
 *
 * A snapshot of a large cluster is almost all PartitionRecords (one per partition) and
 * TopicRecords, each the value of one record of a v2 batch. The generic message engine
 * (riverbed/protocol/codec.py) handles every message and version; these functions handle
 * only the common shapes, and say "not mine" (return None) for anything else, malformed
 * input included, so that the caller runs the generic engine: it stays the reference, the
 * one source of errors and of every rare case (unknown tagged fields, other versions).
 * tests/unit/protocol/test_fastpath.py checks byte for byte that both agree.
 *
 *   decode_record(value)   framed metadata record (frame 1, api key, version, body) ->
 *                          (message, version): PartitionRecord v0, TopicRecord v0,
 *                          PartitionChangeRecord v0; else None
 *   encode_record(msg)     the inverse, at the versions riverbed writes (all three v0)
 *   encode_partition(partition_id, topic_id, replicas, isr, removing, adding, leader,
 *                    leader_recovery_state, leader_epoch, partition_epoch)
 *                          PartitionRecord v0 from plain values (snapshot writing, no
 *                          message object built)
 *   record_values(data, count, last_offset_delta)
 *                          the values of the records of an uncompressed v2 records section
 *                          (KIP-98's record format), with every check of
 *                          records._decode_records; None for malformed input or records
 *                          with headers
 *   value_records(values)  the records section of a batch of values: null keys, timestamp
 *                          delta 0, offset deltas 0..n-1, no headers (as build_batch writes
 *                          them for a snapshot)
 *   registration(cls, shared, rec)
 *                          metadata.image's PartitionRegistration of a decoded
 *                          PartitionRecord, untracked by the garbage collector (see there)
 *
 * Decoded messages are built as the generic decoder builds them (the class's __new__,
 * then every slot set, __init__ not run): setup() finds each slot's offset in the
 * instance from the class's member descriptors. Every read is checked against the bytes
 * that remain first.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define FRAME_VERSION 1
#define API_TOPIC 2
#define API_PARTITION 3
#define API_PARTITION_CHANGE 5
#define RECORD_MIN_BYTES 7

/* Slots of the three message classes, in this order. */
enum { P_PARTITION_ID, P_TOPIC_ID, P_REPLICAS, P_ISR, P_REMOVING, P_ADDING, P_LEADER,
       P_LRS, P_LEADER_EPOCH, P_PARTITION_EPOCH, P_DIRECTORIES, P_ELR, P_LKE, P_UNKNOWN,
       P_N };
enum { T_NAME, T_TOPIC_ID, T_UNKNOWN, T_N };
enum { C_PARTITION_ID, C_TOPIC_ID, C_ISR, C_LEADER, C_REPLICAS, C_REMOVING, C_ADDING,
       C_LRS, C_DIRECTORIES, C_ELR, C_LKE, C_UNKNOWN, C_N };

typedef struct {
    PyTypeObject *cls;
    Py_ssize_t off[P_N];
    int n;
} Layout;

static Layout partition_layout, topic_layout, change_layout;
static PyObject *uuid_cls;
static PyObject *version_zero;
/* Consecutive PartitionRecords share their topic's id: one UUID object for them all. */
static unsigned char dec_uuid_raw[16];
static PyObject *dec_uuid;
static PyObject *enc_uuid;
static unsigned char enc_uuid_raw[16];

#define SLOT(obj, layout, i) (*(PyObject **)((char *)(obj) + (layout).off[i]))

/* ------------------------------------------------------------------ reading */

typedef struct {
    const unsigned char *p;
    Py_ssize_t pos, n;
} Rd;

/* 32-bit unsigned varint as primitives.read_uvarint reads it; -1 when malformed. */
static int rd_uvarint(Rd *r, uint32_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (r->pos >= r->n) return -1;
        unsigned char b = r->p[r->pos++];
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            if (v > 0xffffffffULL) return -1;
            *out = (uint32_t)v;
            return 0;
        }
    }
    return -1;
}

static int rd_int32(Rd *r, int32_t *out) {
    if (r->n - r->pos < 4) return -1;
    const unsigned char *q = r->p + r->pos;
    *out = (int32_t)(((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) | q[3]);
    r->pos += 4;
    return 0;
}

/* A UUID object for 16 bytes at the reader (the cached one when they repeat). */
static PyObject *rd_uuid(Rd *r) {
    if (r->n - r->pos < 16) return Py_None; /* borrowed marker: malformed */
    const unsigned char *q = r->p + r->pos;
    r->pos += 16;
    if (dec_uuid == NULL || memcmp(q, dec_uuid_raw, 16) != 0) {
        PyObject *raw = PyBytes_FromStringAndSize((const char *)q, 16);
        if (raw == NULL) return NULL;
        PyObject *args = PyTuple_New(0);
        PyObject *kw = args ? Py_BuildValue("{sO}", "bytes", raw) : NULL;
        PyObject *u = kw ? PyObject_Call(uuid_cls, args, kw) : NULL;
        Py_XDECREF(kw);
        Py_XDECREF(args);
        Py_DECREF(raw);
        if (u == NULL) return NULL;
        /* the bytes first: the old object's release may run Python code (a weakref
         * callback) and another thread, which must see a consistent cache */
        memcpy(dec_uuid_raw, q, 16);
        Py_XSETREF(dec_uuid, u);
    }
    Py_INCREF(dec_uuid);
    return dec_uuid;
}

/* int32 list from a compact array of n - 1 elements; Py_None (borrowed) for a null one
 * (n == 0) when nullable, NULL with an exception set on failure, and Py_NotImplemented
 * (borrowed) for malformed input. */
static PyObject *rd_int32_array(Rd *r, int nullable) {
    uint32_t n1;
    if (rd_uvarint(r, &n1) < 0) return Py_NotImplemented;
    if (n1 == 0) return nullable ? Py_None : Py_NotImplemented;
    Py_ssize_t count = (Py_ssize_t)n1 - 1;
    if (count > (r->n - r->pos) / 4) return Py_NotImplemented;
    PyObject *list = PyList_New(count);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t v = 0;
        rd_int32(r, &v);
        PyObject *x = PyLong_FromLong(v);
        if (x == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, x);
    }
    return list;
}

#define MALFORMED(x) ((x) == Py_NotImplemented || (x) == Py_None)

static PyObject *new_message(Layout *lay, PyObject **values) {
    PyObject *obj = lay->cls->tp_alloc(lay->cls, 0);
    if (obj == NULL) return NULL;
    for (int i = 0; i < lay->n; i++) {
        Py_INCREF(values[i]);
        SLOT(obj, *lay, i) = values[i];
    }
    return obj;
}

static void clear_values(PyObject **values, int n) {
    for (int i = 0; i < n; i++) Py_CLEAR(values[i]);
}

/* The decoders below fill v (new references, in their layout's slot order) and return
 * 0, or 1 when the input is malformed or unusual (the generic engine's case), or -1 with
 * an exception set. */
#define NEED(cond) do { if (!(cond)) return 1; } while (0)
#define NEW(slot, expr) do { if (((slot) = (expr)) == NULL) return -1; } while (0)

/* v[slot] = the UUID at the reader. */
static int take_uuid(Rd *r, PyObject **slot) {
    PyObject *u = rd_uuid(r);
    if (u == NULL) return -1;
    if (u == Py_None) return 1;
    *slot = u;
    return 0;
}

static int decode_partition_v0(Rd *r, PyObject **v) {
    int32_t pid, leader, leader_epoch, partition_epoch;
    int rc;
    NEED(rd_int32(r, &pid) == 0);
    if ((rc = take_uuid(r, &v[P_TOPIC_ID]))) return rc;
    static const int arrays[4] = {P_REPLICAS, P_ISR, P_REMOVING, P_ADDING};
    for (int i = 0; i < 4; i++) {
        PyObject *a = rd_int32_array(r, 0);
        if (a == NULL) return -1;
        NEED(!MALFORMED(a));
        v[arrays[i]] = a;
    }
    NEED(rd_int32(r, &leader) == 0 && rd_int32(r, &leader_epoch) == 0 &&
         rd_int32(r, &partition_epoch) == 0);
    /* tagged fields: none, or only LeaderRecoveryState (tag 0, one int8) */
    uint32_t tags, tag, size;
    int lrs = 0;
    NEED(rd_uvarint(r, &tags) == 0 && tags <= 1);
    if (tags == 1) {
        NEED(rd_uvarint(r, &tag) == 0 && tag == 0 && rd_uvarint(r, &size) == 0 && size == 1 &&
             r->pos < r->n);
        lrs = (int8_t)r->p[r->pos++];
    }
    NEED(r->pos == r->n);
    NEW(v[P_PARTITION_ID], PyLong_FromLong(pid));
    NEW(v[P_LEADER], PyLong_FromLong(leader));
    NEW(v[P_LRS], PyLong_FromLong(lrs));
    NEW(v[P_LEADER_EPOCH], PyLong_FromLong(leader_epoch));
    NEW(v[P_PARTITION_EPOCH], PyLong_FromLong(partition_epoch));
    NEW(v[P_DIRECTORIES], PyList_New(0));
    v[P_ELR] = Py_NewRef(Py_None);
    v[P_LKE] = Py_NewRef(Py_None);
    v[P_UNKNOWN] = Py_NewRef(Py_None);
    return 0;
}

static int decode_topic_v0(Rd *r, PyObject **v) {
    uint32_t n1, tags;
    NEED(rd_uvarint(r, &n1) == 0 && n1 > 0 && (Py_ssize_t)(n1 - 1) <= r->n - r->pos);
    v[T_NAME] = PyUnicode_DecodeUTF8((const char *)r->p + r->pos, n1 - 1, "strict");
    if (v[T_NAME] == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
        PyErr_Clear();
        return 1;
    }
    r->pos += n1 - 1;
    int rc = take_uuid(r, &v[T_TOPIC_ID]);
    if (rc) return rc;
    NEED(rd_uvarint(r, &tags) == 0 && tags == 0 && r->pos == r->n);
    v[T_UNKNOWN] = Py_NewRef(Py_None);
    return 0;
}

/* One tagged field of a PartitionChangeRecord v0 (tags 0..5), exactly filling f. */
static int change_tag(Rd *f, uint32_t tag, PyObject **v, int32_t *leader, int *lrs) {
    static const int array_slot[5] = {C_ISR, -1, C_REPLICAS, C_REMOVING, C_ADDING};
    if (tag == 1) {
        NEED(rd_int32(f, leader) == 0);
    } else if (tag == 5) {
        NEED(f->pos < f->n);
        *lrs = (int8_t)f->p[f->pos++];
    } else if (tag <= 4) {
        PyObject *a = rd_int32_array(f, 1);
        if (a == NULL) return -1;
        NEED(a != Py_NotImplemented);
        Py_XSETREF(v[array_slot[tag]], Py_NewRef(a));
        if (a != Py_None) Py_DECREF(a);
    } else {
        return 1; /* unknown tagged field: the generic engine keeps it */
    }
    NEED(f->pos == f->n);
    return 0;
}

static int decode_change_v0(Rd *r, PyObject **v) {
    int32_t pid, leader = -2;
    int lrs = -1, rc;
    uint32_t tags;
    NEED(rd_int32(r, &pid) == 0);
    if ((rc = take_uuid(r, &v[C_TOPIC_ID]))) return rc;
    NEED(rd_uvarint(r, &tags) == 0 && tags <= 6);
    for (uint32_t i = 0; i < tags; i++) {
        uint32_t tag, size;
        NEED(rd_uvarint(r, &tag) == 0 && rd_uvarint(r, &size) == 0 && size <= r->n - r->pos);
        Rd field = {r->p, r->pos, r->pos + size};
        if ((rc = change_tag(&field, tag, v, &leader, &lrs))) return rc;
        r->pos = field.n;
    }
    NEED(r->pos == r->n);
    static const int nullable[8] = {C_ISR, C_REPLICAS, C_REMOVING, C_ADDING,
                                    C_DIRECTORIES, C_ELR, C_LKE, C_UNKNOWN};
    for (int i = 0; i < 8; i++)
        if (v[nullable[i]] == NULL) v[nullable[i]] = Py_NewRef(Py_None);
    NEW(v[C_PARTITION_ID], PyLong_FromLong(pid));
    NEW(v[C_LEADER], PyLong_FromLong(leader));
    NEW(v[C_LRS], PyLong_FromLong(lrs));
    return 0;
}

/* A message of lay's class from fn's values; Py_None (new ref) when fn declines. */
static PyObject *decode_with(Layout *lay, int (*fn)(Rd *, PyObject **), Rd *r) {
    PyObject *v[P_N] = {0};
    int rc = fn(r, v);
    PyObject *result = rc == 0 ? new_message(lay, v) : rc > 0 ? Py_NewRef(Py_None) : NULL;
    clear_values(v, P_N);
    return result;
}

static PyObject *decode_record(PyObject *self, PyObject *arg) {
    if (!PyBytes_Check(arg)) Py_RETURN_NONE;
    Rd r = {(const unsigned char *)PyBytes_AS_STRING(arg), 0, PyBytes_GET_SIZE(arg)};
    if (uuid_cls == NULL) Py_RETURN_NONE;
    if (r.n < 3 || r.p[0] != FRAME_VERSION || r.p[2] != 0) Py_RETURN_NONE;
    unsigned char api = r.p[1];
    r.pos = 3;
    PyObject *msg;
    if (api == API_PARTITION) msg = decode_with(&partition_layout, decode_partition_v0, &r);
    else if (api == API_TOPIC) msg = decode_with(&topic_layout, decode_topic_v0, &r);
    else if (api == API_PARTITION_CHANGE) msg = decode_with(&change_layout, decode_change_v0, &r);
    else Py_RETURN_NONE;
    if (msg == NULL || msg == Py_None) return msg;
    PyObject *out = PyTuple_Pack(2, msg, version_zero);
    Py_DECREF(msg);
    return out;
}

/* ------------------------------------------------------------------ writing */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Wr;

static int wr_reserve(Wr *w, Py_ssize_t more) {
    if (w->len + more <= w->cap) return 0;
    Py_ssize_t cap = w->cap ? w->cap : 64;
    while (cap < w->len + more) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *p = PyMem_Realloc(w->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    w->p = p;
    w->cap = cap;
    return 0;
}

/* Callers reserve first. */
static void wr_uvarint(Wr *w, uint64_t v) {
    while (v >= 0x80) {
        w->p[w->len++] = (char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    w->p[w->len++] = (char)v;
}

static void wr_int32(Wr *w, int32_t v) {
    uint32_t u = (uint32_t)v;
    w->p[w->len++] = (char)(u >> 24);
    w->p[w->len++] = (char)(u >> 16);
    w->p[w->len++] = (char)(u >> 8);
    w->p[w->len++] = (char)u;
}

/* An int in [lo, hi]; 0 ok, 1 not such an int (caller falls back), -1 error. */
static int as_int(PyObject *x, long lo, long hi, long *out) {
    if (!PyLong_Check(x)) return 1;
    int overflow;
    long v = PyLong_AsLongAndOverflow(x, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow || v < lo || v > hi) return 1;
    *out = v;
    return 0;
}

#define INT32_LO (-2147483647L - 1)
#define INT32_HI 2147483647L

/* The 16 bytes of a uuid.UUID (exact type); 1 when it is not one. */
static int uuid_raw(PyObject *u, unsigned char *out) {
    if (u != enc_uuid) {
        if (uuid_cls == NULL || Py_TYPE(u) != (PyTypeObject *)uuid_cls) return 1;
        PyObject *raw = PyObject_GetAttrString(u, "bytes");
        if (raw == NULL) return -1;
        if (!PyBytes_Check(raw) || PyBytes_GET_SIZE(raw) != 16) {
            Py_DECREF(raw);
            return 1;
        }
        memcpy(enc_uuid_raw, PyBytes_AS_STRING(raw), 16);
        Py_DECREF(raw);
        Py_XSETREF(enc_uuid, Py_NewRef(u));
    }
    memcpy(out, enc_uuid_raw, 16);
    return 0;
}

static int wr_uuid(Wr *w, PyObject *u) {
    unsigned char raw[16];
    int rc = uuid_raw(u, raw);
    if (rc != 0) return rc;
    if (wr_reserve(w, 16) < 0) return -1;
    memcpy(w->p + w->len, raw, 16);
    w->len += 16;
    return 0;
}

/* A compact int32 array from a list or tuple of ints; 1 when it is not one. */
static int wr_int32_array(Wr *w, PyObject *seq) {
    if (!PyList_Check(seq) && !PyTuple_Check(seq)) return 1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (wr_reserve(w, 10 + 4 * n) < 0) return -1;
    wr_uvarint(w, (uint64_t)n + 1);
    for (Py_ssize_t i = 0; i < n; i++) {
        long v;
        int rc = as_int(PySequence_Fast_GET_ITEM(seq, i), INT32_LO, INT32_HI, &v);
        if (rc != 0) return rc;
        wr_int32(w, (int32_t)v);
    }
    return 0;
}

static int wr_int(Wr *w, PyObject *x) {
    long v;
    int rc = as_int(x, INT32_LO, INT32_HI, &v);
    if (rc != 0) return rc;
    if (wr_reserve(w, 4) < 0) return -1;
    wr_int32(w, (int32_t)v);
    return 0;
}

static int wr_frame(Wr *w, int api) {
    if (wr_reserve(w, 3) < 0) return -1;
    w->p[w->len++] = FRAME_VERSION;
    w->p[w->len++] = (char)api;
    w->p[w->len++] = 0;
    return 0;
}

/* PartitionRecord v0 from its field values. */
static int wr_partition(Wr *w, PyObject *const *a) {
    /* a: partition_id, topic_id, replicas, isr, removing, adding, leader, lrs,
     * leader_epoch, partition_epoch */
    long lrs;
    int rc;
    if ((rc = wr_frame(w, API_PARTITION)) || (rc = wr_int(w, a[0])) || (rc = wr_uuid(w, a[1])))
        return rc;
    for (int i = 2; i < 6; i++)
        if ((rc = wr_int32_array(w, a[i]))) return rc;
    if ((rc = wr_int(w, a[6])) || (rc = as_int(a[7], -128, 127, &lrs)) || (rc = wr_int(w, a[8])) ||
        (rc = wr_int(w, a[9])))
        return rc;
    if (wr_reserve(w, 4) < 0) return -1;
    if (lrs == 0) {
        w->p[w->len++] = 0;
    } else {
        w->p[w->len++] = 1; /* one tagged field: LeaderRecoveryState, tag 0, 1 byte */
        w->p[w->len++] = 0;
        w->p[w->len++] = 1;
        w->p[w->len++] = (char)(int8_t)lrs;
    }
    return 0;
}

static int is_empty_or_none(PyObject *x) {
    return x == Py_None || ((PyList_Check(x) || PyTuple_Check(x)) && PySequence_Fast_GET_SIZE(x) == 0);
}

static int encode_partition_msg(Wr *w, PyObject *m) {
    Layout *L = &partition_layout;
    for (int i = 0; i < P_N; i++)
        if (SLOT(m, *L, i) == NULL) return 1; /* an unset slot: the generic engine says so */
    if (!is_empty_or_none(SLOT(m, *L, P_DIRECTORIES)) || SLOT(m, *L, P_ELR) != Py_None ||
        SLOT(m, *L, P_LKE) != Py_None || !is_empty_or_none(SLOT(m, *L, P_UNKNOWN)))
        return 1;
    static const int order[10] = {P_PARTITION_ID, P_TOPIC_ID, P_REPLICAS, P_ISR, P_REMOVING,
                                  P_ADDING, P_LEADER, P_LRS, P_LEADER_EPOCH, P_PARTITION_EPOCH};
    PyObject *a[10];
    for (int i = 0; i < 10; i++) a[i] = SLOT(m, *L, order[i]);
    return wr_partition(w, a);
}

static int encode_topic_msg(Wr *w, PyObject *m) {
    Layout *L = &topic_layout;
    for (int i = 0; i < T_N; i++)
        if (SLOT(m, *L, i) == NULL) return 1;
    PyObject *name = SLOT(m, *L, T_NAME);
    if (!PyUnicode_CheckExact(name) || !is_empty_or_none(SLOT(m, *L, T_UNKNOWN))) return 1;
    Py_ssize_t len;
    const char *utf8 = PyUnicode_AsUTF8AndSize(name, &len);
    if (utf8 == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
        PyErr_Clear();
        return 1;
    }
    int rc;
    if ((rc = wr_frame(w, API_TOPIC)) || wr_reserve(w, 10 + len) < 0) return rc ? rc : -1;
    wr_uvarint(w, (uint64_t)len + 1);
    memcpy(w->p + w->len, utf8, len);
    w->len += len;
    if ((rc = wr_uuid(w, SLOT(m, *L, T_TOPIC_ID)))) return rc;
    if (wr_reserve(w, 1) < 0) return -1;
    w->p[w->len++] = 0;
    return 0;
}

/* One tagged field holding a compact int32 array. */
static int wr_tagged_array(Wr *w, int tag, PyObject *seq) {
    Wr body = {0};
    int rc = wr_int32_array(&body, seq);
    if (rc == 0 && wr_reserve(w, 20 + body.len) == 0) {
        wr_uvarint(w, (uint64_t)tag);
        wr_uvarint(w, (uint64_t)body.len);
        memcpy(w->p + w->len, body.p, body.len);
        w->len += body.len;
    } else if (rc == 0) {
        rc = -1;
    }
    PyMem_Free(body.p);
    return rc;
}

static int encode_change_msg(Wr *w, PyObject *m) {
    Layout *L = &change_layout;
    for (int i = 0; i < C_N; i++)
        if (SLOT(m, *L, i) == NULL) return 1;
    if (SLOT(m, *L, C_DIRECTORIES) != Py_None || SLOT(m, *L, C_ELR) != Py_None ||
        SLOT(m, *L, C_LKE) != Py_None || !is_empty_or_none(SLOT(m, *L, C_UNKNOWN)))
        return 1;
    long leader, lrs;
    int rc;
    if ((rc = as_int(SLOT(m, *L, C_LEADER), INT32_LO, INT32_HI, &leader)) ||
        (rc = as_int(SLOT(m, *L, C_LRS), -128, 127, &lrs)))
        return rc;
    static const int array_tags[5] = {C_ISR, -1, C_REPLICAS, C_REMOVING, C_ADDING};
    int count = (leader != -2) + (lrs != -1);
    for (int t = 0; t < 5; t++)
        if (t != 1 && SLOT(m, *L, array_tags[t]) != Py_None) count++;
    if ((rc = wr_frame(w, API_PARTITION_CHANGE)) || (rc = wr_int(w, SLOT(m, *L, C_PARTITION_ID))) ||
        (rc = wr_uuid(w, SLOT(m, *L, C_TOPIC_ID))))
        return rc;
    if (wr_reserve(w, 16) < 0) return -1;
    wr_uvarint(w, (uint64_t)count);
    for (int t = 0; t <= 5; t++) {
        if (t == 1) {
            if (leader == -2) continue;
            if (wr_reserve(w, 6) < 0) return -1;
            w->p[w->len++] = 1;
            w->p[w->len++] = 4;
            wr_int32(w, (int32_t)leader);
        } else if (t == 5) {
            if (lrs == -1) continue;
            if (wr_reserve(w, 3) < 0) return -1;
            w->p[w->len++] = 5;
            w->p[w->len++] = 1;
            w->p[w->len++] = (char)(int8_t)lrs;
        } else {
            PyObject *seq = SLOT(m, *L, array_tags[t]);
            if (seq == Py_None) continue;
            if ((rc = wr_tagged_array(w, t, seq))) return rc;
        }
    }
    return 0;
}

static PyObject *finish(Wr *w, int rc) {
    PyObject *out = NULL;
    if (rc == 0) out = PyBytes_FromStringAndSize(w->p, w->len);
    else if (rc == 1) out = Py_NewRef(Py_None);
    PyMem_Free(w->p);
    return out;
}

static PyObject *encode_record(PyObject *self, PyObject *msg) {
    Wr w = {0};
    int rc = 1;
    if (uuid_cls == NULL) Py_RETURN_NONE;
    if (Py_TYPE(msg) == partition_layout.cls) rc = encode_partition_msg(&w, msg);
    else if (Py_TYPE(msg) == topic_layout.cls) rc = encode_topic_msg(&w, msg);
    else if (Py_TYPE(msg) == change_layout.cls) rc = encode_change_msg(&w, msg);
    return finish(&w, rc);
}

static PyObject *encode_partition(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "encode_partition takes 10 arguments");
        return NULL;
    }
    Wr w = {0};
    if (uuid_cls == NULL) Py_RETURN_NONE;
    return finish(&w, wr_partition(&w, args));
}

/* ------------------------------------------------------------------ record batches */

/* A zig-zag varint of at most max bytes ending before end; -1 when malformed. */
static int rd_varint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, int max,
                     int64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < max && *pos < end; i++) {
        unsigned char b = p[(*pos)++];
        if (i == 9 && (b & 0x7f) > 1) return -1; /* beyond 64 bits: left to Python */
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    return -1;
}

static PyObject *record_values(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t count, last_delta;
    if (!PyArg_ParseTuple(args, "y*nn", &buf, &count, &last_delta)) return NULL;
    const unsigned char *p = buf.buf;
    Py_ssize_t n = buf.len, pos = 0;
    PyObject *out = NULL;
    if (count < 0 || count > n / RECORD_MIN_BYTES + 1) goto fallback;
    out = PyList_New(count);
    if (out == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, skip, delta, klen, vlen;
        if (rd_varint(p, &pos, n, 5, &length) < 0) goto fallback;
        if (length < RECORD_MIN_BYTES - 1 || length > n - pos) goto fallback;
        Py_ssize_t end = pos + (Py_ssize_t)length;
        pos++; /* attributes */
        if (rd_varint(p, &pos, end, 10, &skip) < 0 || rd_varint(p, &pos, end, 5, &delta) < 0 ||
            delta < 0 || delta > last_delta || rd_varint(p, &pos, end, 5, &klen) < 0)
            goto fallback;
        if (klen != -1) {
            if (klen < 0 || klen > end - pos) goto fallback;
            pos += (Py_ssize_t)klen;
        }
        if (rd_varint(p, &pos, end, 5, &vlen) < 0) goto fallback;
        PyObject *value;
        if (vlen == -1) {
            value = Py_NewRef(Py_None);
        } else {
            if (vlen < 0 || vlen > end - pos) goto fallback;
            value = PyBytes_FromStringAndSize((const char *)p + pos, (Py_ssize_t)vlen);
            if (value == NULL) goto done;
            pos += (Py_ssize_t)vlen;
        }
        PyList_SET_ITEM(out, i, value);
        /* headers: none (a record with headers is left to Python) */
        if (pos + 1 != end || p[pos] != 0) goto fallback;
        pos = end;
    }
    if (pos != n) goto fallback;
    PyBuffer_Release(&buf);
    return out;
fallback:
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
done:
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    return NULL;
}

static PyObject *value_records(PyObject *self, PyObject *values) {
    if (!PyList_Check(values)) Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(values);
    Wr w = {0};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(values, i);
        if (!PyBytes_Check(v) || i > INT32_HI) return finish(&w, 1);
        Py_ssize_t vlen = PyBytes_GET_SIZE(v);
        if (wr_reserve(&w, 40 + vlen) < 0) return finish(&w, -1);
        /* the record after its length: attributes 0, timestampDelta 0, offsetDelta i,
         * key null (-1), value length; then the value and 0 headers (zig-zag of x >= 0
         * is 2x) */
        char head_buf[32];
        Wr head = {head_buf, 0, sizeof head_buf};
        head.p[head.len++] = 0;
        head.p[head.len++] = 0;
        wr_uvarint(&head, (uint64_t)i * 2);
        head.p[head.len++] = 1;
        wr_uvarint(&head, (uint64_t)vlen * 2);
        wr_uvarint(&w, (uint64_t)(head.len + vlen + 1) * 2);
        memcpy(w.p + w.len, head.p, head.len);
        w.len += head.len;
        memcpy(w.p + w.len, PyBytes_AS_STRING(v), vlen);
        w.len += vlen;
        w.p[w.len++] = 0;
    }
    return finish(&w, 0);
}

/* ------------------------------------------------------------------ image entries */

/* A tuple of the ints of a list (exact ints only), one object per distinct value through
 * `shared`; untracked by the collector (ints cannot form a cycle). Py_None (borrowed):
 * not such a list. */
static PyObject *int_tuple(PyObject *list, PyObject *shared) {
    if (!PyList_CheckExact(list)) return Py_None;
    Py_ssize_t n = PyList_GET_SIZE(list);
    PyObject *t = PyTuple_New(n);
    if (t == NULL || n == 0) return t; /* () is a shared, untracked singleton */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyList_GET_ITEM(list, i);
        if (!PyLong_CheckExact(x)) {
            Py_DECREF(t);
            return Py_None;
        }
        PyTuple_SET_ITEM(t, i, Py_NewRef(x));
    }
    PyObject_GC_UnTrack(t);
    PyObject *one = PyDict_SetDefault(shared, t, t); /* borrowed */
    if (one == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    Py_INCREF(one);
    Py_DECREF(t);
    return one;
}

/* registration(cls, shared, rec): metadata.image's PartitionRegistration of a
 * PartitionRecord (a tuple subclass of 8 fields: replicas, isr, removing, adding as int
 * tuples, leader, leader recovery state, leader epoch, partition epoch), untracked by the
 * collector: an image holds one per partition, a million immutable tuples of ints that
 * every full collection would otherwise walk. None when rec is not such a record. */
static PyObject *registration(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyType_Check(args[0]) || !PyDict_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "registration(cls, shared: dict, rec)");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    PyObject *shared = args[1], *rec = args[2];
    if (!PyType_IsSubtype(cls, &PyTuple_Type) || cls->tp_basicsize != PyTuple_Type.tp_basicsize ||
        cls->tp_dictoffset != 0 || cls->tp_weaklistoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "registration: cls must be a tuple subclass without slots");
        return NULL;
    }
    if (uuid_cls == NULL || Py_TYPE(rec) != partition_layout.cls) Py_RETURN_NONE;
    Layout *L = &partition_layout;
    static const int lists[4] = {P_REPLICAS, P_ISR, P_REMOVING, P_ADDING};
    static const int ints[4] = {P_LEADER, P_LRS, P_LEADER_EPOCH, P_PARTITION_EPOCH};
    PyObject *items[8] = {0};
    PyObject *out = NULL;
    for (int i = 0; i < 4; i++) {
        PyObject *x = SLOT(rec, *L, ints[i]);
        if (x == NULL || !PyLong_CheckExact(x)) goto fallback;
        PyObject *a = SLOT(rec, *L, lists[i]);
        if (a == NULL) goto fallback;
        items[i] = int_tuple(a, shared);
        if (items[i] == NULL) goto done;
        if (items[i] == Py_None) {
            items[i] = NULL;
            goto fallback;
        }
        items[4 + i] = Py_NewRef(x);
    }
    out = cls->tp_alloc(cls, 8);
    if (out == NULL) goto done;
    for (int i = 0; i < 8; i++) {
        PyTuple_SET_ITEM(out, i, items[i]);
        items[i] = NULL;
    }
    PyObject_GC_UnTrack(out);
    goto done;
fallback:
    out = Py_NewRef(Py_None);
done:
    for (int i = 0; i < 8; i++) Py_XDECREF(items[i]);
    return out;
}

/* ------------------------------------------------------------------ setup */

static int layout(Layout *lay, PyObject *cls, PyObject *names) {
    if (!PyType_Check(cls) || !PyTuple_Check(names) || PyTuple_GET_SIZE(names) > P_N) {
        PyErr_SetString(PyExc_TypeError, "setup: (class, tuple of slot names) expected");
        return -1;
    }
    lay->n = (int)PyTuple_GET_SIZE(names);
    for (int i = 0; i < lay->n; i++) {
        PyObject *d = PyObject_GetAttr(cls, PyTuple_GET_ITEM(names, i));
        if (d == NULL) return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX &&
                 !(((PyMemberDescrObject *)d)->d_member->flags & READONLY);
        if (ok) lay->off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "setup: %R is not a slot of %R",
                         PyTuple_GET_ITEM(names, i), cls);
            return -1;
        }
    }
    Py_INCREF(cls);
    lay->cls = (PyTypeObject *)cls;
    return 0;
}

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *u, *p, *pn, *t, *tn, *c, *cn;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &u, &p, &pn, &t, &tn, &c, &cn)) return NULL;
    if (PyTuple_Check(pn) && PyTuple_GET_SIZE(pn) != P_N) goto bad;
    if (PyTuple_Check(tn) && PyTuple_GET_SIZE(tn) != T_N) goto bad;
    if (PyTuple_Check(cn) && PyTuple_GET_SIZE(cn) != C_N) goto bad;
    if (layout(&partition_layout, p, pn) < 0 || layout(&topic_layout, t, tn) < 0 ||
        layout(&change_layout, c, cn) < 0)
        return NULL;
    Py_XSETREF(uuid_cls, Py_NewRef(u));
    Py_RETURN_NONE;
bad:
    PyErr_SetString(PyExc_TypeError, "setup: wrong number of slot names");
    return NULL;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(uuid_cls, (cls, slot names) x 3 as 6 arguments)"},
    {"decode_record", decode_record, METH_O, "framed metadata record -> (msg, version) | None"},
    {"encode_record", encode_record, METH_O, "metadata record at v0 -> framed bytes | None"},
    {"encode_partition", (PyCFunction)(void (*)(void))encode_partition, METH_FASTCALL,
     "PartitionRecord v0 from 10 field values -> framed bytes | None"},
    {"registration", (PyCFunction)(void (*)(void))registration, METH_FASTCALL,
     "(cls, shared, PartitionRecord) -> untracked PartitionRegistration | None"},
    {"record_values", record_values, METH_VARARGS,
     "(records section, count, last offset delta) -> values | None"},
    {"value_records", value_records, METH_O, "values -> records section | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpath", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastpath(void) {
    version_zero = PyLong_FromLong(0);
    if (version_zero == NULL) return NULL;
    return PyModule_Create(&module);
}
