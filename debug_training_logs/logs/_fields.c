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


/* ------------------------------------------------------------------------------------------------------------------
 * nccl_line(line, ctx): formats/torch_nccl.py's parse_line for the canonical torch 2.4+ line, or None.
 *
 * It answers only for an ASCII line (no colour code, no carriage return) that is, from its first character to its
 * end, ``[rankN]:[Smmdd HH:MM:SS.fffffffff src:line]`` + 1 or 2 PG prefixes (``[Rank N]``
 * or ``[PG ID N PG GUID g(desc) Rank N]``, g and desc of [A-Za-z0-9_-]) + one known message; a message that may be
 * followed by free text (the dump signal's advice, the teardown's explanation) answers only when that text holds
 * none of the words that gate the Python parser's earlier families. Anything else is None: the caller runs the
 * Python parser, whose answer this must equal (tests/test_nccl_native.py runs both over a matrix and a fuzz).
 * Numbers longer than 18 digits are left to Python. Literal blanks in a message match any run of whitespace,
 * including none, as the Python regexes' \s* do.
 *
 * ctx: (new_header, new_parsed, new_timeout, new_status, new_dump, new_first, new_teardown, new_fatal,
 *       new_terminated, new_observed, new_pg, new_work, pg_seen, work_seen, timeout_seen, new_child_rank,
 *       new_child_exit) -- the positional
 *       constructors and the memo dicts of formats/torch_nccl.py (shared, so objects are shared as there).
 * ------------------------------------------------------------------------------------------------------------------ */

enum { C_HEADER, C_PARSED, C_TIMEOUT, C_STATUS, C_DUMP, C_FIRST, C_TEARDOWN, C_FATAL, C_TERMINATED, C_OBSERVED, C_PG,
       C_WORK, C_PG_SEEN, C_WORK_SEEN, C_TIMEOUT_SEEN, C_CHILD_RANK, C_CHILD_EXIT, C_N };

typedef struct {
    const char *s;
    Py_ssize_t n;
} Ascii;

static inline int a_space(char c) { return (c >= 9 && c <= 13) || (c >= 28 && c <= 32); }
static inline int a_digit(char c) { return c >= '0' && c <= '9'; }
static inline int a_word(char c) {
    return a_digit(c) || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == '-';
}

/* ``lit`` at i, each blank of lit matching any run of whitespace (none too); the end, or -1. */
static Py_ssize_t lit_ws(const Ascii *t, Py_ssize_t i, const char *lit) {
    if (i < 0) return -1;
    for (; *lit; lit++) {
        if (*lit == ' ') {
            while (i < t->n && a_space(t->s[i])) i++;
        } else {
            if (i >= t->n || t->s[i] != *lit) return -1;
            i++;
        }
    }
    return i;
}

/* An exact literal at i; the end, or -1. */
static Py_ssize_t lit_at(const Ascii *t, Py_ssize_t i, const char *lit) {
    Py_ssize_t k = (Py_ssize_t)strlen(lit);
    if (i < 0 || t->n - i < k || memcmp(t->s + i, lit, (size_t)k) != 0) return -1;
    return i + k;
}

/* 1..18 digits at i (after a '-' when neg is allowed); the end, or -1. */
static Py_ssize_t num_at(const Ascii *t, Py_ssize_t i, int neg, long long *out) {
    int minus = 0;
    if (i < 0) return -1;
    if (neg && i < t->n && t->s[i] == '-') {
        minus = 1;
        i++;
    }
    Py_ssize_t b = i;
    long long v = 0;
    while (i < t->n && a_digit(t->s[i])) {
        if (i - b >= 18) return -1;
        v = v * 10 + (t->s[i] - '0');
        i++;
    }
    if (i == b) return -1;
    *out = minus ? -v : v;
    return i;
}

static Py_ssize_t spaces(const Ascii *t, Py_ssize_t i) {
    while (i < t->n && a_space(t->s[i])) i++;
    return i;
}

/* Words that gate the Python parser's families (and the child-failure rows): free text holding one is left to it. */
static const char *const GATES[] = {"operations", "inconsistency", "terminated", "aborted", "WorkNCCL", "blocking",
                                    "sequence", "either", "Timeout", "Received", "signal", "stuck", "eartbeat",
                                    "monitor", "Terminating", "detected", "local_rank", "exitcode", "Signal",
                                    "what():", NULL};

/* Whether t[a:b] holds a gate word (from the ``skip``-th on: the teardown's own words are the first two). One pass:
 * only the characters a gate word starts with are compared further. */
static int gated_from(const Ascii *t, Py_ssize_t a, Py_ssize_t b, int skip) {
    static signed char by_start[128][4]; /* the gates each character starts, -1 ended */
    static Py_ssize_t len[32];
    static int ready = 0;
    if (!ready) {
        memset(by_start, -1, sizeof by_start);
        for (int g = 0; GATES[g]; g++) {
            unsigned char c = (unsigned char)GATES[g][0];
            int k = 0;
            while (by_start[c][k] >= 0) k++;
            by_start[c][k] = (signed char)g;
            len[g] = (Py_ssize_t)strlen(GATES[g]);
        }
        ready = 1;
    }
    for (Py_ssize_t i = a; i + 1 < b; i++) {
        unsigned char c = (unsigned char)t->s[i];
        if (c >= 128 || by_start[c][0] < 0) continue;
        for (int k = 0; k < 4 && by_start[c][k] >= 0; k++) {
            int g = by_start[c][k];
            if (g < skip || GATES[g][1] != t->s[i + 1]) continue;
            if (i + len[g] <= b && memcmp(t->s + i, GATES[g], (size_t)len[g]) == 0) return 1;
        }
    }
    return 0;
}

static int gated(const Ascii *t, Py_ssize_t a, Py_ssize_t b) { return gated_from(t, a, b, 0); }

static int at_end(const Ascii *t, Py_ssize_t i) { return i == t->n; }

/* A memo lookup as the Python side does it (key -> object; cleared when full); a new reference or NULL (error). */
static PyObject *memo_get(PyObject *memo, PyObject *key) {
    PyObject *got = PyDict_GetItemWithError(memo, key);
    if (got != NULL) Py_INCREF(got);
    return got;
}

static int memo_put(PyObject *memo, PyObject *key, PyObject *value, Py_ssize_t max) {
    if (PyDict_GET_SIZE(memo) >= max) PyDict_Clear(memo);
    return PyDict_SetItem(memo, key, value);
}

typedef struct {
    Py_ssize_t a, b; /* the prefix text */
    int style_rank;  /* [Rank N] */
    Py_ssize_t id_a, id_b, guid_a, guid_b, desc_a, desc_b;
    long long rank;
} Pfx;

/* One PG prefix at i: the end, or -1. */
static Py_ssize_t pg_at(const Ascii *t, Py_ssize_t i, Pfx *p) {
    Py_ssize_t j;
    p->a = i;
    if ((j = lit_at(t, i, "[Rank ")) >= 0) {
        p->style_rank = 1;
        j = num_at(t, j, 0, &p->rank);
        j = lit_at(t, j, "]");
        p->b = j;
        return j;
    }
    long long id;
    p->style_rank = 0;
    if ((j = lit_at(t, i, "[PG ID ")) < 0) return -1;
    p->id_a = j;
    if ((j = num_at(t, j, 0, &id)) < 0) return -1;
    p->id_b = j;
    if ((j = lit_at(t, j, " PG GUID ")) < 0) return -1;
    p->guid_a = j;
    while (j < t->n && a_word(t->s[j])) j++;
    p->guid_b = j;
    if (j == p->guid_a) return -1;
    p->desc_a = p->desc_b = -1;
    if (j < t->n && t->s[j] == '(') {
        p->desc_a = ++j;
        while (j < t->n && a_word(t->s[j])) j++;
        p->desc_b = j;
        if ((j = lit_at(t, j, ")")) < 0) return -1;
    }
    if ((j = lit_at(t, j, " Rank ")) < 0) return -1;
    if ((j = num_at(t, j, 0, &p->rank)) < 0) return -1;
    if ((j = lit_at(t, j, "]")) < 0) return -1;
    /* "Rank" inside the GUID or desc could make the lazy regex split it elsewhere: leave such lines to Python */
    if (gated(t, p->guid_a, j - 1)) return -1;
    for (Py_ssize_t k = p->guid_a; k + 4 <= p->guid_b; k++)
        if (memcmp(t->s + k, "Rank", 4) == 0) return -1;
    if (p->desc_a >= 0)
        for (Py_ssize_t k = p->desc_a; k + 4 <= p->desc_b; k++)
            if (memcmp(t->s + k, "Rank", 4) == 0) return -1;
    p->b = j;
    return j;
}

static PyObject *sub(const Ascii *t, Py_ssize_t a, Py_ssize_t b) { return PyUnicode_FromStringAndSize(t->s + a, b - a); }

/* The PGPrefix of p (shared through pg_seen, keyed by its text as _pg_from does). */
static PyObject *pg_object(const Ascii *t, const Pfx *p, PyObject *const *ctx) {
    PyObject *key = sub(t, p->a, p->b), *got = NULL;
    if (key == NULL) return NULL;
    got = memo_get(ctx[C_PG_SEEN], key);
    if (got != NULL || PyErr_Occurred()) goto done;
    PyObject *rank = PyLong_FromLongLong(p->rank);
    if (rank == NULL) goto done;
    if (p->style_rank) {
        got = PyObject_CallFunction(ctx[C_PG], "sOOOO", "rank", Py_None, Py_None, Py_None, rank);
    } else {
        PyObject *id = sub(t, p->id_a, p->id_b), *guid = sub(t, p->guid_a, p->guid_b);
        PyObject *desc = (p->desc_a >= 0 && p->desc_b > p->desc_a) ? sub(t, p->desc_a, p->desc_b) : Py_NewRef(Py_None);
        if (id != NULL && guid != NULL && desc != NULL)
            got = PyObject_CallFunction(ctx[C_PG], "sOOOO", "guid", id, guid, desc, rank);
        Py_XDECREF(id);
        Py_XDECREF(guid);
        Py_XDECREF(desc);
    }
    Py_DECREF(rank);
    if (got != NULL && memo_put(ctx[C_PG_SEEN], key, got, 4096) < 0) Py_CLEAR(got);
done:
    Py_DECREF(key);
    return got;
}

/* "WorkNCCL(SeqNum=S, OpType=OP, NumelIn=I, NumelOut=O, Timeout(ms)=T)" at i: its end (after ')'), or -1. */
static Py_ssize_t work_at(const Ascii *t, Py_ssize_t i, Py_ssize_t *wa, Py_ssize_t *wb, long long v[4],
                          Py_ssize_t *op_a, Py_ssize_t *op_b) {
    Py_ssize_t j = lit_at(t, i, "WorkNCCL(");
    *wa = j;
    if ((j = lit_at(t, j, "SeqNum=")) < 0 || (j = num_at(t, j, 0, &v[0])) < 0) return -1;
    if ((j = lit_at(t, j, ", OpType=")) < 0) return -1;
    *op_a = j;
    while (j < t->n && t->s[j] >= 'A' && t->s[j] <= 'Z') j++; /* [A-Z_]+ */
    while (j < t->n && ((t->s[j] >= 'A' && t->s[j] <= 'Z') || t->s[j] == '_')) j++;
    *op_b = j;
    if (j == *op_a) return -1;
    if ((j = lit_at(t, j, ", NumelIn=")) < 0 || (j = num_at(t, j, 1, &v[1])) < 0) return -1;
    if ((j = lit_at(t, j, ", NumelOut=")) < 0 || (j = num_at(t, j, 1, &v[2])) < 0) return -1;
    if ((j = lit_at(t, j, ", Timeout(ms)=")) < 0 || (j = num_at(t, j, 0, &v[3])) < 0) return -1;
    *wb = j;
    return lit_at(t, j, ")");
}

/* "[Rank N] Watchdog caught collective operation timeout: WorkNCCL(...) ran for N milliseconds before timing out."
 * at i, to the end of the line: the WatchdogTimeout (shared through timeout_seen and work_seen), None when the text
 * is not that, NULL on error. */
static PyObject *timeout_at(const Ascii *t, Py_ssize_t i, PyObject *const *ctx) {
    Pfx p;
    Py_ssize_t j = pg_at(t, i, &p), wa, wb, op_a, op_b;
    long long v[4], ran;
    if (j < 0 || !p.style_rank) Py_RETURN_NONE;
    j = lit_at(t, j, " Watchdog caught collective operation timeout: ");
    if (j < 0 || (j = work_at(t, j, &wa, &wb, v, &op_a, &op_b)) < 0) Py_RETURN_NONE;
    if ((j = lit_at(t, j, " ran for ")) < 0 || (j = num_at(t, j, 0, &ran)) < 0) Py_RETURN_NONE;
    if ((j = lit_at(t, j, " milliseconds before timing out.")) < 0 || !at_end(t, j)) Py_RETURN_NONE;
    PyObject *rest = sub(t, i, t->n), *got = NULL, *work = NULL, *wkey = NULL;
    if (rest == NULL) return NULL;
    got = memo_get(ctx[C_TIMEOUT_SEEN], rest);
    if (got != NULL || PyErr_Occurred()) goto done;
    if ((wkey = sub(t, wa, wb)) == NULL) goto done;
    work = memo_get(ctx[C_WORK_SEEN], wkey);
    if (work == NULL && !PyErr_Occurred()) {
        PyObject *op = sub(t, op_a, op_b);
        if (op != NULL)
            work = PyObject_CallFunction(ctx[C_WORK], "LOLLOL", v[0], op, v[1], v[2], Py_None, v[3]);
        Py_XDECREF(op);
        if (work != NULL && memo_put(ctx[C_WORK_SEEN], wkey, work, 4096) < 0) Py_CLEAR(work);
    }
    if (work == NULL) goto done;
    if (work == Py_None) { /* cannot be: the Python side found no fields in this text */
        Py_DECREF(work);
        got = Py_NewRef(Py_None);
        goto done;
    }
    got = PyObject_CallFunction(ctx[C_TIMEOUT], "OLLOO", work, ran, p.rank, Py_None, Py_False);
    if (got != NULL && t->n - i <= 1024 && memo_put(ctx[C_TIMEOUT_SEEN], rest, got, 256) < 0) Py_CLEAR(got);
done:
    Py_XDECREF(work);
    Py_XDECREF(wkey);
    Py_DECREF(rest);
    return got;
}

static PyObject *S_FAILURE, *S_TIMEOUT_AT, *S_LOCAL, *S_REMOTE, *S_25, *S_27, *S_SOME, *S_TAKE,
    *S_COLL, *S_HANG, *S_PROCESS, *S_NCCL, *S_STYLE;

/* "... watchdog thread terminated with exception: <timeout>" with the timeout at j: the teardown event of that
 * wording (``S_PROCESS`` or ``S_NCCL``) holding the WatchdogTimeout, None when the rest is not one, NULL on error. */
static PyObject *terminated_at(const Ascii *t, Py_ssize_t j, PyObject *wording, PyObject *last, PyObject *const *ctx) {
    PyObject *emb = timeout_at(t, j, ctx), *got;
    if (emb == NULL || emb == Py_None) return emb;
    got = PyObject_CallFunction(ctx[C_TERMINATED], "OOOO", wording, emb, last, Py_False);
    Py_DECREF(emb);
    return got;
}

/* The event of the message at m (after the PG prefixes), None, or NULL on error. ``first``/``last`` are the prefixes'
 * objects (borrowed; None when there is none). */
static PyObject *message(const Ascii *t, Py_ssize_t m, Py_ssize_t pfx_a, PyObject *first, PyObject *last,
                         int last_is_rank, PyObject *const *ctx) {
    Py_ssize_t j;
    long long a, b, c;
    switch (t->s[m]) {
    case 'W':
        /* after one [Rank N] only: a PG-style prefix (2.14) or two prefixes are left to Python */
        if (last_is_rank && first == last) return timeout_at(t, pfx_a, ctx);
        break;
    case 'P':
        if ((j = lit_ws(t, lit_at(t, m, "Process group "), "watchdog thread terminated with exception: ")) >= 0)
            return terminated_at(t, j, S_PROCESS, last, ctx);
        break;
    case 'N':
        if ((j = lit_ws(t, m, "NCCL watchdog thread terminated with exception: ")) >= 0)
            return terminated_at(t, j, S_NCCL, last, ctx);
        break;
    case 'f':
        j = lit_ws(t, m, "failure detected by watchdog at work sequence id: ");
        if ((j = num_at(t, j, 1, &a)) < 0) break;
        if ((j = lit_ws(t, j, " PG status: last enqueued work: ")) < 0 || (j = num_at(t, j, 1, &b)) < 0) break;
        if ((j = lit_ws(t, j, ", last completed work: ")) < 0 || (j = num_at(t, j, 1, &c)) < 0) break;
        if (!at_end(t, j)) break;
        return PyObject_CallFunction(ctx[C_STATUS], "OLLLO", S_FAILURE, a, b, c, last);
    case 'T':
        if ((j = lit_ws(t, m, "Terminating the process after attempting to dump debug info, due to ")) >= 0) {
            Py_ssize_t k;
            PyObject *why = NULL;
            if ((k = lit_at(t, j, "collective timeout or exception.")) >= 0) why = S_COLL;
            else if ((k = lit_at(t, j, "ProcessGroupNCCL watchdog hang.")) >= 0) why = S_HANG;
            if (why == NULL || !at_end(t, k)) break;
            return PyObject_CallFunction(ctx[C_FATAL], "OO", why, first);
        }
        j = lit_ws(t, m, "Timeout at NCCL work: ");
        if ((j = num_at(t, j, 1, &a)) < 0) break;
        if ((j = lit_ws(t, j, ", last enqueued NCCL work: ")) < 0 || (j = num_at(t, j, 1, &b)) < 0) break;
        if ((j = lit_ws(t, j, ", last completed NCCL work: ")) < 0 || (j = num_at(t, j, 1, &c)) < 0) break;
        if ((j = lit_at(t, j, ".")) < 0 || !at_end(t, j)) break;
        return PyObject_CallFunction(ctx[C_STATUS], "OLLLO", S_TIMEOUT_AT, a, b, c, last);
    case 'R': {
        long long r = 0;
        int remote = 0;
        if ((j = lit_ws(t, m, "Received a dump signal due to a collective timeout from ")) < 0) break;
        Py_ssize_t k = lit_ws(t, j, "this local rank and we will try our best to dump the debug info. ");
        if (k < 0) {
            if ((k = lit_ws(t, j, "rank ")) < 0 || (k = num_at(t, k, 1, &r)) < 0) break;
            if ((k = lit_ws(t, k, " and we will try our best to dump the debug info. ")) < 0) break;
            remote = 1;
        }
        if ((k = lit_ws(t, k, "Last enqueued NCCL work: ")) < 0 || (k = num_at(t, k, 1, &b)) < 0) break;
        if ((k = lit_ws(t, k, ", last completed NCCL work: ")) < 0 || (k = num_at(t, k, 1, &c)) < 0) break;
        if ((k = lit_at(t, k, ".")) < 0 || gated(t, k, t->n)) break;
        if (remote)
            return PyObject_CallFunction(ctx[C_DUMP], "OLLLOO", S_REMOTE, r, b, c, S_25, last);
        return PyObject_CallFunction(ctx[C_DUMP], "OOLLOO", S_LOCAL, Py_None, b, c, S_25, last);
    }
    case 'F':
        if ((j = lit_ws(t, m, "First PG on this rank to signal dumping.")) < 0 || !at_end(t, j)) break;
        return PyObject_CallFunction(ctx[C_FIRST], "OO", S_27, last);
    case 'O':
        if ((j = lit_ws(t, m, "Observed flight recorder dump signal from another rank via TCPStore.")) < 0) break;
        if (!at_end(t, j)) break;
        return PyObject_CallFunction(ctx[C_OBSERVED], "OO", S_25, last);
    case 'S':
        if ((j = lit_ws(t, m, "Some NCCL operations have failed or timed out.")) < 0 || gated_from(t, j, t->n, 2)) break;
        return PyObject_CallFunction(ctx[C_TEARDOWN], "OO", S_SOME, last);
    default:
        break;
    }
    if (t->s[m] == 'T' && (j = lit_ws(t, m, "To avoid data inconsistency, we are taking the entire process down.")) >= 0 &&
        !gated(t, j, t->n))
        return PyObject_CallFunction(ctx[C_TEARDOWN], "OO", S_TAKE, last);
    Py_RETURN_NONE;
}

/* The headerless lines: the ChildFailedError rows ``  rank      : 3 (local_rank: 3)`` and ``  exitcode  : -6 (pid:
 * 123)`` (with `` (SIGABRT)`` from 2.12), and std::terminate's ``  what():  [PG ...] Process group watchdog thread
 * terminated with exception: [Rank N] Watchdog caught ...`` copy. */
static PyObject *headerless(const Ascii *t, PyObject *const *ctx) {
    Py_ssize_t i = spaces(t, 0), j, k;
    long long a, b;
    if ((j = lit_at(t, i, "rank")) >= 0 && j < t->n && a_space(t->s[j])) {
        if ((j = lit_at(t, spaces(t, j), ": ")) < 0 || (j = num_at(t, j, 0, &a)) < 0) Py_RETURN_NONE;
        if ((j = lit_at(t, j, " (local_rank: ")) < 0 || (j = num_at(t, j, 0, &b)) < 0) Py_RETURN_NONE;
        if ((j = lit_at(t, j, ")")) < 0 || !at_end(t, j)) Py_RETURN_NONE;
        PyObject *ev = PyObject_CallFunction(ctx[C_CHILD_RANK], "LL", a, b), *got;
        if (ev == NULL) return NULL;
        got = PyObject_CallFunction(ctx[C_PARSED], "OOO", Py_None, Py_None, ev);
        Py_DECREF(ev);
        return got;
    }
    if ((j = lit_at(t, i, "exitcode")) >= 0 && j < t->n && a_space(t->s[j])) {
        if ((j = lit_at(t, spaces(t, j), ": ")) < 0 || (j = num_at(t, j, 1, &a)) < 0) Py_RETURN_NONE;
        if ((j = lit_at(t, j, " (pid: ")) < 0 || (j = num_at(t, j, 0, &b)) < 0) Py_RETURN_NONE;
        if ((j = lit_at(t, j, ")")) < 0) Py_RETURN_NONE;
        PyObject *sig = NULL;
        if (!at_end(t, j)) {
            Py_ssize_t s0 = spaces(t, j);
            if (s0 == j || (k = lit_at(t, s0, "(SIG")) < 0) Py_RETURN_NONE;
            while (k < t->n && a_word(t->s[k]) && t->s[k] != '-') k++;
            if ((j = lit_at(t, k, ")")) < 0 || !at_end(t, j)) Py_RETURN_NONE;
            if ((sig = sub(t, s0 + 1, k)) == NULL) return NULL;
        } else {
            sig = Py_NewRef(Py_None);
        }
        PyObject *ev = PyObject_CallFunction(ctx[C_CHILD_EXIT], "LLO", a, b, sig), *got = NULL;
        Py_DECREF(sig);
        if (ev == NULL) return NULL;
        got = PyObject_CallFunction(ctx[C_PARSED], "OOO", Py_None, Py_None, ev);
        Py_DECREF(ev);
        return got;
    }
    if ((j = lit_at(t, i, "what():")) < 0) Py_RETURN_NONE;
    Pfx p;
    if ((k = pg_at(t, spaces(t, j), &p)) < 0 || p.style_rank) Py_RETURN_NONE;
    if ((k = lit_at(t, k, " Process group watchdog thread terminated with exception: ")) < 0) Py_RETURN_NONE;
    PyObject *emb = timeout_at(t, k, ctx), *pg = NULL, *ev = NULL, *got = NULL;
    if (emb == NULL || emb == Py_None) return emb;
    if ((pg = pg_object(t, &p, ctx)) != NULL)
        ev = PyObject_CallFunction(ctx[C_TERMINATED], "OOOO", S_PROCESS, emb, pg, Py_True);
    if (ev != NULL) got = PyObject_CallFunction(ctx[C_PARSED], "OOO", Py_None, Py_None, ev);
    Py_XDECREF(emb);
    Py_XDECREF(pg);
    Py_XDECREF(ev);
    return got;
}

static PyObject *nccl_line(PyObject *self, PyObject *args) {
    PyObject *line, *ctxt;
    (void)self;
    if (!PyArg_ParseTuple(args, "UO!", &line, &PyTuple_Type, &ctxt)) return NULL;
    if (PyTuple_GET_SIZE(ctxt) != C_N) {
        PyErr_SetString(PyExc_ValueError, "nccl_line: bad context");
        return NULL;
    }
    PyObject *const *ctx = &PyTuple_GET_ITEM(ctxt, 0);
    if (!PyUnicode_IS_ASCII(line)) Py_RETURN_NONE;
    Ascii t = {(const char *)PyUnicode_DATA(line), PyUnicode_GET_LENGTH(line)};
    if (memchr(t.s, '\r', (size_t)t.n) != NULL || memchr(t.s, '\x1b', (size_t)t.n) != NULL) Py_RETURN_NONE;
    if (t.n > 0 && t.s[0] != '[') return headerless(&t, ctx);
    /* header: [rankN]:[Smmdd HH:MM:SS.fffffffff src:line] */
    long long grank, mmdd, srcline;
    Py_ssize_t j = lit_at(&t, 0, "[rank"), md_a, hms_a, src_a, src_b;
    if ((j = num_at(&t, j, 0, &grank)) < 0 || (j = lit_at(&t, j, "]:[")) < 0 || j >= t.n) Py_RETURN_NONE;
    char sev = t.s[j];
    if (sev != 'F' && sev != 'E' && sev != 'W' && sev != 'I' && sev != 'V') Py_RETURN_NONE;
    md_a = ++j;
    while (j < t.n && a_digit(t.s[j])) j++;
    if (j - md_a < 3 || j - md_a > 4) Py_RETURN_NONE;
    if (num_at(&t, md_a, 0, &mmdd) < 0 || (j = lit_at(&t, j, " ")) < 0) Py_RETURN_NONE;
    hms_a = j;
    if (t.n - j < 19) Py_RETURN_NONE;
    for (int k = 0; k < 18; k++) {
        char c = t.s[j + k];
        if (k == 2 || k == 5 ? c != ':' : k == 8 ? c != '.' : !a_digit(c)) Py_RETURN_NONE;
    }
    j += 18;
    if ((j = lit_at(&t, j, " ")) < 0) Py_RETURN_NONE;
    src_a = j;
    while (j < t.n && (a_word(t.s[j]) || t.s[j] == '.')) j++;
    if (j == src_a || (j = lit_at(&t, j, ":")) < 0 || (j = num_at(&t, j, 0, &srcline)) < 0) Py_RETURN_NONE;
    src_b = j;
    if ((j = lit_at(&t, j, "]")) < 0 || gated(&t, src_a, src_b)) Py_RETURN_NONE;
    j = spaces(&t, j);
    /* one or two PG prefixes, then the message */
    Pfx p1, p2;
    Py_ssize_t k = pg_at(&t, j, &p1);
    if (k < 0) Py_RETURN_NONE;
    int two = 0;
    Py_ssize_t k2 = pg_at(&t, spaces(&t, k), &p2);
    if (k2 >= 0) {
        two = 1;
        k = k2;
    }
    Py_ssize_t m = spaces(&t, k);
    if (m >= t.n || m == k) Py_RETURN_NONE;
    PyObject *first = NULL, *last = NULL, *ev = NULL, *header = NULL, *got = NULL;
    if ((first = pg_object(&t, &p1, ctx)) == NULL) return NULL;
    if (two) {
        if ((last = pg_object(&t, &p2, ctx)) == NULL) goto done;
    } else {
        last = Py_NewRef(first);
    }
    ev = message(&t, m, p1.a, first, last, two ? p2.style_rank : p1.style_rank, ctx);
    if (ev == NULL || ev == Py_None) {
        got = ev;
        ev = NULL;
        goto done;
    }
    {
        PyObject *hms = sub(&t, hms_a, hms_a + 8), *src = sub(&t, src_a, src_b), *raw = sub(&t, md_a, hms_a + 8);
        if (hms != NULL && src != NULL && raw != NULL)
            header = PyObject_CallFunction(ctx[C_HEADER], "OCLLOLOO", S_STYLE, (int)sev, mmdd / 100, mmdd % 100, hms,
                                           grank, src, raw);
        Py_XDECREF(hms);
        Py_XDECREF(src);
        Py_XDECREF(raw);
    }
    if (header != NULL) got = PyObject_CallFunction(ctx[C_PARSED], "OLO", header, grank, ev);
done:
    Py_XDECREF(first);
    Py_XDECREF(last);
    Py_XDECREF(ev);
    Py_XDECREF(header);
    return got;
}

static PyMethodDef methods[] = {
    {"progress_run", progress_run, METH_VARARGS,
     "progress_run(lines, line_nos, start, time_of) -> (stop, stats, points, timed_idx, timed_wt): see the C source."},
    {"nccl_line", nccl_line, METH_VARARGS, "nccl_line(line, ctx) -> Parsed or None: see the C source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fields",
                                    "Per-rank aggregation of progress lines (optional; see fields.py).", -1, methods};

PyMODINIT_FUNC PyInit__fields(void) {
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {{&S_FAILURE, "failure_detected"}, {&S_TIMEOUT_AT, "timeout_at"},
                 {&S_LOCAL, "local"}, {&S_REMOTE, "remote"}, {&S_25, "2.5+"}, {&S_27, "2.7+"}, {&S_SOME, "some_failed"},
                 {&S_TAKE, "take_down"}, {&S_COLL, "collective timeout or exception"},
                 {&S_HANG, "ProcessGroupNCCL watchdog hang"}, {&S_PROCESS, "Process group"}, {&S_NCCL, "NCCL"},
                 {&S_STYLE, "c10_2.4+"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    return PyModule_Create(&module);
}
