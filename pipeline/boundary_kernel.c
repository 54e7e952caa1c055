/* The quantizer boundary's fused pass, compiled at first use by pipeline/native.py (loaded with ctypes).
 *
 * dst[n, o, y, x] = ((OUT) src[n, order[o], y, x] - mean[o]) / std[o]
 *
 * One read of the source and one write of the destination, in the output dtype, with the same IEEE
 * operations as the pure-torch path (cast, subtract, divide; built with -ffp-contract=off and no
 * -ffast-math, so no fused multiply-add but the explicit fma calls of vp_qf, and no reciprocal but
 * its proven one: the same bits). Strides are in elements
 * and may be negative or zero (numpy flips, expanded channels). Rows [y0, y1) of samples [n0, n1):
 * the caller hands out tiles. The source row of one (n, y) stays in L1 while every channel is read
 * from it, so the NHWC -> NCHW transpose costs no extra pass; three interleaved channels (pixel stride
 * 3, any permutation: RGB, BGR, a flipped numpy axis) are read as one group in one loop over the row
 * (uint8 -> float32: with AVX512-VBMI byte permutes when the CPU has them). Built in x86-64-v4
 * (AVX-512), v3 (AVX2) and baseline variants, chosen when loaded (GCC target_clones; AVX-512F/AVX2
 * clones before GCC 11). Each vp_<in>_<out> divides (IEEE); vp_<in>_<out>_nodiv, for uint8, int8 and
 * int16 inputs, multiplies by 1/std and corrects with two FMAs (vp_qf), which gives the division's
 * bits when the caller's probe has shown it for every input value (see vp_qf).
 *
 * geom: n0, n1, c, y0, y1, w, sn, sc, sh, sw, dn, dc, dh, dw (int64). recip: 1/std per channel
 * (read by the _nodiv variants only). rows: NULL, or for a channels_last destination (dc == 1,
 * dw == c) read with the identity order, mean, std and 1/std each repeated w times; with an
 * interleaved source row (sc == 1, sw == c) the row is then one contiguous loop.
 */
#include <math.h>
#include <stdint.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && __GNUC__ >= 11
#define VP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && __GNUC__ >= 6
#define VP_CLONES __attribute__((target_clones("avx512f", "avx2", "default"))) /* GCC 9 in Ubuntu 20.04 images */
#else
#define VP_CLONES
#endif

#define VP_INLINE static inline __attribute__((always_inline))

/* The division-free variants (*_nodiv) are compiled for a hardware FMA (x86-64-v3/v4 clones with GCC
 * 11+, else AVX2+FMA on x86); the caller uses them only when vp_fast_fma() says this CPU has one. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && __GNUC__ >= 11
#define VP_FMA VP_CLONES
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define VP_FMA __attribute__((target("avx2,fma")))
#else
#define VP_FMA
#endif
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <cpuid.h>
/* 1: AVX2 and FMA usable, 2: AVX512-F/BW/VBMI usable too; read once with cpuid and xgetbv (the OS must
 * save the registers) rather than __builtin_cpu_supports, whose feature names vary by compiler version */
static int vp_cpu(void) {
    static int features = -1;
    unsigned a, b, c, d, xcr0, xcr0_hi;
    if (features >= 0) return features;
    features = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)) || !(c & (1u << 12))) return 0; /* OSXSAVE, FMA */
    __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0 & 6) != 6 || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 5))) return 0; /* AVX2 */
    features = 1;
    if ((xcr0 & 0xE0) == 0xE0 && (b & (1u << 16)) && (b & (1u << 30)) && (c & (1u << 1))) features = 3;
    return features;
}
#endif
int vp_fast_fma(void) {
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
    return vp_cpu() & 1;
#elif defined(__FP_FAST_FMAF) && defined(__FP_FAST_FMA)
    return 1;
#else
    return 0;
#endif
}

/* a / sd, or without a division (fast): q0 = a * r, then one FMA-based correction step (Markstein
 * 1990; Muller et al., Handbook of Floating-Point Arithmetic, the FMA-based division correction):
 * e = fma(-q0, sd, a) is the exact remainder, and q = fma(e, r, q0) is the correctly rounded a / sd when
 * r = RN(1 / sd) and nothing overflows or underflows. The caller proves it per (mean, std, input
 * dtype, output dtype) by running this code on every input value first (QuantizerBoundary's probe). */
VP_INLINE float vp_qf(float a, float sd, float r, int fast) {
    float q0;
    if (!fast) return a / sd;
    q0 = a * r;
    return fmaf(fmaf(-q0, sd, a), r, q0);
}
VP_INLINE double vp_qd(double a, double sd, double r, int fast) {
    double q0;
    if (!fast) return a / sd;
    q0 = a * r;
    return fma(fma(-q0, sd, a), r, q0);
}

/* uint8 RGB -> float32 planes with AVX512-VBMI, 16 pixels per step: one 48-byte load, then per channel
 * one byte permute (vpermb) that moves every third byte into the low byte of a zeroed 32-bit lane, and
 * the same convert, subtract and divide (or division-free correction) as the C loop: the same bits.
 * GCC's vectorized stride-3 loop goes through 16-bit lanes and several shuffles per vector: 1.8x a
 * plain cast's time at 8x224x224x3 on Zen 4, against 1.0-1.1x for this one (C timing). The loads
 * are plain 64-byte loads while they stay inside the row (masked loads defeat the hardware prefetcher
 * on Zen 4: 1.4x slower from DRAM), and the last pixels use masked loads and stores: nothing outside
 * the row is read or written. Returns the pixels done (w, or 0 when the CPU lacks AVX512-VBMI: the C
 * loop runs). Build with -DVP_PORTABLE to leave it out (the tests compare both builds). */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(VP_PORTABLE)
#include <immintrin.h>
#define VP_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi,fma")))
VP_VBMI static inline __m512 vp_plane16(__m512i v, __m512i index, __m512 m, __m512 sd, __m512 r, int fast) {
    __m512i lanes = _mm512_maskz_permutexvar_epi8(0x1111111111111111ULL, index, v); /* zero-extended bytes */
    __m512 a = _mm512_sub_ps(_mm512_cvtepi32_ps(lanes), m), q0;
    if (!fast) return _mm512_div_ps(a, sd);
    q0 = _mm512_mul_ps(a, r);
    return _mm512_fmadd_ps(_mm512_fnmadd_ps(q0, sd, a), r, q0);
}
VP_VBMI static int64_t vp_rgb_vbmi(const uint8_t *s, float *d0, float *d1, float *d2, int64_t w, const float *m,
                                   const float *sd, const float *r, int fast) {
    const __m512i i0 = _mm512_set_epi32(45, 42, 39, 36, 33, 30, 27, 24, 21, 18, 15, 12, 9, 6, 3, 0);
    const __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32(1)), i2 = _mm512_add_epi32(i0, _mm512_set1_epi32(2));
    const __m512 vm0 = _mm512_set1_ps(m[0]), vm1 = _mm512_set1_ps(m[1]), vm2 = _mm512_set1_ps(m[2]);
    const __m512 vs0 = _mm512_set1_ps(sd[0]), vs1 = _mm512_set1_ps(sd[1]), vs2 = _mm512_set1_ps(sd[2]);
    const __m512 vr0 = _mm512_set1_ps(r[0]), vr1 = _mm512_set1_ps(r[1]), vr2 = _mm512_set1_ps(r[2]);
    int64_t x, k;
    for (x = 0; x + 22 <= w; x += 16) { /* a 64-byte load that stays inside the row; plain stores */
        __m512i v = _mm512_loadu_si512(s + 3 * x);
        _mm512_storeu_ps(d0 + x, vp_plane16(v, i0, vm0, vs0, vr0, fast));
        _mm512_storeu_ps(d1 + x, vp_plane16(v, i1, vm1, vs1, vr1, fast));
        _mm512_storeu_ps(d2 + x, vp_plane16(v, i2, vm2, vs2, vr2, fast));
    }
    for (; x < w; x += 16) { /* the last 1 to 21 pixels: masked loads and stores */
        __mmask16 last;
        __m512i v;
        k = w - x < 16 ? w - x : 16;
        last = (__mmask16)(0xFFFFu >> (16 - k));
        v = _mm512_maskz_loadu_epi8(~0ULL >> (64 - 3 * k), s + 3 * x);
        _mm512_mask_storeu_ps(d0 + x, last, vp_plane16(v, i0, vm0, vs0, vr0, fast));
        _mm512_mask_storeu_ps(d1 + x, last, vp_plane16(v, i1, vm1, vs1, vr1, fast));
        _mm512_mask_storeu_ps(d2 + x, last, vp_plane16(v, i2, vm2, vs2, vr2, fast));
    }
    return w;
}
int vp_vbmi_active(void) { return (vp_cpu() & 2) != 0; }
static int64_t vp_rgb_u8_f32(const uint8_t *s, float *d0, float *d1, float *d2, int64_t w, const float *m,
                             const float *sd, const float *r, int fast) {
    return vp_vbmi_active() ? vp_rgb_vbmi(s, d0, d1, d2, w, m, sd, r, fast) : 0;
}
#else
int vp_vbmi_active(void) { return 0; }
#define vp_rgb_u8_f32(...) 0
#endif
#define VP_RGB_NONE(...) 0

#define VP_DEFINE(NAME, TIN, TOUT, Q, RGB)                                                                     \
    VP_INLINE void NAME##_strided(const TIN *restrict s, TOUT *restrict d, int64_t w, int64_t sw, TOUT m,       \
                                  TOUT sd, TOUT r, int fast) {                                              \
        int64_t x;                                                                                          \
        if (sw == 1) {                                                                                      \
            for (x = 0; x < w; x++) d[x] = Q((TOUT)s[x] - m, sd, r, fast);                                 \
        } else if (sw == 3) {                                                                               \
            for (x = 0; x < w; x++) d[x] = Q((TOUT)s[3 * x] - m, sd, r, fast);                             \
        } else if (sw == 4) {                                                                               \
            for (x = 0; x < w; x++) d[x] = Q((TOUT)s[4 * x] - m, sd, r, fast);                             \
        } else {                                                                                            \
            for (x = 0; x < w; x++) d[x] = Q((TOUT)s[x * sw] - m, sd, r, fast);                            \
        }                                                                                                   \
    }                                                                                                       \
    /* three channels interleaved with pixel stride 3, read as one group (s[3x], s[3x+1], s[3x+2]) */   \
    VP_INLINE void NAME##_rgb(const TIN *restrict s, TOUT *restrict d0, TOUT *restrict d1, TOUT *restrict d2, \
                              int64_t w, const TOUT *m, const TOUT *sd, const TOUT *r, int fast) {          \
        int64_t x = RGB(s, d0, d1, d2, w, m, sd, r, fast);                                                  \
        for (; x < w; x++) {                                                                                \
            d0[x] = Q((TOUT)s[3 * x] - m[0], sd[0], r[0], fast);                                           \
            d1[x] = Q((TOUT)s[3 * x + 1] - m[1], sd[1], r[1], fast);                                       \
            d2[x] = Q((TOUT)s[3 * x + 2] - m[2], sd[2], r[2], fast);                                       \
        }                                                                                                   \
    }                                                                                                       \
    VP_INLINE void NAME##_row(const TIN *restrict s, TOUT *restrict d, int64_t k, const TOUT *restrict m,      \
                              const TOUT *restrict sd, const TOUT *restrict r, int fast) {                  \
        int64_t i;                                                                                          \
        for (i = 0; i < k; i++) d[i] = Q((TOUT)s[i] - m[i], sd[i], fast ? r[i] : 0, fast);                \
    }                                                                                                       \
    VP_INLINE void NAME##_run(const void *src_, const int64_t *g, const int64_t *order, const void *mean_,   \
                              const void *std_, const void *recip_, const void *rows_, void *dst_, int fast) { \
        const TIN *src = (const TIN *)src_;                                                                 \
        const TOUT *mean = (const TOUT *)mean_, *std = (const TOUT *)std_, *recip = (const TOUT *)recip_;   \
        const TOUT *mean_row = (const TOUT *)rows_;                                                         \
        TOUT *dst = (TOUT *)dst_;                                                                           \
        int64_t n0 = g[0], n1 = g[1], c = g[2], y0 = g[3], y1 = g[4], w = g[5];                             \
        int64_t sn = g[6], sc = g[7], sh = g[8], sw = g[9], dn = g[10], dc = g[11], dh = g[12], dw = g[13];  \
        int64_t n, y, o, x;                                                                                 \
        int interleaved = mean_row != 0 && dc == 1 && dw == c && sc == 1 && sw == c;                        \
        /* rgb: NCHW output, 3 channels that are a permutation of one pixel's 3 interleaved values */      \
        int64_t pos[3] = {0, 0, 0}, base = 0, k, rgb = dw == 1 && c == 3 && sw == 3 && (sc == 1 || sc == -1); \
        TOUT *dp[3], mp[3], sp[3], rp[3];                                                                   \
        if (rgb) {                                                                                          \
            for (k = 0; k < 3; k++) pos[k] = order[k] * sc;                                                 \
            base = pos[0] < pos[1] ? pos[0] : pos[1];                                                       \
            base = base < pos[2] ? base : pos[2];                                                           \
            for (k = 0; k < 3; k++) pos[k] -= base;                                                         \
            rgb = pos[0] + pos[1] + pos[2] == 3 && pos[0] * pos[1] * pos[2] == 0 && pos[0] != pos[1] &&      \
                  pos[1] != pos[2] && pos[0] != pos[2];                                                     \
            for (k = 0; k < 3 && rgb; k++) {                                                                \
                mp[pos[k]] = mean[k], sp[pos[k]] = std[k], rp[pos[k]] = fast ? recip[k] : 0;                \
            }                                                                                               \
        }                                                                                                   \
        for (n = n0; n < n1; n++) {                                                                         \
            for (y = y0; y < y1; y++) {                                                                     \
                const TIN *srow = src + n * sn + y * sh;                                                    \
                TOUT *drow = dst + n * dn + y * dh;                                                         \
                if (interleaved) {                                                                          \
                    NAME##_row(srow, drow, w * c, mean_row, mean_row + w * c, mean_row + 2 * w * c, fast);   \
                } else if (rgb) {                                                                           \
                    for (k = 0; k < 3; k++) dp[pos[k]] = drow + k * dc;                                     \
                    NAME##_rgb(srow + base, dp[0], dp[1], dp[2], w, mp, sp, rp, fast);                      \
                } else if (dw == 1) {                                                                       \
                    for (o = 0; o < c; o++)                                                                 \
                        NAME##_strided(srow + order[o] * sc, drow + o * dc, w, sw, mean[o], std[o],         \
                                       fast ? recip[o] : 0, fast);                                          \
                } else {                                                                                    \
                    for (x = 0; x < w; x++)                                                                 \
                        for (o = 0; o < c; o++)                                                             \
                            drow[x * dw + o * dc] = Q((TOUT)srow[x * sw + order[o] * sc] - mean[o], std[o], \
                                                      fast ? recip[o] : 0, fast);                           \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
    }                                                                                                       \
    VP_CLONES void NAME(const void *src, const int64_t *g, const int64_t *order, const void *mean,          \
                        const void *std, const void *recip, const void *rows, void *dst) {                  \
        NAME##_run(src, g, order, mean, std, recip, rows, dst, 0);                                          \
    }
/* the division-free variant (for integer inputs of at most 16 bits, after the caller's probe) */
#define VP_NODIV(NAME)                                                                                      \
    VP_FMA void NAME##_nodiv(const void *src, const int64_t *g, const int64_t *order, const void *mean,     \
                             const void *std, const void *recip, const void *rows, void *dst) {             \
        NAME##_run(src, g, order, mean, std, recip, rows, dst, 1);                                          \
    }

VP_DEFINE(vp_u8_f32, uint8_t, float, vp_qf, vp_rgb_u8_f32)
VP_NODIV(vp_u8_f32)
VP_DEFINE(vp_i8_f32, int8_t, float, vp_qf, VP_RGB_NONE)
VP_NODIV(vp_i8_f32)
VP_DEFINE(vp_i16_f32, int16_t, float, vp_qf, VP_RGB_NONE)
VP_NODIV(vp_i16_f32)
VP_DEFINE(vp_i32_f32, int32_t, float, vp_qf, VP_RGB_NONE)
VP_DEFINE(vp_i64_f32, int64_t, float, vp_qf, VP_RGB_NONE)
VP_DEFINE(vp_f32_f32, float, float, vp_qf, VP_RGB_NONE)
VP_DEFINE(vp_f64_f32, double, float, vp_qf, VP_RGB_NONE)
VP_DEFINE(vp_u8_f64, uint8_t, double, vp_qd, VP_RGB_NONE)
VP_NODIV(vp_u8_f64)
VP_DEFINE(vp_i8_f64, int8_t, double, vp_qd, VP_RGB_NONE)
VP_NODIV(vp_i8_f64)
VP_DEFINE(vp_i16_f64, int16_t, double, vp_qd, VP_RGB_NONE)
VP_NODIV(vp_i16_f64)
VP_DEFINE(vp_i32_f64, int32_t, double, vp_qd, VP_RGB_NONE)
VP_DEFINE(vp_i64_f64, int64_t, double, vp_qd, VP_RGB_NONE)
VP_DEFINE(vp_f32_f64, float, double, vp_qd, VP_RGB_NONE)
VP_DEFINE(vp_f64_f64, double, double, vp_qd, VP_RGB_NONE)

/* ABI check for the loader: bump when a signature changes. */
int vp_abi_version(void) { return 3; }
