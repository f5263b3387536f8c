/* The replay's loop (analysis/replay/engine.py), in C: the same steps as engine._Run, one call after another.

   The predictions replay a few steady iterations (thousands of calls) several times per finding; in Python each call
   costs microseconds of interpreter time, here tens of nanoseconds. engine.py prepares every array (the edit applied,
   streams numbered 0..S-1) and calls run(); without this module it runs the same steps in Python (engine._Run), and
   tests/test_replay.py holds the two to the same answers on the bundled traces.

   run(gaps f8[n+1], call_own f8[n], waits u1[n], dropped u1[n], awaits i8[n], tail f8[n],
       ptr i8[n+1], order i8[k] (the operations of call c: order[ptr[c]:ptr[c+1]]),
       lat f8[m], after i8[m], op_ns f8[m], stream i8[m], producer i8[m] (-1: none), op_start f8[m],
       external i8[e] (operations of no call, by start), ends f8[m] (out, NaN where not run),
       streams, lo, queued_ns, profiler_ns, drop_ns)  ->  (host clock at the end, the host's own time) */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct { Py_buffer b[18]; int n; } Views;

static void release(Views *v) { for (int i = 0; i < v->n; i++) PyBuffer_Release(&v->b[i]); }

static void *view(Views *v, PyObject *o, Py_ssize_t itemsize, Py_ssize_t count, int writable) {
    Py_buffer *b = &v->b[v->n];
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return NULL;
    v->n++;
    if (b->len != itemsize * count) { PyErr_SetString(PyExc_ValueError, "replay: an array of the wrong size"); return NULL; }
    return b->buf;
}

typedef struct { double credit, host; } Cost;

static double host_time(Cost *c, double x) {   /* x less what it gives of the profiler's cost (at most 90% of it) */
    double cut = x > 0 ? fmin(c->credit, 0.9 * x) : 0.0;
    c->credit -= cut; c->host += x - cut;
    return x - cut;
}

static PyObject *run(PyObject *self, PyObject *args) {
    PyObject *o[18]; Py_ssize_t n, m, e, k, streams; double lo, queued, profiler, drop;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOnnnnndddd", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14], &o[15], &n, &m, &e, &k, &streams,
                          &lo, &queued, &profiler, &drop)) return NULL;
    Views v = {.n = 0};
    double *gaps = view(&v, o[0], 8, n + 1, 0), *own = gaps ? view(&v, o[1], 8, n, 0) : NULL;
    uint8_t *waits = own ? view(&v, o[2], 1, n, 0) : NULL, *dropped = waits ? view(&v, o[3], 1, n, 0) : NULL;
    int64_t *awaits = dropped ? view(&v, o[4], 8, n, 0) : NULL;
    double *tail = awaits ? view(&v, o[5], 8, n, 0) : NULL;
    int64_t *ptr = tail ? view(&v, o[6], 8, n + 1, 0) : NULL, *order = ptr ? view(&v, o[7], 8, k, 0) : NULL;
    double *lat = order ? view(&v, o[8], 8, m, 0) : NULL;
    int64_t *after = lat ? view(&v, o[9], 8, m, 0) : NULL;
    double *op_ns = after ? view(&v, o[10], 8, m, 0) : NULL;
    int64_t *stream = op_ns ? view(&v, o[11], 8, m, 0) : NULL, *producer = stream ? view(&v, o[12], 8, m, 0) : NULL;
    double *op_start = producer ? view(&v, o[13], 8, m, 0) : NULL;
    int64_t *external = op_start ? view(&v, o[14], 8, e, 0) : NULL;
    double *ends = external ? view(&v, o[15], 8, m, 1) : NULL;
    if (!ends) { release(&v); return NULL; }
    double *stream_end = malloc(sizeof(double) * (size_t)(streams > 0 ? streams : 1));
    unsigned char *stream_set = calloc((size_t)(streams > 0 ? streams : 1), 1);
    if (!stream_end || !stream_set) { free(stream_end); free(stream_set); release(&v); return PyErr_NoMemory(); }
    for (Py_ssize_t i = 0; i < m; i++) ends[i] = NAN;
    for (Py_ssize_t s = 0; s < streams; s++) stream_end[s] = -1e30;
    Cost cost = {0.0, 0.0};
    double h = lo; Py_ssize_t ext = 0;
    for (Py_ssize_t c = 0; c < n; c++) {
        cost.credit += profiler + (dropped[c] ? drop : 0.0);
        h += host_time(&cost, gaps[c]);
        if (dropped[c]) continue;
        while (ext < e && op_start[external[ext]] <= h) {   /* other threads' work on the same GPU */
            int64_t j = external[ext++], s = stream[j];
            double begin = stream_set[s] ? fmax(op_start[j], stream_end[s]) : op_start[j];
            ends[j] = begin + op_ns[j]; stream_end[s] = ends[j]; stream_set[s] = 1;
        }
        for (int64_t q = ptr[c]; q < ptr[c + 1]; q++) {
            int64_t j = order[q], s = stream[j];
            double begin = fmax(h + lat[j], stream_end[s] + queued);
            if (producer[j] >= 0) begin = fmax(begin, stream_end[producer[j]]);
            int64_t a = after[j];
            if (a >= 0 && ends[a] == ends[a]) begin = fmax(begin, ends[a]);
            ends[j] = begin + op_ns[j]; stream_end[s] = ends[j]; stream_set[s] = 1;
        }
        double step = host_time(&cost, own[c]);
        int64_t a = awaits[c];
        if (waits[c] && a >= 0) {
            double target = ends[a] == ends[a] ? ends[a] : (stream_set[stream[a]] ? stream_end[stream[a]] : h);
            h = fmax(h + step, target) + host_time(&cost, tail[c]);
        } else {
            h += step;
        }
    }
    h += host_time(&cost, gaps[n]);
    free(stream_end); free(stream_set); release(&v);
    return Py_BuildValue("dd", h, cost.host);
}

static PyMethodDef METHODS[] = {
    {"run", run, METH_VARARGS, "The replay's loop over the calls (analysis/replay/engine.py)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_engine", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__engine(void) { return PyModule_Create(&MODULE); }
