/* Per-rank aggregation of a run of progress lines, for the evidence scan's sink (optional; see fields.py).
 *
 * progress_run(lines, line_nos, start, time_of) reads lines[start:] (each a str of one hit line of the ``progress``
 * signal and of nothing else) and stops at the first line it cannot answer for exactly as the per-line Python path
 * would: a line that is not pure ASCII, holds an ANSI escape (0x1b), a Ray ``pid=`` prefix, a c10 or glog time (no
 * full date but a '.' and six digits, as every such header has), a rank number of more than 18 digits, or a step
 * time that float() refuses. A line's time is its leftmost full date (formats/timestamps.py's FULL_DATE): its text
 * is given to time_of (parse_wall_time) once per distinct text in a row; a line with neither has none. It returns
 * (stop, stats, points, timed_idx, timed_wt):
 *
 *   stats:     rank -> [first index, last index, count] over lines[start:stop], in order of each rank's first line;
 *   points:    rank -> [(line_no, time or None, step_ms), ...], the step times in line order (first rank first);
 *   timed_idx: the indices of the lines with a time, in order; timed_wt: their times.
 *
 * A rank is what logs/attribution.py's rank_and_source_plain gives on such a line: ``[rankN]:`` anywhere (the
 * leftmost), else ``[rankN] `` anywhere, else an srun label ``^\s*(?:P\d+ )?N: ``, else None. The step time is the
 * leftmost ``elapsed time per iteration (ms): X`` (ms), else the leftmost ``train_step_timing(?: in s)?[=: ]+X``
 * (seconds, times 1000), X a run of digits and dots; as analysis/evidence.py's _STEP_MS regexes find it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* Python's str.isspace() on ASCII: what \s matches in a str pattern. */
static int is_space(unsigned char c) { return (c >= 9 && c <= 13) || (c >= 28 && c <= 32); }

static const unsigned char *find_lit(const unsigned char *s, Py_ssize_t n, Py_ssize_t from, const char *lit,
                                     Py_ssize_t k) {
    if (from < 0 || n - from < k) return NULL;
    const unsigned char *p = s + from, *end = s + n - k + 1;
    while (p < end) {
        p = memchr(p, lit[0], (size_t)(end - p));
        if (p == NULL) return NULL;
        if (memcmp(p, lit, (size_t)k) == 0) return p;
        p++;
    }
    return NULL;
}

static int is_digits(const unsigned char *s, Py_ssize_t k) {
    for (Py_ssize_t i = 0; i < k; i++)
        if (!is_digit(s[i])) return 0;
    return 1;
}

/* formats/timestamps.py's FULL_DATE, leftmost: 20dd[-/]dd[-/]dd[ T_]dd:dd:dd, then [.,] and 1-6 digits if there.
 * 1 and its span s[*a..*b), or 0. */
static int full_date(const unsigned char *s, Py_ssize_t n, Py_ssize_t *a, Py_ssize_t *b) {
    for (Py_ssize_t i = 0; i + 19 <= n; i++) {
        const unsigned char *p = s + i;
        if (p[0] == '2' && p[1] == '0' && is_digits(p + 2, 2) && (p[4] == '-' || p[4] == '/') && is_digits(p + 5, 2) &&
            (p[7] == '-' || p[7] == '/') && is_digits(p + 8, 2) && (p[10] == ' ' || p[10] == 'T' || p[10] == '_') &&
            is_digits(p + 11, 2) && p[13] == ':' && is_digits(p + 14, 2) && p[16] == ':' && is_digits(p + 17, 2)) {
            Py_ssize_t j = i + 19;
            if (j + 1 < n && (s[j] == '.' || s[j] == ',') && is_digit(s[j + 1])) {
                Py_ssize_t k = j + 1;
                while (k < n && k < j + 7 && is_digit(s[k])) k++;
                j = k;
            }
            *a = i, *b = j;
            return 1;
        }
    }
    return 0;
}

/* '.' and six digits: every c10 header (nine) and glog header (six) holds it (timestamps.py's _SUBSECONDS). */
static int has_subseconds(const unsigned char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i + 7 <= n; i++)
        if (s[i] == '.' && is_digits(s + i + 1, 6)) return 1;
    return 0;
}

/* 1 when the line must go the per-line way whatever its time (see the header). */
static int must_defer(const unsigned char *s, Py_ssize_t n) {
    if (memchr(s, 0x1b, (size_t)n) != NULL) return 1;
    return find_lit(s, n, 0, "pid=", 4) != NULL;
}

/* Digits at s[i..]: their count (up to the first non-digit), the value in *out; -1 beyond 18 digits. */
static Py_ssize_t digits(const unsigned char *s, Py_ssize_t n, Py_ssize_t i, long long *out) {
    Py_ssize_t j = i;
    long long v = 0;
    while (j < n && is_digit(s[j])) {
        if (j - i >= 18) return -1;
        v = v * 10 + (s[j] - '0');
        j++;
    }
    *out = v;
    return j - i;
}

/* ``\[rank(\d+)\]`` + ``after`` at its leftmost place: 1 found (*rank), 0 none, -1 too many digits. */
static int rank_tag(const unsigned char *s, Py_ssize_t n, char after, long long *rank) {
    const unsigned char *p;
    Py_ssize_t from = 0;
    while ((p = find_lit(s, n, from, "[rank", 5)) != NULL) {
        Py_ssize_t i = (p - s) + 5;
        long long v;
        Py_ssize_t k = digits(s, n, i, &v);
        if (k < 0) return -1;
        if (k > 0 && i + k + 1 < n && s[i + k] == ']' && s[i + k + 1] == (unsigned char)after) {
            *rank = v;
            return 1;
        }
        from = (p - s) + 1;
    }
    return 0;
}

/* ``^\s*(?:P\d+ )?(\d+): ``: 1 found (*rank), 0 none, -1 too many digits. */
static int srun_label(const unsigned char *s, Py_ssize_t n, long long *rank) {
    Py_ssize_t i = 0;
    long long v;
    while (i < n && is_space(s[i])) i++;
    if (i < n && s[i] == 'P') {
        Py_ssize_t k = digits(s, n, i + 1, &v);
        if (k < 0) return -1;
        if (k > 0 && i + 1 + k < n && s[i + 1 + k] == ' ')
            i = i + 1 + k + 1;
        else
            return 0; /* without the optional group, \d+ meets the 'P' */
    }
    Py_ssize_t k = digits(s, n, i, &v);
    if (k < 0) return -1;
    if (k > 0 && i + k + 1 < n && s[i + k] == ':' && s[i + k + 1] == ' ') {
        *rank = v;
        return 1;
    }
    return 0;
}

/* 1 and *rank, or 0 (None), or -1 (defer). */
static int line_rank(const unsigned char *s, Py_ssize_t n, long long *rank) {
    int r = rank_tag(s, n, ':', rank);
    if (r != 0) return r;
    r = rank_tag(s, n, ' ', rank);
    if (r != 0) return r;
    return srun_label(s, n, rank);
}

static Py_ssize_t value_run(const unsigned char *s, Py_ssize_t n, Py_ssize_t i) {
    Py_ssize_t j = i;
    while (j < n && (is_digit(s[j]) || s[j] == '.')) j++;
    return j - i;
}

/* The step time's text s[*a..*b): 1 found (*scale), 0 none. */
static int step_text(const unsigned char *s, Py_ssize_t n, Py_ssize_t *a, Py_ssize_t *b, double *scale) {
    static const char lit1[] = "elapsed time per iteration (ms): ";
    static const char lit2[] = "train_step_timing";
    const Py_ssize_t k1 = (Py_ssize_t)sizeof(lit1) - 1, k2 = (Py_ssize_t)sizeof(lit2) - 1;
    const unsigned char *p;
    Py_ssize_t from = 0;
    while ((p = find_lit(s, n, from, lit1, k1)) != NULL) {
        Py_ssize_t i = (p - s) + k1, m = value_run(s, n, i);
        if (m > 0) {
            *a = i, *b = i + m, *scale = 1.0;
            return 1;
        }
        from = (p - s) + 1;
    }
    from = 0;
    while ((p = find_lit(s, n, from, lit2, k2)) != NULL) {
        Py_ssize_t q = (p - s) + k2;
        for (int with_unit = 1; with_unit >= 0; with_unit--) {
            Py_ssize_t i = q;
            if (with_unit) {
                if (n - q < 5 || memcmp(s + q, " in s", 5) != 0) continue;
                i += 5;
            }
            Py_ssize_t j = i;
            while (j < n && (s[j] == '=' || s[j] == ':' || s[j] == ' ')) j++;
            if (j == i) continue;
            Py_ssize_t m = value_run(s, n, j);
            if (m > 0) {
                *a = j, *b = j + m, *scale = 1000.0;
                return 1;
            }
        }
        from = (p - s) + 1;
    }
    return 0;
}

static PyObject *progress_run(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *lines, *nos, *time_of;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!O!nO", &PyList_Type, &lines, &PyList_Type, &nos, &start, &time_of)) return NULL;
    Py_ssize_t total = PyList_GET_SIZE(lines);
    if (PyList_GET_SIZE(nos) != total) {
        PyErr_SetString(PyExc_ValueError, "lines and line_nos differ in length");
        return NULL;
    }
    if (start < 0 || start > total) {
        PyErr_SetString(PyExc_IndexError, "start out of range");
        return NULL;
    }
    PyObject *stats = PyDict_New(), *points = PyDict_New(), *timed_idx = PyList_New(0), *timed_wt = PyList_New(0);
    unsigned char prev_key[32];
    Py_ssize_t prev_len = -1;
    PyObject *prev_wt = NULL;
    if (stats == NULL || points == NULL || timed_idx == NULL || timed_wt == NULL) goto fail;
    Py_ssize_t i = start;
    for (; i < total; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyUnicode_Check(line) || !PyUnicode_IS_ASCII(line)) break;
        const unsigned char *s = PyUnicode_1BYTE_DATA(line);
        Py_ssize_t n = PyUnicode_GET_LENGTH(line);
        if (must_defer(s, n)) break;
        Py_ssize_t da, db;
        int dated = full_date(s, n, &da, &db);
        if (!dated && has_subseconds(s, n)) break;
        long long rank = 0;
        int has_rank = line_rank(s, n, &rank);
        if (has_rank < 0) break;
        PyObject *value = NULL;
        Py_ssize_t a, b;
        double scale;
        if (step_text(s, n, &a, &b, &scale)) {
            PyObject *txt = PyUnicode_FromStringAndSize((const char *)s + a, b - a);
            if (txt == NULL) goto fail;
            PyObject *f = PyFloat_FromString(txt);
            Py_DECREF(txt);
            if (f == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_ValueError)) goto fail;
                PyErr_Clear(); /* float() refuses it: the per-line path decides (it leaves the point out) */
                break;
            }
            value = PyFloat_FromDouble(PyFloat_AS_DOUBLE(f) * scale);
            Py_DECREF(f);
            if (value == NULL) goto fail;
        }
        PyObject *wt = Py_None; /* borrowed: prev_wt holds it */
        if (dated) {
            if (prev_len != db - da || memcmp(prev_key, s + da, (size_t)(db - da)) != 0) {
                PyObject *key = PyUnicode_FromStringAndSize((const char *)s + da, db - da);
                PyObject *got = key == NULL ? NULL : PyObject_CallOneArg(time_of, key);
                Py_XDECREF(key);
                if (got == NULL) {
                    Py_XDECREF(value);
                    goto fail;
                }
                Py_XSETREF(prev_wt, got);
                memcpy(prev_key, s + da, (size_t)(db - da)); /* a full date with its fraction: at most 26 bytes */
                prev_len = db - da;
            }
            wt = prev_wt;
        }
        PyObject *key = has_rank ? PyLong_FromLongLong(rank) : Py_NewRef(Py_None);
        if (key == NULL) {
            Py_XDECREF(value);
            goto fail;
        }
        PyObject *idx = PyLong_FromSsize_t(i);
        PyObject *st = idx == NULL ? NULL : PyDict_GetItemWithError(stats, key);
        int bad = idx == NULL || (st == NULL && PyErr_Occurred());
        if (!bad && st == NULL) {
            PyObject *one = PyLong_FromLong(1);
            st = one == NULL ? NULL : PyList_New(3);
            if (st == NULL) {
                Py_XDECREF(one);
                bad = 1;
            } else {
                PyList_SET_ITEM(st, 0, Py_NewRef(idx));
                PyList_SET_ITEM(st, 1, Py_NewRef(idx));
                PyList_SET_ITEM(st, 2, one);
                bad = PyDict_SetItem(stats, key, st) < 0;
                Py_DECREF(st);
            }
        } else if (!bad) {
            PyObject *count = PyLong_FromSsize_t(PyLong_AsSsize_t(PyList_GET_ITEM(st, 2)) + 1);
            if (count == NULL) {
                bad = 1;
            } else {
                PyList_SetItem(st, 1, Py_NewRef(idx));
                PyList_SetItem(st, 2, count);
            }
        }
        if (!bad && wt != Py_None)
            bad = PyList_Append(timed_idx, idx) < 0 || PyList_Append(timed_wt, wt) < 0;
        Py_XDECREF(idx);
        if (!bad && value != NULL) {
            PyObject *pt = PyTuple_Pack(3, PyList_GET_ITEM(nos, i), wt, value);
            PyObject *series = pt == NULL ? NULL : PyDict_GetItemWithError(points, key);
            if (pt == NULL || (series == NULL && PyErr_Occurred())) {
                bad = 1;
            } else if (series == NULL) {
                series = PyList_New(0);
                bad = series == NULL || PyList_Append(series, pt) < 0 || PyDict_SetItem(points, key, series) < 0;
                Py_XDECREF(series);
            } else {
                bad = PyList_Append(series, pt) < 0;
            }
            Py_XDECREF(pt);
        }
        Py_XDECREF(value);
        Py_DECREF(key);
        if (bad) goto fail;
    }
    Py_XDECREF(prev_wt);
    return Py_BuildValue("(nNNNN)", i, stats, points, timed_idx, timed_wt);
fail:
    Py_XDECREF(prev_wt);
    Py_XDECREF(stats);
    Py_XDECREF(points);
    Py_XDECREF(timed_idx);
    Py_XDECREF(timed_wt);
    return NULL;
}

static PyMethodDef methods[] = {
    {"progress_run", progress_run, METH_VARARGS,
     "progress_run(lines, line_nos, start, time_of) -> (stop, stats, points, timed_idx, timed_wt): see the C source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fields",
                                    "Per-rank aggregation of progress lines (optional; see fields.py).", -1, methods};

PyMODINIT_FUNC PyInit__fields(void) { return PyModule_Create(&module); }
