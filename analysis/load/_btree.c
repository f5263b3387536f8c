/* Integer columns of an SQLite table read straight from its b-tree pages (the analysis's fast reader).

   SQLite's own row loop costs 65-130 ns a value on the development machine; nsys exports hold tens of millions
   of rows of plain integers, so the analysis reads them here: walk the table's b-tree for a rowid range, decode
   only the wanted fields of each record, keep the rows passing the filters.

       interior page (0x05): [child, key] ... right child      child holds rowids <= key
       leaf page (0x0d):     [payload size, rowid, record]     record: header of serial types, then the values

   Anything this reader does not handle the way SQLite would (a value that is not an integer, an overflowing
   record, a record shorter than the table, a page that does not parse) ends the scan with a status; the caller
   then reads the same rows through SQLite, which gives the exact answer or the exact error. Every read is
   bounds-checked: a damaged file gives a status, never a crash. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

enum { OK = 0, DAMAGED = 1, NOT_HANDLED = 2, NO_MEMORY = 3 };
enum { MAX_COLUMNS = 16, MAX_DEPTH = 40, MAX_FIELDS = 2000 };

typedef struct {          /* keep rows whose (value >> shift) & mask is one of the sorted values (none, negated) */
    int slot, shift, negate; int64_t mask; const int64_t *values; Py_ssize_t n;
} InFilter;

typedef struct {          /* keep rows whose [start, end) overlaps one of the sorted disjoint intervals */
    int start_slot, end_slot; const int64_t *starts, *ends; Py_ssize_t n;
} TouchFilter;

typedef struct {
    int fd; uint32_t page_size, usable; uint64_t pages, visited;
    int64_t lo, hi;                      /* rowids in (lo, hi] */
    int64_t last_rowid;                  /* the walk's previous rowid: rowids must rise, as in a sound b-tree */
    int ncol, max_field; int slot_of[MAX_FIELDS];
    int64_t *out[MAX_COLUMNS]; Py_ssize_t n, cap; int64_t seen;
    InFilter *ins; int nin; TouchFilter *touches; int ntouch;
    const unsigned char *map;            /* the whole file, mapped by the caller; NULL: read each page (pread) */
    unsigned char *buf[MAX_DEPTH]; int status, done;  /* done: a rowid above hi was met */
} Scan;

static int varint(const unsigned char *p, const unsigned char *end, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < 9; i++) {
        if (p + i >= end) return 0;
        if (i == 8) { *v = (x << 8) | p[i]; return 9; }
        x = (x << 7) | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) { *v = x; return i + 1; }
    }
    return 0;
}

static int64_t big_endian(const unsigned char *p, int len) {
    uint64_t v = (p[0] & 0x80) ? ~(uint64_t)0 : 0;
    for (int i = 0; i < len; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}

static int contains(const int64_t *a, Py_ssize_t n, int64_t v) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) { Py_ssize_t mid = (lo + hi) / 2; if (a[mid] < v) lo = mid + 1; else hi = mid; }
    return lo < n && a[lo] == v;
}

static int touches(const TouchFilter *f, int64_t start, int64_t end) {
    Py_ssize_t lo = 0, hi = f->n;  /* k = the number of interval starts before `end` */
    while (lo < hi) { Py_ssize_t mid = (lo + hi) / 2; if (f->starts[mid] < end) lo = mid + 1; else hi = mid; }
    return lo > 0 && f->ends[lo - 1] > start;
}

static int kept(const Scan *s, const int64_t *row) {
    for (int i = 0; i < s->nin; i++) {
        const InFilter *f = &s->ins[i];
        if (contains(f->values, f->n, (row[f->slot] >> f->shift) & f->mask) == f->negate) return 0;
    }
    for (int i = 0; i < s->ntouch; i++)
        if (!touches(&s->touches[i], row[s->touches[i].start_slot], row[s->touches[i].end_slot])) return 0;
    return 1;
}

/* One leaf cell: decode the wanted fields of its record into row[], keep it if it passes the filters. */
static void leaf_cell(Scan *s, const unsigned char *p, const unsigned char *end, int64_t min_key, int64_t max_key) {
    uint64_t payload, rowid, header_len, type; int k;
    if (!(k = varint(p, end, &payload))) { s->status = DAMAGED; return; }
    p += k;
    if (!(k = varint(p, end, &rowid))) { s->status = DAMAGED; return; }
    p += k;
    /* out of order or outside its parent's bounds: SQLite's seek and its in-order walk would disagree with any
       other reading, so only SQLite answers (usually with "database disk image is malformed") */
    if ((int64_t)rowid <= s->last_rowid || (int64_t)rowid <= min_key || (int64_t)rowid > max_key) {
        s->status = DAMAGED; return;
    }
    s->last_rowid = (int64_t)rowid;
    if ((int64_t)rowid > s->hi) { s->done = 1; return; }  /* where SQLite's scan stops too */
    if ((int64_t)rowid <= s->lo) return;
    if (payload > s->usable - 35) { s->status = NOT_HANDLED; return; }  /* spills to overflow pages */
    if (payload > (uint64_t)(end - p)) { s->status = DAMAGED; return; }
    const unsigned char *rec_end = p + payload;
    if (!(k = varint(p, rec_end, &header_len)) || header_len > payload || header_len < (uint64_t)k) {
        s->status = DAMAGED; return;
    }
    const unsigned char *h = p + k, *h_end = p + header_len, *body = h_end;
    int64_t row[MAX_COLUMNS]; int found = 0;
    s->seen++;
    for (int field = 0; found < s->ncol; field++) {
        if (h >= h_end || field > s->max_field) { s->status = NOT_HANDLED; return; }  /* a default SQLite knows */
        if (!(k = varint(h, h_end, &type))) { s->status = DAMAGED; return; }
        h += k;
        static const int INT_BYTES[10] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0};
        uint64_t len = type < 10 ? (uint64_t)INT_BYTES[type] : type >= 12 ? (type - 12) / 2 : 0;
        if (type == 10 || type == 11 || len > (uint64_t)(rec_end - body)) { s->status = DAMAGED; return; }
        int slot = s->slot_of[field];
        if (slot >= 0) {
            if (type >= 1 && type <= 6) row[slot] = big_endian(body, (int)len);
            else if (type == 8 || type == 9) row[slot] = (int64_t)type - 8;
            else { s->status = NOT_HANDLED; return; }  /* NULL, a float, text: SQLite's rules decide */
            found++;
        }
        body += len;
    }
    if (!kept(s, row)) return;
    if (s->n >= s->cap) { s->status = DAMAGED; return; }  /* more rows than rowids in (lo, hi] */
    for (int c = 0; c < s->ncol; c++) s->out[c][s->n] = row[c];
    s->n++;
}

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* The subtree at page pgno, whose rowids are in (min_key, max_key]. */
static void walk(Scan *s, uint32_t pgno, int depth, int64_t min_key, int64_t max_key) {
    if (depth >= MAX_DEPTH || pgno == 0 || pgno > s->pages || ++s->visited > s->pages) { s->status = DAMAGED; return; }
    const unsigned char *page = s->map ? s->map + (size_t)(pgno - 1) * s->page_size : s->buf[depth];
    if (!s->map && pread(s->fd, s->buf[depth], s->page_size, (off_t)(pgno - 1) * s->page_size) != (ssize_t)s->page_size) {
        s->status = DAMAGED; return;
    }
    const unsigned char *hdr = page + (pgno == 1 ? 100 : 0), *end = page + s->usable;
    int leaf = hdr[0] == 0x0d;
    if (!leaf && hdr[0] != 0x05) { s->status = NOT_HANDLED; return; }  /* not a rowid table's page */
    uint32_t cells = ((uint32_t)hdr[3] << 8) | hdr[4];
    const unsigned char *ptrs = hdr + (leaf ? 8 : 12);
    if (ptrs + 2 * (size_t)cells > end) { s->status = DAMAGED; return; }
    /* Children below lo are skipped by their keys, as SQLite's seek skips them. Above hi, nothing is skipped by
       a key: SQLite's scan walks on until it meets a rowid above hi, and so does this one. Every key and rowid
       met must rise within its parent's bounds, else only SQLite answers. */
    for (uint32_t i = 0; i < cells && s->status == OK && !s->done; i++) {
        uint32_t off = ((uint32_t)ptrs[2 * i] << 8) | ptrs[2 * i + 1];
        if (off < (uint32_t)(ptrs + 2 * cells - page) || off >= s->usable) { s->status = DAMAGED; return; }
        if (leaf) { leaf_cell(s, page + off, end, min_key, max_key); continue; }
        uint64_t key;
        if (off + 4 >= s->usable || !varint(page + off + 4, end, &key)) { s->status = DAMAGED; return; }
        if ((int64_t)key <= min_key || (int64_t)key > max_key) { s->status = DAMAGED; return; }  /* keys must rise */
        if ((int64_t)key > s->lo) walk(s, be32(page + off), depth + 1, min_key, (int64_t)key);
        min_key = (int64_t)key;
    }
    if (!leaf && s->status == OK && !s->done) walk(s, be32(hdr + 8), depth + 1, min_key, max_key);
}

static int int64_buffer(PyObject *obj, Py_buffer *view, const int64_t **data, Py_ssize_t *n) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) return 0;
    if (view->len % 8) { PyBuffer_Release(view); PyErr_SetString(PyExc_ValueError, "int64 buffer expected"); return 0; }
    *data = view->buf; *n = view->len / 8;
    return 1;
}

/* Parse the filters: ins = [(slot, shift, mask, values, negate)], touches = [(start_slot, end_slot, starts, ends)]. */
static int parse_filters(Scan *s, PyObject *ins, PyObject *tch, Py_buffer *views, int *nviews) {
    Py_ssize_t nin = PyList_Size(ins), nt = PyList_Size(tch);
    if (nin < 0 || nt < 0 || nin + 2 * nt > 3 * MAX_COLUMNS) { PyErr_SetString(PyExc_ValueError, "filters"); return 0; }
    s->ins = calloc(nin + 1, sizeof(InFilter)); s->touches = calloc(nt + 1, sizeof(TouchFilter));
    if (!s->ins || !s->touches) { PyErr_NoMemory(); return 0; }
    for (Py_ssize_t i = 0; i < nin; i++) {
        InFilter *f = &s->ins[i]; PyObject *values;
        if (!PyArg_ParseTuple(PyList_GetItem(ins, i), "iiLOp", &f->slot, &f->shift, &f->mask, &values, &f->negate))
            return 0;
        if (!int64_buffer(values, &views[(*nviews)], &f->values, &f->n)) return 0;
        (*nviews)++; s->nin++;
        if (f->slot < 0 || f->slot >= s->ncol || f->shift < 0 || f->shift > 63) { PyErr_SetString(PyExc_ValueError, "slot"); return 0; }
    }
    for (Py_ssize_t i = 0; i < nt; i++) {
        TouchFilter *f = &s->touches[i]; PyObject *starts, *ends; Py_ssize_t n_ends;
        if (!PyArg_ParseTuple(PyList_GetItem(tch, i), "iiOO", &f->start_slot, &f->end_slot, &starts, &ends)) return 0;
        if (!int64_buffer(starts, &views[(*nviews)], &f->starts, &f->n)) return 0;
        (*nviews)++;
        if (!int64_buffer(ends, &views[(*nviews)], &f->ends, &n_ends)) return 0;
        (*nviews)++; s->ntouch++;
        if (n_ends != f->n || f->start_slot < 0 || f->start_slot >= s->ncol || f->end_slot < 0 || f->end_slot >= s->ncol) {
            PyErr_SetString(PyExc_ValueError, "touch filter"); return 0;
        }
    }
    return 1;
}

/* A mapped file cut short while it is read (another program truncating it) raises SIGBUS on the missing pages:
   the scan then ends as DAMAGED (SQLite reads it next and says what is wrong) instead of killing the process. */
static __thread sigjmp_buf *bus_escape;
static struct sigaction previous_bus;

static void on_bus_error(int sig, siginfo_t *info, void *context) {
    if (bus_escape) siglongjmp(*bus_escape, 1);
    if (previous_bus.sa_flags & SA_SIGINFO) previous_bus.sa_sigaction(sig, info, context);
    else if (previous_bus.sa_handler != SIG_IGN && previous_bus.sa_handler != SIG_DFL) previous_bus.sa_handler(sig);
    else { signal(SIGBUS, SIG_DFL); raise(SIGBUS); }
}

static void walk_mapped(Scan *s, uint32_t root) {
    sigjmp_buf escape;
    if (sigsetjmp(escape, 0)) { bus_escape = NULL; s->status = DAMAGED; return; }
    bus_escape = &escape;
    walk(s, root, 0, INT64_MIN, INT64_MAX);
    bus_escape = NULL;
}

/* Open the file: the caller's mapping of it (a buffer, e.g. mmap.mmap), or its path (then each page is read). */
static void open_source(Scan *s, const char *path, const Py_buffer *mapped) {
    if (mapped) {
        s->map = mapped->buf; s->pages = (uint64_t)mapped->len / s->page_size;
        return;
    }
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    off_t size = s->fd < 0 ? -1 : lseek(s->fd, 0, SEEK_END);
    if (size < 0) s->status = DAMAGED;
    else s->pages = (uint64_t)size / s->page_size;
}

/* scan(source, root, page_size, usable, fields, lo, hi, ins, touches) -> (status, rows seen, [bytearray per field]);
   source: the file's path, or a buffer holding the whole file (a read-only mapping of it) */
static PyObject *btree_scan(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *source; unsigned int root, page_size, usable; PyObject *fields, *ins, *tch; long long lo, hi;
    if (!PyArg_ParseTuple(args, "OIIIOLLO!O!", &source, &root, &page_size, &usable, &fields, &lo, &hi,
                          &PyList_Type, &ins, &PyList_Type, &tch)) return NULL;
    Scan s; memset(&s, 0, sizeof s);
    s.page_size = page_size; s.usable = usable; s.lo = lo; s.hi = hi; s.max_field = -1;
    Py_ssize_t nfields = PySequence_Size(fields);
    if (nfields < 1 || nfields > MAX_COLUMNS || page_size < 512 || page_size > 65536 || usable < 480 ||
        usable > page_size || hi < lo || hi - lo > (1LL << 24)) {
        PyErr_SetString(PyExc_ValueError, "scan: bad arguments"); return NULL;
    }
    for (int f = 0; f < MAX_FIELDS; f++) s.slot_of[f] = -1;
    s.ncol = (int)nfields;
    for (int c = 0; c < s.ncol; c++) {
        PyObject *item = PySequence_GetItem(fields, c);
        long field = item ? PyLong_AsLong(item) : -1;
        Py_XDECREF(item);
        if (field < 0 || field >= MAX_FIELDS || s.slot_of[field] >= 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "scan: bad field");
            return NULL;
        }
        s.slot_of[field] = c;
        if (field > s.max_field) s.max_field = (int)field;
    }
    const char *path = PyUnicode_Check(source) ? PyUnicode_AsUTF8(source) : NULL;
    Py_buffer mapped; int is_mapped = 0;
    if (!path) {
        if (PyErr_Occurred() || PyObject_GetBuffer(source, &mapped, PyBUF_SIMPLE) < 0) return NULL;
        is_mapped = 1;
    }
    Py_buffer views[3 * MAX_COLUMNS]; int nviews = 0;
    PyObject *cols = PyList_New(s.ncol), *result = NULL;
    s.cap = (Py_ssize_t)(hi - lo);
    if (!cols || !parse_filters(&s, ins, tch, views, &nviews)) goto done;
    for (int c = 0; c < s.ncol; c++) {  /* room for every rowid in range; pages never written are never resident */
        PyObject *b = PyByteArray_FromStringAndSize(NULL, s.cap * 8);
        if (!b) goto done;
        PyList_SET_ITEM(cols, c, b);
        s.out[c] = (int64_t *)PyByteArray_AS_STRING(b);
    }
    for (int d = 0; d < MAX_DEPTH; d++)
        if (!(s.buf[d] = malloc(page_size))) { PyErr_NoMemory(); goto done; }
    Py_BEGIN_ALLOW_THREADS
    s.fd = -1; s.last_rowid = INT64_MIN;
    open_source(&s, path, is_mapped ? &mapped : NULL);
    if (s.status == OK && s.map) walk_mapped(&s, root);
    else if (s.status == OK) walk(&s, root, 0, INT64_MIN, INT64_MAX);
    if (s.fd >= 0) close(s.fd);
    Py_END_ALLOW_THREADS
    for (int c = 0; c < s.ncol; c++)
        if (PyByteArray_Resize(PyList_GET_ITEM(cols, c), s.status == OK ? s.n * 8 : 0) < 0) goto done;
    result = Py_BuildValue("(iLO)", s.status, (long long)s.seen, cols);
done:
    if (is_mapped) PyBuffer_Release(&mapped);
    for (int i = 0; i < nviews; i++) PyBuffer_Release(&views[i]);
    for (int d = 0; d < MAX_DEPTH; d++) free(s.buf[d]);
    free(s.ins); free(s.touches);
    Py_XDECREF(cols);
    return result;
}

static PyMethodDef METHODS[] = {
    {"scan", btree_scan, METH_VARARGS,
     "scan(path, root, page_size, usable, fields, lo, hi, ins, touches) -> (status, rows seen, columns)"},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_btree", "SQLite table b-tree reader", -1, METHODS};
PyMODINIT_FUNC PyInit__btree(void) {
    struct sigaction bus = {0};
    bus.sa_sigaction = on_bus_error;
    bus.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&bus.sa_mask);
    if (sigaction(SIGBUS, &bus, &previous_bus) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyModule_Create(&MODULE);
}
