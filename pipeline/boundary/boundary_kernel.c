/* The quantizer boundary's fused pass, compiled at first use by pipeline/boundary/native.py (loaded with ctypes).
 *
 * dst[n, o, y, x] = ((OUT) src[n, order[o], y, x] - mean[o]) / std[o]
 *
 * One read of the source and one write of the destination, in the output dtype, with the same IEEE
 * operations as the pure-torch path (cast, subtract, divide; built with -ffp-contract=off and no
 * -ffast-math, so no fused multiply-add and no reciprocal: the same bits). Strides are in elements
 * and may be negative or zero (numpy flips, expanded channels). Rows [y0, y1) of samples [n0, n1):
 * the caller hands out tiles. The source row of one (n, y) stays in L1 while every channel is read
 * from it, so the NHWC -> NCHW transpose costs no extra pass; three interleaved channels (pixel stride
 * 3, any permutation: RGB, BGR, a flipped numpy axis) are read as one group in one loop over the row
 * (uint8 -> float32: with AVX512-VBMI byte permutes when the CPU has them). Built in x86-64-v4
 * (AVX-512), v3 (AVX2) and baseline variants, chosen when loaded (GCC target_clones; AVX-512F/AVX2
 * clones before GCC 11); the division stays an IEEE division.
 *
 * geom: n0, n1, c, y0, y1, w, sn, sc, sh, sw, dn, dc, dh, dw (int64). rows: NULL, or for a
 * channels_last destination (dc == 1, dw == c) read with the identity order, mean repeated w times
 * then std repeated w times; with an interleaved source row (sc == 1, sw == c) the row is then one
 * contiguous loop.
 */
#include <stdint.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && __GNUC__ >= 11
#define VP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && __GNUC__ >= 6
#define VP_CLONES __attribute__((target_clones("avx512f", "avx2", "default"))) /* GCC 9 in Ubuntu 20.04 images */
#else
#define VP_CLONES
#endif

#define VP_INLINE static inline __attribute__((always_inline))

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(VP_PORTABLE)
#include <cpuid.h>
/* 1 when AVX512-F/BW/VBMI are usable: read once with cpuid and xgetbv (the OS must save the zmm and
 * mask registers) rather than __builtin_cpu_supports, whose feature names vary by compiler version */
int vp_vbmi_active(void) {
    static int vbmi = -1;
    unsigned a, b, c, d, xcr0, xcr0_hi;
    if (vbmi >= 0) return vbmi;
    vbmi = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
    __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0 & 0xE6) != 0xE6 || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    vbmi = (b & (1u << 16)) && (b & (1u << 30)) && (c & (1u << 1)); /* AVX512-F, AVX512-BW, AVX512-VBMI */
    return vbmi;
}
#endif

/* uint8 RGB -> float32 planes with AVX512-VBMI, 16 pixels per step: one 48-byte load, then per channel
 * one byte permute (vpermb) that moves every third byte into the low byte of a zeroed 32-bit lane, and
 * the same convert, subtract and IEEE divide as the C loop: the same bits. The loads are plain
 * 64-byte loads while they stay inside the row, and the last pixels use masked loads and stores:
 * nothing outside the row is read or written. Returns the pixels done (w, or 0 when the CPU lacks
 * AVX512-VBMI: the C loop runs). Build with -DVP_PORTABLE to leave it out (the tests compare both
 * builds). Timings, and the variants tried and left out: docs/performance.md#uint8-rgb-rows-the-avx512-vbmi-loop */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(VP_PORTABLE)
#include <immintrin.h>
#define VP_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))
VP_VBMI static inline __m512 vp_plane16(__m512i v, __m512i index, __m512 m, __m512 sd) {
    __m512i lanes = _mm512_maskz_permutexvar_epi8(0x1111111111111111ULL, index, v); /* zero-extended bytes */
    return _mm512_div_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(lanes), m), sd);
}
VP_VBMI static int64_t vp_rgb_vbmi(const uint8_t *s, float *d0, float *d1, float *d2, int64_t w, const float *m,
                                   const float *sd) {
    const __m512i i0 = _mm512_set_epi32(45, 42, 39, 36, 33, 30, 27, 24, 21, 18, 15, 12, 9, 6, 3, 0);
    const __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32(1)), i2 = _mm512_add_epi32(i0, _mm512_set1_epi32(2));
    const __m512 vm0 = _mm512_set1_ps(m[0]), vm1 = _mm512_set1_ps(m[1]), vm2 = _mm512_set1_ps(m[2]);
    const __m512 vs0 = _mm512_set1_ps(sd[0]), vs1 = _mm512_set1_ps(sd[1]), vs2 = _mm512_set1_ps(sd[2]);
    int64_t x, k;
    for (x = 0; x + 22 <= w; x += 16) { /* a 64-byte load that stays inside the row; plain stores */
        __m512i v = _mm512_loadu_si512(s + 3 * x);
        _mm512_storeu_ps(d0 + x, vp_plane16(v, i0, vm0, vs0));
        _mm512_storeu_ps(d1 + x, vp_plane16(v, i1, vm1, vs1));
        _mm512_storeu_ps(d2 + x, vp_plane16(v, i2, vm2, vs2));
    }
    for (; x < w; x += 16) { /* the last 1 to 21 pixels: masked loads and stores */
        __mmask16 last;
        __m512i v;
        k = w - x < 16 ? w - x : 16;
        last = (__mmask16)(0xFFFFu >> (16 - k));
        v = _mm512_maskz_loadu_epi8(~0ULL >> (64 - 3 * k), s + 3 * x);
        _mm512_mask_storeu_ps(d0 + x, last, vp_plane16(v, i0, vm0, vs0));
        _mm512_mask_storeu_ps(d1 + x, last, vp_plane16(v, i1, vm1, vs1));
        _mm512_mask_storeu_ps(d2 + x, last, vp_plane16(v, i2, vm2, vs2));
    }
    return w;
}
static int64_t vp_rgb_u8_f32(const uint8_t *s, float *d0, float *d1, float *d2, int64_t w, const float *m,
                             const float *sd) {
    return vp_vbmi_active() ? vp_rgb_vbmi(s, d0, d1, d2, w, m, sd) : 0;
}
#else
int vp_vbmi_active(void) { return 0; }
#define vp_rgb_u8_f32(...) 0
#endif
#define VP_RGB_NONE(...) 0

#define VP_DEFINE(NAME, TIN, TOUT, RGB)                                                                        \
    VP_INLINE void NAME##_strided(const TIN *restrict s, TOUT *restrict d, int64_t w, int64_t sw, TOUT m,       \
                                  TOUT sd) {                                                                \
        int64_t x;                                                                                          \
        if (sw == 1) {                                                                                      \
            for (x = 0; x < w; x++) d[x] = ((TOUT)s[x] - m) / sd;                                           \
        } else if (sw == 3) {                                                                               \
            for (x = 0; x < w; x++) d[x] = ((TOUT)s[3 * x] - m) / sd;                                       \
        } else if (sw == 4) {                                                                               \
            for (x = 0; x < w; x++) d[x] = ((TOUT)s[4 * x] - m) / sd;                                       \
        } else {                                                                                            \
            for (x = 0; x < w; x++) d[x] = ((TOUT)s[x * sw] - m) / sd;                                      \
        }                                                                                                   \
    }                                                                                                       \
    /* three channels interleaved with pixel stride 3, read as one group (s[3x], s[3x+1], s[3x+2]) */   \
    VP_INLINE void NAME##_rgb(const TIN *restrict s, TOUT *restrict d0, TOUT *restrict d1, TOUT *restrict d2, \
                              int64_t w, const TOUT *m, const TOUT *sd) {                                   \
        int64_t x = RGB(s, d0, d1, d2, w, m, sd);                                                           \
        for (; x < w; x++) {                                                                                \
            d0[x] = ((TOUT)s[3 * x] - m[0]) / sd[0];                                                        \
            d1[x] = ((TOUT)s[3 * x + 1] - m[1]) / sd[1];                                                    \
            d2[x] = ((TOUT)s[3 * x + 2] - m[2]) / sd[2];                                                    \
        }                                                                                                   \
    }                                                                                                       \
    VP_INLINE void NAME##_row(const TIN *restrict s, TOUT *restrict d, int64_t k, const TOUT *restrict m,      \
                              const TOUT *restrict sd) {                                                    \
        int64_t i;                                                                                          \
        for (i = 0; i < k; i++) d[i] = ((TOUT)s[i] - m[i]) / sd[i];                                         \
    }                                                                                                       \
    VP_CLONES void NAME(const void *src_, const int64_t *g, const int64_t *order, const void *mean_,        \
                        const void *std_, const void *rows_, void *dst_) {                                  \
        const TIN *src = (const TIN *)src_;                                                                 \
        const TOUT *mean = (const TOUT *)mean_, *std = (const TOUT *)std_, *mean_row = (const TOUT *)rows_; \
        TOUT *dst = (TOUT *)dst_;                                                                           \
        int64_t n0 = g[0], n1 = g[1], c = g[2], y0 = g[3], y1 = g[4], w = g[5];                             \
        int64_t sn = g[6], sc = g[7], sh = g[8], sw = g[9], dn = g[10], dc = g[11], dh = g[12], dw = g[13];  \
        int64_t n, y, o, x;                                                                                 \
        int interleaved = mean_row != 0 && dc == 1 && dw == c && sc == 1 && sw == c;                        \
        /* rgb: NCHW output, 3 channels that are a permutation of one pixel's 3 interleaved values */      \
        int64_t pos[3] = {0, 0, 0}, base = 0, k, rgb = dw == 1 && c == 3 && sw == 3 && (sc == 1 || sc == -1); \
        TOUT *dp[3], mp[3], sp[3];                                                                          \
        if (rgb) {                                                                                          \
            for (k = 0; k < 3; k++) pos[k] = order[k] * sc;                                                 \
            base = pos[0] < pos[1] ? pos[0] : pos[1];                                                       \
            base = base < pos[2] ? base : pos[2];                                                           \
            for (k = 0; k < 3; k++) pos[k] -= base;                                                         \
            rgb = pos[0] + pos[1] + pos[2] == 3 && pos[0] * pos[1] * pos[2] == 0 && pos[0] != pos[1] &&      \
                  pos[1] != pos[2] && pos[0] != pos[2];                                                     \
            for (k = 0; k < 3 && rgb; k++) mp[pos[k]] = mean[k], sp[pos[k]] = std[k];                       \
        }                                                                                                   \
        for (n = n0; n < n1; n++) {                                                                         \
            for (y = y0; y < y1; y++) {                                                                     \
                const TIN *srow = src + n * sn + y * sh;                                                    \
                TOUT *drow = dst + n * dn + y * dh;                                                         \
                if (interleaved) {                                                                          \
                    NAME##_row(srow, drow, w * c, mean_row, mean_row + w * c);                              \
                } else if (rgb) {                                                                           \
                    for (k = 0; k < 3; k++) dp[pos[k]] = drow + k * dc;                                     \
                    NAME##_rgb(srow + base, dp[0], dp[1], dp[2], w, mp, sp);                                \
                } else if (dw == 1) {                                                                       \
                    for (o = 0; o < c; o++)                                                                 \
                        NAME##_strided(srow + order[o] * sc, drow + o * dc, w, sw, mean[o], std[o]);        \
                } else {                                                                                    \
                    for (x = 0; x < w; x++)                                                                 \
                        for (o = 0; o < c; o++)                                                             \
                            drow[x * dw + o * dc] = ((TOUT)srow[x * sw + order[o] * sc] - mean[o]) / std[o];  \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
    }

VP_DEFINE(vp_u8_f32, uint8_t, float, vp_rgb_u8_f32)
VP_DEFINE(vp_i8_f32, int8_t, float, VP_RGB_NONE)
VP_DEFINE(vp_i16_f32, int16_t, float, VP_RGB_NONE)
VP_DEFINE(vp_i32_f32, int32_t, float, VP_RGB_NONE)
VP_DEFINE(vp_i64_f32, int64_t, float, VP_RGB_NONE)
VP_DEFINE(vp_f32_f32, float, float, VP_RGB_NONE)
VP_DEFINE(vp_f64_f32, double, float, VP_RGB_NONE)
VP_DEFINE(vp_u8_f64, uint8_t, double, VP_RGB_NONE)
VP_DEFINE(vp_i8_f64, int8_t, double, VP_RGB_NONE)
VP_DEFINE(vp_i16_f64, int16_t, double, VP_RGB_NONE)
VP_DEFINE(vp_i32_f64, int32_t, double, VP_RGB_NONE)
VP_DEFINE(vp_i64_f64, int64_t, double, VP_RGB_NONE)
VP_DEFINE(vp_f32_f64, float, double, VP_RGB_NONE)
VP_DEFINE(vp_f64_f64, double, double, VP_RGB_NONE)

/* ABI check for the loader: bump when a signature changes. */
int vp_abi_version(void) { return 4; }
