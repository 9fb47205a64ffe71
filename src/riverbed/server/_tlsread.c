/* riverbed.server._tlsread: decrypt every complete TLS record an OpenSSL connection holds
 * in one call (issue 20).
 *
 * Why: librdkafka writes a Produce request over TLS as one TLS record per message value
 * (~1 KiB) plus a 31-byte one, and the event loop's TLS layer (uvloop's SSLProtocol) calls
 * the `_ssl` module's `read(256 KiB)` once per record: each call allocates 256 KiB, releases
 * and re-takes the GIL around one SSL_read and shrinks the result. `Reader.read` loops
 * SSL_read_ex until the caller's size is filled or OpenSSL wants more input, into one
 * buffer sized from what is buffered, holding the GIL (decryption of a memory BIO never
 * blocks). (OpenSSL's read-ahead, tried on top: no gain, 1.02x the broker's CPU.)
 *
 * Safe by construction: the SSL* is taken from CPython's private `_ssl._SSLSocket` struct
 * (Modules/_ssl.c, 3.x: PyObject_HEAD; PyObject *Socket; SSL *ssl; ...) only after checking
 * the type's name and size, and used only when OpenSSL's own app data of that SSL* is the
 * object itself (CPython sets SSL_set_app_data(ssl, self)); otherwise the constructor raises
 * and the caller keeps the `_ssl` methods. libssl is not linked: its functions are looked up
 * in the libssl.so.3 the `_ssl` module already loaded (RTLD_NOLOAD), so the build needs no
 * OpenSSL headers and a process without it never loads a second copy.
 *
 * Errors: "nothing complete buffered" raises ssl.SSLWantReadError as `_ssl` does; a close
 * ends the data (b'' / 0 once nothing precedes it, as `_ssl` on close_notify; `pending`
 * says 1 meanwhile so that the caller reads again); any other failure is handed to the
 * `_ssl` read method itself at once, which meets the same sticky OpenSSL state and error
 * queue and raises exactly what it would have raised.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <string.h>

#define SSL_ERROR_WANT_READ 2
#define SSL_ERROR_ZERO_RETURN 6
#define SSL_RECEIVED_SHUTDOWN 2
/* the largest TLS record's plaintext plus slack: what a partly buffered record can add */
#define RECORD_PLAINTEXT_MAX (16384 + 2048)

typedef struct ssl_st SSL;
typedef struct bio_st BIO;

static int (*p_SSL_read_ex)(SSL *, void *, size_t, size_t *);
static int (*p_SSL_get_error)(const SSL *, int);
static int (*p_SSL_pending)(const SSL *);
static int (*p_SSL_get_shutdown)(const SSL *);
static void *(*p_SSL_get_ex_data)(const SSL *, int);
static BIO *(*p_SSL_get_rbio)(const SSL *);
static size_t (*p_BIO_ctrl_pending)(BIO *);
static const char *load_error = NULL;

/* The leading fields of CPython's PySSLSocket (Modules/_ssl.c, unchanged through 3.x). */
typedef struct {
    PyObject_HEAD
    PyObject *Socket;
    SSL *ssl;
} SSLSocketHead;

static PyObject *want_read_error; /* ssl.SSLWantReadError */

typedef struct {
    PyObject_HEAD
    PyObject *sslsocket; /* the _ssl._SSLSocket (keeps the SSL* alive) */
    PyObject *fallback;  /* its C `read` method */
    SSL *ssl;
    int eof_unread; /* a close_notify met after data: the next read returns it */
} Reader;

static int
load_openssl(void)
{
    void *lib = dlopen("libssl.so.3", RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL) {
        load_error = "libssl.so.3 is not loaded in this process";
        return -1;
    }
#define SYM(name)                                                  \
    do {                                                           \
        *(void **)(&p_##name) = dlsym(lib, #name);                 \
        if (p_##name == NULL) {                                    \
            load_error = "libssl.so.3 lacks " #name;               \
            return -1;                                             \
        }                                                          \
    } while (0)
    SYM(SSL_read_ex);
    SYM(SSL_get_error);
    SYM(SSL_pending);
    SYM(SSL_get_shutdown);
    SYM(SSL_get_ex_data);
    SYM(SSL_get_rbio);
    SYM(BIO_ctrl_pending);
#undef SYM
    return 0;
}

static int
Reader_init(Reader *self, PyObject *args, PyObject *kwds)
{
    PyObject *sock;
    if (!PyArg_ParseTuple(args, "O:Reader", &sock))
        return -1;
    if (load_error != NULL) {
        PyErr_SetString(PyExc_ValueError, load_error);
        return -1;
    }
    PyTypeObject *tp = Py_TYPE(sock);
    if (strcmp(tp->tp_name, "_ssl._SSLSocket") != 0 ||
        tp->tp_basicsize < (Py_ssize_t)sizeof(SSLSocketHead)) {
        PyErr_Format(PyExc_ValueError, "not an _ssl._SSLSocket: %s", tp->tp_name);
        return -1;
    }
    SSL *ssl = ((SSLSocketHead *)sock)->ssl;
    if (ssl == NULL || p_SSL_get_ex_data(ssl, 0) != (void *)sock) {
        PyErr_SetString(PyExc_ValueError,
                        "the _ssl._SSLSocket layout is not the one this module knows");
        return -1;
    }
    PyObject *fallback = PyObject_GetAttrString(sock, "read");
    if (fallback == NULL)
        return -1;
    Py_XSETREF(self->fallback, fallback);
    Py_INCREF(sock);
    Py_XSETREF(self->sslsocket, sock);
    self->ssl = ssl;
    return 0;
}

static void
Reader_dealloc(Reader *self)
{
    Py_XDECREF(self->sslsocket);
    Py_XDECREF(self->fallback);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Decrypt into dst[0:cap) until full or OpenSSL stops; *err its error (0: filled). */
static size_t
drain(SSL *ssl, char *dst, size_t cap, int *err)
{
    size_t total = 0, n = 0;
    *err = 0;
    while (total < cap) {
        if (!p_SSL_read_ex(ssl, dst + total, cap - total, &n)) {
            *err = p_SSL_get_error(ssl, 0);
            break;
        }
        total += n;
    }
    return total;
}

/* Whether the records decrypted before OpenSSL stopped with `err` are returned: not
 * when it failed (a damaged record, an EOF inside one): the failure is raised at once, with
 * OpenSSL's error queue as it left it (uvloop drops the data read before a failure too). */
static int
data_stands(int err)
{
    return err == 0 || err == SSL_ERROR_WANT_READ || err == SSL_ERROR_ZERO_RETURN;
}

/* What a call that decrypted nothing returns or raises, as `_ssl` would. */
static PyObject *
nothing_read(Reader *self, int err, PyObject *const *args, Py_ssize_t nargs, int into)
{
    self->eof_unread = 0;
    if (err == SSL_ERROR_WANT_READ) {
        PyObject *exc = PyObject_CallFunction(
            want_read_error, "is", SSL_ERROR_WANT_READ,
            "The operation did not complete (read)");
        if (exc != NULL) {
            PyErr_SetObject(want_read_error, exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    if (err == SSL_ERROR_ZERO_RETURN &&
        p_SSL_get_shutdown(self->ssl) == SSL_RECEIVED_SHUTDOWN)
        return into ? PyLong_FromLong(0) : PyBytes_FromStringAndSize(NULL, 0);
    /* a failure: `_ssl` reads again, meets the same state, raises its own exception */
    return PyObject_Vectorcall(self->fallback, args, nargs, NULL);
}

static PyObject *
read_into(Reader *self, Py_ssize_t len, PyObject *buffer, PyObject *const *args,
          Py_ssize_t nargs)
{
    Py_buffer view;
    if (PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (len <= 0 || len > view.len)
        len = view.len; /* as _ssl */
    int err = 0;
    size_t total = len > 0 ? drain(self->ssl, view.buf, (size_t)len, &err) : 0;
    PyBuffer_Release(&view);
    if (len == 0)
        return PyLong_FromLong(0);
    if (total > 0 && data_stands(err)) {
        self->eof_unread = err == SSL_ERROR_ZERO_RETURN;
        return PyLong_FromSize_t(total);
    }
    return nothing_read(self, err, args, nargs, 1);
}

/* read(len[, buffer]): `_ssl._SSLSocket.read`'s contract, every complete record at once */
static PyObject *
Reader_read(Reader *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2 || !PyLong_Check(args[0]))
        return PyObject_Vectorcall(self->fallback, args, nargs, NULL);
    Py_ssize_t len = PyLong_AsSsize_t(args[0]);
    if (len == -1 && PyErr_Occurred())
        return NULL;
    if (nargs == 2 && args[1] != Py_None)
        return read_into(self, len, args[1], args, nargs);
    if (len <= 0)
        return PyObject_Vectorcall(self->fallback, args, nargs, NULL);
    size_t buffered = p_BIO_ctrl_pending(p_SSL_get_rbio(self->ssl)) +
                      (size_t)p_SSL_pending(self->ssl) + RECORD_PLAINTEXT_MAX;
    size_t cap = (size_t)len < buffered ? (size_t)len : buffered;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap);
    if (out == NULL)
        return NULL;
    int err = 0;
    size_t total = drain(self->ssl, PyBytes_AS_STRING(out), cap, &err);
    if (total == 0 || !data_stands(err)) {
        Py_DECREF(out);
        return nothing_read(self, err, args, nargs, 0);
    }
    self->eof_unread = err == SSL_ERROR_ZERO_RETURN;
    if (total < cap && _PyBytes_Resize(&out, (Py_ssize_t)total) < 0)
        return NULL;
    return out;
}

/* pending(): decrypted bytes buffered, as `_ssl`; 1 for a close_notify met behind data,
 * which `_ssl` would have returned (b'') from a read of its own: the caller reads on. */
static PyObject *
Reader_pending(Reader *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong((long)p_SSL_pending(self->ssl) + self->eof_unread);
}

static PyMethodDef Reader_methods[] = {
    {"read", (PyCFunction)(void (*)(void))Reader_read, METH_FASTCALL,
     "read(len[, buffer]): every complete TLS record's plaintext, up to len bytes"},
    {"pending", (PyCFunction)Reader_pending, METH_NOARGS,
     "pending(): decrypted bytes buffered (1 for a close_notify not yet returned)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "riverbed.server._tlsread.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reader(sslobj): a `read` decrypting every buffered TLS record in one call",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Reader_init,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_methods = Reader_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tlsread",
    "Decrypt every buffered TLS record in one call (see _tlsread.c).", -1, NULL,
};

PyMODINIT_FUNC
PyInit__tlsread(void)
{
    PyObject *ssl = PyImport_ImportModule("ssl"); /* loads _ssl and so libssl first */
    if (ssl == NULL)
        return NULL;
    want_read_error = PyObject_GetAttrString(ssl, "SSLWantReadError");
    Py_DECREF(ssl);
    if (want_read_error == NULL)
        return NULL;
    load_openssl();
    if (PyType_Ready(&ReaderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
