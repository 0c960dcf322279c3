/*
 * _linescan: one pass over a buffer that finds every line holding any of N literal needles.
 *
 * Used by debug_training_logs/logs/scan.py as the literal prefilter of the scan (the RE2 Set still decides which
 * patterns a candidate line matches). Replaces several Aho-Corasick passes plus a bytes.count per hit.
 *
 * Algorithm (measured in bench/README.md):
 *   - every needle of two or more bytes is anchored on one of its byte pairs (the rarest on the planner's corpus
 *     sample, see choose_anchors); a 64 KiB table of flags, one byte per pair, holds the anchor pairs (a table of
 *     bits measured slower: shifts and masks cost more than the few cache lines of text pairs it saves);
 *   - the hot loop reads each byte pair of the buffer once, eight per branch, and looks its flag up; a set flag is
 *     verified against the needles anchored on that pair with memcmp (a one-byte needle flags every pair it
 *     starts);
 *   - where the CPU has AVX2 (checked once at run time; x86-64 GCC/Clang builds only), a Teddy-style filter runs
 *     before that loop (teddy_build, teddy_next): fingerprints of two bytes (the anchor pairs) or three (a byte more)
 *     are merged into 8, 16 or 32 buckets of nibble masks, two pshufb per byte and 8 buckets test 32 positions at
 *     once, and only the positions it passes are looked up in the table and verified; the scalar loop does the last
 *     33 bytes of each search. The filter passes every fingerprint, so the lines found are the same with or without
 *     it (tests/test_native_teddy.py). The buckets are merged so that few positions pass: under a static prior of log
 *     text bytes, or, given the planner's pair_profile of its sample (Plan.profile), so that the sample's frequent
 *     pairs (the lines a job writes every step) pass few. Which filter runs (or none: anchors of common letters) is
 *     decided per needle set at init by a cost rule measured on the corpus (teddy_base). The filter also counts
 *     the newlines of the blocks it tests from its own loads. Measured on the realistic corpus (bench/README.md,
 *     CPU per 8.6 MB file, the first read of the file included, session 8): the finder pass of grep 2.5 -> 1.75 ms,
 *     nccl 2.6 -> 1.8 ms, analyze 3.3 -> 1.85 ms. Finder(simd=False) forces the scalar loop, simd_filter() says
 *     which runs;
 *   - a verified needle flags its line: the line start is found backwards (memrchr, never before the previous
 *     line's end), newlines up to it are counted with SSE2 (scalar elsewhere; the filter's count is corrected by
 *     the few bytes between its block and the line start), the line end with memchr, and the search resumes after
 *     that line (other needles in the same line cost nothing).
 * Needles holding a newline can never lie inside a line and are ignored. Nothing is read outside [start, end).
 * A candidate is checked with one word compare of the needle's first 8 bytes before memcmp.
 *
 * find_lines(every=True) also names every distinct needle inside each line it reports (the scan then checks a line
 * only against the patterns of those needles), and sample() proposes a dense pattern's stride walk over many pieces
 * in one call.
 *
 * The scan searches spans of a memory-mapped file in place (Py_buffer: bytes, mmap, memoryview), so every function
 * takes a start and end. Also here: collect_ranks (the distinct '[rankN]:' digit strings of a span: one pass for
 * "[r" that gathers 4 KiB of hits before visiting them with AVX2 where the CPU has it, SSE2 or memchr elsewhere; a
 * hit is first compared as 16 bytes with the prefix met before under the same key, so a line of a torchrun --tee
 * file costs no hash, no digit loop and no mispredicted branch), count_literals (non-overlapping counts of many
 * literals in one pass, as bytes.count, for the planner's sample) and line_indexes (newlines before ascending
 * offsets).
 *
 * Built by setup.py (optional: without a compiler the scan uses ahocorasick_rs). After editing this file, rebuild with
 * `pip install -e .` (or `python setup.py build_ext --inplace`); tests/test_native_scan.py checks it against Python.
 */
#define PY_SSIZE_T_CLEAN
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef struct {
    Py_ssize_t start, end, line;
    Py_ssize_t needle;
} Hit;

typedef struct {
    Hit *items;
    Py_ssize_t len, cap;
} HitVec;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n_needles;
    unsigned char *blob;     /* every needle's bytes, back to back */
    Py_ssize_t *offset;      /* needle i is blob[offset[i] : offset[i] + length[i]] */
    Py_ssize_t *length;
    Py_ssize_t *anchor;      /* offset of needle i's anchor pair inside it (0 for one-byte needles) */
    uint8_t *tab;            /* pair (b0 | b1 << 8) -> non-zero when it may be an anchor (or start a one-byte
                              * needle): bit j set when a needle anchored on it has a byte c after the pair with
                              * c & 7 == j, every bit when one has none (the filter's third-byte check) */
    int32_t single[256];     /* first byte -> index of a one-byte needle equal to it, or -1 */
    uint32_t *bucket_of;     /* pair -> index into bucket_start (valid when the pair has anchored needles) */
    uint8_t has_bucket[8192];
    uint32_t *bucket_start;  /* bucket b holds items[bucket_start[b] : bucket_start[b + 1]] */
    uint32_t *items;         /* needle indices grouped by anchor pair */
    Py_ssize_t n_buckets;
    uint64_t *head;          /* needle i's first (up to) 8 bytes as a little-endian word ... */
    uint64_t *head_mask;     /* ... and the mask of those of its bytes that exist */
    int simd;                /* 1: scan() runs the AVX2 candidate filter (teddy_next) before the scalar loop */
    int t_sets;              /* the filter's mask sets, 8 buckets each (1, 2 or 4) */
    int t_width;             /* bytes per fingerprint the filter tests (2: the anchor pair, 3: a byte more) */
    double t_rate;           /* the filter's estimated pass rate per position (prior or profile; -1: not built) */
    uint8_t t_mask[4][6][16]; /* [set][lo0, hi0, lo1, hi1, lo2, hi2][nibble] -> bucket bits of (b0, b1, b2) */
    struct Checks *checks;   /* set_patterns(): what hits() checks on a candidate line, or NULL */
} Finder;

struct Checks;
static void checks_free(struct Checks *c);

/* ----------------------------------------------------------------------------------------------------------------- */
/* helpers */

static Py_ssize_t
count_nl(const unsigned char *p, Py_ssize_t len)
{
    Py_ssize_t c = 0;
#if defined(__SSE2__)
    const __m128i nlv = _mm_set1_epi8('\n');
    const __m128i zero = _mm_setzero_si128();
    while (len >= 16) {
        __m128i acc = zero;
        int k = 0;
        while (len >= 16 && k < 255) {
            __m128i x = _mm_loadu_si128((const __m128i *)p);
            acc = _mm_sub_epi8(acc, _mm_cmpeq_epi8(x, nlv));
            p += 16;
            len -= 16;
            k++;
        }
        __m128i s = _mm_sad_epu8(acc, zero);
        c += (Py_ssize_t)_mm_cvtsi128_si32(s) + (Py_ssize_t)_mm_extract_epi16(s, 4);
    }
#endif
    for (Py_ssize_t i = 0; i < len; i++)
        c += p[i] == '\n';
    return c;
}

/* last newline in [lo, hi), or NULL */
static const unsigned char *
last_nl(const unsigned char *lo, const unsigned char *hi)
{
#if defined(__GLIBC__)
    return (const unsigned char *)memrchr(lo, '\n', (size_t)(hi - lo));
#else
    while (hi > lo) {
        hi--;
        if (*hi == '\n')
            return hi;
    }
    return NULL;
#endif
}

static int
vec_push(HitVec *v, Py_ssize_t start, Py_ssize_t end, Py_ssize_t line, Py_ssize_t needle)
{
    if (v->len == v->cap) {
        Py_ssize_t cap = v->cap ? v->cap * 2 : 64;
        Hit *grown = (Hit *)PyMem_RawRealloc(v->items, (size_t)cap * sizeof(Hit));
        if (grown == NULL)
            return -1;
        v->items = grown;
        v->cap = cap;
    }
    Hit *h = &v->items[v->len++];
    h->start = start;
    h->end = end;
    h->line = line;
    h->needle = needle;
    return 0;
}

static inline unsigned
pair_at(const unsigned char *b)
{
    return (unsigned)b[0] | ((unsigned)b[1] << 8);
}

/* static cost of a byte for anchor choice without a sample: text bytes are common, others rare */
static unsigned
byte_prior(unsigned char c)
{
    if (c == ' ' || (c >= 'a' && c <= 'z'))
        return 4;
    if (c >= '0' && c <= '9')
        return 3;
    if (c >= 'A' && c <= 'Z')
        return 2;
    if (c == '\t' || c == '.' || c == ',' || c == ':' || c == '_' || c == '-' || c == '/' || c == '=')
        return 2;
    return 1;
}

/* ----------------------------------------------------------------------------------------------------------------- */
/* Finder */

static int teddy_build(Finder *f, int mode, int width, const unsigned char *prof, Py_ssize_t prof_len);

static void
Finder_dealloc(Finder *self)
{
    PyMem_Free(self->blob);
    PyMem_Free(self->offset);
    PyMem_Free(self->length);
    PyMem_Free(self->anchor);
    PyMem_Free(self->bucket_of);
    PyMem_Free(self->tab);
    PyMem_Free(self->bucket_start);
    PyMem_Free(self->items);
    PyMem_Free(self->head);
    PyMem_Free(self->head_mask);
    checks_free(self->checks);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The tables of the scalar loop and verify() from the needles and their anchors: tab, single, has_bucket, bucket_of,
 * bucket_start and items. Returns -1 (exception set) on memory error. */
static int
build_index(Finder *self)
{
    Py_ssize_t n = self->n_needles;
    memset(self->has_bucket, 0, sizeof(self->has_bucket));
    memset(self->tab, 0, 65536);
    for (int c = 0; c < 256; c++)
        self->single[c] = -1;
    /* group needles by anchor pair (counting sort over the 65,536 pairs) */
    uint32_t *count = PyMem_Calloc(65536, sizeof(uint32_t));
    if (count == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t anchored = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *s = self->blob + self->offset[i];
        Py_ssize_t len = self->length[i];
        if (memchr(s, '\n', (size_t)len) != NULL)
            continue; /* can never lie inside one line */
        if (len == 1) {
            if (self->single[s[0]] < 0)
                self->single[s[0]] = (int32_t)i;
            for (unsigned b1 = 0; b1 < 256; b1++) {
                unsigned v = s[0] | (b1 << 8);
                self->tab[v] = 0xff;
            }
            continue;
        }
        Py_ssize_t k = self->anchor[i];
        unsigned v = pair_at(s + k);
        self->tab[v] |= k + 2 < len ? (uint8_t)(1u << (s[k + 2] & 7)) : 0xff;
        count[v]++;
        anchored++;
    }
    Py_ssize_t n_buckets = 0;
    for (unsigned v = 0; v < 65536; v++)
        if (count[v])
            n_buckets++;
    self->bucket_start = PyMem_Malloc(sizeof(uint32_t) * (size_t)(n_buckets + 1));
    self->items = PyMem_Malloc(sizeof(uint32_t) * (size_t)(anchored ? anchored : 1));
    if (!self->bucket_start || !self->items) {
        PyMem_Free(count);
        PyErr_NoMemory();
        return -1;
    }
    uint32_t b = 0, pos = 0;
    for (unsigned v = 0; v < 65536; v++) {
        if (!count[v])
            continue;
        self->bucket_of[v] = b;
        self->has_bucket[v >> 3] |= (uint8_t)(1u << (v & 7));
        self->bucket_start[b] = pos;
        pos += count[v];
        count[v] = self->bucket_start[b]; /* now: next free slot of this bucket */
        b++;
    }
    self->bucket_start[b] = pos;
    self->n_buckets = n_buckets;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *s = self->blob + self->offset[i];
        Py_ssize_t len = self->length[i];
        if (len < 2 || memchr(s, '\n', (size_t)len) != NULL)
            continue;
        unsigned v = pair_at(s + self->anchor[i]);
        self->items[count[v]++] = (uint32_t)i;
    }
    PyMem_Free(count);
    return 0;
}

static int
Finder_init(Finder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"needles", "anchors", "simd", "width", "profile", NULL};
    PyObject *needles_obj, *anchors_obj = Py_None, *simd_obj = Py_None, *profile_obj = Py_None;
    int width = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOiO", kwlist, &needles_obj, &anchors_obj, &simd_obj, &width,
                                     &profile_obj))
        return -1;
    if (width != 0 && width != 2 && width != 3) {
        PyErr_SetString(PyExc_ValueError, "width must be 0 (the rule chooses), 2 or 3");
        return -1;
    }
    int simd_mode = 1;
    if (PyLong_Check(simd_obj) && !PyBool_Check(simd_obj)) {
        long k = PyLong_AsLong(simd_obj);
        if (k != 8 && k != 16 && k != 32) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "simd must be None, a bool, or 8, 16 or 32 buckets");
            return -1;
        }
        simd_mode = k == 8 ? 3 : k == 16 ? 4 : 5;
    } else if (simd_obj != Py_None) {
        int truth = PyObject_IsTrue(simd_obj);
        if (truth < 0)
            return -1;
        simd_mode = truth ? 2 : 0;
    }
    if (self->blob != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Finder is already initialised");
        return -1;
    }
    PyObject *seq = PySequence_Fast(needles_obj, "needles must be a sequence of bytes");
    if (seq == NULL)
        return -1;
    PyObject *aseq = NULL;
    int ok = -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (anchors_obj != Py_None) {
        aseq = PySequence_Fast(anchors_obj, "anchors must be a sequence of int");
        if (aseq == NULL)
            goto done;
        if (PySequence_Fast_GET_SIZE(aseq) != n) {
            PyErr_SetString(PyExc_ValueError, "anchors must have one entry per needle");
            goto done;
        }
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(o)) {
            PyErr_SetString(PyExc_TypeError, "every needle must be bytes");
            goto done;
        }
        if (PyBytes_GET_SIZE(o) == 0) {
            PyErr_SetString(PyExc_ValueError, "an empty needle would match every line");
            goto done;
        }
        total += PyBytes_GET_SIZE(o);
    }
    self->n_needles = n;
    self->blob = PyMem_Malloc(total ? (size_t)total : 1);
    self->offset = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
    self->length = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
    self->anchor = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
    self->bucket_of = PyMem_Calloc(65536, sizeof(uint32_t));
    self->tab = PyMem_Calloc(65536, 1);
    self->head = PyMem_Calloc((size_t)(n ? n : 1), sizeof(uint64_t));
    self->head_mask = PyMem_Calloc((size_t)(n ? n : 1), sizeof(uint64_t));
    if (!self->blob || !self->offset || !self->length || !self->anchor || !self->bucket_of || !self->tab ||
        !self->head || !self->head_mask) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        Py_ssize_t len = PyBytes_GET_SIZE(o);
        const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(o);
        memcpy(self->blob + at, s, (size_t)len);
        for (Py_ssize_t j = 0; j < len && j < 8; j++) {
            self->head[i] |= (uint64_t)s[j] << (8 * j);
            self->head_mask[i] |= (uint64_t)0xff << (8 * j);
        }
        self->offset[i] = at;
        self->length[i] = len;
        at += len;
        Py_ssize_t k = 0;
        if (aseq != NULL) {
            k = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(aseq, i));
            if (k == -1 && PyErr_Occurred())
                goto done;
            if (k < 0 || (len >= 2 && k > len - 2) || (len == 1 && k != 0)) {
                PyErr_SetString(PyExc_ValueError, "an anchor must be the offset of a byte pair inside its needle");
                goto done;
            }
        } else if (len >= 2) {
            unsigned best = ~0u;
            for (Py_ssize_t j = 0; j + 1 < len; j++) {
                unsigned cost = byte_prior(s[j]) * byte_prior(s[j + 1]);
                if (cost < best) {
                    best = cost;
                    k = j;
                }
            }
        }
        self->anchor[i] = k;
    }
    /* the filter first: with three-byte fingerprints it moves some anchors (teddy_build) */
    {
        Py_buffer pv = {0};
        if (profile_obj != Py_None) {
            if (PyObject_GetBuffer(profile_obj, &pv, PyBUF_SIMPLE) < 0)
                goto done;
            if (pv.len < 4 || (pv.len - 4) % 6 != 0) {
                PyBuffer_Release(&pv);
                PyErr_SetString(PyExc_ValueError, "profile must come from pair_profile()");
                goto done;
            }
        }
        int rc = teddy_build(self, simd_mode, width, (const unsigned char *)pv.buf, pv.buf ? pv.len : 0);
        if (pv.buf != NULL)
            PyBuffer_Release(&pv);
        if (rc < 0 || build_index(self) < 0)
            goto done;
    }
    ok = 0;
done:
    Py_XDECREF(aseq);
    Py_DECREF(seq);
    return ok;
}

/* 1 when needle i occurs at st, wholly inside buf[lo:hi] (hi: at most the buffer's end) */
static inline int
needle_at(const Finder *f, const unsigned char *buf, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t st, uint32_t i)
{
    Py_ssize_t len = f->length[i];
    if (st < lo || st + len > hi)
        return 0;
    if (st + 8 <= hi) {
        /* one word compare rejects almost every false candidate (an anchor pair is often common text) */
        const unsigned char *w = buf + st;
        uint64_t word = (uint64_t)w[0] | (uint64_t)w[1] << 8 | (uint64_t)w[2] << 16 | (uint64_t)w[3] << 24 |
                        (uint64_t)w[4] << 32 | (uint64_t)w[5] << 40 | (uint64_t)w[6] << 48 | (uint64_t)w[7] << 56;
        if ((word ^ f->head[i]) & f->head_mask[i])
            return 0;
        return len <= 8 || memcmp(buf + st + 8, f->blob + f->offset[i] + 8, (size_t)(len - 8)) == 0;
    }
    return memcmp(buf + st, f->blob + f->offset[i], (size_t)len) == 0;
}

/* index of a needle that occurs with its anchor (or, one-byte needles, its start) at p, setting *s to its start; -1 */
static inline Py_ssize_t
verify(const Finder *f, const unsigned char *buf, Py_ssize_t lo, Py_ssize_t n, Py_ssize_t p, Py_ssize_t *s)
{
    int32_t one = f->single[buf[p]];
    if (one >= 0) {
        *s = p;
        return one;
    }
    if (p + 1 >= n)
        return -1;
    unsigned v = pair_at(buf + p);
    if (!(f->has_bucket[v >> 3] & (1u << (v & 7))))
        return -1;
    uint32_t b = f->bucket_of[v];
    for (uint32_t j = f->bucket_start[b]; j < f->bucket_start[b + 1]; j++) {
        uint32_t i = f->items[j];
        Py_ssize_t st = p - f->anchor[i];
        if (needle_at(f, buf, lo, n, st, i)) {
            *s = st;
            return (Py_ssize_t)i;
        }
    }
    return -1;
}

/* ----------------------------------------------------------------------------------------------------------------- */
/* The SIMD candidate filter (Teddy-style, as in Hyperscan and ripgrep; this is our own code).
 *
 * Each needle's fingerprint (its anchor pair, or with width 3 the three bytes from its anchor; bytes past the
 * needle's end and a one-byte needle's second byte match any byte) goes to one of 8, 16 or 32 buckets; bucket k is a
 * bit of t_mask[k / 8]. Bytes (b0, b1, b2) can start a fingerprint of bucket k only if lo0[b0 & 15], hi0[b0 >> 4],
 * lo1[b1 & 15], hi1[b1 >> 4] (and lo2, hi2) all hold k's bit. Two pshufb per byte and mask set test 32 positions at
 * once; a position that passes is checked against tab (its pair, and the low three bits of the byte after it against
 * those of the bytes that follow that pair in its needles: "nan"'s anchor "na" no longer stops at every "dynamic")
 * and goes to verify(). Measured on the corpus, verify() calls per file: grep 25.6k -> 0.5k, nccl 2.9k -> 0.8k,
 * analyze 36.5k -> 6.3k. A bucket's masks are the union of its members' nibbles, so no fingerprint is missed; what
 * it passes beyond them (one member's low and another's high nibbles) only costs time. teddy_groups chooses the buckets at init by merging, greedily, the two groups whose
 * union adds the least expected pass rate, from one group per distinct fingerprint down to 32, 16 and 8: the rate
 * under a static prior of log text bytes (text_weight), or, with a profile of the text (pair_profile), the share of
 * the sample's pairs the union passes (three bytes: a Markov estimate from pairs). Measured on the corpus (8.6 MB
 * files, positions passed per file): grep's 73 needles in 16 buckets 268k under the prior, 35k with the profile
 * (25k of them the anchor pair "na" of "nan", see below); nccl's 87 needles 346k -> 42k; analyze's ~310 in 32
 * buckets 438k -> 40k. Three bytes pass fewer still (grep 6.6k in 16 buckets) but their kernel costs more than it
 * saves on these sets; the rule (teddy_base, fitted on kernel timings) weighs both. */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_TEDDY 1

/* The rule choosing the filter (mode 1 of teddy_build), from timings of the corpus' needle sets and random subsets
 * of them (bench/README.md): the filter's time per byte, relative to the scalar loop's, is about
 * teddy_base[width][sets] + TEDDY_SLOPE * (its estimated pass rate: on the prior, or on the profile); the cheapest
 * bucket count is used when that is at most TEDDY_MAX_COST. The three-byte bases are scaled from the two-byte ones by
 * the kernels' timings with nothing passing (grep's set, session 8: 8 / 16 / 32 buckets 1.30 / 1.40 / 1.94 ms per
 * file for two bytes, 1.40 / 1.78 / 2.76 ms for three). */
static const double teddy_base[2][3] = {{0.49, 0.30, 0.30}, {0.70, 0.38, 0.32}}; /* [width 2, 3][32, 16, 8 buckets] */
#define TEDDY_SLOPE 6.0
#define TEDDY_MAX_COST 0.9
#define TEDDY_MAX_GROUPS 256 /* more distinct fingerprints: no filter of that width (the merge costs ng^3) */

/* relative frequency of a byte in log text (our own rough prior: spaces, lowercase letters and digits are common) */
static double
text_weight(unsigned c)
{
    if (c == ' ')
        return 12.0;
    if (c >= 'a' && c <= 'z')
        return 3.0;
    if (c >= '0' && c <= '9')
        return 2.5;
    if (c == '\n')
        return 1.5;
    if (c >= 'A' && c <= 'Z')
        return 1.0;
    if (c == '.' || c == ',' || c == ':' || c == '_' || c == '-' || c == '/' || c == '=' || c == '[' || c == ']' ||
        c == '(' || c == ')')
        return 1.0;
    if (c > ' ' && c < 127)
        return 0.3;
    if (c == '\t')
        return 0.3;
    return 0.05;
}

typedef struct {
    uint16_t m[6]; /* nibble sets: lo0, hi0, lo1, hi1, lo2, hi2 (a side that may be any byte: 0xffff twice) */
} TGroup;

/* The byte pairs of a text sample (Finder's profile): t[b0 | b1 << 8] is the share of the sample's positions holding
 * that pair plus PROFILE_PRIOR times the prior's estimate (pairs the sample missed are not free), row[b] and col[b]
 * the sums over pairs starting and ending with b. t NULL: no profile, the prior alone. */
typedef struct {
    float *t, *row, *col;
} Profile;

#define PROFILE_PRIOR 0.05

/* the byte values whose low nibble is in lo and high nibble in hi, into out; their number */
static int
closure(uint16_t lo, uint16_t hi, uint8_t *out)
{
    int n = 0;
    for (uint32_t hs = hi; hs; hs &= hs - 1)
        for (uint32_t ls = lo; ls; ls &= ls - 1)
            out[n++] = (uint8_t)((unsigned)__builtin_ctz(hs) << 4 | (unsigned)__builtin_ctz(ls));
    return n;
}

/* a group's pass rate on the profile: the sample's pairs in its closure; three bytes: a Markov estimate from pairs
 * (P(b0 b1) P(b1 b2) / P(b1)) */
static double
tgroup_cost_profile(const TGroup *g, const Profile *pf, int w)
{
    uint8_t c[3][256];
    int nc[3];
    for (int k = 0; k < w; k++)
        nc[k] = closure(g->m[2 * k], g->m[2 * k + 1], c[k]);
    double rate = 0;
    for (int j = 0; j < nc[1]; j++) {
        unsigned b = c[1][j];
        double a = 0;
        if (nc[0] == 256)
            a = pf->col[b];
        else
            for (int i = 0; i < nc[0]; i++)
                a += pf->t[c[0][i] | b << 8];
        if (w == 2 || a == 0) {
            rate += a;
            continue;
        }
        double z = 0;
        if (nc[2] == 256)
            z = pf->row[b];
        else
            for (int i = 0; i < nc[2]; i++)
                z += pf->t[b | (unsigned)c[2][i] << 8];
        if (pf->row[b] > 0)
            rate += a * z / pf->row[b];
    }
    return rate;
}

/* expected share of positions passing one group's masks: the product over its w bytes of P(byte in its closure)
 * under the prior, or the profile's estimate when there is one */
static double
tgroup_cost(const TGroup *g, const double (*rs)[256], int w, const Profile *pf)
{
    if (pf->t != NULL)
        return tgroup_cost_profile(g, pf, w);
    double rate = 1;
    for (int k = 0; k < w; k++) {
        uint16_t lo = g->m[2 * k], hi = g->m[2 * k + 1];
        double s = 0;
        for (unsigned h = 0; h < 16; h++)
            if (hi & (1u << h))
                s += rs[2 * h][lo & 255] + rs[2 * h + 1][lo >> 8];
        rate *= s;
    }
    return rate;
}

static TGroup
tgroup_union(const TGroup *a, const TGroup *b)
{
    TGroup u;
    for (int k = 0; k < 6; k++)
        u.m[k] = a->m[k] | b->m[k];
    return u;
}

/* the pass rate of buckets g[0 .. nb) of w bytes under the prior (weights: normalised byte weights) */
static double
tgroups_rate(const TGroup *g, int nb, const double *weights, int w)
{
    uint32_t m[3][256];
    for (int k = 0; k < w; k++)
        for (unsigned c = 0; c < 256; c++) {
            uint32_t a = 0;
            for (int b = 0; b < nb; b++)
                if ((g[b].m[2 * k] >> (c & 15)) & (g[b].m[2 * k + 1] >> (c >> 4)) & 1)
                    a |= 1u << b;
            m[k][c] = a;
        }
    /* the last byte's weights grouped by its bucket bits (few distinct values) */
    uint32_t val[256];
    double wsum[256];
    int nv = 0;
    for (unsigned c = 0; c < 256; c++) {
        uint32_t v = m[w - 1][c];
        if (!v)
            continue;
        int j = 0;
        while (j < nv && val[j] != v)
            j++;
        if (j == nv) {
            val[nv] = v;
            wsum[nv++] = 0;
        }
        wsum[j] += weights[c];
    }
    double rate = 0;
    for (unsigned c0 = 0; c0 < 256; c0++) {
        if (!m[0][c0])
            continue;
        if (w == 2) {
            double s = 0;
            for (int j = 0; j < nv; j++)
                if (m[0][c0] & val[j])
                    s += wsum[j];
            rate += weights[c0] * s;
            continue;
        }
        for (unsigned c1 = 0; c1 < 256; c1++) {
            uint32_t both = m[0][c0] & m[1][c1];
            if (!both)
                continue;
            double s = 0;
            for (int j = 0; j < nv; j++)
                if (both & val[j])
                    s += wsum[j];
            rate += weights[c0] * weights[c1] * s;
        }
    }
    return rate;
}

static void
tgroups_store(Finder *f, const TGroup *g, int nb, int w)
{
    memset(f->t_mask, 0, sizeof(f->t_mask));
    for (int k = 0; k < nb; k++)
        for (int j = 0; j < 2 * w; j++)
            for (unsigned x = 0; x < 16; x++)
                if (g[k].m[j] & (1u << x))
                    f->t_mask[k / 8][j][x] |= (uint8_t)(1u << (k % 8));
    f->t_sets = nb <= 8 ? 1 : nb <= 16 ? 2 : 4;
    f->t_width = w;
}

static int cpu_avx2 = -1; /* __builtin_cpu_supports("avx2"), read once */
static double prior_w[256], prior_rs[32][256]; /* text_weight normalised, and its row sums (teddy_build) */
static int prior_ready;

/* The filter's verdict on the 32 positions at..at + 31 (reads at..at + 31 + w - 1): bytes non-zero where a
 * fingerprint of w bytes may start; *newlines: the bits of the newlines among the 32 bytes (the scan's line count
 * comes from the same load) */
__attribute__((target("avx2"), always_inline)) static inline __m256i
teddy_block(const __m256i (*m)[6], const unsigned char *at, const int sets, const int w, uint32_t *newlines)
{
    const __m256i nib = _mm256_set1_epi8(0x0f);
    __m256i a = _mm256_loadu_si256((const __m256i *)at);
    *newlines = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, _mm256_set1_epi8('\n')));
    __m256i b = _mm256_loadu_si256((const __m256i *)(at + 1));
    __m256i al = _mm256_and_si256(a, nib), ah = _mm256_and_si256(_mm256_srli_epi16(a, 4), nib);
    __m256i bl = _mm256_and_si256(b, nib), bh = _mm256_and_si256(_mm256_srli_epi16(b, 4), nib);
    __m256i cl = al, ch = ah;
    if (w == 3) {
        __m256i c = _mm256_loadu_si256((const __m256i *)(at + 2));
        cl = _mm256_and_si256(c, nib);
        ch = _mm256_and_si256(_mm256_srli_epi16(c, 4), nib);
    }
    __m256i acc = _mm256_setzero_si256();
    for (int s = 0; s < sets; s++) {
        __m256i x = _mm256_and_si256(_mm256_shuffle_epi8(m[s][0], al), _mm256_shuffle_epi8(m[s][1], ah));
        __m256i y = _mm256_and_si256(_mm256_shuffle_epi8(m[s][2], bl), _mm256_shuffle_epi8(m[s][3], bh));
        x = _mm256_and_si256(x, y);
        if (w == 3)
            x = _mm256_and_si256(
                x, _mm256_and_si256(_mm256_shuffle_epi8(m[s][4], cl), _mm256_shuffle_epi8(m[s][5], ch)));
        acc = _mm256_or_si256(acc, x);
    }
    return acc;
}

/* The first position q in [*pp, n - 34] where a needle (verify) occurs: the filter tests 32 or 64 positions per
 * step, a position it passes is looked up in tab (exact) and verified. Returns q with the needle in *which and its
 * start in *s, *pp then being the start of q's step; -1 when none, *pp then being the first position not tested
 * (fewer than 34 bytes before n). Either way *nl is the number of newlines from the entry's *pp to the new *pp. */
__attribute__((target("avx2"), always_inline)) static inline Py_ssize_t
teddy_kernel(const Finder *f, const unsigned char *buf, Py_ssize_t *pp, Py_ssize_t lo, Py_ssize_t n,
             Py_ssize_t *which, Py_ssize_t *s, Py_ssize_t *nl, const int sets, const int w)
{
    const __m256i zero = _mm256_setzero_si256();
    __m256i m[4][6];
    for (int k = 0; k < sets; k++)
        for (int j = 0; j < 2 * w; j++)
            m[k][j] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)f->t_mask[k][j]));
    const uint8_t *tab = f->tab;
    Py_ssize_t p = *pp, lines = 0;
    while (p + 34 <= n) {
        uint64_t bits, nls;
        int step;
        if (sets * w <= 6 && p + 66 <= n) { /* two blocks per branch while the masks leave registers for it */
            uint32_t n0, n1;
            __m256i a0 = teddy_block((const __m256i (*)[6])m, buf + p, sets, w, &n0);
            __m256i a1 = teddy_block((const __m256i (*)[6])m, buf + p + 32, sets, w, &n1);
            uint32_t z0 = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(a0, zero));
            uint32_t z1 = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(a1, zero));
            bits = ~((uint64_t)z0 | (uint64_t)z1 << 32);
            nls = (uint64_t)n0 | (uint64_t)n1 << 32;
            step = 64;
        } else {
            uint32_t n0;
            __m256i a0 = teddy_block((const __m256i (*)[6])m, buf + p, sets, w, &n0);
            bits = (uint32_t)~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(a0, zero));
            nls = n0;
            step = 32;
        }
        while (bits) {
            Py_ssize_t q = p + __builtin_ctzll(bits);
            if (tab[pair_at(buf + q)] & (1u << (buf[q + 2] & 7))) { /* q + 2 < n: the loop's bound */
                Py_ssize_t x = verify(f, buf, lo, n, q, s);
                if (x >= 0) {
                    *which = x;
                    *pp = p;
                    *nl = lines;
                    return q;
                }
            }
            bits &= bits - 1;
        }
        lines += __builtin_popcountll(nls);
        p += step;
    }
    *pp = p;
    *nl = lines;
    return -1;
}

#define TEDDY_NEXT(name, sets, w)                                                                                      \
    __attribute__((target("avx2,popcnt"))) static Py_ssize_t name(const Finder *f, const unsigned char *buf,          \
                                                                  Py_ssize_t *pp, Py_ssize_t lo, Py_ssize_t n,       \
                                                                  Py_ssize_t *which, Py_ssize_t *s, Py_ssize_t *nl)  \
    {                                                                                                                  \
        return teddy_kernel(f, buf, pp, lo, n, which, s, nl, sets, w);                                                 \
    }
TEDDY_NEXT(teddy_next1w2, 1, 2)
TEDDY_NEXT(teddy_next2w2, 2, 2)
TEDDY_NEXT(teddy_next4w2, 4, 2)
TEDDY_NEXT(teddy_next1w3, 1, 3)
TEDDY_NEXT(teddy_next2w3, 2, 3)
TEDDY_NEXT(teddy_next4w3, 4, 3)

static inline Py_ssize_t
teddy_next(const Finder *f, const unsigned char *buf, Py_ssize_t *pp, Py_ssize_t lo, Py_ssize_t n, Py_ssize_t *which,
           Py_ssize_t *s, Py_ssize_t *nl)
{
    if (f->t_width == 3)
        return f->t_sets == 1   ? teddy_next1w3(f, buf, pp, lo, n, which, s, nl)
               : f->t_sets == 2 ? teddy_next2w3(f, buf, pp, lo, n, which, s, nl)
                                : teddy_next4w3(f, buf, pp, lo, n, which, s, nl);
    return f->t_sets == 1   ? teddy_next1w2(f, buf, pp, lo, n, which, s, nl)
           : f->t_sets == 2 ? teddy_next2w2(f, buf, pp, lo, n, which, s, nl)
                            : teddy_next4w2(f, buf, pp, lo, n, which, s, nl);
}

static void
prior_init(void)
{
    if (prior_ready)
        return;
    double total = 0;
    for (unsigned c = 0; c < 256; c++)
        total += prior_w[c] = text_weight(c);
    for (unsigned c = 0; c < 256; c++)
        prior_w[c] /= total;
    /* prior_rs[2h][x]: weight of the bytes h << 4 | l, l in the low 8 nibbles set in x; prior_rs[2h + 1]: the high 8 */
    for (unsigned h = 0; h < 16; h++)
        for (unsigned x = 0; x < 256; x++) {
            double lo = 0, hi = 0;
            for (unsigned l = 0; l < 8; l++)
                if (x & (1u << l)) {
                    lo += prior_w[h << 4 | l];
                    hi += prior_w[h << 4 | (l + 8)];
                }
            prior_rs[2 * h][x] = lo;
            prior_rs[2 * h + 1][x] = hi;
        }
    prior_ready = 1;
}

/* The buckets of fingerprints of w bytes for the needles with anchors at anchor[] (a needle's fingerprint starts at
 * its anchor; bytes past a needle's end are any byte), merged greedily down to 32, 16 and 8: snap[32 * t ..] holds
 * snap_n[t] groups, rate[t] their pass rate (t = 0, 1, 2) on the profile pf, or the prior when pf has none. Returns 0,
 * 1 when there are too many distinct fingerprints for a filter, -1 on memory error. */
static int
teddy_groups(const Finder *f, const Py_ssize_t *anchor, int w, const Profile *pf, TGroup *snap, int *snap_n,
             double *rate)
{
    const double *wts = prior_w;
    const double (*rs)[256] = (const double (*)[256])prior_rs;
    TGroup *g = PyMem_Malloc(sizeof(TGroup) * (size_t)(f->n_needles ? f->n_needles : 1));
    if (g == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int ng = 0;
    for (Py_ssize_t i = 0; i < f->n_needles; i++) {
        const unsigned char *nd = f->blob + f->offset[i];
        Py_ssize_t len = f->length[i];
        if (memchr(nd, '\n', (size_t)len) != NULL)
            continue;
        TGroup t;
        for (int k = 0; k < 6; k++)
            t.m[k] = 0xffff;
        for (int k = 0; k < w && anchor[i] + k < len; k++) {
            unsigned c = nd[anchor[i] + k];
            t.m[2 * k] = (uint16_t)(1u << (c & 15));
            t.m[2 * k + 1] = (uint16_t)(1u << (c >> 4));
        }
        int dup = 0;
        for (int j = 0; j < ng && !dup; j++)
            dup = memcmp(&g[j], &t, sizeof(TGroup)) == 0;
        if (!dup)
            g[ng++] = t;
    }
    if (ng > TEDDY_MAX_GROUPS) {
        PyMem_Free(g);
        return 1;
    }
    float *delta = PyMem_Malloc(sizeof(float) * (size_t)(ng ? ng * ng : 1));
    double *cost = PyMem_Malloc(sizeof(double) * (size_t)(ng ? ng : 1));
    if (!delta || !cost) {
        PyMem_Free(g);
        PyMem_Free(delta);
        PyMem_Free(cost);
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < ng; i++)
        cost[i] = tgroup_cost(&g[i], rs, w, pf);
    for (int i = 0; i < ng; i++)
        for (int j = i + 1; j < ng; j++) {
            TGroup u = tgroup_union(&g[i], &g[j]);
            delta[i * ng + j] = (float)(tgroup_cost(&u, rs, w, pf) - cost[i] - cost[j]);
        }
    /* greedy merging; alive groups are g[0 .. alive) after each step (the merged-away one is replaced by the last) */
    int alive = ng;
    for (int t = 0; t < 3; t++) {
        int target = 32 >> t;
        while (alive > target) {
            int bi = 0, bj = 1;
            float best = delta[0 * ng + 1];
            for (int i = 0; i < alive; i++)
                for (int j = i + 1; j < alive; j++)
                    if (delta[i * ng + j] < best) {
                        best = delta[i * ng + j];
                        bi = i;
                        bj = j;
                    }
            g[bi] = tgroup_union(&g[bi], &g[bj]);
            cost[bi] = tgroup_cost(&g[bi], rs, w, pf);
            int last = alive - 1;
            if (bj != last) { /* the last group moves into slot bj */
                g[bj] = g[last];
                cost[bj] = cost[last];
                for (int i = 0; i < last; i++) {
                    if (i == bj)
                        continue;
                    float d = delta[i * ng + last];
                    if (i < bj)
                        delta[i * ng + bj] = d;
                    else
                        delta[bj * ng + i] = d;
                }
            }
            alive--;
            for (int i = 0; i < alive; i++) {
                if (i == bi)
                    continue;
                TGroup u = tgroup_union(&g[i], &g[bi]);
                float d = (float)(tgroup_cost(&u, rs, w, pf) - cost[i] - cost[bi]);
                if (i < bi)
                    delta[i * ng + bi] = d;
                else
                    delta[bi * ng + i] = d;
            }
        }
        snap_n[t] = alive;
        memcpy(snap + 32 * t, g, sizeof(TGroup) * (size_t)(alive ? alive : 1));
        if (pf->t != NULL) { /* the profile's estimate (overlaps between buckets counted twice) */
            rate[t] = 0;
            for (int i = 0; i < alive; i++)
                rate[t] += cost[i];
        } else {
            rate[t] = tgroups_rate(g, alive, wts, w);
        }
    }
    PyMem_Free(g);
    PyMem_Free(delta);
    PyMem_Free(cost);
    return 0;
}
#endif

/* Choose the filter (f->anchor set, the index not built yet) and whether scan() uses it: mode 0 never, 1 when the CPU
 * has AVX2 and the rule (teddy_base) says it pays, 2 whenever the CPU has AVX2 (the buckets with the lowest rate),
 * 3/4/5: with 8/16/32 buckets whenever the CPU has AVX2 (benchmarks, tests). width 2 or 3 forces the fingerprint's
 * bytes, 0 lets the rule choose. With three bytes, the anchor of a needle whose anchor pair is its last two bytes
 * moves one byte back (its fingerprint is then whole); results do not change, only which needle of a line that holds
 * several is named. Returns -1 on memory error. */
static int
teddy_build(Finder *f, int mode, int width, const unsigned char *prof, Py_ssize_t prof_len)
{
    f->simd = 0;
    f->t_sets = 0;
    f->t_width = 0;
    f->t_rate = -1;
#ifdef HAVE_TEDDY
    if (cpu_avx2 < 0)
        cpu_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
    if (mode == 0 || !cpu_avx2)
        return 0;
    prior_init();
    Profile pf = {NULL, NULL, NULL};
    if (prof != NULL && prof_len >= 4) {
        pf.t = PyMem_Malloc(sizeof(float) * (65536 + 512));
        if (pf.t == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        pf.row = pf.t + 65536;
        pf.col = pf.row + 256;
        uint32_t total = (uint32_t)prof[0] | (uint32_t)prof[1] << 8 | (uint32_t)prof[2] << 16 | (uint32_t)prof[3] << 24;
        double scale = 1.0 / (total ? total : 1);
        for (unsigned v = 0; v < 65536; v++)
            pf.t[v] = (float)(PROFILE_PRIOR * prior_w[v & 255] * prior_w[v >> 8]);
        for (Py_ssize_t r = 4; r + 6 <= prof_len; r += 6) {
            unsigned v = (unsigned)prof[r] | (unsigned)prof[r + 1] << 8;
            uint32_t c = (uint32_t)prof[r + 2] | (uint32_t)prof[r + 3] << 8 | (uint32_t)prof[r + 4] << 16 |
                         (uint32_t)prof[r + 5] << 24;
            pf.t[v] += (float)(c * scale);
        }
        for (unsigned b = 0; b < 256; b++)
            pf.row[b] = pf.col[b] = 0;
        for (unsigned v = 0; v < 65536; v++) {
            pf.row[v & 255] += pf.t[v];
            pf.col[v >> 8] += pf.t[v];
        }
    }
    Py_ssize_t n = f->n_needles;
    Py_ssize_t *moved = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
    TGroup *snap = PyMem_Malloc(sizeof(TGroup) * 32 * 3 * 2);
    if (!moved || !snap) {
        PyMem_Free(moved);
        PyMem_Free(snap);
        PyMem_Free(pf.t);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = f->length[i];
        moved[i] = len >= 3 && f->anchor[i] > len - 3 ? len - 3 : f->anchor[i];
    }
    int snap_n[2][3], usable[2] = {0, 0};
    double rate[2][3];
    int ok = -1;
    for (int wi = 0; wi < 2; wi++) {
        int w = 2 + wi;
        /* the rule tries three bytes only on a profile: under the prior they measured slower (grep's set: 2.3 ms
         * per file in 16 buckets against 2.1 ms for pairs), the prior's estimate of them being too optimistic */
        if (width != 0 ? width != w : w == 3 && pf.t == NULL)
            continue;
        int rc = teddy_groups(f, w == 3 ? moved : f->anchor, w, &pf, snap + 96 * wi, snap_n[wi], rate[wi]);
        if (rc < 0)
            goto done;
        usable[wi] = rc == 0;
    }
    /* the rule; mode 2: the lowest rate (when equal: two bytes, then fewer buckets) */
    int pick = -1, pick_w = -1;
    double best = mode == 1 ? TEDDY_MAX_COST + 1e-9 : 1e300;
    for (int wi = 0; wi < 2; wi++)
        for (int t = 2; t >= 0; t--) {
            if (!usable[wi] || (mode >= 3 && t != 5 - mode))
                continue;
            double c = mode == 1 ? teddy_base[wi][t] + TEDDY_SLOPE * rate[wi][t] : rate[wi][t];
            if (c < best) { /* strictly cheaper replaces: on a tie the fewer mask sets stay */
                best = c;
                pick = t;
                pick_w = wi;
            }
        }
    if (pick >= 0) {
        tgroups_store(f, snap + 96 * pick_w + 32 * pick, snap_n[pick_w][pick], 2 + pick_w);
        f->t_rate = rate[pick_w][pick];
        f->simd = 1;
        if (pick_w == 1)
            memcpy(f->anchor, moved, sizeof(Py_ssize_t) * (size_t)n);
    }
    ok = 0;
done:
    PyMem_Free(moved);
    PyMem_Free(snap);
    PyMem_Free(pf.t);
    return ok;
#else
    (void)mode;
    (void)width;
    (void)prof;
    (void)prof_len;
    return 0;
#endif
}

/* The scan; returns where it stopped (n, or just past the last hit line when max_lines were found), the newlines in
 * [start, stop) in *newlines. -1 on memory error. */
static Py_ssize_t
scan(const Finder *f, const unsigned char *buf, Py_ssize_t start, Py_ssize_t n, Py_ssize_t max_lines, HitVec *out,
     Py_ssize_t *newlines)
{
    const uint8_t *tab = f->tab;
    Py_ssize_t pos = start; /* the start of a line (or of the buffer part searched): nothing before it is left */
    Py_ssize_t p = start;
    Py_ssize_t nl = 0;      /* newlines in [start, counted) */
    Py_ssize_t counted = start; /* (the filter counts the newlines of the blocks it tests) */
    for (;;) {
        Py_ssize_t last = n - 1;
        Py_ssize_t s = 0, which = -1;
#ifdef HAVE_TEDDY
        if (f->simd) {
            /* the filter up to the last 33 bytes, verifying what it passes; the scalar loop below does the rest */
            if (counted < p) {
                nl += count_nl(buf + counted, p - counted);
                counted = p;
            }
            Py_ssize_t lines = 0;
            Py_ssize_t q = teddy_next(f, buf, &p, start, n, &which, &s, &lines);
            if (p > counted) { /* blocks tested (none when fewer than 34 bytes were left at p) */
                nl += lines;
                counted = p;
            }
            if (q >= 0)
                goto hit;
        }
#endif
        /* eight pairs per step, one branch: the common case is no candidate at all */
        for (; p + 8 < n; p += 8) {
            if (tab[pair_at(buf + p)] | tab[pair_at(buf + p + 1)] | tab[pair_at(buf + p + 2)] |
                tab[pair_at(buf + p + 3)] | tab[pair_at(buf + p + 4)] | tab[pair_at(buf + p + 5)] |
                tab[pair_at(buf + p + 6)] | tab[pair_at(buf + p + 7)])
                break;
        }
        for (; p < last; p++) {
            unsigned v = pair_at(buf + p);
            if (tab[v])
                goto candidate;
        }
        if (p == last && f->single[buf[p]] >= 0)
            goto candidate;
        break;
    candidate:
        which = verify(f, buf, start, n, p, &s);
        if (which < 0) {
            p++;
            continue;
        }
#ifdef HAVE_TEDDY
    hit:
#endif
    {
        const unsigned char *before = last_nl(buf + pos, buf + s);
        Py_ssize_t ls = before ? (before - buf) + 1 : pos;
        if (ls >= counted)
            nl += count_nl(buf + counted, ls - counted);
        else /* the filter counted past the line start (the needle starts before its block) */
            nl -= count_nl(buf + ls, counted - ls);
        counted = ls;
        const unsigned char *after = memchr(buf + s, '\n', (size_t)(n - s));
        Py_ssize_t le = after ? after - buf : n;
        if (vec_push(out, ls, le, nl, which) < 0)
            return -1;
        if (le >= n) {
            pos = n;
            break;
        }
        nl++; /* [ls, le] holds one newline, at le */
        pos = p = counted = le + 1;
        if (max_lines > 0 && out->len >= max_lines)
            break;
    }
    }
    if (pos < n && (max_lines <= 0 || out->len < max_lines)) {
        nl += count_nl(buf + counted, n - counted);
        pos = counted = n;
    }
    *newlines = nl;
    return pos;
}

/* Append to *found (capacity cap, *count used) the distinct needles whose anchor (or, one-byte needles, start) is at
 * q inside buf[ls:le]. Returns -1 when more than cap were found. */
static inline int
needles_at(const Finder *f, const unsigned char *buf, Py_ssize_t ls, Py_ssize_t le, Py_ssize_t q, Py_ssize_t *found,
           Py_ssize_t cap, Py_ssize_t *count)
{
    Py_ssize_t cand[2];
    int nc = 0;
    int32_t one = f->single[buf[q]];
    if (one >= 0)
        cand[nc++] = one;
    if (q + 1 < le) {
        unsigned v = pair_at(buf + q);
        if (f->tab[v] && (f->has_bucket[v >> 3] & (1u << (v & 7)))) {
            uint32_t b = f->bucket_of[v];
            for (uint32_t j = f->bucket_start[b]; j < f->bucket_start[b + 1]; j++) {
                uint32_t i = f->items[j];
                if (!needle_at(f, buf, ls, le, q - f->anchor[i], i))
                    continue;
                int dup = 0;
                for (Py_ssize_t k = 0; k < *count; k++)
                    dup |= found[k] == (Py_ssize_t)i;
                if (dup)
                    continue;
                if (*count >= cap)
                    return -1;
                found[(*count)++] = (Py_ssize_t)i;
            }
        }
    }
    for (int c = 0; c < nc; c++) {
        int dup = 0;
        for (Py_ssize_t k = 0; k < *count; k++)
            dup |= found[k] == cand[c];
        if (dup)
            continue;
        if (*count >= cap)
            return -1;
        found[(*count)++] = cand[c];
    }
    return 0;
}

#ifdef HAVE_TEDDY
/* The filter's passes among the 32 positions at..at + 31 (reads at..at + 33), as bits */
__attribute__((target("avx2"))) static uint32_t
teddy_mask32(const Finder *f, const unsigned char *at)
{
    __m256i m[4][6];
    for (int k = 0; k < f->t_sets; k++)
        for (int j = 0; j < 2 * f->t_width; j++)
            m[k][j] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)f->t_mask[k][j]));
    uint32_t newlines;
    __m256i acc = teddy_block((const __m256i (*)[6])m, at, f->t_sets, f->t_width, &newlines);
    return ~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(acc, _mm256_setzero_si256()));
}
#endif

/* Append to *found (capacity cap, *count used) every distinct needle occurring inside buf[ls:le] (a line: no needle
 * holding a newline is anchored; buf holds n bytes), in order of their anchor positions: the positions the filter
 * passes where it runs (32 per step), every position elsewhere. Returns -1 when more than cap were found. */
static int
line_needles(const Finder *f, const unsigned char *buf, Py_ssize_t ls, Py_ssize_t le, Py_ssize_t n,
             Py_ssize_t *found, Py_ssize_t cap, Py_ssize_t *count)
{
    Py_ssize_t q = ls;
#ifdef HAVE_TEDDY
    if (f->simd) {
        for (; q < le && q + 34 <= n; q += 32) {
            uint32_t bits = teddy_mask32(f, buf + q);
            if (le - q < 32)
                bits &= (1u << (le - q)) - 1;
            for (; bits; bits &= bits - 1)
                if (needles_at(f, buf, ls, le, q + __builtin_ctz(bits), found, cap, count) < 0)
                    return -1;
        }
    }
#else
    (void)n;
#endif
    for (; q < le; q++)
        if (needles_at(f, buf, ls, le, q, found, cap, count) < 0)
            return -1;
    return 0;
}

/* A tuple of the distinct needles (ascending indexes) inside buf[ls:le], or NULL with an exception set. */
static PyObject *
line_needle_tuple(const Finder *f, const unsigned char *buf, Py_ssize_t ls, Py_ssize_t le, Py_ssize_t n)
{
    Py_ssize_t local[64];
    Py_ssize_t *found = local, cap = 64, count = 0;
    Py_ssize_t *heap = NULL;
    if (line_needles(f, buf, ls, le, n, found, cap, &count) < 0) {
        /* more distinct needles in one line than fit on the stack: every needle at most once */
        cap = f->n_needles;
        heap = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(cap ? cap : 1));
        if (heap == NULL)
            return PyErr_NoMemory();
        found = heap;
        count = 0;
        line_needles(f, buf, ls, le, n, found, cap, &count);
    }
    /* ascending (insertion sort: a handful) */
    for (Py_ssize_t i = 1; i < count; i++) {
        Py_ssize_t x = found[i], j = i - 1;
        while (j >= 0 && found[j] > x) {
            found[j + 1] = found[j];
            j--;
        }
        found[j + 1] = x;
    }
    PyObject *t = PyTuple_New(count);
    if (t != NULL) {
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *o = PyLong_FromSsize_t(found[i]);
            if (o == NULL) {
                Py_CLEAR(t);
                break;
            }
            PyTuple_SET_ITEM(t, i, o);
        }
    }
    PyMem_Free(heap);
    return t;
}

PyDoc_STRVAR(find_lines_doc,
"find_lines(buf, start=0, max_lines=0, end=len(buf)) -> (hits, newlines, stop)\n\n"
"Every line of buf[start:end] holding a needle, in one pass, as if buf[start:end] were the whole buffer (nothing\n"
"outside it is read). hits: list of (line_start, line_end, line_index, needle) where offsets are into buf,\n"
"line_end excludes the newline (end at most), line_index counts the newlines between start and line_start, and\n"
"needle is the index of one needle found in that line. newlines: newlines in buf[start:stop]. stop: end, or, when\n"
"max_lines > 0 lines were found, just past the last one's newline (call again from there: start must be a line\n"
"start). every=True: needle is instead the tuple of every distinct needle inside the line (ascending indexes).");

static PyObject *
Finder_find_lines(Finder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buf", "start", "max_lines", "end", "every", NULL};
    Py_buffer view;
    Py_ssize_t start = 0, max_lines = 0, end = -1;
    int every = 0;
    if (self->blob == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Finder is not initialised");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*|nnnp", kwlist, &view, &start, &max_lines, &end, &every))
        return NULL;
    Py_ssize_t n = end < 0 ? view.len : end;
    if (n > view.len || start < 0 || start > n) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start or end is outside the buffer");
        return NULL;
    }
    HitVec hits = {NULL, 0, 0};
    Py_ssize_t newlines = 0, stop;
    Py_BEGIN_ALLOW_THREADS
    stop = scan(self, (const unsigned char *)view.buf, start, n, max_lines, &hits, &newlines);
    Py_END_ALLOW_THREADS
    if (stop < 0) {
        PyBuffer_Release(&view);
        PyMem_RawFree(hits.items);
        return PyErr_NoMemory();
    }
    PyObject *list = PyList_New(hits.len);
    if (list == NULL) {
        PyBuffer_Release(&view);
        PyMem_RawFree(hits.items);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < hits.len; i++) {
        Hit *h = &hits.items[i];
        PyObject *t;
        if (every) {
            PyObject *nd = line_needle_tuple(self, (const unsigned char *)view.buf, h->start, h->end, n);
            t = nd == NULL ? NULL : Py_BuildValue("(nnnN)", h->start, h->end, h->line, nd);
        } else {
            t = Py_BuildValue("(nnnn)", h->start, h->end, h->line, h->needle);
        }
        if (t == NULL) {
            Py_DECREF(list);
            PyBuffer_Release(&view);
            PyMem_RawFree(hits.items);
            return NULL;
        }
        PyList_SET_ITEM(list, i, t);
    }
    PyBuffer_Release(&view);
    PyMem_RawFree(hits.items);
    return Py_BuildValue("(Nnn)", list, newlines, stop);
}

/* ----------------------------------------------------------------------------------------------------------------- */
/* Candidate lines checked here: which patterns each line the finder flags matches (the scan's per-line work). */

/* What set_patterns() gives: per needle the patterns it may match and those it proves, the DFA patterns, and the
 * RE2 checks (Python callables), as bit sets over pattern ids. */
typedef struct Checks {
    Py_ssize_t k, words;    /* pattern ids 0..k-1; words: 64-bit words per set */
    uint64_t *cand;         /* [needle][words]: patterns a line holding the needle may match */
    uint64_t *sure;         /* [needle][words]: patterns a line holding the needle matches (a pure top-level branch) */
    uint64_t *always;       /* [words]: the DFA patterns (checked on lines a DFA search found) */
    PyObject **verify;      /* [k]: pattern i's RE2 Match (anchor, text, pos, endpos), or NULL */
    PyObject *set_match;    /* the RE2 Set's Match(text) over the searched patterns, or NULL */
    Py_ssize_t *searched;   /* Set index -> pattern id */
    Py_ssize_t n_searched;
    PyObject *unanchored;   /* the anchor argument of verify */
} Checks;

static void
checks_free(Checks *c)
{
    if (c == NULL)
        return;
    if (c->verify != NULL)
        for (Py_ssize_t i = 0; i < c->k; i++)
            Py_XDECREF(c->verify[i]);
    PyMem_Free(c->verify);
    Py_XDECREF(c->set_match);
    Py_XDECREF(c->unanchored);
    PyMem_Free(c->cand);
    PyMem_Free(c->sure);
    PyMem_Free(c->always);
    PyMem_Free(c->searched);
    PyMem_Free(c);
}

/* Set the bits of the ints of iterable obj (each in 0..k-1) in bits. -1 with an exception set on a bad item. */
static int
bits_of(PyObject *obj, Py_ssize_t k, uint64_t *bits)
{
    PyObject *seq = PySequence_Fast(obj, "pattern ids must be a sequence of int");
    if (seq == NULL)
        return -1;
    for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(seq); j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, j));
        if (i == -1 && PyErr_Occurred())
            goto fail;
        if (i < 0 || i >= k) {
            PyErr_SetString(PyExc_ValueError, "a pattern id is outside 0..k-1");
            goto fail;
        }
        bits[i >> 6] |= (uint64_t)1 << (i & 63);
    }
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    return -1;
}

PyDoc_STRVAR(set_patterns_doc,
"set_patterns(k, may_match, proves, always, verify, set_match, searched, unanchored)\n\n"
"The checks hits() runs on a candidate line, for pattern ids 0..k-1. may_match, proves: per needle, the ids a line\n"
"holding it may match and those it matches for sure. always: the ids also checked on a line a DFA search found.\n"
"verify: per id, a callable verify[i](unanchored, line, 0, len(line)) whose [0][0] >= 0 when the line matches\n"
"(RE2 Match), or None. set_match: a callable set_match(line) -> indexes into searched of the ids the line\n"
"matches (an RE2 Set), or None.");

static PyObject *
Finder_set_patterns(Finder *self, PyObject *args)
{
    Py_ssize_t k;
    PyObject *may_obj, *sure_obj, *always_obj, *verify_obj, *set_obj, *searched_obj, *unanchored;
    if (!PyArg_ParseTuple(args, "nOOOOOOO", &k, &may_obj, &sure_obj, &always_obj, &verify_obj, &set_obj,
                          &searched_obj, &unanchored))
        return NULL;
    if (k < 0) {
        PyErr_SetString(PyExc_ValueError, "k must be >= 0");
        return NULL;
    }
    PyObject *may = NULL, *sure = NULL, *ver = NULL, *srch = NULL;
    Checks *c = PyMem_Calloc(1, sizeof(Checks));
    if (c == NULL)
        return PyErr_NoMemory();
    c->k = k;
    c->words = (k + 63) / 64;
    size_t w = (size_t)(c->words ? c->words : 1);
    size_t nn = (size_t)(self->n_needles ? self->n_needles : 1);
    c->cand = PyMem_Calloc(nn * w, sizeof(uint64_t));
    c->sure = PyMem_Calloc(nn * w, sizeof(uint64_t));
    c->always = PyMem_Calloc(w, sizeof(uint64_t));
    c->verify = PyMem_Calloc((size_t)(k ? k : 1), sizeof(PyObject *));
    if (c->cand == NULL || c->sure == NULL || c->always == NULL || c->verify == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    may = PySequence_Fast(may_obj, "may_match must be a sequence");
    sure = PySequence_Fast(sure_obj, "proves must be a sequence");
    ver = PySequence_Fast(verify_obj, "verify must be a sequence");
    srch = PySequence_Fast(searched_obj, "searched must be a sequence");
    if (may == NULL || sure == NULL || ver == NULL || srch == NULL)
        goto fail;
    if (PySequence_Fast_GET_SIZE(may) != self->n_needles || PySequence_Fast_GET_SIZE(sure) != self->n_needles ||
        PySequence_Fast_GET_SIZE(ver) != k) {
        PyErr_SetString(PyExc_ValueError, "may_match and proves need one item per needle, verify one per id");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < self->n_needles; i++) {
        if (bits_of(PySequence_Fast_GET_ITEM(may, i), k, c->cand + i * c->words) < 0 ||
            bits_of(PySequence_Fast_GET_ITEM(sure, i), k, c->sure + i * c->words) < 0)
            goto fail;
        for (Py_ssize_t j = 0; j < c->words; j++)
            c->cand[i * c->words + j] |= c->sure[i * c->words + j];
    }
    if (bits_of(always_obj, k, c->always) < 0)
        goto fail;
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(ver, i);
        if (v != Py_None) {
            Py_INCREF(v);
            c->verify[i] = v;
        }
    }
    c->n_searched = PySequence_Fast_GET_SIZE(srch);
    c->searched = PyMem_Calloc((size_t)(c->n_searched ? c->n_searched : 1), sizeof(Py_ssize_t));
    if (c->searched == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t j = 0; j < c->n_searched; j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(srch, j));
        if (i == -1 && PyErr_Occurred())
            goto fail;
        if (i < 0 || i >= k) {
            PyErr_SetString(PyExc_ValueError, "a searched id is outside 0..k-1");
            goto fail;
        }
        c->searched[j] = i;
    }
    if (set_obj != Py_None) {
        Py_INCREF(set_obj);
        c->set_match = set_obj;
    }
    Py_INCREF(unanchored);
    c->unanchored = unanchored;
    Py_DECREF(may);
    Py_DECREF(sure);
    Py_DECREF(ver);
    Py_DECREF(srch);
    checks_free(self->checks);
    self->checks = c;
    Py_RETURN_NONE;
fail:
    Py_XDECREF(may);
    Py_XDECREF(sure);
    Py_XDECREF(ver);
    Py_XDECREF(srch);
    checks_free(c);
    return NULL;
}

/* 1 when hay[0:n] holds needle[0:m] (m == 0: always), as Python's ``in`` */
static int
holds(const unsigned char *hay, Py_ssize_t n, const unsigned char *needle, Py_ssize_t m)
{
    if (m == 0)
        return 1;
#if defined(__GLIBC__)
    return memmem(hay, (size_t)n, needle, (size_t)m) != NULL;
#else
    for (Py_ssize_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, (size_t)m) == 0)
            return 1;
    return 0;
#endif
}

/* 1 when match(unanchored, line, 0, len(line))[0][0] >= 0 (an RE2 Match: the line matches), 0 when not, -1 with an
 * exception set */
static int
match_at(PyObject *match, PyObject *unanchored, PyObject *line)
{
    PyObject *argv[4];
    PyObject *zero = PyLong_FromLong(0), *size = PyLong_FromSsize_t(PyBytes_GET_SIZE(line));
    if (zero == NULL || size == NULL) {
        Py_XDECREF(zero);
        Py_XDECREF(size);
        return -1;
    }
    argv[0] = unanchored;
    argv[1] = line;
    argv[2] = zero;
    argv[3] = size;
    PyObject *r = PyObject_Vectorcall(match, argv, 4, NULL);
    Py_DECREF(zero);
    Py_DECREF(size);
    if (r == NULL)
        return -1;
    Py_ssize_t at = -1;
    PyObject *first = PySequence_GetItem(r, 0);
    if (first != NULL) {
        PyObject *start = PySequence_GetItem(first, 0);
        if (start != NULL) {
            at = PyLong_AsSsize_t(start);
            Py_DECREF(start);
        }
        Py_DECREF(first);
    }
    Py_DECREF(r);
    if (PyErr_Occurred())
        return -1;
    return at >= 0;
}

/* 1 when verify[i] says line matches, 0 when not, -1 with an exception set */
static int
check_one(const Checks *c, Py_ssize_t i, PyObject *line)
{
    return match_at(c->verify[i], c->unanchored, line);
}

/* A list of the ids whose bits are set in bits (ascending), or NULL with an exception set */
static PyObject *
ids_list(const uint64_t *bits, Py_ssize_t words)
{
    Py_ssize_t count = 0;
    for (Py_ssize_t j = 0; j < words; j++)
        count += __builtin_popcountll(bits[j]);
    PyObject *list = PyList_New(count);
    if (list == NULL)
        return NULL;
    Py_ssize_t at = 0;
    for (Py_ssize_t j = 0; j < words; j++)
        for (uint64_t b = bits[j]; b; b &= b - 1) {
            PyObject *o = PyLong_FromSsize_t(j * 64 + __builtin_ctzll(b));
            if (o == NULL) {
                Py_DECREF(list);
                return NULL;
            }
            PyList_SET_ITEM(list, at++, o);
        }
    return list;
}

/* Into ids: the patterns line buf[ls:le] matches, given the needles inside it (cand, sure: their unions) and the
 * patterns no longer checked (spent). As the scan's Python did: no check left, the sure ones; one, its Match; more,
 * one Set pass (its answer as it is), or when it says none, each check's Match. 0, or -1 with an exception set. */
static int
line_ids(const Checks *c, const unsigned char *buf, Py_ssize_t ls, Py_ssize_t le, const uint64_t *cand,
         const uint64_t *sure, const uint64_t *spent, uint64_t *ids)
{
    Py_ssize_t words = c->words, nchecks = 0, only = -1;
    for (Py_ssize_t j = 0; j < words; j++) {
        ids[j] = sure[j];
        uint64_t chk = cand[j] & ~sure[j] & ~spent[j];
        if (chk) {
            nchecks += __builtin_popcountll(chk);
            only = j * 64 + __builtin_ctzll(chk);
        }
    }
    if (nchecks == 0)
        return 0;
    PyObject *line = PyBytes_FromStringAndSize((const char *)buf + ls, le - ls);
    if (line == NULL)
        return -1;
    int rc = 0;
    if (nchecks == 1 && c->verify[only] != NULL) {
        rc = check_one(c, only, line);
        if (rc > 0)
            ids[only >> 6] |= (uint64_t)1 << (only & 63);
        Py_DECREF(line);
        return rc < 0 ? -1 : 0;
    }
    if (c->set_match != NULL) {
        PyObject *got = PyObject_CallOneArg(c->set_match, line);
        if (got == NULL) {
            Py_DECREF(line);
            return -1;
        }
        PyObject *seq = PySequence_Fast(got, "the Set's Match must return a sequence");
        Py_DECREF(got);
        if (seq == NULL) {
            Py_DECREF(line);
            return -1;
        }
        Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
        if (m > 0) {
            memset(ids, 0, (size_t)words * sizeof(uint64_t));
            for (Py_ssize_t t = 0; t < m; t++) {
                Py_ssize_t x = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, t));
                if (x < 0 || x >= c->n_searched) {
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_ValueError, "the Set's Match gave an index outside searched");
                    Py_DECREF(seq);
                    Py_DECREF(line);
                    return -1;
                }
                Py_ssize_t i = c->searched[x];
                ids[i >> 6] |= (uint64_t)1 << (i & 63);
            }
            Py_DECREF(seq);
            Py_DECREF(line);
            return 0;
        }
        Py_DECREF(seq);
    }
    /* none, or the Set ran out of DFA memory: each check */
    for (Py_ssize_t j = 0; j < words && rc >= 0; j++)
        for (uint64_t b = cand[j] & ~sure[j] & ~spent[j]; b && rc >= 0; b &= b - 1) {
            Py_ssize_t i = j * 64 + __builtin_ctzll(b);
            if (c->verify[i] == NULL)
                continue;
            rc = check_one(c, i, line);
            if (rc > 0)
                ids[j] |= (uint64_t)1 << (i & 63);
        }
    Py_DECREF(line);
    return rc < 0 ? -1 : 0;
}

PyDoc_STRVAR(hits_doc,
"hits(buf, start, max_lines, end, line0, dfa, extra_starts, extra, left, spent) -> (hits, newlines, stop)\n\n"
"Every line of buf[start:end] that matches a pattern (set_patterns first), in order, as (line_start, line_end,\n"
"ids, line0 + line_index): ids the ascending pattern ids, line_index the newlines in buf[start:line_start]. A\n"
"candidate line (one holding a needle, as find_lines) is checked against the patterns of its needles, and also\n"
"against the always patterns when its start is in dfa (ascending starts of lines a DFA search found); a line of\n"
"dfa that holds no needle is checked against the always patterns alone (those not spent before it).\n"
"extra_starts: ascending starts of lines already checked, extra: start -> their ids (added to the line's). The\n"
"lines of dfa and extra are numbered in the same pass (the search stops at each of them). max_lines > 0: at most\n"
"about that many candidate lines per call; stop is where to go on from (end when done). left: None, or a dict\n"
"id -> how many more of its lines count: each candidate line matching the id takes one off (in the dict), and at 0\n"
"the id is no longer checked on later lines and spent[id] = that line's start (spent, a dict, is also read at the\n"
"start: those ids are not checked). Only dfa and extra items in [start, end) are looked at.\n"
"bulk: None, or (id, guard, max_len, no_base, texts, nos, starts), three lists: a line whose ids are id alone, that\n"
"starts after guard, ends with a newline before end and is at most max_len bytes long, is not in hits; its text\n"
"(decoded as UTF-8 with replacement, trailing \\r removed) is appended to texts, no_base + line0 + line_index to\n"
"nos and its start to starts (the frequent lines of one pattern, which the caller hands on in bulk).");

typedef struct {
    Py_ssize_t pos;
    int dfa;       /* a DFA search found the line */
    PyObject *ids; /* borrowed: extra[pos], or NULL */
} Mark;

/* One hits() call's state */
typedef struct {
    const Finder *f;
    const Checks *c;
    const unsigned char *buf;
    Py_ssize_t n;
    uint64_t *cand, *sure, *ids, *spent, *capped;
    PyObject *out, *left, *spent_dict;
    /* bulk lines (see hits_doc): b_texts NULL when none are taken apart */
    Py_ssize_t b_id, b_guard, b_max, b_base;
    PyObject *b_texts, *b_nos, *b_starts;
} HitsState;

/* Whether the ids of the line are the bulk id alone */
static inline int
bulk_ids(const HitsState *st)
{
    for (Py_ssize_t j = 0; j < st->c->words; j++)
        if (st->ids[j] != (j == st->b_id >> 6 ? (uint64_t)1 << (st->b_id & 63) : 0))
            return 0;
    return 1;
}

/* Append a bulk line's text, number and start to the bulk lists; -1 with an exception set */
static int
emit_bulk(HitsState *st, Py_ssize_t ls, Py_ssize_t le, Py_ssize_t line)
{
    Py_ssize_t e = le;
    while (e > ls && st->buf[e - 1] == '\r')
        e--; /* (a \r byte is never part of a UTF-8 sequence: the same as removing it after decoding) */
    PyObject *text = PyUnicode_DecodeUTF8((const char *)st->buf + ls, e - ls, "replace");
    PyObject *no = text == NULL ? NULL : PyLong_FromSsize_t(st->b_base + line);
    PyObject *at = no == NULL ? NULL : PyLong_FromSsize_t(ls);
    int rc = at == NULL || PyList_Append(st->b_texts, text) < 0 || PyList_Append(st->b_nos, no) < 0 ||
                     PyList_Append(st->b_starts, at) < 0
                 ? -1
                 : 0;
    Py_XDECREF(text);
    Py_XDECREF(no);
    Py_XDECREF(at);
    return rc;
}

/* ids |= the ints of the sequence obj (pattern ids); -1 with an exception set */
static int
or_ids(const HitsState *st, PyObject *obj)
{
    return bits_of(obj, st->c->k, st->ids);
}

/* Append (ls, le, ids, line) to the output when ids holds any; -1 with an exception set */
static int
emit(HitsState *st, Py_ssize_t ls, Py_ssize_t le, Py_ssize_t line)
{
    int any = 0;
    for (Py_ssize_t j = 0; j < st->c->words; j++)
        any |= st->ids[j] != 0;
    if (!any)
        return 0;
    if (st->b_texts != NULL && ls > st->b_guard && le < st->n && le - ls <= st->b_max && bulk_ids(st))
        return emit_bulk(st, ls, le, line);
    PyObject *list = ids_list(st->ids, st->c->words);
    PyObject *t = list == NULL ? NULL : Py_BuildValue("(nnNn)", ls, le, list, line);
    if (t == NULL || PyList_Append(st->out, t) < 0) {
        Py_XDECREF(t);
        return -1;
    }
    Py_DECREF(t);
    return 0;
}

/* Take one off left[i] for each capped id of the candidate line at ls; spend those that reach 0 */
static int
take_caps(HitsState *st, Py_ssize_t ls)
{
    for (Py_ssize_t j = 0; j < st->c->words; j++)
        for (uint64_t b = st->ids[j] & st->capped[j]; b; b &= b - 1) {
            Py_ssize_t i = j * 64 + __builtin_ctzll(b);
            PyObject *key = PyLong_FromSsize_t(i);
            if (key == NULL)
                return -1;
            PyObject *have = PyDict_GetItemWithError(st->left, key);
            Py_ssize_t rest = have == NULL ? 0 : PyLong_AsSsize_t(have) - 1;
            PyObject *val = PyErr_Occurred() ? NULL : PyLong_FromSsize_t(rest);
            int bad = val == NULL || PyDict_SetItem(st->left, key, val) < 0;
            Py_XDECREF(val);
            if (!bad && rest == 0) {
                PyObject *at = PyLong_FromSsize_t(ls);
                bad = at == NULL || PyDict_SetItem(st->spent_dict, key, at) < 0;
                Py_XDECREF(at);
                st->spent[j] |= (uint64_t)1 << (i & 63);
            }
            Py_DECREF(key);
            if (bad)
                return -1;
        }
    return 0;
}

/* A candidate line buf[ls:le] (mark: the DFA/extra item at the same start, or NULL) */
static int
candidate_line(HitsState *st, Py_ssize_t ls, Py_ssize_t le, Py_ssize_t line, const Mark *mark)
{
    const Finder *f = st->f;
    const Checks *c = st->c;
    Py_ssize_t words = c->words;
    Py_ssize_t local[64];
    Py_ssize_t *found = local, count = 0, *heap = NULL;
    if (line_needles(f, st->buf, ls, le, st->n, found, 64, &count) < 0) {
        /* more distinct needles in one line than fit on the stack: every needle at most once */
        heap = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(f->n_needles ? f->n_needles : 1));
        if (heap == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        found = heap;
        count = 0;
        line_needles(f, st->buf, ls, le, st->n, found, f->n_needles, &count);
    }
    int on_dfa = mark != NULL && mark->dfa;
    for (Py_ssize_t j = 0; j < words; j++) {
        st->cand[j] = on_dfa ? c->always[j] : 0;
        st->sure[j] = 0;
    }
    for (Py_ssize_t t = 0; t < count; t++) {
        const uint64_t *cm = c->cand + found[t] * words, *sm = c->sure + found[t] * words;
        for (Py_ssize_t j = 0; j < words; j++) {
            st->cand[j] |= cm[j];
            st->sure[j] |= sm[j];
        }
    }
    PyMem_Free(heap);
    if (line_ids(c, st->buf, ls, le, st->cand, st->sure, st->spent, st->ids) < 0)
        return -1;
    if (st->left != NULL && take_caps(st, ls) < 0)
        return -1;
    if (mark != NULL && mark->ids != NULL && or_ids(st, mark->ids) < 0)
        return -1;
    return emit(st, ls, le, line);
}

/* A line of dfa or extra that holds no needle: the always patterns not spent (when a DFA search found it), and its
 * extra ids */
static int
mark_line(HitsState *st, const Mark *mark, Py_ssize_t line)
{
    const Checks *c = st->c;
    Py_ssize_t ls = mark->pos;
    const unsigned char *after = memchr(st->buf + ls, '\n', (size_t)(st->n - ls));
    Py_ssize_t le = after ? after - st->buf : st->n;
    memset(st->ids, 0, (size_t)c->words * sizeof(uint64_t));
    if (mark->dfa) {
        PyObject *text = NULL;
        for (Py_ssize_t j = 0; j < c->words; j++)
            for (uint64_t b = c->always[j] & ~st->spent[j]; b; b &= b - 1) {
                Py_ssize_t i = j * 64 + __builtin_ctzll(b);
                if (c->verify[i] == NULL)
                    continue;
                if (text == NULL && (text = PyBytes_FromStringAndSize((const char *)st->buf + ls, le - ls)) == NULL)
                    return -1;
                int rc = check_one(c, i, text);
                if (rc < 0) {
                    Py_DECREF(text);
                    return -1;
                }
                if (rc > 0)
                    st->ids[j] |= (uint64_t)1 << (i & 63);
            }
        Py_XDECREF(text);
    }
    if (mark->ids != NULL && or_ids(st, mark->ids) < 0)
        return -1;
    return emit(st, ls, le, line);
}

/* The first index of the ascending int sequence seq whose item is >= at; -1 with an exception set */
static Py_ssize_t
first_at(PyObject *seq, Py_ssize_t at)
{
    Py_ssize_t lo = 0, hi = PySequence_Fast_GET_SIZE(seq);
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        Py_ssize_t v = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, mid));
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v < at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The marks (items of dfa and extra_starts in [start, n), merged, ascending) into *out (*count of them); -1 */
static int
merge_marks(PyObject *dfa, PyObject *xs, PyObject *extra, Py_ssize_t start, Py_ssize_t n, Mark **out,
            Py_ssize_t *count)
{
    Py_ssize_t di = first_at(dfa, start), xi = first_at(xs, start);
    if (di < 0 || xi < 0)
        return -1;
    Py_ssize_t nd = PySequence_Fast_GET_SIZE(dfa), nx = PySequence_Fast_GET_SIZE(xs);
    Mark *marks = PyMem_Malloc(sizeof(Mark) * (size_t)(nd - di + nx - xi + 1));
    if (marks == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t m = 0, last = -1;
    while (di < nd || xi < nx) {
        Py_ssize_t dv = PY_SSIZE_T_MAX, xv = PY_SSIZE_T_MAX;
        if (di < nd && (dv = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(dfa, di))) == -1 && PyErr_Occurred())
            goto fail;
        PyObject *xo = xi < nx ? PySequence_Fast_GET_ITEM(xs, xi) : NULL;
        if (xo != NULL && (xv = PyLong_AsSsize_t(xo)) == -1 && PyErr_Occurred())
            goto fail;
        Py_ssize_t v = dv < xv ? dv : xv;
        if (v >= n)
            break;
        if (v <= last) {
            PyErr_SetString(PyExc_ValueError, "dfa and extra_starts must ascend");
            goto fail;
        }
        Mark *mk = &marks[m++];
        mk->pos = last = v;
        mk->dfa = dv == v;
        mk->ids = NULL;
        if (dv == v)
            di++;
        if (xv == v) {
            xi++;
            mk->ids = PyDict_GetItemWithError(extra, xo);
            if (mk->ids == NULL) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_KeyError, "a start of extra_starts is not in extra");
                goto fail;
            }
        }
    }
    *out = marks;
    *count = m;
    return 0;
fail:
    PyMem_Free(marks);
    return -1;
}

static PyObject *
Finder_hits(Finder *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, max_lines, end, line0;
    PyObject *dfa_obj, *xs_obj, *extra, *left, *spent, *bulk = Py_None;
    Py_ssize_t b_id = -1, b_guard = 0, b_max = 0, b_base = 0;
    PyObject *b_texts = NULL, *b_nos = NULL, *b_starts = NULL;
    const Checks *c = self->checks;
    if (self->blob == NULL || c == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Finder has no patterns (set_patterns)");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*nnnnOOOOO|O", &view, &start, &max_lines, &end, &line0, &dfa_obj, &xs_obj, &extra,
                          &left, &spent, &bulk))
        return NULL;
    if (bulk != Py_None &&
        (!PyTuple_Check(bulk) || !PyArg_ParseTuple(bulk, "nnnnO!O!O!", &b_id, &b_guard, &b_max, &b_base, &PyList_Type,
                                                   &b_texts, &PyList_Type, &b_nos, &PyList_Type, &b_starts) ||
         b_id < 0 || b_id >= c->k)) {
        PyBuffer_Release(&view);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "bulk must be None or (id, guard, max_len, no_base, list, list, list)");
        return NULL;
    }
    Py_ssize_t n = end < 0 ? view.len : end;
    if (n > view.len || start < 0 || start > n || !PyDict_Check(spent) || !PyDict_Check(extra) ||
        (left != Py_None && !PyDict_Check(left))) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start or end outside the buffer, or extra/left/spent not dicts");
        return NULL;
    }
    PyObject *dfa = PySequence_Fast(dfa_obj, "dfa must be a sequence of int");
    PyObject *xs = dfa == NULL ? NULL : PySequence_Fast(xs_obj, "extra_starts must be a sequence of int");
    Py_ssize_t words = c->words;
    uint64_t *bits = PyMem_Calloc((size_t)(5 * (words ? words : 1)), sizeof(uint64_t));
    HitsState st = {self,           c,
                    (const unsigned char *)view.buf, n,
                    bits,           bits + words,
                    bits + 2 * words, bits + 3 * words,
                    bits + 4 * words, PyList_New(0),
                    left == Py_None ? NULL : left, spent,
                    b_id,           b_guard,
                    b_max,          b_base,
                    b_texts,        b_nos,
                    b_starts};
    HitVec cands = {NULL, 0, 0};
    Mark *marks = NULL;
    Py_ssize_t nm = 0, nl_total = 0, stop = n;
    if (dfa == NULL || xs == NULL || bits == NULL || st.out == NULL) {
        if (bits == NULL)
            PyErr_NoMemory();
        goto fail;
    }
    {
        PyObject *key, *value;
        Py_ssize_t it = 0;
        while (PyDict_Next(spent, &it, &key, &value)) {
            Py_ssize_t i = PyLong_AsSsize_t(key);
            if (i >= 0 && i < c->k)
                st.spent[i >> 6] |= (uint64_t)1 << (i & 63);
        }
        it = 0;
        if (st.left != NULL)
            while (PyDict_Next(left, &it, &key, &value)) {
                Py_ssize_t i = PyLong_AsSsize_t(key);
                if (i >= 0 && i < c->k)
                    st.capped[i >> 6] |= (uint64_t)1 << (i & 63);
            }
        if (PyErr_Occurred())
            goto fail;
    }
    if (merge_marks(dfa, xs, extra, start, n, &marks, &nm) < 0)
        goto fail;
    /* the search stops at each mark (a line start: no needle crosses it), so the newlines before it are known */
    Py_ssize_t seg = start, mi = 0, got = 0;
    const Mark *at_seg = NULL; /* the mark at seg */
    if (nm > 0 && marks[0].pos == start)
        at_seg = &marks[mi++];
    for (;;) {
        Py_ssize_t seg_end = mi < nm ? marks[mi].pos : n, nl = 0, s_stop;
        cands.len = 0;
        Py_BEGIN_ALLOW_THREADS
        s_stop = scan(self, st.buf, seg, seg_end, max_lines > 0 ? max_lines - got : 0, &cands, &nl);
        Py_END_ALLOW_THREADS
        if (s_stop < 0) {
            PyErr_NoMemory();
            goto fail;
        }
        Py_ssize_t h = 0;
        if (at_seg != NULL) {
            int rc;
            if (cands.len > 0 && cands.items[0].start == seg) {
                rc = candidate_line(&st, seg, cands.items[0].end, line0 + nl_total + cands.items[0].line, at_seg);
                h = 1;
            } else {
                rc = mark_line(&st, at_seg, line0 + nl_total);
            }
            if (rc < 0)
                goto fail;
        }
        for (; h < cands.len; h++)
            if (candidate_line(&st, cands.items[h].start, cands.items[h].end, line0 + nl_total + cands.items[h].line,
                               NULL) < 0)
                goto fail;
        nl_total += nl;
        got += cands.len;
        if (s_stop < seg_end) { /* a full page */
            stop = s_stop;
            break;
        }
        if (mi >= nm || (max_lines > 0 && got >= max_lines)) {
            stop = seg_end;
            break;
        }
        seg = seg_end;
        at_seg = &marks[mi++];
    }
    PyMem_Free(marks);
    PyMem_RawFree(cands.items);
    PyMem_Free(bits);
    Py_DECREF(dfa);
    Py_DECREF(xs);
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nnn)", st.out, nl_total, stop);
fail:
    PyMem_Free(marks);
    PyMem_RawFree(cands.items);
    PyMem_Free(bits);
    Py_XDECREF(st.out);
    Py_XDECREF(dfa);
    Py_XDECREF(xs);
    PyBuffer_Release(&view);
    return NULL;
}

PyDoc_STRVAR(sample_doc,
"sample(buf, bounds, stride, base=-1, sure=None, check=None, unanchored=None) -> list[list[tuple[int, int]]]\n\n"
"Per (lo, hi) of bounds (ascending pieces of buf), the lines a stride walk over buf[lo:hi] proposes, as\n"
"(line_start, line_end) pairs: from pos = lo, the first line holding a needle that starts at or after pos (a\n"
"line that began before pos, when pos is not a line start, is given from its real start, never before lo),\n"
"then pos = max(line_start + stride, line_end + 1), until no line is left. The caller checks the lines and\n"
"walks on by itself after the first that fails its check (as if every line proposed here passed). base >= 0 (at\n"
"most the first piece's lo): each pair gets a third item, the newlines in buf[base:line_start]. check (a callable\n"
"check(unanchored, line, 0, len(line)) whose [0][0] >= 0 when the line matches, an RE2 Match; with sure, a\n"
"sequence of bytes: a line holding one of them matches without the call): each line is checked here, and per\n"
"piece the answer is (the starts of the lines that passed, the end of the first that failed or -1): the walk stops\n"
"at that line (the caller walks on from its end).");

static PyObject *
Finder_sample(Finder *self, PyObject *args)
{
    Py_buffer view;
    PyObject *bounds_obj;
    Py_ssize_t stride, base = -1;
    PyObject *sure_obj = Py_None, *check = Py_None, *unanchored = Py_None, *sure = NULL;
    if (self->blob == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Finder is not initialised");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*On|nOOO", &view, &bounds_obj, &stride, &base, &sure_obj, &check, &unanchored))
        return NULL;
    Py_ssize_t counted_to = base, lines = 0; /* newlines in buf[base:counted_to] */
    PyObject *seq = PySequence_Fast(bounds_obj, "bounds must be a sequence of (lo, hi) pairs");
    if (seq == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_ssize_t n_sure = 0;
    if (check != Py_None) {
        if (base >= 0 || !PyCallable_Check(check)) {
            PyErr_SetString(PyExc_ValueError, "check must be callable, and base is not given with it");
            goto fail_args;
        }
        if (sure_obj != Py_None) {
            sure = PySequence_Fast(sure_obj, "sure must be a sequence of bytes");
            if (sure == NULL)
                goto fail_args;
            n_sure = PySequence_Fast_GET_SIZE(sure);
            for (Py_ssize_t j = 0; j < n_sure; j++)
                if (!PyBytes_Check(PySequence_Fast_GET_ITEM(sure, j))) {
                    PyErr_SetString(PyExc_TypeError, "sure must be a sequence of bytes");
                    goto fail_args;
                }
        }
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t n_pieces = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n_pieces);
    HitVec hits = {NULL, 0, 0};
    if (out == NULL)
        goto fail;
    for (Py_ssize_t k = 0; k < n_pieces; k++) {
        Py_ssize_t lo, hi;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "nn;bounds must hold (lo, hi) pairs", &lo, &hi))
            goto fail;
        if (lo < 0 || hi > view.len || lo > hi) {
            PyErr_SetString(PyExc_ValueError, "a piece lies outside the buffer");
            goto fail;
        }
        if (base >= 0 && lo < counted_to) {
            PyErr_SetString(PyExc_ValueError, "pieces must ascend from base");
            goto fail;
        }
        PyObject *chain = PyList_New(0);
        if (chain == NULL)
            goto fail;
        PyList_SET_ITEM(out, k, chain);
        Py_ssize_t pos = lo, failed = -1;
        while (pos < hi) {
            Py_ssize_t nl;
            hits.len = 0;
            if (scan(self, buf, pos, hi, 1, &hits, &nl) < 0) {
                PyErr_NoMemory();
                goto fail;
            }
            if (hits.len == 0)
                break;
            Py_ssize_t ls = hits.items[0].start, le = hits.items[0].end;
            if (ls == pos && pos > lo && buf[pos - 1] != '\n') {
                const unsigned char *before = last_nl(buf + lo, buf + pos);
                ls = before ? (before - buf) + 1 : lo;
            }
            PyObject *t;
            if (check != Py_None) {
                /* checked here: a sure literal inside the line, else the regex */
                int ok = 0;
                for (Py_ssize_t j = 0; j < n_sure && !ok; j++) {
                    PyObject *lit = PySequence_Fast_GET_ITEM(sure, j);
                    ok = holds(buf + ls, le - ls, (const unsigned char *)PyBytes_AS_STRING(lit), PyBytes_GET_SIZE(lit));
                }
                if (!ok) {
                    PyObject *line = PyBytes_FromStringAndSize((const char *)buf + ls, le - ls);
                    ok = line == NULL ? -1 : match_at(check, unanchored, line);
                    Py_XDECREF(line);
                    if (ok < 0)
                        goto fail;
                }
                if (!ok) {
                    failed = le;
                    break;
                }
                t = PyLong_FromSsize_t(ls);
            } else if (base >= 0) {
                lines += count_nl(buf + counted_to, ls - counted_to);
                counted_to = ls;
                t = Py_BuildValue("(nnn)", ls, le, lines);
            } else {
                t = Py_BuildValue("(nn)", ls, le);
            }
            if (t == NULL || PyList_Append(chain, t) < 0) {
                Py_XDECREF(t);
                goto fail;
            }
            Py_DECREF(t);
            pos = ls + stride > le + 1 ? ls + stride : le + 1;
        }
        if (check != Py_None) {
            PyObject *pair = Py_BuildValue("(On)", chain, failed);
            if (pair == NULL)
                goto fail;
            PyList_SET_ITEM(out, k, pair); /* pair holds chain now: the list's reference to it goes */
            Py_DECREF(chain);
        }
    }
    PyMem_RawFree(hits.items);
    Py_XDECREF(sure);
    Py_DECREF(seq);
    PyBuffer_Release(&view);
    return out;
fail:
    PyMem_RawFree(hits.items);
    Py_XDECREF(out);
fail_args:
    Py_XDECREF(sure);
    Py_DECREF(seq);
    PyBuffer_Release(&view);
    return NULL;
}

PyDoc_STRVAR(rfind_doc,
"rfind(buf, lo=0, hi=len(buf)) -> int\n\n"
"The start of a needle occurring inside buf[lo:hi] in the last line that holds one (searching backwards from hi;\n"
"the line's other needles may start later), or -1. Like the largest bytes.rfind(needle, lo, hi) over the needles,\n"
"up to which needle of that line is named.");

static PyObject *
Finder_rfind(Finder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buf", "lo", "hi", NULL};
    Py_buffer view;
    Py_ssize_t lo = 0, hi = -1;
    if (self->blob == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Finder is not initialised");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*|nn", kwlist, &view, &lo, &hi))
        return NULL;
    if (hi < 0 || hi > view.len)
        hi = view.len;
    if (lo < 0)
        lo = 0;
    Py_ssize_t found = -1;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_BEGIN_ALLOW_THREADS
    /* a match lies in [lo, hi): its anchor pair starts in [lo, hi - 2], a one-byte needle in [lo, hi - 1] */
    if (lo < hi && self->single[buf[hi - 1]] >= 0)
        found = hi - 1;
    for (Py_ssize_t p = hi - 2; found < 0 && p >= lo; p--) {
        if (!self->tab[pair_at(buf + p)])
            continue;
        Py_ssize_t st;
        if (verify(self, buf, lo, hi, p, &st) >= 0)
            found = st;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(found);
}

static PyObject *
Finder_len(Finder *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSsize_t(self->n_needles);
}

static PyObject *
Finder_simd_filter(Finder *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->simd)
        Py_RETURN_NONE;
    return Py_BuildValue("(idi)", self->t_sets * 8, self->t_rate, self->t_width);
}

/* a copy of src's n bytes in new memory (at least one byte), or NULL */
static void *
mem_dup(const void *src, size_t n)
{
    void *p = PyMem_Malloc(n ? n : 1);
    if (p != NULL && n)
        memcpy(p, src, n);
    return p;
}

static PyObject *
Finder_copy(Finder *self, PyObject *Py_UNUSED(ignored))
{
    if (self->blob == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Finder is not initialised");
        return NULL;
    }
    Finder *c = (Finder *)Py_TYPE(self)->tp_alloc(Py_TYPE(self), 0);
    if (c == NULL)
        return NULL;
    /* every value field as it is (the filter's masks, the one-byte and bucket tables), then the copy's own arrays */
    memcpy((char *)c + sizeof(PyObject), (char *)self + sizeof(PyObject), sizeof(Finder) - sizeof(PyObject));
    c->blob = NULL;
    c->offset = c->length = c->anchor = NULL;
    c->tab = NULL;
    c->bucket_of = c->bucket_start = c->items = NULL;
    c->head = c->head_mask = NULL;
    c->checks = NULL;
    Py_ssize_t n = self->n_needles;
    size_t nn = (size_t)(n ? n : 1), total = n ? (size_t)(self->offset[n - 1] + self->length[n - 1]) : 0;
    size_t items = self->bucket_start[self->n_buckets];
    c->blob = mem_dup(self->blob, total);
    c->offset = mem_dup(self->offset, nn * sizeof(Py_ssize_t));
    c->length = mem_dup(self->length, nn * sizeof(Py_ssize_t));
    c->anchor = mem_dup(self->anchor, nn * sizeof(Py_ssize_t));
    c->tab = mem_dup(self->tab, 65536);
    c->bucket_of = mem_dup(self->bucket_of, 65536 * sizeof(uint32_t));
    c->bucket_start = mem_dup(self->bucket_start, ((size_t)self->n_buckets + 1) * sizeof(uint32_t));
    c->items = mem_dup(self->items, (items ? items : 1) * sizeof(uint32_t));
    c->head = mem_dup(self->head, nn * sizeof(uint64_t));
    c->head_mask = mem_dup(self->head_mask, nn * sizeof(uint64_t));
    if (!c->blob || !c->offset || !c->length || !c->anchor || !c->tab || !c->bucket_of || !c->bucket_start ||
        !c->items || !c->head || !c->head_mask) {
        Py_DECREF(c);
        return PyErr_NoMemory();
    }
    return (PyObject *)c;
}

static PyMethodDef Finder_methods[] = {
    {"find_lines", (PyCFunction)(void (*)(void))Finder_find_lines, METH_VARARGS | METH_KEYWORDS, find_lines_doc},
    {"rfind", (PyCFunction)(void (*)(void))Finder_rfind, METH_VARARGS | METH_KEYWORDS, rfind_doc},
    {"sample", (PyCFunction)Finder_sample, METH_VARARGS, sample_doc},
    {"set_patterns", (PyCFunction)Finder_set_patterns, METH_VARARGS, set_patterns_doc},
    {"hits", (PyCFunction)Finder_hits, METH_VARARGS, hits_doc},
    {"needle_count", (PyCFunction)Finder_len, METH_NOARGS, "Number of needles."},
    {"copy", (PyCFunction)Finder_copy, METH_NOARGS,
     "A new Finder with the same needles, anchors and filter (what the same arguments would build, without the\n"
     "filter's cost rule), and no patterns set (set_patterns)."},
    {"simd_filter", (PyCFunction)Finder_simd_filter, METH_NOARGS,
     "(buckets, estimated pass rate per position, fingerprint bytes) of the AVX2 candidate filter scan() runs\n"
     "before its scalar loop, or None when only the scalar loop runs (no AVX2, simd=False, or the rule found no\n"
     "filter that pays). The rate is on the profile when one was given, else on a static prior of log text."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FinderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "debug_training_logs.logs._linescan.Finder",
    .tp_basicsize = sizeof(Finder),
    .tp_dealloc = (destructor)Finder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Finder(needles, anchors=None, simd=None, width=0, profile=None): the lines holding any of the needles\n"
              "(bytes), one pass per buffer. anchors: per needle, the offset of the byte pair it is filtered on\n"
              "(choose_anchors); default: a static guess of the rarest pair. simd: None: the AVX2 candidate filter\n"
              "runs where the CPU has AVX2 and the needles' filter passes few positions (simd_filter()); False: never\n"
              "(the scalar loop, for tests); True: whenever the CPU has AVX2; 8, 16 or 32: with that many buckets.\n"
              "width: the filter's fingerprint bytes (2 or 3; 0: the rule chooses). profile: pair_profile() of a\n"
              "sample of the text (the buckets are merged so that its frequent pairs pass few). Results are the same\n"
              "either way, up to which needle of a line holding several is named (every=False) with width 3.",
    .tp_methods = Finder_methods,
    .tp_init = (initproc)Finder_init,
    .tp_new = PyType_GenericNew,
};

/* ----------------------------------------------------------------------------------------------------------------- */
/* module functions */

/* The (buffer, needles) arguments of choose_anchors and count_literals: *view filled and *seq a fast sequence whose
 * items are all bytes (non-empty ones when nonempty). On failure an exception is set, nothing is held, -1 returned. */
static int
buffer_and_needles(PyObject *args, Py_buffer *view, PyObject **seq, int nonempty)
{
    PyObject *needles_obj;
    if (!PyArg_ParseTuple(args, "y*O", view, &needles_obj))
        return -1;
    *seq = PySequence_Fast(needles_obj, "needles must be a sequence of bytes");
    if (*seq == NULL) {
        PyBuffer_Release(view);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(*seq); i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(*seq, i);
        if (!PyBytes_Check(o) || (nonempty && PyBytes_GET_SIZE(o) == 0)) {
            PyErr_SetString(PyExc_TypeError,
                            nonempty ? "every needle must be non-empty bytes" : "every needle must be bytes");
            Py_CLEAR(*seq);
            PyBuffer_Release(view);
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(choose_anchors_doc,
"choose_anchors(sample, needles) -> list[int]\n\n"
"Per needle, the offset of its byte pair that occurs least often in sample (ties: the static guess), 0 for\n"
"one-byte needles. Passed to Finder as anchors.");

static PyObject *
choose_anchors(PyObject *Py_UNUSED(mod), PyObject *args)
{
    Py_buffer view;
    PyObject *seq;
    if (buffer_and_needles(args, &view, &seq, 0) < 0)
        return NULL;
    uint32_t *count = PyMem_Calloc(65536, sizeof(uint32_t));
    if (count == NULL) {
        Py_DECREF(seq);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    for (Py_ssize_t i = 0; i + 1 < view.len; i++) {
        unsigned v = pair_at(b + i);
        if (count[v] < UINT32_MAX)
            count[v]++;
    }
    PyBuffer_Release(&view);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(o);
        Py_ssize_t len = PyBytes_GET_SIZE(o);
        Py_ssize_t k = 0;
        uint64_t best = UINT64_MAX;
        for (Py_ssize_t j = 0; j + 1 < len; j++) {
            uint64_t cost = (uint64_t)count[pair_at(s + j)] * 64 + byte_prior(s[j]) * byte_prior(s[j + 1]);
            if (cost < best) {
                best = cost;
                k = j;
            }
        }
        PyObject *ko = PyLong_FromSsize_t(k);
        if (ko == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, ko);
    }
    PyMem_Free(count);
    Py_DECREF(seq);
    return out;
fail:
    Py_XDECREF(out);
    PyMem_Free(count);
    Py_DECREF(seq);
    return NULL;
}

PyDoc_STRVAR(pair_profile_doc,
"pair_profile(sample, limit=1024) -> bytes\n\n"
"The byte pairs of sample, for Finder(profile=...): the number of pair positions (uint32), then the limit most\n"
"frequent pairs, most frequent first, each as (b0 | b1 << 8: uint16, count: uint32), little-endian. The Finder\n"
"merges its anchors into the SIMD filter's buckets so that the sample's frequent pairs pass few of them.");

static int
profile_order(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0; /* descending: count in the high bits, then the pair */
}

static PyObject *
pair_profile(PyObject *Py_UNUSED(mod), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t limit = 1024;
    if (!PyArg_ParseTuple(args, "y*|n", &view, &limit))
        return NULL;
    if (limit < 0)
        limit = 0;
    uint32_t *count = PyMem_Calloc(65536, sizeof(uint32_t));
    uint64_t *order = PyMem_Malloc(65536 * sizeof(uint64_t));
    if (count == NULL || order == NULL) {
        PyMem_Free(count);
        PyMem_Free(order);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t total = view.len > 1 ? view.len - 1 : 0;
    if (total > (Py_ssize_t)UINT32_MAX)
        total = UINT32_MAX;
    for (Py_ssize_t i = 0; i < total; i++)
        count[pair_at(b + i)]++;
    PyBuffer_Release(&view);
    Py_ssize_t k = 0;
    for (unsigned v = 0; v < 65536; v++)
        if (count[v])
            order[k++] = (uint64_t)count[v] << 16 | v;
    qsort(order, (size_t)k, sizeof(uint64_t), profile_order);
    if (k > limit)
        k = limit;
    PyObject *out = PyBytes_FromStringAndSize(NULL, 4 + 6 * k);
    if (out != NULL) {
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
        uint32_t t = (uint32_t)total;
        for (int j = 0; j < 4; j++)
            o[j] = (unsigned char)(t >> (8 * j));
        for (Py_ssize_t r = 0; r < k; r++) {
            unsigned char *e = o + 4 + 6 * r;
            uint32_t v = (uint32_t)(order[r] & 0xffff), c = (uint32_t)(order[r] >> 16);
            e[0] = (unsigned char)v;
            e[1] = (unsigned char)(v >> 8);
            for (int j = 0; j < 4; j++)
                e[2 + j] = (unsigned char)(c >> (8 * j));
        }
    }
    PyMem_Free(count);
    PyMem_Free(order);
    return out;
}

PyDoc_STRVAR(line_indexes_doc,
"line_indexes(buf, positions, start=0) -> list[int]\n\n"
"For ascending offsets into buf (start..len(buf)), the number of newlines in buf[start:offset] for each: one\n"
"counting pass in all.");

static PyObject *
line_indexes(PyObject *Py_UNUSED(mod), PyObject *args)
{
    Py_buffer view;
    PyObject *pos_obj;
    Py_ssize_t from = 0;
    if (!PyArg_ParseTuple(args, "y*O|n", &view, &pos_obj, &from))
        return NULL;
    if (from < 0 || from > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start is outside the buffer");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(pos_obj, "positions must be a sequence of int");
    if (seq == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        goto fail;
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t at = from, nl = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t p = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));
        if (p == -1 && PyErr_Occurred())
            goto fail;
        if (p < at || p > view.len) {
            PyErr_SetString(PyExc_ValueError, "positions must ascend and lie inside the buffer");
            goto fail;
        }
        nl += count_nl(b + at, p - at);
        at = p;
        PyObject *o = PyLong_FromSsize_t(nl);
        if (o == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, o);
    }
    Py_DECREF(seq);
    PyBuffer_Release(&view);
    return out;
fail:
    Py_XDECREF(out);
    Py_DECREF(seq);
    PyBuffer_Release(&view);
    return NULL;
}


/* Rank prefixes. collect_ranks visits every "[r" of a span in order (found 16 positions per SSE2 step; with AVX2 64
 * per step, gathered for 4 KiB before they are visited) and parses a '[rankN]:' or '[rankN] ' there. Lines of a torchrun --tee or
 * log_line_prefix file all start with one of a few such prefixes, so each prefix of up to 16 bytes (separator
 * included) already met is kept in a small table keyed by its last two digits and separator: a hit whose first 16
 * bytes agree with the entry for its key up to the first ']' and one byte more is that prefix (one 16-byte compare;
 * its digit string is in the set already). Other hits are parsed: the digits, a hash table of the strings this call
 * has added (RANK_SLOTS), and only for a string it has not seen a str and a set lookup. */

#define RANK_SLOTS 1024
#define RANK_DIGITS 23
#define RECENT_KEYS 128

typedef struct {
    unsigned char len; /* 0: empty slot */
    char d[RANK_DIGITS];
} RankSlot;

typedef struct {
    unsigned char recent[RECENT_KEYS][16]; /* per key, a prefix met before (its bytes, zero after it; '\0' first: none) */
    RankSlot *slots;
    PyObject *seen;
    Py_ssize_t added;
} RankState;

/* the key of a prefix whose ']' is at b[j] (j >= 6): its last two digits (the last and a 'k' when it has one) and
 * separator (':' and ' ' differ in bit 1); ten ranks in a row never share one */
static inline unsigned
prefix_key(const unsigned char *b, Py_ssize_t j)
{
    return (unsigned)((b[j - 1] & 15) | ((b[j - 2] & 3) << 4) | ((b[j + 1] & 2) << 5));
}

/* the "[r" at b[at] (at + 1 < end) parsed: where the search goes on (past a prefix, else at + 1), -1 on error */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static Py_ssize_t
rank_slow(const unsigned char *b, Py_ssize_t at, Py_ssize_t end, RankState *st)
{
    if (end - at < 8 || memcmp(b + at, "[rank", 5) != 0)
        return at + 1;
    Py_ssize_t d0 = at + 5, d = d0;
    while (d < end && b[d] >= '0' && b[d] <= '9')
        d++;
    Py_ssize_t nd = d - d0;
    if (nd == 0 || d + 1 >= end || b[d] != ']' || (b[d + 1] != ':' && b[d + 1] != ' '))
        return at + 1;
    RankSlot *slot = NULL;
    int known = 0;
    if (nd <= RANK_DIGITS) {
        uint32_t h = 2166136261u;
        for (Py_ssize_t k = 0; k < nd; k++)
            h = (h ^ b[d0 + k]) * 16777619u;
        for (uint32_t probe = 0; probe < 8; probe++) {
            RankSlot *sl = &st->slots[(h + probe) & (RANK_SLOTS - 1)];
            if (sl->len == 0) {
                slot = sl;
                break;
            }
            if (sl->len == nd && memcmp(sl->d, b + d0, (size_t)nd) == 0) {
                slot = sl;
                known = 1; /* added before by this call */
                break;
            }
        }
    }
    if (!known) {
        PyObject *str = PyUnicode_DecodeASCII((const char *)b + d0, nd, NULL);
        if (str == NULL)
            return -1;
        int had = PySet_Contains(st->seen, str);
        if (had < 0 || (had == 0 && PySet_Add(st->seen, str) < 0)) {
            Py_DECREF(str);
            return -1;
        }
        Py_DECREF(str);
        st->added += had == 0;
        if (slot != NULL) {
            slot->len = (unsigned char)nd;
            memcpy(slot->d, b + d0, (size_t)nd);
        }
    }
    /* in the set now: the next time these bytes are met, one compare */
    Py_ssize_t len = d + 2 - at;
    if (len <= 16) {
        unsigned char *e = st->recent[prefix_key(b, d)];
        memset(e, 0, 16);
        memcpy(e, b + at, (size_t)len);
    }
    return d + 2;
}

/* rank_slow, after a compare with the prefix met before under the same key */
static inline Py_ssize_t
rank_at(const unsigned char *b, Py_ssize_t at, Py_ssize_t end, RankState *st)
{
    if (end - at >= 16) {
#if defined(__SSE2__)
        __m128i x = _mm_loadu_si128((const __m128i *)(b + at));
        unsigned close = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8(']')));
        unsigned j = (unsigned)__builtin_ctz(close | 0x10000u); /* the first ']' (16: none) */
        if (j - 6 <= 8) { /* one to nine digits: the prefix and its separator fit the 16 bytes */
            const unsigned char *e = st->recent[prefix_key(b + at, j)];
            unsigned same = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_loadu_si128((const __m128i *)e)));
            unsigned want = (2u << (j + 1)) - 1; /* bytes 0 .. j + 1 */
            if ((same & want) == want)
                return at + j + 2;
        }
#else
        const unsigned char *c = memchr(b + at + 6, ']', 9);
        if (c != NULL) {
            Py_ssize_t j = c - (b + at);
            if (memcmp(b + at, st->recent[prefix_key(b + at, j)], (size_t)j + 2) == 0)
                return at + j + 2;
        }
#endif
    }
    return rank_slow(b, at, end, st);
}

/* every "[r" whose '[' lies in [p, end - 1), in order, unless inside a prefix found before it; returns 0, or -1 */
static int
collect_ranks_scalar(const unsigned char *b, Py_ssize_t p, Py_ssize_t end, RankState *st)
{
    while (end - p >= 2) {
        const unsigned char *h = memchr(b + p, '[', (size_t)(end - p - 1));
        if (h == NULL)
            return 0;
        Py_ssize_t at = h - b;
        p = h[1] == 'r' ? rank_at(b, at, end, st) : at + 1;
        if (p < 0)
            return -1;
    }
    return 0;
}

static int
collect_ranks_sse2(const unsigned char *b, Py_ssize_t p, Py_ssize_t end, RankState *st)
{
#if defined(__SSE2__)
    const __m128i lb = _mm_set1_epi8('[');
    const __m128i r = _mm_set1_epi8('r');
    Py_ssize_t q = p; /* every position before q was looked at */
    for (;;) {
        unsigned mask = 0;
        for (; end - q >= 17; q += 16) {
            __m128i a = _mm_loadu_si128((const __m128i *)(b + q));
            __m128i c = _mm_loadu_si128((const __m128i *)(b + q + 1));
            mask = (unsigned)_mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(a, lb), _mm_cmpeq_epi8(c, r)));
            if (mask)
                break;
        }
        if (mask == 0)
            break;
        do {
            Py_ssize_t at = q + __builtin_ctz(mask);
            mask &= mask - 1;
            if (at < p)
                continue; /* inside the prefix just found */
            p = rank_at(b, at, end, st);
            if (p < 0)
                return -1;
        } while (mask);
        q += 16;
        if (q < p)
            q = p;
    }
    p = q > p ? q : p;
#endif
    return collect_ranks_scalar(b, p, end, st);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RANK_BATCH 4096
/* collect_ranks_sse2 with AVX2, used when the CPU has it (and POPCNT): the "[r" positions of RANK_BATCH bytes are
 * written to an array first (64 positions per step, no branch per hit), then visited in order: the branch that
 * ends a search at each hit (one mispredict per line) is gone, and a hit that is a recent prefix costs no branch
 * either. */
__attribute__((target("avx2,popcnt"))) static int
collect_ranks_avx2(const unsigned char *b, Py_ssize_t p, Py_ssize_t end, RankState *st)
{
    const __m256i lb = _mm256_set1_epi8('[');
    const __m256i r = _mm256_set1_epi8('r');
    uint32_t pos[RANK_BATCH / 2 + 64]; /* at most 32 per step (pairs do not overlap), RANK_BATCH / 64 + 1 steps */
    Py_ssize_t q = p;
    while (end - q >= 65) {
        Py_ssize_t base = q, stop = end - 65 - q < RANK_BATCH ? end - 65 : q + RANK_BATCH;
        size_t n = 0;
        for (; q <= stop; q += 64) { /* bytes q .. q + 64 */
            __m256i a0 = _mm256_loadu_si256((const __m256i *)(b + q));
            __m256i c0 = _mm256_loadu_si256((const __m256i *)(b + q + 1));
            __m256i a1 = _mm256_loadu_si256((const __m256i *)(b + q + 32));
            __m256i c1 = _mm256_loadu_si256((const __m256i *)(b + q + 33));
            uint64_t m0 = (uint32_t)_mm256_movemask_epi8(_mm256_and_si256(_mm256_cmpeq_epi8(a0, lb), _mm256_cmpeq_epi8(c0, r)));
            uint64_t m1 = (uint32_t)_mm256_movemask_epi8(_mm256_and_si256(_mm256_cmpeq_epi8(a1, lb), _mm256_cmpeq_epi8(c1, r)));
            uint64_t m = m0 | (m1 << 32);
            uint32_t off = (uint32_t)(q - base);
            size_t cnt = (size_t)__builtin_popcountll(m);
            /* one position always written (garbage when cnt is 0, overwritten later), more only when a step has
             * several (one or none per step is the rule: a line is longer than 64 bytes) */
            pos[n] = off + (uint32_t)__builtin_ctzll(m | (1ULL << 63));
            m &= m - 1;
            if (__builtin_expect(cnt > 1, 0)) {
                size_t k = n + 1;
                for (; m; m &= m - 1)
                    pos[k++] = off + (uint32_t)__builtin_ctzll(m);
            }
            n += cnt;
        }
        for (size_t i = 0; i < n; i++) {
            Py_ssize_t at = base + pos[i];
            if (at < p)
                continue; /* inside the prefix just found */
            p = rank_at(b, at, end, st);
            if (p < 0)
                return -1;
        }
    }
    return collect_ranks_sse2(b, q > p ? q : p, end, st);
}
#define HAVE_AVX2_PATH 1
#endif

PyDoc_STRVAR(collect_ranks_doc,
"collect_ranks(buf, seen, start=0, end=len(buf), simd=2) -> int\n\n"
"Add to the set seen the digit string N (str) of every '[rankN]:' or '[rankN] ' in buf[start:end] (N: ASCII\n"
"digits), as re.findall(rb'\\[rank(\\d+)\\](?::| )') would find them. Returns how many strings were new.\n"
"simd (for tests): 0 searches without SIMD, 1 with SSE2 at most, 2 with the best the CPU has.");

static PyObject *
collect_ranks(PyObject *Py_UNUSED(mod), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buf", "seen", "start", "end", "simd", NULL};
    Py_buffer view;
    PyObject *seen;
    Py_ssize_t start = 0, end = -1;
    int simd = 2;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*O!|nni", kwlist, &view, &PySet_Type, &seen, &start, &end, &simd))
        return NULL;
    if (end < 0 || end > view.len)
        end = view.len;
    if (start < 0)
        start = 0;
    RankState *st = PyMem_Calloc(1, sizeof(RankState));
    RankSlot *slots = PyMem_Calloc(RANK_SLOTS, sizeof(RankSlot));
    if (st == NULL || slots == NULL) {
        PyMem_Free(st);
        PyMem_Free(slots);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    st->slots = slots;
    st->seen = seen;
    const unsigned char *b = (const unsigned char *)view.buf;
    int rc;
    if (start >= end)
        rc = 0;
    else if (simd <= 0)
        rc = collect_ranks_scalar(b, start, end, st);
#ifdef HAVE_AVX2_PATH
    else if (simd >= 2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt"))
        rc = collect_ranks_avx2(b, start, end, st);
#endif
    else
        rc = collect_ranks_sse2(b, start, end, st);
    Py_ssize_t added = st->added;
    PyMem_Free(slots);
    PyMem_Free(st);
    PyBuffer_Release(&view);
    if (rc < 0)
        return NULL;
    return PyLong_FromSsize_t(added);
}

PyDoc_STRVAR(count_literals_doc,
"count_literals(buf, needles) -> list[int]\n\n"
"Per needle (non-empty bytes), its number of non-overlapping occurrences in buf, as buf.count(needle) gives it,\n"
"for all needles in one pass over buf.");

static PyObject *
count_literals(PyObject *Py_UNUSED(mod), PyObject *args)
{
    Py_buffer view;
    PyObject *seq;
    if (buffer_and_needles(args, &view, &seq, 1) < 0)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = NULL;
    /* one-byte and two-byte needles are read off a byte and a byte-pair histogram of buf (a pair of two equal bytes
     * counted non-overlapping: every other position of a run); longer ones are grouped by their first pair (counting
     * sort), with per needle the next offset at which an occurrence counts (non-overlapping, leftmost first, like
     * bytes.count) */
    Py_ssize_t *next_ok = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_ssize_t));
    Py_ssize_t *counts = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_ssize_t));
    const unsigned char **text = PyMem_Calloc((size_t)(n ? n : 1), sizeof(*text));
    Py_ssize_t *tlen = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_ssize_t));
    uint32_t *first = PyMem_Calloc(65536 + 1, sizeof(uint32_t)); /* pair -> start in order[] */
    uint32_t *order = PyMem_Calloc((size_t)(n ? n : 1), sizeof(uint32_t));
    uint32_t *pairs = PyMem_Calloc(65536, sizeof(uint32_t)); /* pair -> occurrences */
    uint32_t singles[256] = {0};
    int any_short = 0;
    if (!next_ok || !counts || !text || !tlen || !first || !order || !pairs) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        text[i] = (const unsigned char *)PyBytes_AS_STRING(o);
        tlen[i] = PyBytes_GET_SIZE(o);
        if (tlen[i] > 2)
            first[pair_at(text[i]) + 1]++;
        else
            any_short = 1;
    }
    for (unsigned v = 0; v < 65536; v++)
        first[v + 1] += first[v];
    {
        uint32_t *fill = PyMem_Malloc(65536 * sizeof(uint32_t));
        if (fill == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(fill, first, 65536 * sizeof(uint32_t));
        for (Py_ssize_t i = 0; i < n; i++)
            if (tlen[i] > 2)
                order[fill[pair_at(text[i])]++] = (uint32_t)i;
        PyMem_Free(fill);
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t len = view.len;
    if (any_short) {
        int skip = 0; /* the previous position counted a pair of two equal bytes that this one overlaps */
        for (Py_ssize_t p = 0; p < len; p++) {
            singles[b[p]]++;
            if (p + 1 >= len)
                break;
            if (b[p] == b[p + 1]) {
                if (skip) {
                    skip = 0;
                    continue;
                }
                skip = 1;
            } else
                skip = 0;
            pairs[pair_at(b + p)]++;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            if (tlen[i] == 1)
                counts[i] = singles[text[i][0]];
            else if (tlen[i] == 2)
                counts[i] = pairs[pair_at(text[i])];
    }
    if (first[65536] > 0) {
        uint64_t used[1024] = {0}; /* pairs that start a longer needle: 8 KB, stays in L1 (first[] is 256 KB) */
        for (unsigned v = 0; v < 65536; v++)
            if (first[v + 1] > first[v])
                used[v >> 6] |= (uint64_t)1 << (v & 63);
        for (Py_ssize_t p = 0; p + 2 < len; p++) {
            unsigned v = pair_at(b + p);
            if (!(used[v >> 6] >> (v & 63) & 1))
                continue;
            for (uint32_t j = first[v]; j < first[v + 1]; j++) {
                uint32_t i = order[j];
                Py_ssize_t nl = tlen[i];
                if (text[i][2] != b[p + 2] || p < next_ok[i] || p + nl > len)
                    continue;
                if (memcmp(b + p, text[i], (size_t)nl) == 0) {
                    counts[i]++;
                    next_ok[i] = p + nl;
                }
            }
        }
    }
    out = PyList_New(n);
    if (out == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *c = PyLong_FromSsize_t(counts[i]);
        if (c == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, c);
    }
done:
    PyMem_Free(next_ok);
    PyMem_Free(counts);
    PyMem_Free(text);
    PyMem_Free(tlen);
    PyMem_Free(first);
    PyMem_Free(order);
    PyMem_Free(pairs);
    Py_DECREF(seq);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef module_methods[] = {
    {"choose_anchors", choose_anchors, METH_VARARGS, choose_anchors_doc},
    {"line_indexes", line_indexes, METH_VARARGS, line_indexes_doc},
    {"pair_profile", pair_profile, METH_VARARGS, pair_profile_doc},
    {"collect_ranks", (PyCFunction)(void (*)(void))collect_ranks, METH_VARARGS | METH_KEYWORDS, collect_ranks_doc},
    {"count_literals", count_literals, METH_VARARGS, count_literals_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "_linescan",
    "One-pass finder of the lines holding any of N literal needles (the scan's literal prefilter).",
    -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__linescan(void)
{
    if (PyType_Ready(&FinderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FinderType);
    if (PyModule_AddObject(m, "Finder", (PyObject *)&FinderType) < 0) {
        Py_DECREF(&FinderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
