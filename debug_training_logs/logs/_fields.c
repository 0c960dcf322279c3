/* Per-rank aggregation of a run of progress lines, for the evidence scan's sink (optional; see fields.py).
 *
 * progress_run(lines, line_nos, start, time_of) reads lines[start:] (each a str of one hit line of the ``progress``
 * signal and of nothing else) and stops at the first line it cannot answer for exactly as the per-line Python path
 * would: a line whose rank may come from a Ray ``[rank=N] pid=`` prefix, a c10 or glog time (no full date but a '.'
 * and six digits, as every such header has), a rank number of more than 18 digits, or a step time that float()
 * refuses. Colour codes are removed first, as strip_ansi does. Any str kind is read (\d is a Unicode decimal digit and \s Unicode space, as in the regexes). A line's
 * time is its leftmost full date (formats/timestamps.py's FULL_DATE): its text is given to time_of (parse_wall_time)
 * once per distinct text in a row; a line with neither has none. It returns (stop, stats, points, timed_idx,
 * timed_wt):
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

/* One line's code points (any str kind: progress bars draw with block characters such as U+2588). */
typedef struct {
    int kind;
    const void *data;
    Py_ssize_t n;
} Text;

static inline Py_UCS4 at(const Text *t, Py_ssize_t i) { return PyUnicode_READ(t->kind, t->data, i); }

/* What \d, its value and \s are in a str pattern (sre: Py_UNICODE_ISDECIMAL, Py_UNICODE_ISSPACE). */
static inline int is_digit(Py_UCS4 c) { return c < 128 ? (c >= '0' && c <= '9') : Py_UNICODE_ISDECIMAL(c); }
static inline int digit_value(Py_UCS4 c) { return c < 128 ? (int)(c - '0') : Py_UNICODE_TODECIMAL(c); }
static inline int is_space(Py_UCS4 c) {
    return c < 128 ? ((c >= 9 && c <= 13) || (c >= 28 && c <= 32)) : Py_UNICODE_ISSPACE(c);
}

/* The first place at or after ``from`` where the ASCII literal ``lit`` (k chars) starts, or -1. */
static Py_ssize_t find_lit(const Text *t, Py_ssize_t from, const char *lit, Py_ssize_t k) {
    if (from < 0 || t->n - from < k) return -1;
    if (t->kind == PyUnicode_1BYTE_KIND) {
        const unsigned char *s = t->data, *p = s + from, *end = s + t->n - k + 1;
        while (p < end) {
            p = memchr(p, lit[0], (size_t)(end - p));
            if (p == NULL) return -1;
            if (memcmp(p, lit, (size_t)k) == 0) return p - s;
            p++;
        }
        return -1;
    }
    for (Py_ssize_t i = from; i + k <= t->n; i++) {
        Py_ssize_t j = 0;
        while (j < k && at(t, i + j) == (Py_UCS4)(unsigned char)lit[j]) j++;
        if (j == k) return i;
    }
    return -1;
}

static int has_lit_at(const Text *t, Py_ssize_t i, const char *lit, Py_ssize_t k) {
    if (i < 0 || t->n - i < k) return 0;
    for (Py_ssize_t j = 0; j < k; j++)
        if (at(t, i + j) != (Py_UCS4)(unsigned char)lit[j]) return 0;
    return 1;
}

static int digits_at(const Text *t, Py_ssize_t i, Py_ssize_t k) {
    if (i < 0 || t->n - i < k) return 0;
    for (Py_ssize_t j = 0; j < k; j++)
        if (!is_digit(at(t, i + j))) return 0;
    return 1;
}

static int one_of(Py_UCS4 c, const char *set) {
    for (; *set; set++)
        if (c == (Py_UCS4)(unsigned char)*set) return 1;
    return 0;
}

/* formats/timestamps.py's FULL_DATE, leftmost: 20dd[-/]dd[-/]dd[ T_]dd:dd:dd, then [.,] and 1-6 digits if there.
 * 1 and its span [*a, *b), or 0. */
static int full_date(const Text *t, Py_ssize_t *a, Py_ssize_t *b) {
    Py_ssize_t from = 0, i;
    while ((i = find_lit(t, from, "20", 2)) >= 0) {
        from = i + 1;
        if (i + 19 > t->n) return 0;
        if (digits_at(t, i + 2, 2) && one_of(at(t, i + 4), "-/") && digits_at(t, i + 5, 2) &&
            one_of(at(t, i + 7), "-/") && digits_at(t, i + 8, 2) && one_of(at(t, i + 10), " T_") &&
            digits_at(t, i + 11, 2) && at(t, i + 13) == ':' && digits_at(t, i + 14, 2) && at(t, i + 16) == ':' &&
            digits_at(t, i + 17, 2)) {
            Py_ssize_t j = i + 19;
            if (j + 1 < t->n && one_of(at(t, j), ".,") && is_digit(at(t, j + 1))) {
                Py_ssize_t k = j + 1;
                while (k < t->n && k < j + 7 && is_digit(at(t, k))) k++;
                j = k;
            }
            *a = i, *b = j;
            return 1;
        }
    }
    return 0;
}

/* '.' and six digits: every c10 header (nine) and glog header (six) holds it (timestamps.py's _SUBSECONDS). */
static int has_subseconds(const Text *t) {
    Py_ssize_t from = 0, i;
    while ((i = find_lit(t, from, ".", 1)) >= 0) {
        if (digits_at(t, i + 1, 6)) return 1;
        from = i + 1;
    }
    return 0;
}

/* ``line`` without its terminal colour codes, as logs/attribution.py's strip_ansi removes them (every
 * ``\x1b\[[0-9;?]*[A-Za-z]``, left to right): a new reference, or NULL with an exception set. */
static PyObject *strip_ansi(PyObject *line, const Text *t) {
    Py_UCS4 *buf = PyMem_New(Py_UCS4, t->n > 0 ? t->n : 1);
    if (buf == NULL) return PyErr_NoMemory();
    Py_ssize_t m = 0, i = 0;
    while (i < t->n) {
        Py_UCS4 c = at(t, i);
        if (c == 0x1b && i + 1 < t->n && at(t, i + 1) == '[') {
            Py_ssize_t k = i + 2;
            while (k < t->n && ((at(t, k) >= '0' && at(t, k) <= '9') || at(t, k) == ';' || at(t, k) == '?')) k++;
            if (k < t->n && ((at(t, k) >= 'A' && at(t, k) <= 'Z') || (at(t, k) >= 'a' && at(t, k) <= 'z'))) {
                i = k + 1;
                continue;
            }
        }
        buf[m++] = c;
        i++;
    }
    (void)line;
    PyObject *out = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buf, m);
    PyMem_Free(buf);
    return out;
}

/* Digits at i..: their count (up to the first non-digit), the value in *out; -1 beyond 18 digits. */
static Py_ssize_t digits(const Text *t, Py_ssize_t i, long long *out) {
    Py_ssize_t j = i;
    long long v = 0;
    while (j < t->n && is_digit(at(t, j))) {
        if (j - i >= 18) return -1;
        v = v * 10 + digit_value(at(t, j));
        j++;
    }
    *out = v;
    return j - i;
}

/* ``\[rank(\d+)\]`` + ``after`` at its leftmost place: 1 found (*rank), 0 none, -1 too many digits. */
static int rank_tag(const Text *t, char after, long long *rank) {
    Py_ssize_t from = 0, p;
    while ((p = find_lit(t, from, "[rank", 5)) >= 0) {
        Py_ssize_t i = p + 5;
        long long v;
        Py_ssize_t k = digits(t, i, &v);
        if (k < 0) return -1;
        if (k > 0 && i + k + 1 < t->n && at(t, i + k) == ']' && at(t, i + k + 1) == (Py_UCS4)after) {
            *rank = v;
            return 1;
        }
        from = p + 1;
    }
    return 0;
}

/* ``^\s*(?:P\d+ )?(\d+): ``: 1 found (*rank), 0 none, -1 too many digits. */
static int srun_label(const Text *t, long long *rank) {
    Py_ssize_t i = 0;
    long long v;
    while (i < t->n && is_space(at(t, i))) i++;
    if (i < t->n && at(t, i) == 'P') {
        Py_ssize_t k = digits(t, i + 1, &v);
        if (k < 0) return -1;
        if (k > 0 && i + 1 + k < t->n && at(t, i + 1 + k) == ' ')
            i = i + 1 + k + 1;
        else
            return 0; /* without the optional group, \d+ meets the 'P' */
    }
    Py_ssize_t k = digits(t, i, &v);
    if (k < 0) return -1;
    if (k > 0 && i + k + 1 < t->n && at(t, i + k) == ':' && at(t, i + k + 1) == ' ') {
        *rank = v;
        return 1;
    }
    return 0;
}

/* ``^\[<letter or _><word chars, '.', '-'>*?(\d+)\]:`` (torchrun's ``--tee`` prefix, e.g. ``[default3]:``): 1 with
 * *rank = -(local rank + 1), 0 none, -1 too many digits. The trailing digits are the local rank: the file's
 * local-to-global map turns it into a global rank when the file is folded. */
static int local_prefix(const Text *t, long long *rank) {
    if (t->n < 4 || at(t, 0) != '[') return 0;
    Py_UCS4 c0 = at(t, 1);
    if (!((c0 >= 'A' && c0 <= 'Z') || (c0 >= 'a' && c0 <= 'z') || c0 == '_')) return 0;
    Py_ssize_t i = 2;
    while (i < t->n) {
        Py_UCS4 c = at(t, i);
        if (c == ']') break;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || is_digit(c) || c == '_' || c == '.' || c == '-'))
            return 0;
        i++;
    }
    if (i >= t->n - 1 || at(t, i + 1) != ':' || !is_digit(at(t, i - 1))) return 0;
    Py_ssize_t j = i;
    while (j > 1 && is_digit(at(t, j - 1))) j--;
    if (j == 1) return 0; /* the name has a letter before its digits */
    long long v;
    Py_ssize_t k = digits(t, j, &v);
    if (k < 0) return -1;
    *rank = -(v + 1);
    return 1;
}

/* 1 and *rank, or 0 (None), or -1 (defer). A Ray prefix can only give a rank through ``[rank=N]``: a line with
 * ``pid=`` and that is left to the per-line path, as is a line that may state its rank in a trainer's own format
 * (``"rank": N``, ``[rank N/M]``, ``[rank: N]``, ``[RANK N]``, ``rank=N |``, a line opening with ``rank``). */
static int line_rank(const Text *t, long long *rank) {
    int r = rank_tag(t, ':', rank);
    if (r != 0) return r;
    r = rank_tag(t, ' ', rank);
    if (r != 0) return r;
    if (find_lit(t, 0, "pid=", 4) >= 0 && find_lit(t, 0, "[rank=", 6) >= 0) return -1;
    if (find_lit(t, 0, "\"rank\"", 6) >= 0 || find_lit(t, 0, "[rank ", 6) >= 0 || find_lit(t, 0, "[rank:", 6) >= 0 ||
        find_lit(t, 0, "[RANK ", 6) >= 0 || find_lit(t, 0, "rank=", 5) >= 0)
        return -1;
    Py_ssize_t lead = 0;
    while (lead < t->n && is_space(at(t, lead))) lead++;
    if (find_lit(t, lead, "rank", 4) == lead) return -1; /* a ``rankN| `` / ``rank N: `` label opening the line */
    r = local_prefix(t, rank);
    if (r != 0) return r;
    return srun_label(t, rank);
}

static Py_ssize_t value_run(const Text *t, Py_ssize_t i) {
    Py_ssize_t j = i;
    while (j < t->n && (is_digit(at(t, j)) || at(t, j) == '.')) j++;
    return j - i;
}

/* The step time's text [*a, *b): 1 found (*scale), 0 none. */
static int step_text(const Text *t, Py_ssize_t *a, Py_ssize_t *b, double *scale) {
    static const char lit1[] = "elapsed time per iteration (ms): ";
    static const char lit2[] = "train_step_timing";
    const Py_ssize_t k1 = (Py_ssize_t)sizeof(lit1) - 1, k2 = (Py_ssize_t)sizeof(lit2) - 1;
    Py_ssize_t from = 0, p;
    while ((p = find_lit(t, from, lit1, k1)) >= 0) {
        Py_ssize_t i = p + k1, m = value_run(t, i);
        if (m > 0) {
            *a = i, *b = i + m, *scale = 1.0;
            return 1;
        }
        from = p + 1;
    }
    from = 0;
    while ((p = find_lit(t, from, lit2, k2)) >= 0) {
        Py_ssize_t q = p + k2;
        for (int with_unit = 1; with_unit >= 0; with_unit--) {
            Py_ssize_t i = q;
            if (with_unit) {
                if (!has_lit_at(t, q, " in s", 5)) continue;
                i += 5;
            }
            Py_ssize_t j = i;
            while (j < t->n && one_of(at(t, j), "=: ")) j++;
            if (j == i) continue;
            Py_ssize_t m = value_run(t, j);
            if (m > 0) {
                *a = j, *b = j + m, *scale = 1000.0;
                return 1;
            }
        }
        from = p + 1;
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
    PyObject *prev_key = NULL, *prev_wt = NULL; /* the last date text asked about and its answer */
    PyObject *clean = NULL;                     /* the current line without colour codes */
    if (stats == NULL || points == NULL || timed_idx == NULL || timed_wt == NULL) goto fail;
    Py_ssize_t i = start;
    for (; i < total; i++) {
        PyObject *raw_line = PyList_GET_ITEM(lines, i);
        if (!PyUnicode_Check(raw_line)) break;
        Text text = {PyUnicode_KIND(raw_line), PyUnicode_DATA(raw_line), PyUnicode_GET_LENGTH(raw_line)};
        if (find_lit(&text, 0, "\x1b", 1) >= 0) {
            Py_XSETREF(clean, strip_ansi(raw_line, &text));
            if (clean == NULL) goto fail;
            text = (Text){PyUnicode_KIND(clean), PyUnicode_DATA(clean), PyUnicode_GET_LENGTH(clean)};
        } else {
            Py_XSETREF(clean, Py_NewRef(raw_line));
        }
        PyObject *line = clean; /* the text the per-line path reads */
        const Text *t = &text;
        Py_ssize_t da, db;
        int dated = full_date(t, &da, &db);
        if (!dated && has_subseconds(t)) break;
        long long rank = 0;
        int has_rank = line_rank(t, &rank);
        if (has_rank < 0) break;
        PyObject *value = NULL;
        Py_ssize_t a, b;
        double scale;
        if (step_text(t, &a, &b, &scale)) {
            PyObject *txt = PyUnicode_Substring(line, a, b);
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
            PyObject *date = PyUnicode_Substring(line, da, db);
            int same = date != NULL && prev_key != NULL && PyUnicode_Compare(date, prev_key) == 0;
            PyObject *got = date == NULL || same ? NULL : PyObject_CallOneArg(time_of, date);
            if (date == NULL || (!same && got == NULL)) {
                Py_XDECREF(date);
                Py_XDECREF(value);
                goto fail;
            }
            if (same) {
                Py_DECREF(date);
            } else {
                Py_XSETREF(prev_key, date);
                Py_XSETREF(prev_wt, got);
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
    Py_XDECREF(clean);
    Py_XDECREF(prev_key);
    Py_XDECREF(prev_wt);
    return Py_BuildValue("(nNNNN)", i, stats, points, timed_idx, timed_wt);
fail:
    Py_XDECREF(clean);
    Py_XDECREF(prev_key);
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
