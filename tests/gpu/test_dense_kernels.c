/*
 * GPU tests of the dense kernels (kernels/{cast,copy_rows,embedding,rmsnorm,rope,swiglu,cross_entropy,adamw,
 * reduce}.cu) against the CPU reference (src/cpu/ops.c, src/optim.c) on fresh random inputs.
 * Every test: outputs poisoned with NaN before the launch (every element written), relative error
 * ||gpu - cpu|| / ||cpu|| < 1e-5 on fp32 paths and < 1e-2 on bf16 paths (the CPU gets the same
 * bf16-rounded inputs), a second identical launch compared bitwise, and odd shapes that exercise
 * both the 16-byte vector path and the element-by-element path (misaligned pointers, odd widths).
 * One suite per kernel file: run one with `build/mokc_tests gpu_rmsnorm` and the like.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/adamw.h"
#include "../../kernels/cast.h"
#include "../../kernels/copy_rows.h"
#include "../../kernels/cross_entropy.h"
#include "../../kernels/embedding.h"
#include "../../kernels/master_split.h"
#include "../../kernels/reduce.h"
#include "../../kernels/rmsnorm.h"
#include "../../kernels/rope.h"
#include "../../kernels/swiglu.h"
#include "cpu/ops.h"
#include "gpu_test.h"
#include "optim.h"

#define F32_TOL 1e-5
#define BF16_TOL 1e-2

/* ---------- random inputs (splitmix64) and host helpers ---------- */
static uint64_t rng_state;

static void rng_seed(uint64_t seed) { rng_state = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull; }

static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [lo, hi) */
static float rnd(float lo, float hi) { return lo + (hi - lo) * (float)((double)(rng_next() >> 11) * 0x1.0p-53); }

static int rnd_int(int n) { return (int)(rng_next() % (uint64_t)n); }

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", bytes);
        abort();
    }
    return p;
}

static float *rand_f32(long n, float lo, float hi) {
    float *x = xmalloc((size_t)n * sizeof(float));
    for (long i = 0; i < n; i++) x[i] = rnd(lo, hi);
    return x;
}

static float *copy_f32(const float *x, long n) {
    float *y = xmalloc((size_t)n * sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

/* Rounds x to bf16 values in place (so the CPU sees exactly what the GPU reads). */
static void round_bf16(float *x, long n) {
    for (long i = 0; i < n; i++) x[i] = host_from_bf16(host_to_bf16(x[i]));
}

static bf16_t *to_bf16(const float *x, long n) {
    bf16_t *b = xmalloc((size_t)n * sizeof(bf16_t));
    for (long i = 0; i < n; i++) b[i] = host_to_bf16(x[i]);
    return b;
}

static float *dl_f32(const float *dev, long n) {
    float *h = xmalloc((size_t)n * sizeof(float));
    gpu_download(h, dev, (size_t)n * sizeof(float));
    return h;
}

static float *dl_bf16(const bf16_t *dev, long n) {
    bf16_t *b = xmalloc((size_t)n * sizeof(bf16_t));
    gpu_download(b, dev, (size_t)n * sizeof(bf16_t));
    float *f = xmalloc((size_t)n * sizeof(float));
    for (long i = 0; i < n; i++) f[i] = host_from_bf16(b[i]);
    free(b);
    return f;
}

static void *dl_raw(const void *dev, size_t bytes) {
    void *h = xmalloc(bytes);
    gpu_download(h, dev, bytes);
    return h;
}

/* ||(a - a0) - (b - b0)|| / ||b - b0||: compares what two backwards ADDED to the same prefill. */
static double rel_error_increment(const float *a, const float *b, const float *base, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) {
        double da = (double)a[i] - base[i], db = (double)b[i] - base[i];
        num += (da - db) * (da - db);
        den += db * db;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int bits_equal(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* A device copy of host data at an element offset of `shift` (0: 256-byte aligned; 1: misaligned,
 * which forces the element-by-element path). Free with gpu_free_shifted. */
static void *upload_shifted(const void *host, size_t bytes, size_t elem, int shift) {
    char *d = NULL;
    cudaCheck(cudaMalloc((void **)&d, bytes + elem * (size_t)shift + 1));
    cudaCheck(cudaMemset(d, 0xff, bytes + elem * (size_t)shift + 1));
    if (bytes) cudaCheck(cudaMemcpy(d + elem * (size_t)shift, host, bytes, cudaMemcpyHostToDevice));
    return d + elem * (size_t)shift;
}
static void *poisoned_shifted(size_t bytes, size_t elem, int shift) {
    char *d = NULL;
    cudaCheck(cudaMalloc((void **)&d, bytes + elem * (size_t)shift + 1));
    cudaCheck(cudaMemset(d, 0xff, bytes + elem * (size_t)shift + 1));
    return d + elem * (size_t)shift;
}
static void gpu_free_shifted(void *p, size_t elem, int shift) { cudaCheck(cudaFree((char *)p - elem * (size_t)shift)); }

/* ================================================================================================
 * cast.h */
static void test_cast_exact(void) {
    if (!gpu_test_begin()) return;
    const long sizes[] = {1, 7, 8, 257, 4099, (1 << 16) + 5};
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-40f, -3e-39f, 3.4e38f, 1.00390625f, 1.01171875f};
    for (int si = 0; si < (int)(sizeof sizes / sizeof sizes[0]); si++)
        for (int shift = 0; shift < 2; shift++) {
            long n = sizes[si];
            rng_seed(100 + si * 2 + shift);
            float *x = rand_f32(n, -8, 8);
            for (long i = 0; i < n && i < (long)(sizeof specials / sizeof specials[0]); i++) x[i] = specials[i];
            /* f32 -> bf16: round to nearest even, bit-exact with the host conversion */
            float *dx = upload_shifted(x, (size_t)n * 4, 4, shift);
            bf16_t *db = poisoned_shifted((size_t)n * 2, 2, shift);
            gpu_cast_f32_to_bf16(db, dx, n, 0);
            bf16_t *hb = dl_raw(db, (size_t)n * 2), *ref = to_bf16(x, n);
            long bad = 0, first = -1;
            for (long i = 0; i < n; i++)
                if (hb[i] != ref[i]) bad++, first = first < 0 ? i : first;
            CHECK_MSG(bad == 0, "cast_f32_to_bf16 n=%ld shift=%d: %ld mismatches, first at %ld: x=%.9g gpu=0x%04x cpu=0x%04x",
                      n, shift, bad, first, first >= 0 ? x[first] : 0.0, first >= 0 ? (unsigned)hb[first] : 0u,
                      first >= 0 ? (unsigned)ref[first] : 0u);
            /* bf16 -> f32: exact */
            float *df = poisoned_shifted((size_t)n * 4, 4, shift);
            gpu_cast_bf16_to_f32(df, db, n, 0);
            float *hf = dl_f32(df, n);
            bad = 0;
            for (long i = 0; i < n; i++) {
                float want = host_from_bf16(ref[i]);
                bad += memcmp(&hf[i], &want, 4) != 0;
            }
            CHECK_MSG(bad == 0, "cast_bf16_to_f32 n=%ld shift=%d: %ld elements differ from the exact widening", n, shift, bad);
            gpu_free_shifted(dx, 4, shift);
            gpu_free_shifted(db, 2, shift);
            gpu_free_shifted(df, 4, shift);
            free(x), free(hb), free(ref), free(hf);
        }
}

/* ================================================================================================
 * master_split.h */

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* split then join gives every non-NaN fp32 back bit for bit; the bf16 half is the ties-away rounding, which differs
 * from the cast's ties-to-even only at ties above an even bf16; every element written (two poisons agree); the
 * 16-byte path and the element path (shift 1). */
static void test_master_split(void) {
    if (!gpu_test_begin()) return;
    const long sizes[] = {1, 7, 8, 257, 4099, (1 << 16) + 5};
    const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x00000001u, 0x8000ffffu,
                                 0x7f7fffffu, 0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f807fffu, 0x3f808001u,
                                 0x3fffffffu, 0x3fff8000u, 0x7fc00000u, 0xffc12345u, 0x00008000u, 0x00018000u};
    const long nspec = (long)(sizeof specials / sizeof specials[0]);
    for (int si = 0; si < (int)(sizeof sizes / sizeof sizes[0]); si++)
        for (int shift = 0; shift < 2; shift++) {
            const long n = sizes[si];
            rng_seed(150 + si * 2 + shift);
            float *x = rand_f32(n, -8, 8);
            for (long i = 0; i < n; i++)
                if (i < nspec) x[i] = from_bits(specials[i]);
                else if (i % 3 == 0) x[i] = from_bits((uint32_t)(rng_next() >> 32)); /* any bits, NaNs too */
            float *dx = upload_shifted(x, (size_t)n * 4, 4, shift);
            bf16_t *dh = poisoned_shifted((size_t)n * 2, 2, shift);
            int16_t *dl = poisoned_shifted((size_t)n * 2, 2, shift);
            gpu_master_split(dh, dl, dx, n, 0);
            bf16_t *h = dl_raw(dh, (size_t)n * 2);
            int16_t *l = dl_raw(dl, (size_t)n * 2);
            cudaCheck(cudaMemset(dh, 0, (size_t)n * 2));
            cudaCheck(cudaMemset(dl, 0, (size_t)n * 2));
            gpu_master_split(dh, dl, dx, n, 0);
            bf16_t *h0 = dl_raw(dh, (size_t)n * 2);
            int16_t *l0 = dl_raw(dl, (size_t)n * 2);
            CHECK_MSG(bits_equal(h, h0, (size_t)n * 2) && bits_equal(l, l0, (size_t)n * 2),
                      "master_split n=%ld shift=%d: elements left unwritten (over 0xff and over 0 differ)", n, shift);
            float *dy = poisoned_shifted((size_t)n * 4, 4, shift);
            gpu_master_join(dy, dh, dl, n, 0);
            float *y = dl_f32(dy, n);
            cudaCheck(cudaMemset(dy, 0, (size_t)n * 4));
            gpu_master_join(dy, dh, dl, n, 0);
            float *y0 = dl_f32(dy, n);
            CHECK_MSG(bits_equal(y, y0, (size_t)n * 4),
                      "master_join n=%ld shift=%d: elements left unwritten (over 0xff and over 0 differ)", n, shift);
            long bad_hi = 0, bad_back = 0, bad_nan = 0, bad_even = 0, first = -1;
            for (long i = 0; i < n; i++) {
                if (isnan(x[i])) {
                    bad_nan += !isnan(y[i]) || (h[i] & 0x7fffu) != 0x7fc0u;
                    continue;
                }
                uint32_t u;
                memcpy(&u, &x[i], 4);
                const int wrong = h[i] != host_to_bf16_ties_away(x[i]) || memcmp(&x[i], &y[i], 4) != 0;
                bad_hi += h[i] != host_to_bf16_ties_away(x[i]);
                bad_back += memcmp(&x[i], &y[i], 4) != 0;
                bad_even += h[i] != host_to_bf16(x[i]) && !((u & 0xffffu) == 0x8000u && (host_to_bf16(x[i]) & 1u) == 0);
                if (wrong && first < 0) first = i;
            }
            CHECK_MSG(bad_hi + bad_back + bad_nan + bad_even == 0,
                      "master_split/join n=%ld shift=%d: %ld bf16 halves not the ties-away rounding, %ld values not "
                      "joined back bit for bit, %ld NaNs not kept, %ld halves off the cast away from even ties "
                      "(first: x bits 0x%08x, hi 0x%04x, lo %d, joined 0x%08x)", n, shift, bad_hi, bad_back, bad_nan,
                      bad_even, first >= 0 ? *(uint32_t *)&x[first] : 0u, first >= 0 ? (unsigned)h[first] : 0u,
                      first >= 0 ? (int)l[first] : 0, first >= 0 ? *(uint32_t *)&y[first] : 0u);
            gpu_free_shifted(dx, 4, shift), gpu_free_shifted(dy, 4, shift);
            gpu_free_shifted(dh, 2, shift), gpu_free_shifted(dl, 2, shift);
            free(x), free(h), free(l), free(h0), free(l0), free(y), free(y0);
        }
}

/* ================================================================================================
 * copy_rows.h: every element of the block copied (random bits), nothing around it written (the destination's
 * other bits kept), on the 16-byte path and each condition that takes the element path (a misaligned pointer, an
 * odd width or pitch), and more rows than a grid has blocks in y. */
static void test_copy_rows(void) {
    if (!gpu_test_begin()) return;
    const struct { long rows, width, ld_src, ld_dst; int shift; } cases[] = {
        {2048, 512, 512, 5120, 0}, {2048, 4096, 4096, 5120, 0}, {3, 8, 24, 16, 0},   {5, 8, 16, 24, 1},
        {7, 13, 13, 40, 0},       {7, 16, 20, 40, 0},           {70000, 8, 8, 24, 0}, {1, 1, 1, 1, 0},
    };
    for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
        const long rows = cases[ci].rows, width = cases[ci].width, lds = cases[ci].ld_src, ldd = cases[ci].ld_dst;
        const int shift = cases[ci].shift;
        const long ns = rows * lds, nd = rows * ldd;
        rng_seed(900 + ci);
        bf16_t *src = xmalloc((size_t)ns * 2), *dst0 = xmalloc((size_t)nd * 2);
        for (long i = 0; i < ns; i++) src[i] = (bf16_t)(rng_next() >> 48);
        for (long i = 0; i < nd; i++) dst0[i] = (bf16_t)(rng_next() >> 48);
        bf16_t *d_src = upload_shifted(src, (size_t)ns * 2, 2, shift);
        bf16_t *d_dst = upload_shifted(dst0, (size_t)nd * 2, 2, 0);
        gpu_copy_rows_bf16(d_dst, ldd, d_src, lds, rows, width, 0);
        bf16_t *got = dl_raw(d_dst, (size_t)nd * 2);
        long wrong = 0, touched = 0;
        for (long r = 0; r < rows; r++)
            for (long c = 0; c < ldd; c++) {
                const bf16_t v = got[r * ldd + c];
                if (c < width) wrong += v != src[r * lds + c];
                else touched += v != dst0[r * ldd + c];
            }
        CHECK_MSG(wrong == 0 && touched == 0,
                  "copy_rows_bf16 rows=%ld width=%ld ld_src=%ld ld_dst=%ld shift=%d: %ld copied elements wrong, %ld "
                  "elements beside the block changed", rows, width, lds, ldd, shift, wrong, touched);
        gpu_free_shifted(d_src, 2, shift);
        gpu_free_shifted(d_dst, 2, 0);
        free(src), free(dst0), free(got);
    }
}

/* ================================================================================================
 * embedding.h */
static void test_embedding_buckets(void) {
    /* Host-only: runs without a GPU. Vocabularies of 1 to 4 radix passes of 8 bits (an odd count ends in the
     * scratch array), ids spread over the whole range, the top two never occurring. */
    const int N = 301, vocabs[] = {17, 300, 151936, (1 << 25) + 5};
    rng_seed(11);
    int *tok = xmalloc(N * sizeof(int)), *order = xmalloc(N * sizeof(int)), *bid = xmalloc(N * sizeof(int));
    int *bstart = xmalloc((N + 1) * sizeof(int)), *seen = xmalloc(N * sizeof(int));
    for (int vi = 0; vi < (int)(sizeof vocabs / sizeof vocabs[0]); vi++) {
        const int V = vocabs[vi];
        for (int n = 0; n < N; n++) tok[n] = rnd_int(3) ? rnd_int(V < 40 ? V - 2 : 40) : rnd_int(V - 2);
        int nb = embedding_buckets_build(tok, N, V, order, bstart, bid);
        CHECK(nb > 0 && nb <= V - 2);
        CHECK_EQ_INT(bstart[0], 0);
        CHECK_EQ_INT(bstart[nb], N);
        memset(seen, 0, N * sizeof(int));
        for (int b = 0; b < nb; b++) {
            CHECK_MSG(bstart[b] < bstart[b + 1], "V %d: bucket %d is empty", V, b);
            if (b > 0)
                CHECK_MSG(bid[b] > bid[b - 1], "V %d: bucket ids not increasing at %d: %d after %d", V, b, bid[b],
                          bid[b - 1]);
            for (int p = bstart[b]; p < bstart[b + 1]; p++) {
                CHECK_MSG(tok[order[p]] == bid[b], "V %d: order[%d] = %d has token %d, bucket id %d", V, p, order[p],
                          tok[order[p]], bid[b]);
                if (p > bstart[b]) CHECK_MSG(order[p] > order[p - 1], "V %d: bucket %d not stable at %d", V, b, p);
                seen[order[p]]++;
            }
        }
        for (int n = 0; n < N; n++) CHECK_MSG(seen[n] == 1, "V %d: position %d appears %d times", V, n, seen[n]);
    }
    CHECK_EQ_INT(embedding_buckets_build(tok, 0, 17, order, bstart, bid), 0);
    CHECK_EQ_INT(bstart[0], 0);
    free(tok), free(order), free(bid), free(bstart), free(seen);
}

static void test_embedding_bwd_plan(void) {
    /* Host-only: runs without a GPU. The runs cover each id's positions in order, a run is short only at its id's
     * end, ids with several runs get consecutive scratch rows within embedding_bwd_scratch_floats, and the block
     * stays within embedding_bwd_plan_ints. Tokens: all one id, all distinct, byte-like, none. */
    const int N = 700, R = EMBEDDING_BWD_RUN;
    int *tok = xmalloc(N * sizeof(int)), *ints = xmalloc((size_t)embedding_bwd_plan_ints(N) * sizeof(int));
    int *seen = xmalloc(N * sizeof(int));
    for (int kind = 0; kind < 4; kind++) {
        const int n_tok = kind == 3 ? 0 : N, V = kind == 1 ? N : 300;
        rng_seed(13 + kind);
        for (int n = 0; n < n_tok; n++) tok[n] = kind == 0 ? 7 : kind == 1 ? N - 1 - n : rnd_int(4) ? rnd_int(3) : rnd_int(V);
        const EmbeddingBwdPlan p = embedding_bwd_plan_build(tok, n_tok, V, ints);
        CHECK(p.ints <= embedding_bwd_plan_ints(n_tok) && p.run == R && p.N == n_tok);
        CHECK_MSG((long)p.slots * 64 <= embedding_bwd_scratch_floats(n_tok, 64), "kind %d: %d scratch rows", kind, p.slots);
        const int *order = ints, *start = ints + n_tok, *id = embedding_bwd_plan_ids(ints, &p), *brun = id + p.nb;
        const int *slot = brun + p.nb + 1, *run_bucket = slot + p.nb, *multi = run_bucket + p.runs;
        CHECK(id == start + p.nb + 1 && multi + p.nm == ints + p.ints);
        memset(seen, 0, N * sizeof(int));
        int runs = 0, slots = 0, nm = 0;
        for (int b = 0; b < p.nb; b++) {
            const int len = start[b + 1] - start[b], nr = brun[b + 1] - brun[b];
            CHECK_MSG(len > 0 && nr == (len + R - 1) / R, "kind %d bucket %d: %d positions in %d runs", kind, b, len, nr);
            CHECK_EQ_INT(brun[b], runs);
            for (int j = 0; j < nr; j++) CHECK_EQ_INT(run_bucket[runs + j], b);
            CHECK_EQ_INT(slot[b], nr > 1 ? slots : -1);
            if (nr > 1) CHECK_EQ_INT(multi[nm++], b);
            runs += nr, slots += nr > 1 ? nr : 0;
            for (int q = start[b]; q < start[b + 1]; q++) {
                CHECK(tok[order[q]] == id[b] && (q == start[b] || order[q] > order[q - 1]));
                seen[order[q]]++;
            }
        }
        CHECK(runs == p.runs && slots == p.slots && nm == p.nm && (n_tok == 0 || start[p.nb] == n_tok));
        for (int n = 0; n < n_tok; n++) CHECK_MSG(seen[n] == 1, "kind %d: position %d appears %d times", kind, n, seen[n]);
        if (kind == 0) CHECK(p.nb == 1 && p.nm == 1 && p.slots == (N + R - 1) / R);
        if (kind == 1) CHECK(p.nb == N && p.runs == N && p.nm == 0 && p.ints == embedding_bwd_plan_ints(N) - N);
    }
    free(tok), free(ints), free(seen);
}

static void test_embedding_ids_union(void) {
    /* Host-only: runs without a GPU. Two "ranks'" micro-batches marked into one bitmap each, OR-ed, listed. */
    const int V = 200, N = 37; /* V not a multiple of 64: the last word is partial */
    rng_seed(12);
    const int words = embedding_ids_words(V);
    CHECK_EQ_INT(words, 4);
    uint64_t *seen = calloc((size_t)words, sizeof(uint64_t)), *other = calloc((size_t)words, sizeof(uint64_t));
    int *want = calloc(V, sizeof(int)), *ids = xmalloc(N * sizeof(int)), *list = xmalloc(V * sizeof(int));
    for (int batch = 0; batch < 4; batch++) {
        for (int n = 0; n < N; n++) ids[n] = batch == 3 ? V - 1 - rnd_int(3) : rnd_int(V);
        embedding_ids_mark(batch % 2 ? other : seen, ids, N);
        for (int n = 0; n < N; n++) want[ids[n]] = 1;
    }
    for (int w = 0; w < words; w++) seen[w] |= other[w];
    const int n = embedding_ids_list(seen, V, list);
    int count = 0;
    for (int v = 0; v < V; v++) count += want[v];
    CHECK_EQ_INT(n, count);
    for (int i = 0; i < n; i++) {
        CHECK_MSG(list[i] >= 0 && list[i] < V && want[list[i]], "listed id %d was never marked", list[i]);
        if (i > 0) CHECK_MSG(list[i] > list[i - 1], "ids not increasing at %d: %d after %d", i, list[i], list[i - 1]);
    }
    memset(seen, 0, sizeof(uint64_t) * (size_t)words);
    CHECK_EQ_INT(embedding_ids_list(seen, V, list), 0);
    free(seen), free(other), free(want), free(ids), free(list);
}

static void test_embedding_put_rows(void) {
    if (!gpu_test_begin()) return;
    const struct { int n, C, V; } shapes[] = {{1, 8, 5}, {13, 2048, 40}, {37, 6, 50}, {300, 64, 700}};
    for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
        const int n = shapes[si].n, C = shapes[si].C, V = shapes[si].V;
        const long nt = (long)V * C, nr = (long)n * C;
        rng_seed(300 + si);
        /* n distinct ids in random order: a shuffled prefix of 0..V-1 */
        int *perm = xmalloc(V * sizeof(int));
        for (int v = 0; v < V; v++) perm[v] = v;
        for (int v = V - 1; v > 0; v--) {
            const int j = rnd_int(v + 1), t = perm[v];
            perm[v] = perm[j], perm[j] = t;
        }
        float *table = rand_f32(nt, -1, 1), *rows = rand_f32(nr, -1, 1), *want = copy_f32(table, nt);
        for (int i = 0; i < n; i++) memcpy(want + (long)perm[i] * C, rows + (long)i * C, (size_t)C * 4);
        int *d_ids = gpu_upload(perm, n * sizeof(int));
        float *d_table = gpu_upload(table, (size_t)nt * 4), *d_rows = gpu_upload(rows, (size_t)nr * 4);
        gpu_embedding_put_rows(d_table, d_rows, d_ids, n, C, 0);
        float *got = dl_f32(d_table, nt);
        CHECK_MSG(bits_equal(got, want, (size_t)nt * 4),
                  "embedding_put_rows n=%d C=%d V=%d: %ld elements differ from the rows put or the rows left", n, C, V,
                  count_bit_mismatch_f32(got, want, nt));
        /* and back out with the forward's gather: the rows put, bitwise */
        float *d_back = gpu_poisoned((size_t)nr * 4);
        gpu_embedding_forward(d_back, d_ids, d_table, n, C, 0);
        float *back = dl_f32(d_back, nr);
        CHECK_MSG(bits_equal(back, rows, (size_t)nr * 4), "embedding_put_rows n=%d C=%d: gathered back, %ld differ", n,
                  C, count_bit_mismatch_f32(back, rows, nr));
        /* rows NULL: the listed rows zeroed (the rows of the next ids in the shuffle), the others kept */
        const int nz = n < V - n ? n : V - n;
        for (int i = 0; i < nz; i++) memset(want + (long)perm[n + i] * C, 0, (size_t)C * 4);
        gpu_embedding_put_rows(d_table, NULL, d_ids + n, 0, C, 0); /* nothing */
        cudaFree(d_ids);
        d_ids = gpu_upload(perm, V * sizeof(int));
        gpu_embedding_put_rows(d_table, NULL, d_ids + n, nz, C, 0);
        float *zeroed = dl_f32(d_table, nt);
        CHECK_MSG(bits_equal(zeroed, want, (size_t)nt * 4), "embedding_put_rows n=%d C=%d V=%d, zeros: %ld elements "
                  "differ from the rows zeroed or the rows left", nz, C, V, count_bit_mismatch_f32(zeroed, want, nt));
        cudaFree(d_ids), cudaFree(d_table), cudaFree(d_rows), cudaFree(d_back);
        free(perm), free(table), free(rows), free(want), free(got), free(back), free(zeroed);
    }
}

static void test_embedding_forward_backward(void) {
    if (!gpu_test_begin()) return;
    /* ids with one run, several (byte-like: a few ids hold most positions), run lengths at the edges (V = 3 at N = 97:
     * 32, 33 and 64 positions are all likely), float4 and scalar paths */
    const struct { int N, C, V; } shapes[] = {{1, 8, 5},     {7, 96, 13},  {257, 2056, 1000}, {33, 6, 50},
                                              {64, 13, 3},   {300, 64, 7}, {97, 40, 3},       {4096, 520, 2},
                                              {2000, 2048, 40}};
    for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
        const int N = shapes[si].N, C = shapes[si].C, V = shapes[si].V;
        const long nt = (long)V * C, no = (long)N * C;
        rng_seed(200 + si);
        int *tok = xmalloc(N * sizeof(int));
        for (int n = 0; n < N; n++) tok[n] = rnd_int(V);
        float *table = rand_f32(nt, -1, 1), *dout = rand_f32(no, -1, 1), *dtable0 = rand_f32(nt, -1, 1);
        /* forward: a bitwise copy of the rows */
        int *dtok = gpu_upload(tok, N * sizeof(int));
        float *dtab = gpu_upload(table, (size_t)nt * 4), *dout_d = gpu_poisoned((size_t)no * 4);
        gpu_embedding_forward(dout_d, dtok, dtab, N, C, 0);
        float *out = dl_f32(dout_d, no), *ref = xmalloc((size_t)no * 4);
        embedding_forward(ref, tok, table, N, C);
        CHECK_MSG(count_nan(out, no) == 0, "embedding_forward N=%d C=%d: %ld elements unwritten (NaN)", N, C, count_nan(out, no));
        CHECK_MSG(bits_equal(out, ref, (size_t)no * 4), "embedding_forward N=%d C=%d: not a bitwise copy (%ld differ)", N, C,
                  count_bit_mismatch_f32(out, ref, no));
        /* backward: accumulate into a prefilled dtable, compare with the CPU's token-order sums */
        int *ints = xmalloc((size_t)embedding_bwd_plan_ints(N) * sizeof(int));
        const EmbeddingBwdPlan plan = embedding_bwd_plan_build(tok, N, V, ints);
        int *d_ints = gpu_upload(ints, (size_t)plan.ints * sizeof(int));
        float *d_g = gpu_upload(dout, (size_t)no * 4), *d_dt = gpu_upload(dtable0, (size_t)nt * 4);
        /* NaN scratch: a run sum not written before it is added shows in the table */
        float *d_runs = gpu_poisoned((size_t)embedding_bwd_scratch_floats(N, C) * 4 + 4);
        gpu_embedding_backward(d_dt, d_runs, d_g, d_ints, &plan, C, 0);
        float *got = dl_f32(d_dt, nt), *want = copy_f32(dtable0, nt);
        embedding_backward(want, dout, tok, N, C, V);
        double err = rel_error_increment(got, want, dtable0, nt);
        CHECK_MSG(err < F32_TOL, "embedding_backward N=%d C=%d V=%d: rel error %.3g of the increment", N, C, V, err);
        CHECK_MSG(bits_equal(got, want, (size_t)nt * 4),
                  "embedding_backward N=%d C=%d V=%d: %ld elements not bitwise equal to the CPU (documented as equal)", N, C,
                  V, count_bit_mismatch_f32(got, want, nt));
        /* run twice: bitwise */
        cudaCheck(cudaMemcpy(d_dt, dtable0, (size_t)nt * 4, cudaMemcpyHostToDevice));
        gpu_embedding_backward(d_dt, d_runs, d_g, d_ints, &plan, C, 0);
        float *got2 = dl_f32(d_dt, nt);
        CHECK_MSG(bits_equal(got, got2, (size_t)nt * 4), "embedding_backward N=%d C=%d: second run differs", N, C);
        cudaFree(dtok), cudaFree(dtab), cudaFree(dout_d), cudaFree(d_ints), cudaFree(d_runs), cudaFree(d_g), cudaFree(d_dt);
        free(tok), free(table), free(dout), free(dtable0), free(out), free(ref), free(ints);
        free(got), free(want), free(got2);
    }
}

/* ================================================================================================
 * rmsnorm.h */
static void test_rmsnorm_forward(void) {
    if (!gpu_test_begin()) return;
    const int Ns[] = {1, 7, 257};
    const int Cs[] = {8, 96, 2056, 6, 13};
    const float eps = 1e-5f;
    for (int ni = 0; ni < 3; ni++)
        for (int ci = 0; ci < 5; ci++) {
            const int N = Ns[ni], C = Cs[ci];
            const long n = (long)N * C;
            rng_seed(300 + ni * 10 + ci);
            float *x = rand_f32(n, -2, 2), *w = rand_f32(C, 0.5f, 1.5f);
            float *ref = xmalloc((size_t)n * 4), *rref = xmalloc((size_t)N * 4);
            rmsnorm_forward(ref, rref, x, w, N, C, eps);
            float *dx = gpu_upload(x, (size_t)n * 4), *dw = gpu_upload(w, (size_t)C * 4);
            bf16_t *dout = gpu_poisoned((size_t)n * 2);
            float *drstd = gpu_poisoned((size_t)N * 4);
            gpu_rmsnorm_forward(dout, drstd, dx, dw, N, C, eps, 0);
            float *out = dl_bf16(dout, n), *rstd = dl_f32(drstd, N);
            CHECK_MSG(count_nan(out, n) + count_nan(rstd, N) == 0,
                      "rmsnorm_forward N=%d C=%d: unwritten outputs (NaN: bf16 %ld, rstd %ld)", N, C, count_nan(out, n),
                      count_nan(rstd, N));
            double e_bf = rel_error_f(out, ref, n), e_r = rel_error_f(rstd, rref, N);
            CHECK_MSG(e_bf < BF16_TOL, "rmsnorm_forward N=%d C=%d: bf16 out rel error %.3g", N, C, e_bf);
            CHECK_MSG(e_r < F32_TOL, "rmsnorm_forward N=%d C=%d: rstd rel error %.3g", N, C, e_r);
            /* a second run is bitwise */
            bf16_t *dout2 = gpu_poisoned((size_t)n * 2);
            float *drstd2 = gpu_poisoned((size_t)N * 4);
            gpu_rmsnorm_forward(dout2, drstd2, dx, dw, N, C, eps, 0);
            void *a = dl_raw(dout, (size_t)n * 2), *b = dl_raw(dout2, (size_t)n * 2);
            float *rstd2 = dl_f32(drstd2, N);
            CHECK_MSG(bits_equal(a, b, (size_t)n * 2) && bits_equal(rstd, rstd2, (size_t)N * 4),
                      "rmsnorm_forward N=%d C=%d: second run differs", N, C);
            cudaFree(dx), cudaFree(dw), cudaFree(dout), cudaFree(drstd), cudaFree(dout2), cudaFree(drstd2);
            free(x), free(w), free(ref), free(rref), free(out), free(rstd), free(a), free(b), free(rstd2);
        }
}

static void test_rmsnorm_backward(void) {
    if (!gpu_test_begin()) return;
    /* N = 1100 gives 3 rows per block; C = 16384 needs 64 KiB of shared memory (the opt-in path). A row in
     * registers: 1, 2 or 4 chunks of 256 threads x 4 channels (C = 96, 2048, 2056 / 4096), of 1 channel (13, 301,
     * 1001); in shared memory C = 16384 (4 channels) and 2057 (1). */
    const struct { int N, C; } shapes[] = {{1, 8},      {7, 96},     {257, 2056},  {7, 6},    {257, 13},
                                           {1100, 64},  {5, 16384},  {513, 96},    {1, 2056}, {300, 2048},
                                           {1030, 4096}, {9, 1001},  {7, 301},     {5, 2057}};
    for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
        const int N = shapes[si].N, C = shapes[si].C;
        const long n = (long)N * C;
        rng_seed(400 + si);
        float *x = rand_f32(n, -2, 2), *w = rand_f32(C, 0.5f, 1.5f), *g = rand_f32(n, -1, 1);
        float *dx0 = rand_f32(n, -1, 1), *dw0 = rand_f32(C, -1, 1);
        float *tmp = xmalloc((size_t)n * 4), *rstd = xmalloc((size_t)N * 4);
        rmsnorm_forward(tmp, rstd, x, w, N, C, 1e-6f);
        float *dx_ref = copy_f32(dx0, n), *dw_ref = copy_f32(dw0, C);
        rmsnorm_backward(dx_ref, dw_ref, g, x, w, rstd, N, C);

        long sfloats = gpu_rmsnorm_backward_scratch_floats(N, C);
        CHECK_MSG(sfloats > 0 && sfloats <= (long)RMSNORM_BWD_MAX_BLOCKS * C, "scratch floats %ld for N=%d C=%d", sfloats, N, C);
        float *d_x = gpu_upload(x, (size_t)n * 4), *d_w = gpu_upload(w, (size_t)C * 4), *d_g = gpu_upload(g, (size_t)n * 4);
        float *d_r = gpu_upload(rstd, (size_t)N * 4), *d_dx = gpu_upload(dx0, (size_t)n * 4), *d_dw = gpu_upload(dw0, (size_t)C * 4);
        float *d_s = gpu_poisoned((size_t)(sfloats + 1) * 4);
        bf16_t *d_dxb = gpu_poisoned((size_t)(n + 1) * 2), *d_cast = gpu_poisoned((size_t)n * 2);
        gpu_rmsnorm_backward(d_dx, 1, d_dxb, d_dw, d_s, d_g, d_x, d_w, d_r, N, C, 0);
        float *dx = dl_f32(d_dx, n), *dw = dl_f32(d_dw, C);
        /* the bf16 copy: every element written, the bits of a cast of dx */
        gpu_cast_f32_to_bf16(d_cast, d_dx, n, 0);
        void *dxb = dl_raw(d_dxb, (size_t)n * 2), *cast = dl_raw(d_cast, (size_t)n * 2);
        CHECK_MSG(bits_equal(dxb, cast, (size_t)n * 2), "rmsnorm_backward N=%d C=%d: dx_bf16 is not bf16(dx)", N, C);
        CHECK_MSG(count_nan(dx, n) + count_nan(dw, C) == 0, "rmsnorm_backward N=%d C=%d: NaN in dx (%ld) or dweight (%ld)", N,
                  C, count_nan(dx, n), count_nan(dw, C));
        double e_dx = rel_error_increment(dx, dx_ref, dx0, n), e_dw = rel_error_increment(dw, dw_ref, dw0, C);
        CHECK_MSG(e_dx < F32_TOL, "rmsnorm_backward N=%d C=%d: dx increment rel error %.3g", N, C, e_dx);
        CHECK_MSG(e_dw < F32_TOL, "rmsnorm_backward N=%d C=%d: dweight increment rel error %.3g", N, C, e_dw);
        /* second run from the same prefill (scratch left dirty): bitwise */
        cudaCheck(cudaMemcpy(d_dx, dx0, (size_t)n * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_dw, dw0, (size_t)C * 4, cudaMemcpyHostToDevice));
        gpu_rmsnorm_backward(d_dx, 1, NULL, d_dw, d_s, d_g, d_x, d_w, d_r, N, C, 0);
        float *dx2 = dl_f32(d_dx, n), *dw2 = dl_f32(d_dw, C);
        CHECK_MSG(bits_equal(dx, dx2, (size_t)n * 4) && bits_equal(dw, dw2, (size_t)C * 4),
                  "rmsnorm_backward N=%d C=%d: second run (dx_bf16 = NULL) differs (dx %ld, dweight %ld elements)",
                  N, C, count_bit_mismatch_f32(dx, dx2, n), count_bit_mismatch_f32(dw, dw2, C));
        /* a third with scratch and dx_bf16 one element off alignment: the element-wise form (other channels a
         * thread, so other bits), against the reference, its bf16 copy the cast of its dx */
        cudaCheck(cudaMemcpy(d_dx, dx0, (size_t)n * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_dw, dw0, (size_t)C * 4, cudaMemcpyHostToDevice));
        gpu_rmsnorm_backward(d_dx, 1, d_dxb + 1, d_dw, d_s + 1, d_g, d_x, d_w, d_r, N, C, 0);
        float *dx3 = dl_f32(d_dx, n), *dw3 = dl_f32(d_dw, C);
        gpu_cast_f32_to_bf16(d_cast, d_dx, n, 0);
        void *dxb3 = dl_raw(d_dxb + 1, (size_t)n * 2), *cast3 = dl_raw(d_cast, (size_t)n * 2);
        const double e_dx3 = rel_error_increment(dx3, dx_ref, dx0, n), e_dw3 = rel_error_increment(dw3, dw_ref, dw0, C);
        CHECK_MSG(e_dx3 < F32_TOL && e_dw3 < F32_TOL && bits_equal(dxb3, cast3, (size_t)n * 2),
                  "rmsnorm_backward N=%d C=%d, element-wise form: dx rel error %.3g, dweight %.3g, or dx_bf16 not "
                  "bf16(dx)", N, C, e_dx3, e_dw3);
        /* dx written (dx_add = 0) over NaN, in both forms: every element written, the bits of adding to zeros, and
         * the reference's dx from zeros */
        float *dxw_ref = xmalloc((size_t)n * 4), *dw_scr = copy_f32(dw0, C);
        memset(dxw_ref, 0, (size_t)n * 4);
        rmsnorm_backward(dxw_ref, dw_scr, g, x, w, rstd, N, C);
        float *dxw[2], *dxz[2];
        for (int f = 0; f < 2; f++) {
            bf16_t *db = f ? d_dxb + 1 : NULL;
            float *scr = f ? d_s + 1 : d_s;
            cudaCheck(cudaMemset(d_dx, 0, (size_t)n * 4));
            gpu_rmsnorm_backward(d_dx, 1, db, d_dw, scr, d_g, d_x, d_w, d_r, N, C, 0);
            dxz[f] = dl_f32(d_dx, n);
            cudaCheck(cudaMemset(d_dx, 0xff, (size_t)n * 4));
            gpu_rmsnorm_backward(d_dx, 0, db, d_dw, scr, d_g, d_x, d_w, d_r, N, C, 0);
            dxw[f] = dl_f32(d_dx, n);
            CHECK_MSG(count_nan(dxw[f], n) == 0 && bits_equal(dxw[f], dxz[f], (size_t)n * 4),
                      "rmsnorm_backward N=%d C=%d, %s form, dx written: %ld NaN (unwritten), %ld elements differ "
                      "from adding to zeros", N, C, f ? "element-wise" : "vector", count_nan(dxw[f], n),
                      count_bit_mismatch_f32(dxw[f], dxz[f], n));
            const double e_w = rel_error_f(dxw[f], dxw_ref, n);
            CHECK_MSG(e_w < F32_TOL, "rmsnorm_backward N=%d C=%d, %s form, dx written: rel error %.3g", N, C,
                      f ? "element-wise" : "vector", e_w);
        }
        cudaFree(d_x), cudaFree(d_w), cudaFree(d_g), cudaFree(d_r), cudaFree(d_dx), cudaFree(d_dw), cudaFree(d_s);
        cudaFree(d_dxb), cudaFree(d_cast);
        free(x), free(w), free(g), free(dx0), free(dw0), free(tmp), free(rstd), free(dx_ref), free(dw_ref);
        free(dx), free(dw), free(dx2), free(dw2), free(dxb), free(cast), free(dx3), free(dw3), free(dxb3), free(cast3);
        for (int f = 0; f < 2; f++) free(dxw[f]), free(dxz[f]);
        free(dxw_ref), free(dw_scr);
    }
}

/* ================================================================================================
 * rope.h */
static void test_rope(void) {
    if (!gpu_test_begin()) return;
    /* D/2 % 8 == 0 takes the 16-byte path (D = 16, 64, 128); the others go element by element. */
    const struct { int B, T, H, D; float theta; } shapes[] = {
        {1, 1, 1, 2, 10000.0f},  {2, 7, 3, 6, 10000.0f},   {1, 33, 4, 64, 10000.0f}, {2, 17, 2, 128, 1e6f},
        {1, 5, 3, 16, 500.0f},   {3, 9, 1, 10, 10000.0f},  {1, 4096, 1, 128, 1e6f},
    };
    for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
        const int B = shapes[si].B, T = shapes[si].T, H = shapes[si].H, D = shapes[si].D;
        const float theta = shapes[si].theta;
        const long n = (long)B * T * H * D;
        rng_seed(500 + si);
        float *x = rand_f32(n, -1, 1);
        round_bf16(x, n);
        bf16_t *xb = to_bf16(x, n);
        /* the table: built for T + 3 rows (a longer table serves a shorter sequence) */
        const int Tt = T + 3;
        float *d_tab = gpu_poisoned((size_t)gpu_rope_table_floats(Tt, D) * 4);
        gpu_rope_table_init(d_tab, Tt, D, theta, 0);
        float *tab = dl_f32(d_tab, gpu_rope_table_floats(Tt, D));
        double terr = 0;
        for (int t = 0; t < Tt; t++)
            for (int i = 0; i < D / 2; i++) {
                double angle = t * pow((double)theta, -2.0 * i / D);
                terr = fmax(terr, fabs(tab[(long)t * D + i] - (float)cos(angle)));
                terr = fmax(terr, fabs(tab[(long)t * D + D / 2 + i] - (float)sin(angle)));
            }
        CHECK_MSG(terr <= 1.2e-7, "rope table T=%d D=%d theta=%g: max |table - (float)cos/sin(angle)| = %.3g", Tt, D, theta, terr);
        for (int inverse = 0; inverse < 2; inverse++) {
            float *ref = copy_f32(x, n);
            rope_apply(ref, B, T, H, D, theta, inverse);
            bf16_t *d_x = gpu_upload(xb, (size_t)n * 2);
            gpu_rope(d_x, d_tab, B, T, H, D, (long)H * D, inverse, 0);
            float *got = dl_bf16(d_x, n);
            double err = rel_error_f(got, ref, n);
            CHECK_MSG(count_nan(got, n) == 0, "rope B=%d T=%d H=%d D=%d inverse=%d: NaN in output", B, T, H, D, inverse);
            CHECK_MSG(err < BF16_TOL, "rope B=%d T=%d H=%d D=%d theta=%g inverse=%d: rel error %.3g", B, T, H, D, theta, inverse, err);
            /* bitwise second run */
            bf16_t *d_x2 = gpu_upload(xb, (size_t)n * 2);
            gpu_rope(d_x2, d_tab, B, T, H, D, (long)H * D, inverse, 0);
            void *a = dl_raw(d_x, (size_t)n * 2), *b = dl_raw(d_x2, (size_t)n * 2);
            CHECK_MSG(bits_equal(a, b, (size_t)n * 2), "rope B=%d T=%d H=%d D=%d inverse=%d: second run differs", B, T, H, D, inverse);
            /* forward then inverse returns the input (up to bf16 rounding) */
            if (inverse == 0) {
                gpu_rope(d_x2, d_tab, B, T, H, D, (long)H * D, 1, 0);
                float *back = dl_bf16(d_x2, n);
                double eb = rel_error_f(back, x, n);
                CHECK_MSG(eb < BF16_TOL, "rope B=%d T=%d H=%d D=%d: inverse(forward(x)) vs x rel error %.3g", B, T, H, D, eb);
                free(back);
            }
            cudaFree(d_x), cudaFree(d_x2);
            free(ref), free(got), free(a), free(b);
        }
        /* misaligned x: the element-by-element path gives the same bits as the vector path */
        if ((D / 2) % 8 == 0) {
            bf16_t *d_a = gpu_upload(xb, (size_t)n * 2), *d_m = upload_shifted(xb, (size_t)n * 2, 2, 1);
            gpu_rope(d_a, d_tab, B, T, H, D, (long)H * D, 0, 0);
            gpu_rope(d_m, d_tab, B, T, H, D, (long)H * D, 0, 0);
            void *a = dl_raw(d_a, (size_t)n * 2), *b = dl_raw(d_m, (size_t)n * 2);
            CHECK_MSG(bits_equal(a, b, (size_t)n * 2), "rope B=%d T=%d H=%d D=%d: vector and scalar paths differ", B, T, H, D);
            cudaFree(d_a);
            gpu_free_shifted(d_m, 2, 1);
            free(a), free(b);
        }
        /* the heads at the start of wider rows (as dq and dk in the backward's q, k, v gradient rows): the same
         * bits as packed, the rest of each row untouched; an odd pitch takes the element-by-element path */
        for (int wide = 0; wide < 2; wide++) {
            const long ld = (long)H * D + (wide ? 1 : 2 * D), rows = (long)B * T;
            bf16_t *xw = malloc((size_t)(rows * ld) * 2);
            for (long r = 0; r < rows; r++)
                for (long c = 0; c < ld; c++)
                    xw[r * ld + c] = c < (long)H * D ? xb[r * H * D + c] : (bf16_t)(0x3f00 + (c & 0xff));
            bf16_t *d_p = gpu_upload(xb, (size_t)n * 2), *d_w = gpu_upload(xw, (size_t)(rows * ld) * 2);
            gpu_rope(d_p, d_tab, B, T, H, D, (long)H * D, 1, 0);
            gpu_rope(d_w, d_tab, B, T, H, D, ld, 1, 0);
            bf16_t *p = dl_raw(d_p, (size_t)n * 2), *w = dl_raw(d_w, (size_t)(rows * ld) * 2);
            long differ = 0, touched = 0;
            for (long r = 0; r < rows; r++)
                for (long c = 0; c < ld; c++)
                    if (c < (long)H * D) differ += w[r * ld + c] != p[r * H * D + c];
                    else touched += w[r * ld + c] != xw[r * ld + c];
            CHECK_MSG(differ == 0 && touched == 0,
                      "rope B=%d T=%d H=%d D=%d rows %ld apart: %ld rotated elements differ from packed rows', %ld "
                      "elements beyond the heads changed", B, T, H, D, ld, differ, touched);
            cudaFree(d_p), cudaFree(d_w);
            free(xw), free(p), free(w);
        }
        cudaFree(d_tab);
        free(x), free(xb), free(tab);
    }
}

/* ================================================================================================
 * swiglu.h */
static void test_swiglu(void) {
    if (!gpu_test_begin()) return;
    const long sizes[] = {1, 7, 8, 257, 4099, 100000};
    for (int si = 0; si < (int)(sizeof sizes / sizeof sizes[0]); si++)
        for (int shift = 0; shift < 2; shift++) {
            const long n = sizes[si];
            rng_seed(600 + si * 2 + shift);
            float *g = rand_f32(n, -6, 6), *u = rand_f32(n, -2, 2), *dh = rand_f32(n, -1, 1);
            round_bf16(g, n);
            round_bf16(u, n);
            bf16_t *gb = to_bf16(g, n), *ub = to_bf16(u, n);
            float *h_ref = xmalloc((size_t)n * 4), *dg_ref = calloc(n, 4), *du_ref = calloc(n, 4);
            swiglu_forward(h_ref, g, u, n);
            swiglu_backward(dg_ref, du_ref, dh, g, u, n); /* the CPU adds: zero-filled */
            bf16_t *d_g = upload_shifted(gb, (size_t)n * 2, 2, shift), *d_u = upload_shifted(ub, (size_t)n * 2, 2, shift);
            float *d_dh = upload_shifted(dh, (size_t)n * 4, 4, shift);
            bf16_t *d_h = poisoned_shifted((size_t)n * 2, 2, shift), *d_dg = poisoned_shifted((size_t)n * 2, 2, shift);
            bf16_t *d_du = poisoned_shifted((size_t)n * 2, 2, shift);
            gpu_swiglu_forward(d_h, d_g, d_u, n, 0);
            gpu_swiglu_backward(d_dg, d_du, d_dh, d_g, d_u, n, 0);
            float *h = dl_bf16(d_h, n), *dg = dl_bf16(d_dg, n), *du = dl_bf16(d_du, n);
            CHECK_MSG(count_nan(h, n) + count_nan(dg, n) + count_nan(du, n) == 0,
                      "swiglu n=%ld shift=%d: unwritten outputs (NaN: h %ld, dgate %ld, dup %ld)", n, shift, count_nan(h, n),
                      count_nan(dg, n), count_nan(du, n));
            double eh = rel_error_f(h, h_ref, n), eg = rel_error_f(dg, dg_ref, n), eu = rel_error_f(du, du_ref, n);
            CHECK_MSG(eh < BF16_TOL, "swiglu_forward n=%ld shift=%d: rel error %.3g", n, shift, eh);
            CHECK_MSG(eg < BF16_TOL, "swiglu_backward n=%ld shift=%d: dgate rel error %.3g", n, shift, eg);
            CHECK_MSG(eu < BF16_TOL, "swiglu_backward n=%ld shift=%d: dup rel error %.3g", n, shift, eu);
            /* second run, and the documented in-place forms (h over gate; dgate over gate, dup over up) */
            bf16_t *d_h2 = poisoned_shifted((size_t)n * 2, 2, shift);
            gpu_swiglu_forward(d_h2, d_g, d_u, n, 0);
            void *a = dl_raw(d_h, (size_t)n * 2), *b = dl_raw(d_h2, (size_t)n * 2);
            CHECK_MSG(bits_equal(a, b, (size_t)n * 2), "swiglu_forward n=%ld shift=%d: second run differs", n, shift);
            void *dga = dl_raw(d_dg, (size_t)n * 2), *dua = dl_raw(d_du, (size_t)n * 2);
            gpu_swiglu_backward(d_g, d_u, d_dh, d_g, d_u, n, 0);
            void *dgb = dl_raw(d_g, (size_t)n * 2), *dub = dl_raw(d_u, (size_t)n * 2);
            CHECK_MSG(bits_equal(dga, dgb, (size_t)n * 2) && bits_equal(dua, dub, (size_t)n * 2),
                      "swiglu_backward n=%ld shift=%d: in place (dgate = gate, dup = up) differs from out of place", n, shift);
            cudaCheck(cudaMemcpy(d_g, gb, (size_t)n * 2, cudaMemcpyHostToDevice));
            cudaCheck(cudaMemcpy(d_u, ub, (size_t)n * 2, cudaMemcpyHostToDevice));
            gpu_swiglu_forward(d_g, d_g, d_u, n, 0);
            void *hin = dl_raw(d_g, (size_t)n * 2);
            CHECK_MSG(bits_equal(a, hin, (size_t)n * 2), "swiglu_forward n=%ld shift=%d: in place (h = gate) differs", n, shift);
            gpu_free_shifted(d_g, 2, shift), gpu_free_shifted(d_u, 2, shift), gpu_free_shifted(d_dh, 4, shift);
            gpu_free_shifted(d_h, 2, shift), gpu_free_shifted(d_dg, 2, shift), gpu_free_shifted(d_du, 2, shift);
            gpu_free_shifted(d_h2, 2, shift);
            free(g), free(u), free(dh), free(gb), free(ub), free(h_ref), free(dg_ref), free(du_ref);
            free(h), free(dg), free(du), free(a), free(b), free(dga), free(dua), free(dgb), free(dub), free(hin);
        }
}

/* ================================================================================================
 * cross_entropy.h (+ gpu_sum_f32 for the mean) */
/* gpu_cross_entropy_coded on what gemm_sm90_logits writes, made here from the logits (each 256-column tile's maximum
 * and sum of exp, the codes rounded from (maximum - logit) * 2^11, the target logits): the CPU's losses and gradient
 * within the tolerances, every element written, repeatable bit for bit; and the losses alone without dlogits. */
static void check_cross_entropy_coded(const int *d_t, const float *logits, const int *tgt, const float *loss_ref,
                                      const float *dl_ref, int rows, int V, int shift, float scale) {
    const int tiles = (V + 255) / 256;
    const long n = (long)rows * V;
    float *stats = xmalloc((size_t)rows * tiles * 2 * sizeof(float)), *tl = xmalloc((size_t)rows * sizeof(float));
    uint16_t *codes = xmalloc((size_t)n * 2);
    for (int r = 0; r < rows; r++) {
        const float *x = logits + (long)r * V;
        tl[r] = x[tgt[r]];
        for (int t = 0; t < tiles; t++) {
            float mx;
            int j1;
            const double sum = host_tile_stats(x, V, t, &mx, &j1);
            for (int j = 256 * t; j < j1; j++)
                codes[(long)r * V + j] = (uint16_t)lrint(fmin((double)mx - x[j], 65535.0 / 2048) * 2048);
            stats[2 * ((long)r * tiles + t)] = mx, stats[2 * ((long)r * tiles + t) + 1] = (float)sum;
        }
    }
    float *d_st = gpu_upload(stats, (size_t)rows * tiles * 2 * sizeof(float)), *d_tl = gpu_upload(tl, (size_t)rows * 4);
    uint16_t *d_c = upload_shifted(codes, (size_t)n * 2, 2, shift);
    float *got_loss[3];
    bf16_t *got_dl[2];
    for (int run = 0; run < 3; run++) {
        float *d_loss = gpu_poisoned((size_t)rows * 4);
        bf16_t *d_dl = run < 2 ? poisoned_shifted((size_t)n * 2, 2, shift) : NULL;
        gpu_cross_entropy_coded(d_loss, d_dl, d_c, d_st, d_tl, d_t, rows, V, scale, 0);
        got_loss[run] = dl_f32(d_loss, rows);
        if (d_dl) got_dl[run] = dl_raw(d_dl, (size_t)n * 2), gpu_free_shifted(d_dl, 2, shift);
        cudaFree(d_loss);
    }
    float *dlg = xmalloc((size_t)n * 4);
    for (long i = 0; i < n; i++) dlg[i] = host_from_bf16(got_dl[0][i]);
    CHECK_MSG(count_nan(got_loss[0], rows) + count_nan(dlg, n) == 0,
              "cross_entropy_coded rows=%d V=%d: NaN in losses (%ld) or dlogits (%ld)", rows, V,
              count_nan(got_loss[0], rows), count_nan(dlg, n));
    const double el = rel_error_f(got_loss[0], loss_ref, rows), ed = rel_error_f(dlg, dl_ref, n);
    CHECK_MSG(el < F32_TOL && ed < BF16_TOL,
              "cross_entropy_coded rows=%d V=%d shift=%d: losses rel error %.3g, dlogits %.3g", rows, V, shift, el, ed);
    /* each non-target element against its own value (the norm above is mostly the targets'): bf16's 2^-9 and the
     * codes' 2^-12 (a target's p - 1 may cancel: the norm covers those) */
    long bad = 0, at = -1;
    for (long i = 0; i < n; i++) {
        const int off = fabsf(dlg[i] - dl_ref[i]) > 5e-3f * fabsf(dl_ref[i]);
        if (i % V != tgt[i / V] && fabsf(dl_ref[i]) > 1e-30f && off) bad++, at = at < 0 ? i : at;
    }
    CHECK_MSG(bad == 0, "cross_entropy_coded rows=%d V=%d shift=%d: %ld dlogits off by more than 0.5 %% of their "
              "value (first at %ld: %.6g against %.6g)", rows, V, shift, bad, at, at < 0 ? 0.0 : dlg[at],
              at < 0 ? 0.0 : dl_ref[at]);
    const size_t lb = (size_t)rows * 4;
    CHECK_MSG(bits_equal(got_loss[0], got_loss[1], lb) && bits_equal(got_dl[0], got_dl[1], (size_t)n * 2) &&
                  bits_equal(got_loss[0], got_loss[2], lb),
              "cross_entropy_coded rows=%d V=%d: a second run, or the losses without dlogits, differ", rows, V);
    cudaFree(d_st), cudaFree(d_tl), gpu_free_shifted(d_c, 2, shift);
    free(stats), free(tl), free(codes), free(dlg);
    for (int run = 0; run < 3; run++) free(got_loss[run]);
    free(got_dl[0]), free(got_dl[1]);
}

static void test_cross_entropy(void) {
    if (!gpu_test_begin()) return;
    /* V % 8 == 0 aligned (16-byte codes), V % 4 == 0 only or 8-byte aligned (1004; shift 4: 8-byte), odd or
     * misaligned (one at a time) */
    const struct { int rows, V, shift; } shapes[] = {{1, 256, 0},   {7, 256, 0}, {5, 50257, 0}, {3, 151936, 0},
                                                     {33, 1000, 0}, {4, 7, 0},   {6, 256, 1},   {2, 20000, 1},
                                                     {5, 1004, 0},  {3, 2048, 4}};
    for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
        const int rows = shapes[si].rows, V = shapes[si].V, shift = shapes[si].shift;
        const long n = (long)rows * V;
        rng_seed(700 + si);
        float *logits = rand_f32(n, -4, 4);
        int *tgt = xmalloc(rows * sizeof(int));
        for (int r = 0; r < rows; r++) {
            tgt[r] = rnd_int(V);
            const float offset = r % 3 == 1 ? 40.0f : (r % 3 == 2 ? -25.0f : 0.0f); /* stability: shifted rows */
            for (int j = 0; j < V; j++) logits[(long)r * V + j] += offset;
            if (r % 2 == 0) logits[(long)r * V + tgt[r]] += 6.0f; /* a confident row */
        }
        const float dloss = 0.75f;
        float *dl_ref = xmalloc((size_t)n * 4), *loss_ref = xmalloc((size_t)rows * 4);
        double mean_ref = cross_entropy(dl_ref, loss_ref, logits, tgt, rows, V, dloss);
        float *d_lg = upload_shifted(logits, (size_t)n * 4, 4, shift);
        int *d_t = gpu_upload(tgt, rows * sizeof(int));
        float *d_loss = gpu_poisoned((size_t)rows * 4);
        bf16_t *d_dl = poisoned_shifted((size_t)n * 2, 2, shift);
        gpu_cross_entropy(d_loss, d_dl, d_lg, d_t, rows, V, dloss / rows, 0);
        float *loss = dl_f32(d_loss, rows), *dlg = dl_bf16(d_dl, n);
        CHECK_MSG(count_nan(loss, rows) + count_nan(dlg, n) == 0, "cross_entropy rows=%d V=%d: NaN in losses (%ld) or dlogits (%ld)",
                  rows, V, count_nan(loss, rows), count_nan(dlg, n));
        double el = rel_error_f(loss, loss_ref, rows), ed = rel_error_f(dlg, dl_ref, n);
        CHECK_MSG(el < F32_TOL, "cross_entropy rows=%d V=%d shift=%d: losses rel error %.3g (row 0: gpu %.9g cpu %.9g)", rows, V,
                  shift, el, loss[0], loss_ref[0]);
        CHECK_MSG(ed < BF16_TOL, "cross_entropy rows=%d V=%d shift=%d: dlogits rel error %.3g", rows, V, shift, ed);
        /* the mean through the deterministic device sum */
        double *d_sum = gpu_poisoned(sizeof(double)), mean;
        gpu_sum_f32(d_sum, d_loss, rows, 0, 0);
        gpu_download(&mean, d_sum, sizeof(double));
        mean /= rows;
        CHECK_MSG(fabs(mean - mean_ref) <= F32_TOL * fabs(mean_ref), "cross_entropy rows=%d V=%d: mean %.9g vs cpu %.9g", rows, V,
                  mean, mean_ref);
        /* forward only (dlogits NULL): same losses; second run bitwise */
        float *d_loss2 = gpu_poisoned((size_t)rows * 4);
        gpu_cross_entropy(d_loss2, NULL, d_lg, d_t, rows, V, dloss / rows, 0);
        bf16_t *d_dl2 = poisoned_shifted((size_t)n * 2, 2, shift);
        float *d_loss3 = gpu_poisoned((size_t)rows * 4);
        gpu_cross_entropy(d_loss3, d_dl2, d_lg, d_t, rows, V, dloss / rows, 0);
        float *loss2 = dl_f32(d_loss2, rows), *loss3 = dl_f32(d_loss3, rows);
        void *a = dl_raw(d_dl, (size_t)n * 2), *b = dl_raw(d_dl2, (size_t)n * 2);
        CHECK_MSG(bits_equal(loss, loss2, (size_t)rows * 4), "cross_entropy rows=%d V=%d: losses without dlogits differ", rows, V);
        CHECK_MSG(bits_equal(loss, loss3, (size_t)rows * 4) && bits_equal(a, b, (size_t)n * 2),
                  "cross_entropy rows=%d V=%d: second run differs", rows, V);
        check_cross_entropy_coded(d_t, logits, tgt, loss_ref, dl_ref, rows, V, shift, dloss / rows);
        gpu_free_shifted(d_lg, 4, shift), gpu_free_shifted(d_dl, 2, shift), gpu_free_shifted(d_dl2, 2, shift);
        cudaFree(d_t), cudaFree(d_loss), cudaFree(d_sum), cudaFree(d_loss2), cudaFree(d_loss3);
        free(logits), free(tgt), free(dl_ref), free(loss_ref), free(loss), free(dlg), free(loss2), free(loss3), free(a), free(b);
    }
}

/* ================================================================================================
 * adamw.h */

/* The moments on the device as the state type stores them: fp32, or bf16 (x already bf16-exact). */
static void *upload_moment(const float *x, long n, int bf16) {
    return bf16 ? gpu_upload_bf16(x, n) : gpu_upload(x, (size_t)n * 4);
}
static float *download_moment(const void *dev, long n, int bf16) {
    return bf16 ? dl_bf16(dev, n) : dl_f32(dev, n);
}
static void *moment_at(void *base, size_t o, int bf16) {
    return bf16 ? (void *)((bf16_t *)base + o) : (void *)((float *)base + o);
}
/* The elements from o of flat buffers (w: fp32 masters, h: their bf16 copy or the split pairs' halves with l; NULL
 * where absent) as AdamW takes them. */
static AdamWTensor state_at(float *w, bf16_t *h, int16_t *l, void *m, void *v, size_t o, int bf16, double wd) {
    return (AdamWTensor){.params = w ? w + o : NULL, .params_bf16 = h ? h + o : NULL, .params_lo = l ? l + o : NULL,
                         .m = moment_at(m, o, bf16), .v = moment_at(v, o, bf16), .weight_decay = wd};
}

/* The AdamW tests' settings, with fp32 or bf16 moments. */
static TrainConfig adamw_config(int bf16) {
    TrainConfig tc;
    memset(&tc, 0, sizeof tc);
    tc.beta1 = 0.9, tc.beta2 = 0.95, tc.eps = 1e-8, tc.weight_decay = 0.1;
    tc.optimizer_state = bf16 ? OPT_STATE_BF16 : OPT_STATE_FP32;
    return tc;
}

/* A table of one decayed tensor of n parameters. */
static void one_decayed_tensor(ParamTable *pt, ParamInfo *item, long n) {
    memset(item, 0, sizeof *item);
    item->numel = (size_t)n, item->decay = true;
    memset(pt, 0, sizeof *pt);
    pt->items = item, pt->count = 1, pt->total = (size_t)n;
}

/* Random moments of n parameters as a run keeps them (bf16: rounded so), drawn m first. */
static void adamw_moments(float **m, float **v, long n, int bf16) {
    *m = rand_f32(n, -1e-2f, 1e-2f), *v = rand_f32(n, 0, 1e-4f);
    if (bf16)
        for (long j = 0; j < n; j++) (*m)[j] = host_bf16_round((*m)[j]), (*v)[j] = host_bf16_round((*v)[j]);
}

/* Moments zero in some rows of row_n (a row no gradient has reached yet), so that replays take both their paths: rows
 * r % 3 == 0 whole (m = -0 where r % 6 == 0), rows r % 3 == 2 all but their element 1 (groups of four mixed). */
static void zero_rows_moments(float *m, float *v, long rows, long row_n) {
    for (long r = 0; r < rows; r++)
        for (long j = 0; j < row_n; j++)
            if (r % 3 == 0 || (r % 3 == 2 && j != 1))
                m[r * row_n + j] = r % 6 == 0 ? -0.0f : 0.0f, v[r * row_n + j] = 0.0f;
}

/* Three steps on the GPU against adamw_step, with fp32 or bf16 moments (rounded after each update). */
static void adamw_case(int bf16) {
    /* Three tensors: aligned (vector path + tail), offset 1004 (aligned, tail of 1), offset 1041
     * (misaligned: element path). Gaps between them are not parameters of the table. */
    ParamInfo items[3];
    memset(items, 0, sizeof items);
    items[0].offset = 0, items[0].numel = 1001, items[0].decay = true;
    items[1].offset = 1004, items[1].numel = 37, items[1].decay = false;
    items[2].offset = 1041, items[2].numel = 4096, items[2].decay = true;
    ParamTable pt;
    memset(&pt, 0, sizeof pt);
    pt.items = items, pt.count = 3, pt.total = 1041 + 4096;
    const TrainConfig tc = adamw_config(bf16);
    const char *kind = bf16 ? "bf16 moments" : "fp32 moments";
    const long n = (long)pt.total;
    rng_seed(800 + bf16);
    float *w0 = rand_f32(n, -1, 1), *m0, *v0;
    adamw_moments(&m0, &v0, n, bf16);
    float *w = copy_f32(w0, n), *m = copy_f32(m0, n), *v = copy_f32(v0, n);
    float *d_w = gpu_upload(w0, (size_t)n * 4);
    void *d_m = upload_moment(m0, n, bf16), *d_v = upload_moment(v0, n, bf16);
    bf16_t *d_b = gpu_poisoned((size_t)n * 2);
    float *d_g = gpu_poisoned((size_t)n * 4);
    float *grads[3];
    const double lrs[3] = {3e-4, 1e-3, 2.5e-4}, gss[3] = {1.0, 0.7, 0.31};
    for (int step = 0; step < 3; step++) {
        grads[step] = rand_f32(n, -1, 1);
        cudaCheck(cudaMemcpy(d_g, grads[step], (size_t)n * 4, cudaMemcpyHostToDevice));
        adamw_step(w, grads[step], m, v, &pt, &tc, lrs[step], gss[step], step + 1);
        for (int i = 0; i < pt.count; i++) {
            size_t o = items[i].offset;
            const AdamWTensor t = state_at(d_w, d_b, NULL, d_m, d_v, o, bf16, items[i].decay ? tc.weight_decay : 0.0);
            gpu_adamw(&t, d_g + o, bf16, (long)items[i].numel, NULL, 0, NULL, 0, lrs[step], tc.beta1, tc.beta2,
                      tc.eps, gss[step], step + 1, 0);
        }
    }
    float *gw = dl_f32(d_w, n), *gm = download_moment(d_m, n, bf16), *gv = download_moment(d_v, n, bf16);
    bf16_t *gb = dl_raw(d_b, (size_t)n * 2);
    double ew = rel_error_f(gw, w, n), em = rel_error_f(gm, m, n), ev = rel_error_f(gv, v, n);
    CHECK_MSG(ew < 1e-6, "adamw, %s: params rel error %.3g (%ld of %ld not bitwise equal to adamw_step)", kind, ew,
              count_bit_mismatch_f32(gw, w, n), n);
    CHECK_MSG(em < 1e-6, "adamw, %s: m rel error %.3g (%ld not bitwise equal)", kind, em,
              count_bit_mismatch_f32(gm, m, n));
    CHECK_MSG(ev < 1e-6, "adamw, %s: v rel error %.3g (%ld not bitwise equal)", kind, ev,
              count_bit_mismatch_f32(gv, v, n));
    long bad_bf = 0, gap_touched = 0, moved = 0;
    for (long j = 0; j < n; j++) {
        int in = 0;
        for (int i = 0; i < pt.count; i++) in |= (size_t)j >= items[i].offset && (size_t)j < items[i].offset + items[i].numel;
        if (in)
            bad_bf += gb[j] != host_to_bf16(gw[j]), moved += gm[j] != m0[j] && gv[j] != v0[j];
        else
            gap_touched += gb[j] != 0xffff || gw[j] != w0[j];
    }
    CHECK_MSG(bad_bf == 0, "adamw, %s: %ld bf16 copies differ from bf16(params)", kind, bad_bf);
    CHECK_MSG(gap_touched == 0, "adamw, %s: %ld elements outside the launched ranges were written", kind, gap_touched);
    /* bf16 moments must still follow their updates (beta <= 0.99): nearly every element moved */
    CHECK_MSG(moved > (n - 3) * 9 / 10, "adamw, %s: only %ld of %ld moments moved in three steps", kind, moved, n);
    /* second run from the same state: bitwise */
    cudaFree(d_m), cudaFree(d_v);
    d_m = upload_moment(m0, n, bf16), d_v = upload_moment(v0, n, bf16);
    cudaCheck(cudaMemcpy(d_w, w0, (size_t)n * 4, cudaMemcpyHostToDevice));
    for (int step = 0; step < 3; step++) {
        cudaCheck(cudaMemcpy(d_g, grads[step], (size_t)n * 4, cudaMemcpyHostToDevice));
        for (int i = 0; i < pt.count; i++) {
            size_t o = items[i].offset;
            const AdamWTensor t = state_at(d_w, NULL, NULL, d_m, d_v, o, bf16, items[i].decay ? tc.weight_decay : 0.0);
            gpu_adamw(&t, d_g + o, bf16, (long)items[i].numel, NULL, 0, NULL, 0, lrs[step], tc.beta1, tc.beta2,
                      tc.eps, gss[step], step + 1, 0);
        }
    }
    float *gw2 = dl_f32(d_w, n), *gm2 = download_moment(d_m, n, bf16), *gv2 = download_moment(d_v, n, bf16);
    CHECK_MSG(bits_equal(gw, gw2, (size_t)n * 4) && bits_equal(gm, gm2, (size_t)n * 4) && bits_equal(gv, gv2, (size_t)n * 4),
              "adamw, %s: second run differs (params %ld, m %ld, v %ld)", kind, count_bit_mismatch_f32(gw, gw2, n),
              count_bit_mismatch_f32(gm, gm2, n), count_bit_mismatch_f32(gv, gv2, n));
    /* the masters as pairs (master_split.h) from split(w0), the same three steps: joined, the fp32 run's bits; each
     * bf16 half the ties-away rounding of them; the moments the fp32 run's; nothing outside the ranges written */
    cudaFree(d_m), cudaFree(d_v);
    d_m = upload_moment(m0, n, bf16), d_v = upload_moment(v0, n, bf16);
    cudaCheck(cudaMemcpy(d_w, w0, (size_t)n * 4, cudaMemcpyHostToDevice));
    bf16_t *d_h = gpu_poisoned((size_t)n * 2);
    int16_t *d_l = gpu_poisoned((size_t)n * 2);
    for (int i = 0; i < pt.count; i++)
        gpu_master_split(d_h + items[i].offset, d_l + items[i].offset, d_w + items[i].offset, (long)items[i].numel, 0);
    for (int step = 0; step < 3; step++) {
        cudaCheck(cudaMemcpy(d_g, grads[step], (size_t)n * 4, cudaMemcpyHostToDevice));
        for (int i = 0; i < pt.count; i++) {
            size_t o = items[i].offset;
            const AdamWTensor t = state_at(NULL, d_h, d_l, d_m, d_v, o, bf16, items[i].decay ? tc.weight_decay : 0.0);
            gpu_adamw(&t, d_g + o, bf16, (long)items[i].numel, NULL, 0, NULL, 0, lrs[step], tc.beta1, tc.beta2,
                      tc.eps, gss[step], step + 1, 0);
        }
    }
    for (int i = 0; i < pt.count; i++)
        gpu_master_join(d_w + items[i].offset, d_h + items[i].offset, d_l + items[i].offset, (long)items[i].numel, 0);
    float *sw = dl_f32(d_w, n), *sm = download_moment(d_m, n, bf16), *sv = download_moment(d_v, n, bf16);
    bf16_t *sh = dl_raw(d_h, (size_t)n * 2);
    int16_t *sl = dl_raw(d_l, (size_t)n * 2);
    long split_bad = 0, split_hi = 0, split_gap = 0;
    for (long j = 0; j < n; j++) {
        int in = 0;
        for (int i = 0; i < pt.count; i++)
            in |= (size_t)j >= items[i].offset && (size_t)j < items[i].offset + items[i].numel;
        if (in)
            split_bad += memcmp(&sw[j], &gw[j], 4) != 0 || memcmp(&sm[j], &gm[j], 4) != 0 ||
                         memcmp(&sv[j], &gv[j], 4) != 0,
                split_hi += sh[j] != host_to_bf16_ties_away(gw[j]);
        else
            split_gap += sh[j] != 0xffff || sl[j] != -1 || memcmp(&sw[j], &w0[j], 4) != 0;
    }
    CHECK_MSG(split_bad + split_hi + split_gap == 0,
              "adamw on split masters, %s: %ld elements differ from the fp32 masters' run (params, m or v), %ld bf16 "
              "halves are not the ties-away rounding, %ld elements outside the ranges written", kind, split_bad,
              split_hi, split_gap);
    /* the updates above almost never land on a tie; lr 0 leaves every master as it was, so pairs split from ties
     * (low 16 bits 0x8000 above an even bf16, where the two roundings differ) must come back from AdamW's stores
     * unchanged, on the vector and the element path */
    float *tw = rand_f32(n, -1, 1);
    for (long j = 0; j < n; j += 2) {
        uint32_t u;
        memcpy(&u, &tw[j], 4);
        u = (u & 0xfffe0000u) | 0x8000u;
        memcpy(&tw[j], &u, 4);
    }
    cudaCheck(cudaMemcpy(d_w, tw, (size_t)n * 4, cudaMemcpyHostToDevice));
    for (int i = 0; i < pt.count; i++) {
        size_t o = items[i].offset;
        gpu_master_split(d_h + o, d_l + o, d_w + o, (long)items[i].numel, 0);
        const AdamWTensor t = state_at(NULL, d_h, d_l, d_m, d_v, o, bf16, items[i].decay ? tc.weight_decay : 0.0);
        gpu_adamw(&t, d_g + o, bf16, (long)items[i].numel, NULL, 0, NULL, 0, 0.0, tc.beta1, tc.beta2, tc.eps, 1.0, 4,
                  0);
        gpu_master_join(d_w + o, d_h + o, d_l + o, (long)items[i].numel, 0);
    }
    float *tj = dl_f32(d_w, n);
    bf16_t *th = dl_raw(d_h, (size_t)n * 2);
    long tie_bad = 0;
    for (int i = 0; i < pt.count; i++)
        for (size_t j = items[i].offset; j < items[i].offset + items[i].numel; j++)
            tie_bad += memcmp(&tj[j], &tw[j], 4) != 0 || th[j] != host_to_bf16_ties_away(tw[j]);
    CHECK_MSG(tie_bad == 0, "adamw on split masters, %s, lr 0 over ties: %ld masters or bf16 halves changed", kind,
              tie_bad);
    free(tw), free(tj), free(th);
    cudaFree(d_w), cudaFree(d_m), cudaFree(d_v), cudaFree(d_b), cudaFree(d_g), cudaFree(d_h), cudaFree(d_l);
    for (int s = 0; s < 3; s++) free(grads[s]);
    free(w0), free(m0), free(v0), free(w), free(m), free(v), free(gw), free(gm), free(gv), free(gb), free(gw2), free(gm2), free(gv2);
    free(sw), free(sm), free(sv), free(sh), free(sl);
}

/* Blocks whose gradient is zeros, not read (gpu_adamw's live flags: an idle expert's): their gradient memory holds
 * NaNs, and two steps on split masters must give adamw_step's bits from zeros there, on the vector path (blocks of a
 * multiple of 4) and the element path (of 999). */
static void adamw_live_case(int bf16, long block_n) {
    enum { BLOCKS = 6 };
    const long n = BLOCKS * block_n;
    const int live[BLOCKS] = {3, 0, 0, 17, 0, 1};
    ParamInfo item;
    ParamTable pt;
    one_decayed_tensor(&pt, &item, n);
    const TrainConfig tc = adamw_config(bf16);
    rng_seed(900 + bf16 + block_n);
    float *w = rand_f32(n, -1, 1), *m, *v;
    adamw_moments(&m, &v, n, bf16);
    float *d_w = gpu_upload(w, (size_t)n * 4), *d_g = gpu_poisoned((size_t)n * 4);
    void *d_m = upload_moment(m, n, bf16), *d_v = upload_moment(v, n, bf16);
    int *d_live = gpu_upload(live, sizeof live);
    bf16_t *d_h = gpu_poisoned((size_t)n * 2);
    int16_t *d_l = gpu_poisoned((size_t)n * 2);
    gpu_master_split(d_h, d_l, d_w, n, 0);
    for (int step = 0; step < 2; step++) {
        float *g = rand_f32(n, -1, 1);
        for (int b = 0; b < BLOCKS; b++) /* the device's dead blocks keep their NaNs; the CPU's are zeros */
            if (live[b]) cudaCheck(cudaMemcpy(d_g + b * block_n, g + b * block_n, (size_t)block_n * 4,
                                              cudaMemcpyHostToDevice));
            else memset(g + b * block_n, 0, (size_t)block_n * 4);
        adamw_step(w, g, m, v, &pt, &tc, 1e-3, 0.5, step + 1);
        const AdamWTensor t = state_at(NULL, d_h, d_l, d_m, d_v, 0, bf16, tc.weight_decay);
        gpu_adamw(&t, d_g, bf16, n, d_live, block_n, NULL, 0, 1e-3, tc.beta1, tc.beta2, tc.eps, 0.5, step + 1, 0);
        free(g);
    }
    gpu_master_join(d_w, d_h, d_l, n, 0);
    float *gw = dl_f32(d_w, n), *gm = download_moment(d_m, n, bf16), *gv = download_moment(d_v, n, bf16);
    long bad = 0;
    for (long j = 0; j < n; j++)
        bad += memcmp(&gw[j], &w[j], 4) != 0 || memcmp(&gm[j], &m[j], 4) != 0 || memcmp(&gv[j], &v[j], 4) != 0;
    CHECK_MSG(bad == 0, "adamw with live blocks of %ld, %s moments: %ld of %ld elements differ from adamw_step's with "
              "zero gradients in the dead blocks", block_n, bf16 ? "bf16" : "fp32", bad, n);
    cudaFree(d_w), cudaFree(d_g), cudaFree(d_m), cudaFree(d_v), cudaFree(d_live), cudaFree(d_h), cudaFree(d_l);
    free(w), free(m), free(v), free(gw), free(gm), free(gv);
}

/* A deferred run's state: n elements in `blocks` blocks of block_n, host (w, m, v: random, with zero_rows_moments'
 * zeros, as adamw_step takes them) and device (masters fp32 with a bf16 copy, or split when d_l; moments; a poisoned
 * gradient and schedule of steps + 1 calls). */
typedef struct {
    long n;
    int bf16;
    float *w, *m, *v, *d_w, *d_g, *d_sched;
    void *d_m, *d_v;
    bf16_t *d_h;
    int16_t *d_l;
} DeferredState;
static DeferredState deferred_state(int bf16, int split, long blocks, long block_n, int steps) {
    DeferredState s = {.n = blocks * block_n, .bf16 = bf16};
    s.w = rand_f32(s.n, -1, 1);
    adamw_moments(&s.m, &s.v, s.n, bf16);
    zero_rows_moments(s.m, s.v, blocks, block_n);
    s.d_w = gpu_upload(s.w, (size_t)s.n * 4), s.d_g = gpu_poisoned((size_t)s.n * 4);
    s.d_sched = gpu_poisoned(3 * ((size_t)steps + 1) * sizeof(float));
    s.d_m = upload_moment(s.m, s.n, bf16), s.d_v = upload_moment(s.v, s.n, bf16);
    s.d_h = gpu_poisoned((size_t)s.n * 2);
    s.d_l = split ? gpu_poisoned((size_t)s.n * 2) : NULL;
    if (split) gpu_master_split(s.d_h, s.d_l, s.d_w, s.n, 0);
    return s;
}
static void deferred_state_free(DeferredState *s) {
    cudaFree(s->d_w), cudaFree(s->d_g), cudaFree(s->d_sched), cudaFree(s->d_m), cudaFree(s->d_v), cudaFree(s->d_h);
    cudaFree(s->d_l);
    free(s->w), free(s->m), free(s->v);
}

/* A deferred run's end against adamw_step's (the host w, m, v): the device's masters (joined first where split),
 * moments and bf16 weights element by element, and the `updated` call numbers in d_updated against `calls`. */
typedef struct {
    long state, bf16; /* elements whose master, m or v differ; bf16 weights that differ */
    int updated;      /* blocks whose call number differs */
} DeferredBad;
static DeferredBad deferred_end_bad(const DeferredState *s, const int *d_updated, int updated_n, int calls) {
    const long n = s->n;
    if (s->d_l) gpu_master_join(s->d_w, s->d_h, s->d_l, n, 0);
    float *gw = dl_f32(s->d_w, n), *gm = download_moment(s->d_m, n, s->bf16);
    float *gv = download_moment(s->d_v, n, s->bf16);
    bf16_t *gh = dl_raw(s->d_h, (size_t)n * 2);
    int *updated = dl_raw(d_updated, (size_t)updated_n * sizeof(int));
    DeferredBad bad = {0, 0, 0};
    for (long j = 0; j < n; j++) {
        bad.state += memcmp(&gw[j], &s->w[j], 4) != 0 || memcmp(&gm[j], &s->m[j], 4) != 0 ||
                     memcmp(&gv[j], &s->v[j], 4) != 0;
        bad.bf16 += gh[j] != (s->d_l ? host_to_bf16_ties_away(s->w[j]) : host_to_bf16(s->w[j]));
    }
    for (int b = 0; b < updated_n; b++) bad.updated += updated[b] != calls;
    free(gw), free(gm), free(gv), free(gh), free(updated);
    return bad;
}

/* Deferred updates (gpu_adamw's updated; gpu_adamw_record, _owed, _catch_up) as training uses them, on two tensors
 * that share their blocks' calls (the first decayed, the second not): before each call the blocks about to be live
 * catch up (a forward reads them), then the call on each tensor, and after the last a catch-up of every block (the
 * state read whole). Every element, masters and moments, must be adamw_step's with zero gradients in the idle blocks
 * (their gradient memory holds NaNs), and each owed list the blocks live now and idle before: blocks idle from the
 * start, live throughout, alternating, idle for three calls, live only at the first (block b as b % 5; more than 32
 * blocks take the lists' later rounds). split: the masters as pairs (master_split.h), else fp32 with a bf16 copy. */
static void adamw_deferred_case(int bf16, int split, long block_n, int blocks) {
    enum { STEPS = 7, TENSORS = 2, KINDS = 5 };
    static const int kinds[STEPS][KINDS] = {{0, 4, 1, 0, 9}, {0, 2, 0, 0, 0}, {0, 1, 3, 0, 0}, {0, 8, 0, 2, 0},
                                            {0, 1, 5, 0, 0}, {0, 3, 0, 0, 0}, {0, 6, 2, 7, 0}};
    const double lrs[STEPS] = {1e-3, 2e-3, 1.5e-3, 7e-4, 3e-4, 2.2e-3, 9e-4};
    const long per = blocks * block_n, n = TENSORS * per;
    ParamInfo items[TENSORS];
    memset(items, 0, sizeof items);
    items[0].numel = items[1].numel = (size_t)per, items[1].offset = (size_t)per, items[0].decay = true;
    ParamTable pt;
    memset(&pt, 0, sizeof pt);
    pt.items = items, pt.count = TENSORS, pt.total = (size_t)n;
    const TrainConfig tc = adamw_config(bf16);
    rng_seed(950 + 2 * bf16 + split + block_n + blocks);
    DeferredState st = deferred_state(bf16, split, TENSORS * blocks, block_n, STEPS);
    float *w = st.w, *m = st.m, *v = st.v, *d_g = st.d_g;
    AdamWTensor ts[TENSORS];
    for (int k = 0; k < TENSORS; k++)
        ts[k] = state_at(split ? NULL : st.d_w, st.d_h, split ? st.d_l : NULL, st.d_m, st.d_v, (size_t)(k * per), bf16,
                         k == 0 ? tc.weight_decay : 0);
    const size_t list_ints = 1 + 2 * (size_t)blocks;
    int *live = calloc((size_t)blocks, sizeof(int)), *rows_at = calloc((size_t)blocks + 1, sizeof(int));
    int *want = calloc(list_ints, sizeof(int));
    int *d_updated = gpu_upload(live, (size_t)blocks * sizeof(int)); /* zeros */
    int *d_live = gpu_poisoned((size_t)blocks * sizeof(int));
    int *d_rows = gpu_poisoned(((size_t)blocks + 1) * sizeof(int));
    int *d_owed = gpu_poisoned(list_ints * sizeof(int));
    int bad_owed = 0;
    for (int step = 0; step < STEPS; step++) {
        want[0] = 0;
        for (int b = 0; b < blocks; b++) {
            live[b] = kinds[step][b % KINDS], rows_at[b + 1] = rows_at[b] + live[b];
            int last = 0; /* the list: the blocks live now and idle at the step before, with their last live call */
            for (int s2 = 0; s2 < step; s2++) last = kinds[s2][b % KINDS] ? s2 + 1 : last;
            if (live[b] && step > 0 && !kinds[step - 1][b % KINDS]) {
                want[1 + 2 * want[0]] = b, want[2 + 2 * want[0]] = last;
                want[0]++;
            }
        }
        cudaCheck(cudaMemcpy(d_rows, rows_at, ((size_t)blocks + 1) * sizeof(int), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_live, live, (size_t)blocks * sizeof(int), cudaMemcpyHostToDevice));
        gpu_adamw_owed(d_owed, d_updated, d_rows, blocks, step, 0);
        gpu_adamw_catch_up(ts, TENSORS, bf16, block_n, d_owed, step, st.d_sched, tc.beta1, tc.beta2, tc.eps, 0);
        int *got = dl_raw(d_owed, list_ints * sizeof(int));
        bad_owed += memcmp(got, want, sizeof(int) * (1 + 2 * (size_t)want[0])) != 0;
        free(got);
        float *g = rand_f32(n, -1, 1);
        for (int k = 0; k < TENSORS; k++)
            for (int b = 0; b < blocks; b++) { /* the device's idle blocks keep their NaNs; the CPU's are zeros */
                float *gb = g + k * per + b * block_n;
                if (live[b]) cudaCheck(cudaMemcpy(d_g + (gb - g), gb, (size_t)block_n * 4, cudaMemcpyHostToDevice));
                else memset(gb, 0, (size_t)block_n * 4);
            }
        const double gs = 0.25 + 0.1 * step;
        adamw_step(w, g, m, v, &pt, &tc, lrs[step], gs, step + 1);
        gpu_adamw_record(st.d_sched, step + 1, lrs[step], tc.beta1, tc.beta2, step + 1, 0);
        for (int k = 0; k < TENSORS; k++)
            gpu_adamw(&ts[k], d_g + k * per, bf16, per, d_live, block_n, d_updated, step + 1, lrs[step], tc.beta1,
                      tc.beta2, tc.eps, gs, step + 1, 0);
        free(g);
    }
    gpu_adamw_owed(d_owed, d_updated, NULL, blocks, STEPS, 0);
    gpu_adamw_catch_up(ts, TENSORS, bf16, block_n, d_owed, STEPS, st.d_sched, tc.beta1, tc.beta2, tc.eps, 0);
    const DeferredBad bad = deferred_end_bad(&st, d_updated, blocks, STEPS);
    CHECK_MSG(bad.state == 0 && bad.bf16 == 0 && bad.updated == 0 && bad_owed == 0,
              "adamw deferred, %d blocks of %ld, %s moments, %s masters: %ld of %ld elements differ from adamw_step's, "
              "%ld bf16 weights, %d blocks' call numbers after the last catch-up, %d steps' owed lists", blocks,
              block_n, bf16 ? "bf16" : "fp32", split ? "split" : "fp32", bad.state, n, bad.bf16, bad.updated, bad_owed);
    deferred_state_free(&st);
    cudaFree(d_updated), cudaFree(d_live), cudaFree(d_rows), cudaFree(d_owed);
    free(live), free(rows_at), free(want);
}

/* Deferred updates by rows (gpu_adamw_rows) as an untied embedding table takes them: a decayed tensor of `rows` rows
 * of row_n; before each call the rows a forward reads are caught up (in a shuffled order, a row listed at most once),
 * then the call updates the rows its gradient lists (at the third step all, ids NULL) and leaves the others owed;
 * after the last, every row is caught up. Row r is read when r % 7 is below the step's count and listed when r % 5
 * is, so rows are read and not listed, listed and not read, and neither, for one step and for several (rows 4 mod 5
 * and 5 or 6 mod 7 only at the third step: two calls owed there, three at the end). The unlisted rows' gradient
 * memory holds NaNs; every element, the masters' bf16 weights and each row's call number must be adamw_step's with
 * zero gradients there. */
static void adamw_rows_case(int bf16, int split, long row_n, int rows) {
    enum { STEPS = 6 };
    static const int reads[STEPS] = {2, 0, 5, 1, 3, 4}, lists[STEPS] = {3, 1, 0, 4, 2, 1};
    const long n = (long)rows * row_n;
    ParamInfo item;
    ParamTable pt;
    one_decayed_tensor(&pt, &item, n);
    const TrainConfig tc = adamw_config(bf16);
    rng_seed(1300 + 4 * bf16 + 2 * split + row_n + rows);
    DeferredState st = deferred_state(bf16, split, rows, row_n, STEPS);
    float *w = st.w, *m = st.m, *v = st.v, *d_g = st.d_g, *d_sched = st.d_sched;
    const AdamWTensor t = {.params = split ? NULL : st.d_w, .params_bf16 = st.d_h, .params_lo = st.d_l, .m = st.d_m,
                           .v = st.d_v, .weight_decay = tc.weight_decay};
    int *ids = malloc(sizeof(int) * (size_t)rows), *zeros = calloc((size_t)rows, sizeof(int));
    int *d_updated = gpu_upload(zeros, sizeof(int) * (size_t)rows), *d_ids = gpu_poisoned(sizeof(int) * (size_t)rows);
    const double lrs[STEPS] = {1e-3, 2e-3, 1.5e-3, 7e-4, 3e-4, 2.2e-3};
    for (int step = 0; step < STEPS; step++) {
        int k = 0;
        for (int r = 0; r < rows; r++) /* a forward's rows, in no particular order */
            if (r % 7 < reads[step]) ids[k++] = r;
        for (int i = k - 1; i > 0; i--) { /* shuffled */
            const int j = rnd_int(i + 1), x = ids[i];
            ids[i] = ids[j], ids[j] = x;
        }
        cudaCheck(cudaMemcpy(d_ids, ids, sizeof(int) * (size_t)k, cudaMemcpyHostToDevice));
        gpu_adamw_rows(&t, bf16, row_n, d_ids, k, d_updated, step, NULL, 1.0, d_sched, tc.beta1, tc.beta2, tc.eps, 0);
        const int all = lists[step] == 0;
        k = 0;
        float *g = rand_f32(n, -1, 1);
        cudaCheck(cudaMemset(d_g, 0xff, (size_t)n * 4));
        for (int r = 0; r < rows; r++)
            if (all || r % 5 < lists[step]) {
                ids[k++] = r;
                cudaCheck(cudaMemcpy(d_g + r * row_n, g + r * row_n, (size_t)row_n * 4, cudaMemcpyHostToDevice));
            } else {
                memset(g + r * row_n, 0, (size_t)row_n * 4);
            }
        cudaCheck(cudaMemcpy(d_ids, ids, sizeof(int) * (size_t)k, cudaMemcpyHostToDevice));
        const double gs = 0.25 + 0.1 * step;
        adamw_step(w, g, m, v, &pt, &tc, lrs[step], gs, step + 1);
        gpu_adamw_record(d_sched, step + 1, lrs[step], tc.beta1, tc.beta2, step + 1, 0);
        gpu_adamw_rows(&t, bf16, row_n, all ? NULL : d_ids, all ? rows : k, d_updated, step, d_g, gs, d_sched,
                       tc.beta1, tc.beta2, tc.eps, 0);
        free(g);
    }
    gpu_adamw_rows(&t, bf16, row_n, NULL, rows, d_updated, STEPS, NULL, 1.0, d_sched, tc.beta1, tc.beta2, tc.eps, 0);
    const DeferredBad bad = deferred_end_bad(&st, d_updated, rows, STEPS);
    CHECK_MSG(bad.state == 0 && bad.bf16 == 0 && bad.updated == 0,
              "adamw by rows, %d rows of %ld, %s moments, %s masters: %ld of %ld elements differ from adamw_step's, "
              "%ld bf16 weights, %d rows' call numbers after the last catch-up", rows, row_n, bf16 ? "bf16" : "fp32",
              split ? "split" : "fp32", bad.state, n, bad.bf16, bad.updated);
    deferred_state_free(&st);
    cudaFree(d_updated), cudaFree(d_ids);
    free(ids), free(zeros);
}

static void test_adamw(void) {
    if (!gpu_test_begin()) return;
    adamw_case(0);
    adamw_case(1);
    adamw_live_case(1, 1000);
    adamw_live_case(0, 999);
    adamw_deferred_case(1, 1, 1000, 5);
    adamw_deferred_case(0, 1, 999, 5);
    adamw_deferred_case(1, 0, 1000, 5);
    adamw_deferred_case(0, 0, 999, 5);
    adamw_deferred_case(1, 1, 64, 70);
    adamw_rows_case(0, 0, 1000, 37);
    adamw_rows_case(1, 0, 999, 37);
    adamw_rows_case(1, 1, 64, 300);
    adamw_rows_case(0, 1, 999, 23);
}

/* ================================================================================================
 * reduce.h */
static void test_reduce_sumsq(void) {
    if (!gpu_test_begin()) return;
    const long sizes[] = {0, 1, 7, 257, 100003, (1L << 22) + 3};
    for (int si = 0; si < (int)(sizeof sizes / sizeof sizes[0]); si++)
        for (int shift = 0; shift < 2; shift++) {
            const long n = sizes[si];
            rng_seed(900 + si * 2 + shift);
            float *x = rand_f32(n, -3, 3);
            double ref = sum_of_squares(x, (size_t)n);
            float *d_x = upload_shifted(x, (size_t)n * 4, 4, shift);
            double *d_p = gpu_poisoned(REDUCE_PARTIALS * sizeof(double)), *d_out = gpu_poisoned(sizeof(double));
            gpu_sumsq(d_out, d_p, n ? d_x : NULL, n, 0, 0);
            double got, *parts = dl_raw(d_p, REDUCE_PARTIALS * sizeof(double));
            gpu_download(&got, d_out, sizeof(double));
            long nan_parts = 0;
            for (int b = 0; b < REDUCE_PARTIALS; b++) nan_parts += isnan(parts[b]) != 0;
            CHECK_MSG(nan_parts == 0, "sumsq n=%ld: %ld of %d partials unwritten", n, nan_parts, REDUCE_PARTIALS);
            CHECK_MSG(fabs(got - ref) <= 1e-12 * fabs(ref), "sumsq n=%ld shift=%d: gpu %.17g cpu %.17g (rel %.3g)", n, shift, got, ref,
                      ref != 0 ? fabs(got - ref) / fabs(ref) : fabs(got));
            /* accumulate onto the previous value, and a bitwise second run */
            gpu_sumsq(d_out, d_p, n ? d_x : NULL, n, 1, 0);
            double twice;
            gpu_download(&twice, d_out, sizeof(double));
            CHECK_MSG(twice == got + got, "sumsq n=%ld: accumulate gave %.17g, want %.17g", n, twice, got + got);
            gpu_sumsq(d_out, d_p, n ? d_x : NULL, n, 0, 0);
            double again;
            gpu_download(&again, d_out, sizeof(double));
            CHECK_MSG(memcmp(&again, &got, sizeof(double)) == 0, "sumsq n=%ld: second run %.17g vs %.17g", n, again, got);
            /* the plain sums' partials, gpu_sum_f32_partials: every partial written, their sum the host's */
            double want = 0, scale = 1;
            for (long i = 0; i < n; i++) want += x[i], scale += fabs(x[i]);
            cudaCheck(cudaMemset(d_p, 0xff, REDUCE_PARTIALS * sizeof(double)));
            gpu_sum_f32_partials(d_p, n ? d_x : NULL, n, 0);
            gpu_sum_f64(d_out, d_p, REDUCE_PARTIALS, 0, 0);
            free(parts);
            parts = dl_raw(d_p, REDUCE_PARTIALS * sizeof(double));
            nan_parts = 0;
            for (int b = 0; b < REDUCE_PARTIALS; b++) nan_parts += isnan(parts[b]) != 0;
            gpu_download(&got, d_out, sizeof(double));
            CHECK_MSG(nan_parts == 0, "sum_f32_partials n=%ld: %ld of %d partials unwritten", n, nan_parts,
                      REDUCE_PARTIALS);
            CHECK_MSG(fabs(got - want) <= 1e-12 * scale, "sum_f32_partials n=%ld shift=%d: gpu %.17g cpu %.17g", n,
                      shift, got, want);
            gpu_free_shifted(d_x, 4, shift);
            cudaFree(d_p), cudaFree(d_out);
            free(x), free(parts);
        }
}

static void test_reduce_ranges_and_sum(void) {
    if (!gpu_test_begin()) return;
    /* Grad-norm over several ranges: partials side by side, one final sum. */
    const long na = 5000, nb = 77777, nc = 3;
    rng_seed(950);
    float *a = rand_f32(na, -1, 1), *b = rand_f32(nb, -0.01f, 0.01f), *c = rand_f32(nc, -100, 100);
    double ref = sum_of_squares(a, na) + sum_of_squares(b, nb) + sum_of_squares(c, nc);
    float *d_a = gpu_upload(a, na * 4), *d_b = gpu_upload(b, nb * 4), *d_c = gpu_upload(c, nc * 4);
    double *d_p = gpu_poisoned(3 * REDUCE_PARTIALS * sizeof(double)), *d_out = gpu_poisoned(sizeof(double));
    gpu_sumsq_partials(d_p, d_a, na, 0);
    gpu_sumsq_partials(d_p + REDUCE_PARTIALS, d_b, nb, 0);
    gpu_sumsq_partials(d_p + 2 * REDUCE_PARTIALS, d_c, nc, 0);
    gpu_sum_f64(d_out, d_p, 3 * REDUCE_PARTIALS, 0, 0);
    double got;
    gpu_download(&got, d_out, sizeof(double));
    CHECK_MSG(fabs(got - ref) <= 1e-12 * ref, "sumsq over 3 ranges: gpu %.17g cpu %.17g", got, ref);
    /* gpu_sum_f32 against a double sum, several sizes */
    const long sizes[] = {0, 1, 7, 1023, 1025, 300001};
    for (int si = 0; si < (int)(sizeof sizes / sizeof sizes[0]); si++) {
        const long n = sizes[si];
        float *x = rand_f32(n, -1, 3);
        double want = 0;
        for (long i = 0; i < n; i++) want += x[i];
        float *d_x = gpu_upload(x, (size_t)n * 4);
        double *d_s = gpu_poisoned(sizeof(double)), s1, s2;
        gpu_sum_f32(d_s, d_x, n, 0, 0);
        gpu_download(&s1, d_s, sizeof(double));
        gpu_sum_f32(d_s, d_x, n, 0, 0);
        gpu_download(&s2, d_s, sizeof(double));
        CHECK_MSG(fabs(s1 - want) <= 1e-12 * fmax(1.0, fabs(want)), "sum_f32 n=%ld: gpu %.17g cpu %.17g", n, s1, want);
        CHECK_MSG(memcmp(&s1, &s2, sizeof(double)) == 0, "sum_f32 n=%ld: second run differs", n);
        cudaFree(d_x), cudaFree(d_s);
        free(x);
    }
    cudaFree(d_a), cudaFree(d_b), cudaFree(d_c), cudaFree(d_p), cudaFree(d_out);
    free(a), free(b), free(c);
}

/* gpu_sumsq_rows_partials: every partial written; their sum the host's over the listed rows (any order, repeats
 * none), on the float4 path and the element path (C % 4, a misaligned table); more rows than partials, and none. */
static void test_reduce_rows_sumsq(void) {
    if (!gpu_test_begin()) return;
    const struct { int n, C, V, shift; } cases[] = {{0, 8, 4, 0}, {1, 2048, 3, 0}, {97, 64, 300, 0},
                                                    {2000, 12, 2500, 0}, {33, 13, 50, 0}, {40, 64, 90, 1}};
    for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
        const int n = cases[ci].n, C = cases[ci].C, V = cases[ci].V, shift = cases[ci].shift;
        rng_seed(960 + ci);
        float *table = rand_f32((long)V * C, -2, 2);
        int *ids = xmalloc((V + 1) * sizeof(int));
        for (int v = 0; v < V; v++) ids[v] = v;
        for (int v = V - 1; v > 0; v--) {
            const int j = rnd_int(v + 1), t = ids[v];
            ids[v] = ids[j], ids[j] = t;
        }
        double want = 0, scale = 0;
        for (int r = 0; r < n; r++)
            for (int c = 0; c < C; c++) {
                const double x = table[(long)ids[r] * C + c];
                want += x * x, scale += x * x;
            }
        float *d_t = upload_shifted(table, (size_t)V * C * 4, 4, shift);
        int *d_ids = gpu_upload(ids, (size_t)(V + 1) * sizeof(int));
        double *d_p = gpu_poisoned(REDUCE_PARTIALS * sizeof(double)), *d_out = gpu_poisoned(sizeof(double));
        gpu_sumsq_rows_partials(d_p, d_t, d_ids, n, C, 0);
        gpu_sum_f64(d_out, d_p, REDUCE_PARTIALS, 0, 0);
        double got, *parts = dl_raw(d_p, REDUCE_PARTIALS * sizeof(double));
        gpu_download(&got, d_out, sizeof(double));
        long unwritten = 0;
        for (int b = 0; b < REDUCE_PARTIALS; b++) unwritten += isnan(parts[b]) != 0;
        CHECK_MSG(unwritten == 0 && fabs(got - want) <= 1e-12 * scale,
                  "sumsq_rows n=%d C=%d shift=%d: %ld of %d partials unwritten; gpu %.17g cpu %.17g", n, C, shift,
                  unwritten, REDUCE_PARTIALS, got, want);
        gpu_free_shifted(d_t, 4, shift);
        cudaFree(d_ids), cudaFree(d_p), cudaFree(d_out);
        free(table), free(ids), free(parts);
    }
}

TEST_SUITE(gpu_cast, TEST_CASE(test_cast_exact));
TEST_SUITE(gpu_master_split, TEST_CASE(test_master_split));
TEST_SUITE(gpu_copy_rows, TEST_CASE(test_copy_rows));
TEST_SUITE(gpu_embedding, TEST_CASE(test_embedding_buckets), TEST_CASE(test_embedding_bwd_plan),
           TEST_CASE(test_embedding_ids_union), TEST_CASE(test_embedding_put_rows),
           TEST_CASE(test_embedding_forward_backward));
TEST_SUITE(gpu_rmsnorm, TEST_CASE(test_rmsnorm_forward), TEST_CASE(test_rmsnorm_backward));
TEST_SUITE(gpu_rope, TEST_CASE(test_rope));
TEST_SUITE(gpu_swiglu, TEST_CASE(test_swiglu));
TEST_SUITE(gpu_cross_entropy, TEST_CASE(test_cross_entropy));
TEST_SUITE(gpu_adamw, TEST_CASE(test_adamw));
TEST_SUITE(gpu_reduce, TEST_CASE(test_reduce_sumsq), TEST_CASE(test_reduce_ranges_and_sum),
           TEST_CASE(test_reduce_rows_sumsq));
