/* tolk C prelude: helpers that the expressions of c_ops.rs call, so that
 * generated kernels equal nx's eager kernels bit for bit. Every helper names
 * the Rust code it mirrors; change them together. Emitted once at the top of
 * every generated file (c_ops::PRELUDE). */
/* libm's functions, declared here rather than through <math.h>, which is
 * most of the prelude's compile time (about 20 ms of every translation
 * unit); gcc and clang know them as builtins from these prototypes. */
#if !defined(__CUDACC__) /* CUDA: cuda_prelude.h defines these */
#define INFINITY (__builtin_inff())
#define signbit(x) __builtin_signbit(x)
double acos(double); float acosf(float);
double asin(double); float asinf(float);
double atan(double); float atanf(float);
double cos(double); float cosf(float);
double sin(double); float sinf(float);
double tan(double); float tanf(float);
double acosh(double); float acoshf(float);
double asinh(double); float asinhf(float);
double atanh(double); float atanhf(float);
double cosh(double); float coshf(float);
double sinh(double); float sinhf(float);
double tanh(double); float tanhf(float);
double exp(double); float expf(float);
double exp2(double); float exp2f(float);
double expm1(double); float expm1f(float);
double log(double); float logf(float);
double log10(double); float log10f(float);
double log1p(double); float log1pf(float);
double log2(double); float log2f(float);
double cbrt(double); float cbrtf(float);
double fabs(double); float fabsf(float);
double sqrt(double); float sqrtf(float);
double erf(double); float erff(float);
double erfc(double); float erfcf(float);
double tgamma(double); float tgammaf(float);
double lgamma(double); float lgammaf(float);
double ceil(double); float ceilf(float);
double floor(double); float floorf(float);
double nearbyint(double); float nearbyintf(float);
double rint(double); float rintf(float);
double round(double); float roundf(float);
double trunc(double); float truncf(float);
double atan2(double, double); float atan2f(float, float);
double hypot(double, double); float hypotf(float, float);
double pow(double, double); float powf(float, float);
double fmod(double, double); float fmodf(float, float);
double remainder(double, double); float remainderf(float, float);
double copysign(double, double); float copysignf(float, float);
double fmax(double, double); float fmaxf(float, float);
double fmin(double, double); float fminf(float, float);
double fma(double, double, double); float fmaf(float, float, float);
#include <stdint.h>
#include <string.h>
#define TK_CLZLL(m) __builtin_clzll(m)
#endif
#if defined(__F16C__)
/* F16C's conversions through the compilers' builtins, as <immintrin.h>
 * defines _cvtsh_ss/_cvtss_sh, without including it: parsing it took 170
 * ms of every translation unit, most of a cold jit. (clang has no
 * vcvtph2ps builtin since LLVM 16: f16 -> f32 is a _Float16 conversion
 * there, the same instruction.) */
typedef short tk_v8hi __attribute__((vector_size(16)));
typedef float tk_v4sf __attribute__((vector_size(16)));
#endif

/* ---- out-of-line vector functions ---------------------------------------
 * The f32 transcendentals that vectorize are compiled once per translation
 * unit as vector functions (gcc's `simd` attribute: a clone taking and
 * returning whole vectors, made for the widths the loops use) and called
 * from every kernel, instead of inlined into each: a 120-op chain of
 * sin/tanh/exp/log1p/sigmoid and its gradient (34 kernels) compiled in
 * 3.7 s of CPU inlined, 0.7 s called. Each lane computes the same
 * operations: the same bits. clang has no `simd` attribute; there they stay
 * inlined (a call would keep the loop scalar). */
#if defined(__CUDACC__)
#define TK_VFN static __forceinline__
#elif defined(__GNUC__) && !defined(__clang__)
#define TK_VFN static __attribute__((noinline, simd("notinbranch")))
#else
#define TK_VFN static inline __attribute__((always_inline))
#endif

/* ---- bit casts ---------------------------------------------------------- */
#if defined(__CUDACC__)
static inline float tk_f32_from_bits(uint32_t b) { return __uint_as_float(b); }
static inline uint32_t tk_f32_bits(float f) { return __float_as_uint(f); }
static inline double tk_f64_from_bits(uint64_t b) { return __longlong_as_double((long long)b); }
static inline uint64_t tk_f64_bits(double f) { return (uint64_t)__double_as_longlong(f); }
#else
static inline float tk_f32_from_bits(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static inline uint32_t tk_f32_bits(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }
static inline double tk_f64_from_bits(uint64_t b) { double f; memcpy(&f, &b, 8); return f; }
static inline uint64_t tk_f64_bits(double f) { uint64_t b; memcpy(&b, &f, 8); return b; }
#endif

/* ---- selects as bit masks ------------------------------------------------ */
/* With gcc's default -ftrapping-math (kept: -fno-trapping-math lets gcc
 * rewrite `x + (double)i` so that -0 + 0 gives -0) a select on a float
 * comparison is not if-converted. Without AVX-512's masks, a TK_VFN using
 * one then has a scalar AVX2 clone (one lane at a time: a sigmoid over
 * [2048, 512] took 6.2 ms on a Zen 3 core, 1.4 ms vectorized), and a loop
 * calling it inline would not vectorize. So the vector functions select
 * with masks: tk_sel_f32(q, a, b) is a where the mask q is all ones, else b
 * (both already computed). */
static inline uint32_t tk_mask_f32(int c) { return 0u - (uint32_t)c; }
static inline float tk_sel_f32(uint32_t q, float a, float b) {
    return tk_f32_from_bits((tk_f32_bits(a) & q) | (tk_f32_bits(b) & ~q));
}

/* ---- guards of the vectorized forms (c_ops::unary_vectorized) ------------ */
/* A guard key is at most TK_GUARD_MAX exactly where its fast form is
 * valid. A kernel keeps the largest key over its elements, an unsigned max
 * (one vector op), and re-runs itself exactly when it passed TK_GUARD_MAX.
 * TK_GUARD_MAX is the bits of TK_EXP_FAST_T_LIMIT, so that exp's key is
 * the bits of its t alone (t > 0 but for NaN, whose bits exceed it with
 * either sign): the max is its guard's only op. */
#define TK_GUARD_MAX 0x4B40007Fu
#define TK_GUARD_FAILED(big) ((big) > TK_GUARD_MAX)
/* The key of !(|x| <= limit) (NaN included), for a finite positive limit
 * no larger than TK_EXP_FAST_T_LIMIT: |x|'s bits moved up by the distance
 * from limit to TK_GUARD_MAX (no wrap: at most 0x7FFFFFFF plus that). */
static inline uint32_t tk_guard_key_f32(float x, float limit) {
    return (tk_f32_bits(x) & 0x7fffffffu) + (TK_GUARD_MAX - tk_f32_bits(limit));
}

/* ---- streaming stores (render.rs, a kernel with Kernel::stream) ---------- */
/* A kernel whose pass moves more than the last-level cache holds computes
 * each tile of its output into an L1 buffer, then stores it here: whole
 * 64-byte lines of dst with non-temporal stores, which skip reading the
 * line into the cache first (a third less traffic for a map with two
 * inputs); the ragged ends of a part are copied plainly. The bits are
 * moved, never converted. tk_stream_fence orders the stores before the
 * kernel returns (the runtime's join is an ordinary release). */
#if !defined(__CUDACC__) /* CUDA kernels never stream (Dialect::streams) */
#if defined(__clang__) && defined(__SSE2__)
/* The source (the tile) may sit at any offset; the destination is a whole
 * line, so its type keeps the natural alignment clang needs for movntps. */
typedef float tk_stream_v __attribute__((vector_size(16), aligned(1)));
typedef float tk_stream_line_v __attribute__((vector_size(16)));
#define TK_STREAM_LINE(d, s) do { for (int q = 0; q < 64; q += 16) \
    __builtin_nontemporal_store(*(const tk_stream_v *)((s) + q), (tk_stream_line_v *)((d) + q)); } while (0)
#elif defined(__GNUC__) && defined(__AVX512F__)
typedef float tk_stream_v __attribute__((vector_size(64), aligned(1)));
#define TK_STREAM_LINE(d, s) __builtin_ia32_movntps512((float *)(d), *(const tk_stream_v *)(s))
#elif defined(__GNUC__) && defined(__AVX__)
typedef float tk_stream_v __attribute__((vector_size(32), aligned(1)));
#define TK_STREAM_LINE(d, s) do { \
    __builtin_ia32_movntps256((float *)(d), *(const tk_stream_v *)(s)); \
    __builtin_ia32_movntps256((float *)((d) + 32), *(const tk_stream_v *)((s) + 32)); } while (0)
#elif defined(__GNUC__) && defined(__SSE__)
typedef float tk_stream_v __attribute__((vector_size(16), aligned(1)));
#define TK_STREAM_LINE(d, s) do { for (int q = 0; q < 64; q += 16) \
    __builtin_ia32_movntps((float *)((d) + q), *(const tk_stream_v *)((s) + q)); } while (0)
#endif
static inline void tk_stream(void *dst, const void *src, int64_t n) {
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
#if defined(TK_STREAM_LINE)
    int64_t i = (int64_t)((64u - ((uintptr_t)d & 63u)) & 63u);
    if (i > n) i = n;
    memcpy(d, s, (size_t)i);
    for (; i + 64 <= n; i += 64) TK_STREAM_LINE(d + i, s + i);
    memcpy(d + i, s + i, (size_t)(n - i));
#else
    memcpy(d, s, (size_t)n);
#endif
}
static inline void tk_stream_fence(void) {
#if defined(TK_STREAM_LINE)
    __builtin_ia32_sfence();
#endif
}
#define TK_STREAM_TILE 1024
#endif

/* ---- f16 / bf16 <-> f32 (the `half` crate) ------------------------------ */
/* half's software conversions (binary16/arch.rs *_fallback): round to nearest
 * even, NaN keeps its top payload bits and gets the quiet bit. With F16C
 * (which nx is built with, target-cpu=native) half uses vcvtps2ph/vcvtph2ps,
 * which give the same bits; we do the same. */
static inline float tk_f16_to_f32_soft(uint16_t i) {
    uint32_t sign = (uint32_t)(i & 0x8000u) << 16, exp = i & 0x7C00u, man = i & 0x03FFu;
    if ((i & 0x7FFFu) == 0) return tk_f32_from_bits((uint32_t)i << 16);
    if (exp == 0x7C00u)
        return tk_f32_from_bits(man == 0 ? (sign | 0x7F800000u) : (sign | 0x7FC00000u | (man << 13)));
    if (exp == 0) { /* subnormal: normalize */
        int e = 0;
        while (!(man & 0x0400u)) { man <<= 1; e++; }
        return tk_f32_from_bits(sign | ((uint32_t)(127 - 15 - e + 1) << 23) | ((man & 0x03FFu) << 13));
    }
    return tk_f32_from_bits(sign | (((exp >> 10) + 127 - 15) << 23) | (man << 13));
}
static inline uint16_t tk_f32_to_f16_soft(float value) {
    uint32_t x = tk_f32_bits(value);
    uint32_t sign = x & 0x80000000u, exp = x & 0x7F800000u, man = x & 0x007FFFFFu;
    uint32_t half_sign = sign >> 16;
    int32_t half_exp;
    if (exp == 0x7F800000u)
        return (uint16_t)(half_sign | 0x7C00u | (man ? 0x0200u : 0u) | (man >> 13));
    half_exp = (int32_t)(exp >> 23) - 127 + 15;
    if (half_exp >= 0x1F) return (uint16_t)(half_sign | 0x7C00u);
    if (half_exp <= 0) {
        uint32_t m, half_man, round_bit;
        if (14 - half_exp > 24) return (uint16_t)half_sign;
        m = man | 0x00800000u;
        half_man = m >> (14 - half_exp);
        round_bit = 1u << (13 - half_exp);
        if ((m & round_bit) && (m & (3u * round_bit - 1u))) half_man++;
        return (uint16_t)(half_sign | half_man);
    }
    {
        uint32_t h = half_sign | ((uint32_t)half_exp << 10) | (man >> 13);
        if ((man & 0x1000u) && (man & 0x2FFFu)) h++; /* round to nearest even */
        return (uint16_t)h;
    }
}
static inline float tk_f16_to_f32(uint16_t h) {
#if defined(__F16C__) && defined(__clang__)
    _Float16 v;
    memcpy(&v, &h, 2);
    return (float)v;
#elif defined(__F16C__)
    tk_v8hi v = {(short)h, 0, 0, 0, 0, 0, 0, 0};
    tk_v4sf r = __builtin_ia32_vcvtph2ps(v);
    return __extension__ r[0];
#else
    return tk_f16_to_f32_soft(h);
#endif
}
static inline uint16_t tk_f32_to_f16(float f) {
#if defined(__F16C__)
    /* The builtin, not a _Float16 conversion, with clang too: clang folds
     * a conversion to f32 and back into nothing, keeping a signaling NaN
     * that half quiets. */
    tk_v4sf a = {f, 0.0f, 0.0f, 0.0f};
    tk_v8hi r = __builtin_ia32_vcvtps2ph(a, 0 /* round to nearest even */);
    return (uint16_t)(__extension__ r[0]);
#else
    return tk_f32_to_f16_soft(f);
#endif
}
/* bf16 (bfloat/convert.rs): always software in half. */
static inline float tk_bf16_to_f32(uint16_t i) {
    return tk_f32_from_bits(((i & 0x7FFFu) > 0x7F80u ? (uint32_t)(i | 0x0040u) : (uint32_t)i) << 16);
}
static inline uint16_t tk_f32_to_bf16(float f) {
    uint32_t x = tk_f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x0040u);
    return (uint16_t)((x >> 16) + (((x & 0x8000u) && (x & 0x17FFFu)) ? 1u : 0u));
}

/* ---- conversions of Element::cast / from_f64 (nx dtype.rs) --------------- */
/* f64_to_f32_odd: round toward zero, set the last bit when inexact, so that
 * rounding again into f16/bf16 rounds once. */
static inline float tk_f64_to_f32_odd(double v) {
    float t = (float)v;
    uint32_t b;
    if ((double)t == v || v != v) return t;
    b = tk_f32_bits(t);
    if (fabs((double)t) > fabs(v)) b -= 1;
    return tk_f32_from_bits(b | 1u);
}
/* i128_to_f32_odd for a magnitude of at most 64 bits: truncate to 24
 * significant bits (exact as f32), then set the last bit when inexact. */
static inline float tk_mag_to_f32_odd(uint64_t m) {
    int sh;
    uint64_t top;
    float f;
    if (m < (1ull << 24)) return (float)m;
    sh = (63 - TK_CLZLL(m)) - 23;
    top = (m >> sh) << sh;
    f = (float)top;
    return top == m ? f : tk_f32_from_bits(tk_f32_bits(f) | 1u);
}
static inline float tk_u64_to_f32_odd(uint64_t v) { return tk_mag_to_f32_odd(v); }
static inline float tk_i64_to_f32_odd(int64_t v) {
    return v < 0 ? -tk_mag_to_f32_odd(0ull - (uint64_t)v) : tk_mag_to_f32_odd((uint64_t)v);
}
/* Rust's `f64 as iN/uN`: truncate, saturate, NaN -> 0 (no C UB: the clamp
 * comes first). */
#define TK_F64_TO_INT(NAME, T, LO, HI, TMIN, TMAX) \
    static inline T tk_f64_to_##NAME(double v) { \
        return v != v ? (T)0 : v <= (LO) ? (T)(TMIN) : v >= (HI) ? (T)(TMAX) : (T)v; }
TK_F64_TO_INT(i8, int8_t, -128.0, 128.0, INT8_MIN, INT8_MAX)
TK_F64_TO_INT(i16, int16_t, -32768.0, 32768.0, INT16_MIN, INT16_MAX)
TK_F64_TO_INT(i32, int32_t, -2147483648.0, 2147483648.0, INT32_MIN, INT32_MAX)
TK_F64_TO_INT(i64, int64_t, -9223372036854775808.0, 9223372036854775808.0, INT64_MIN, INT64_MAX)
/* unsigned: anything not above -1 (NaN included) truncates or saturates to 0 */
#define TK_F64_TO_UINT(NAME, T, HI, TMAX) \
    static inline T tk_f64_to_##NAME(double v) { \
        return !(v > -1.0) ? (T)0 : v >= (HI) ? (T)(TMAX) : (T)v; }
TK_F64_TO_UINT(u8, uint8_t, 256.0, UINT8_MAX)
TK_F64_TO_UINT(u16, uint16_t, 65536.0, UINT16_MAX)
TK_F64_TO_UINT(u32, uint32_t, 4294967296.0, UINT32_MAX)
TK_F64_TO_UINT(u64, uint64_t, 18446744073709551616.0, UINT64_MAX)

/* ---- nx cpu/math.rs exp_f32 (Exp and Sigmoid on f32) --------------------- */
/* mla: fused when the target has FMA, exactly as `cfg!(target_feature =
 * "fma")` picks in Rust (both are built for the native CPU). */
static inline float tk_mla_f32(float a, float b, float c) {
#if defined(__FMA__)
    return fmaf(a, b, c);
#else
    return a * b + c;
#endif
}
/* e^r for r = xc - n*ln2 (ln2 in two parts, Cody-Waite), |r| <= ln2/2:
 * 1 + r + r^2*u(r), Sleef's minimax coefficients. */
static inline __attribute__((always_inline)) float tk_exp_f32_poly(float xc, float n) {
    float r, u;
    r = tk_mla_f32(n, -0.693145751953125f, xc);
    r = tk_mla_f32(n, -1.428606765330187e-6f, r);
    u = 1.9852762e-4f;
    u = tk_mla_f32(u, r, 1.3930436e-3f);
    u = tk_mla_f32(u, r, 8.333361e-3f);
    u = tk_mla_f32(u, r, 4.1666485e-2f);
    u = tk_mla_f32(u, r, 0.16666667f);
    u = tk_mla_f32(u, r, 0.5f);
    return tk_mla_f32(r * r, u, r + 1.0f);
}
TK_VFN float tk_exp_f32(float x) {
    const float magic = 12582912.0f; /* 1.5*2^23 */
    /* Clamped to [-104, 89]; NaN passes (comparisons false). Both tests
     * read `x`, in two statements: chained (or nested), gcc merges them
     * into a three-way select of seven to nine vector instructions instead
     * of four (a quarter of `exp(x) * y + 1`'s kernel). */
    float lo = x < -104.0f ? -104.0f : x;
    float xc = x > 89.0f ? 89.0f : lo;
    float t, n, p, s1, s2;
    int32_t ni, n1, n2;
    t = tk_mla_f32(xc, 1.44269504088896340735992468100189214f, magic);
    n = t - magic;
    ni = (int32_t)(tk_f32_bits(t) - tk_f32_bits(magic)); /* wrapping_sub */
    p = tk_exp_f32_poly(xc, n);
    /* ni >> 1 (arithmetic), written without implementation-defined shifts */
    n1 = (int32_t)(((uint32_t)ni >> 1) | ((uint32_t)ni & 0x80000000u));
    n2 = ni - n1;
    s1 = tk_f32_from_bits((uint32_t)(n1 + 127) << 23);
    s2 = tk_f32_from_bits((uint32_t)(n2 + 127) << 23);
    return p * s1 * s2;
}
/* tk_exp_f32 in fewer vector ops, for every x but NaN and x > 68.9
 * (where n > 99). The exact form scales by 2^n as two normal factors, so
 * that a subnormal result is rounded once; here p * 2^(n+28) is one integer
 * add to p's exponent bits (exact: n+28 >= -122 keeps it normal) and the
 * multiplication by 2^-28 rounds once, to the same bits. magic carries the
 * +28 (it is even, so t still rounds ties to even n): bits(t) << 23 is
 * (n + 28) << 23, since 1.5*2^23's low nine bits are 0. Kernels guard it
 * with tk_exp_f32_fast_key(x), t's bits, against TK_EXP_FAST_T_LIMIT's
 * (c_ops::unary_vectorized): t is NaN for NaN and inf for +inf, beyond the
 * limit like n > 99. tests/c_ops.rs checks it against tk_exp_f32 for every
 * f32. */
#define TK_EXP_FAST_MAGIC 12582940.0f /* 1.5*2^23 + 28 */
#define TK_EXP_FAST_T_LIMIT (TK_EXP_FAST_MAGIC + 99.0f)
static inline __attribute__((always_inline)) float tk_exp_f32_fast_t(float x) {
    float xc = x < -104.0f ? -104.0f : x;
    return tk_mla_f32(xc, 1.44269504088896340735992468100189214f, TK_EXP_FAST_MAGIC);
}
/* exp's guard key (see TK_GUARD_MAX). */
static inline __attribute__((always_inline)) uint32_t tk_exp_f32_fast_key(float x) {
    return tk_f32_bits(tk_exp_f32_fast_t(x));
}
static inline __attribute__((always_inline)) float tk_exp_f32_fast_body(float x) {
    float xc = x < -104.0f ? -104.0f : x;
    float t, n, p;
    t = tk_exp_f32_fast_t(x);
    n = t - TK_EXP_FAST_MAGIC;
    p = tk_exp_f32_poly(xc, n);
    return tk_f32_from_bits(tk_f32_bits(p) + (tk_f32_bits(t) << 23)) * 0x1p-28f;
}
TK_VFN float tk_exp_f32_fast(float x) { return tk_exp_f32_fast_body(x); }

/* ---- nx cpu/math.rs tanh_f32 (Tanh on f32): XLA/Eigen's rational ---------- */
TK_VFN float tk_tanh_f32(float x) {
    const float c = 7.90531110763549805f;
    /* NaN passes; both tests on `x` (see tk_exp_f32) */
    float hi = tk_sel_f32(tk_mask_f32(x > c), c, x);
    float xc = tk_sel_f32(tk_mask_f32(x < -c), -c, hi);
    float x2, p, q, r;
    x2 = xc * xc;
    p = -2.76076847742355e-16f;
    p = tk_mla_f32(x2, p, 2.00018790482477e-13f);
    p = tk_mla_f32(x2, p, -8.60467152213735e-11f);
    p = tk_mla_f32(x2, p, 5.12229709037114e-08f);
    p = tk_mla_f32(x2, p, 1.48572235717979e-05f);
    p = tk_mla_f32(x2, p, 6.37261928875436e-04f);
    p = tk_mla_f32(x2, p, 4.89352455891786e-03f);
    p = xc * p;
    q = 1.19825839466702e-06f;
    q = tk_mla_f32(x2, q, 1.18534705686654e-04f);
    q = tk_mla_f32(x2, q, 2.26843463243900e-03f);
    q = tk_mla_f32(x2, q, 4.89352518554385e-03f);
    r = p / q;
    r = tk_sel_f32(tk_mask_f32(x >= 9.0f), 1.0f, r);
    r = tk_sel_f32(tk_mask_f32(x <= -9.0f), -1.0f, r);
    return tk_sel_f32(tk_mask_f32(fabsf(x) < 0.0004f), x, r);
}
/* ---- nx cpu/math.rs ln_f32 (Log on f32): musl's reduction, Cephes' logf -- */
/* Its selects are bit masks (tk_sel_f32, above). */
static inline __attribute__((always_inline)) float tk_log_f32_body(float x) {
    uint32_t tiny = tk_mask_f32(x < 1.17549435e-38f); /* f32::MIN_POSITIVE */
    float xs = tk_sel_f32(tiny, x * 8388608.0f, x);
    uint32_t ix = tk_f32_bits(xs) + (0x3f800000u - 0x3f3504f3u);
    int32_t k = (int32_t)(ix >> 23) - 0x7f - (int32_t)(tiny & 23u);
    float m = tk_f32_from_bits((ix & 0x007fffffu) + 0x3f3504f3u);
    float f = m - 1.0f, e = (float)k, p, z, y, r;
    p = 7.0376836292e-2f;
    p = tk_mla_f32(p, f, -1.1514610310e-1f);
    p = tk_mla_f32(p, f, 1.1676998740e-1f);
    p = tk_mla_f32(p, f, -1.2420140846e-1f);
    p = tk_mla_f32(p, f, 1.4249322787e-1f);
    p = tk_mla_f32(p, f, -1.6668057665e-1f);
    p = tk_mla_f32(p, f, 2.0000714765e-1f);
    p = tk_mla_f32(p, f, -2.4999993993e-1f);
    p = tk_mla_f32(p, f, 3.3333331174e-1f);
    z = f * f;
    y = f * z * p;
    y = tk_mla_f32(e, -2.12194440e-4f, y);
    y = tk_mla_f32(z, -0.5f, y);
    r = tk_mla_f32(e, 0.693359375f, f + y);
    r = tk_sel_f32(tk_mask_f32(x == 0.0f), -INFINITY, r);
    r = tk_sel_f32(tk_mask_f32(x < 0.0f), tk_f32_from_bits(0x7fc00000u), r); /* f32::NAN */
    r = tk_sel_f32(tk_mask_f32(x == INFINITY), x, r);
    return tk_sel_f32(tk_mask_f32(x != x), x, r);
}

TK_VFN float tk_log_f32(float x) { return tk_log_f32_body(x); }

/* ---- nx cpu/math.rs ln_1p_f32 (Log1p on f32): ln(u) * (x / (u - 1)) ------- */
TK_VFN float tk_log1p_f32(float x) {
    float u = 1.0f + x;
    float d = u - 1.0f;
    float r = tk_log_f32_body(u) * (x / d);
    r = tk_sel_f32(tk_mask_f32(d == 0.0f), x, r);
    r = tk_sel_f32(tk_mask_f32(u == INFINITY), u, r);
    r = tk_sel_f32(tk_mask_f32(x < -1.0f), tk_f32_from_bits(0x7fc00000u), r); /* f32::NAN */
    return tk_sel_f32(tk_mask_f32(x != x), x, r);
}

/* ---- nx cpu/math.rs atan_f32 (Atan on f32): Cephes' atanf, branch-free --- */
TK_VFN float tk_atan_f32(float x) {
    float a = fabsf(x), num, den, hi, lo, t, z, p;
    uint32_t big = tk_mask_f32(a > 2.4142136f), mid = tk_mask_f32(a > 0.41421357f);
    num = tk_sel_f32(big, -1.0f, tk_sel_f32(mid, a - 1.0f, a));
    den = tk_sel_f32(big, a, tk_sel_f32(mid, a + 1.0f, 1.0f));
    hi = tk_sel_f32(big, 1.5707964f, tk_sel_f32(mid, 0.7853982f, 0.0f));
    lo = tk_sel_f32(big, -4.371139e-8f, tk_sel_f32(mid, -2.1855695e-8f, 0.0f));
    t = num / den;
    z = t * t;
    p = 8.05374449538e-2f;
    p = tk_mla_f32(p, z, -1.38776856032e-1f);
    p = tk_mla_f32(p, z, 1.99777106478e-1f);
    p = tk_mla_f32(p, z, -3.33329491539e-1f);
    p = tk_mla_f32(p * z, t, t);
    return copysignf(hi + (p + lo), x);
}

/* ---- nx cpu/math.rs erf_f32 (Erf on f32): XLA/Eigen's 9/12 rational ----- */
TK_VFN float tk_erf_f32(float x) {
    float x2 = x * x, p, q, r;
    p = 0.00022905065861350646f;
    p = tk_mla_f32(x2, p, 0.0034082910107109506f);
    p = tk_mla_f32(x2, p, 0.050955695062380861f);
    p = tk_mla_f32(x2, p, 0.18520832239976145f);
    p = tk_mla_f32(x2, p, 1.128379143519084f);
    p = x * p;
    q = -1.1791602954361697e-7f;
    q = tk_mla_f32(x2, q, 0.000023547966471313185f);
    q = tk_mla_f32(x2, q, 0.0010179625278914885f);
    q = tk_mla_f32(x2, q, 0.014070470171167667f);
    q = tk_mla_f32(x2, q, 0.11098505178285362f);
    q = tk_mla_f32(x2, q, 0.49746925110067538f);
    q = tk_mla_f32(x2, q, 1.0f);
    r = p / q;
    r = tk_sel_f32(tk_mask_f32(r > 1.0f), 1.0f, r);
    r = tk_sel_f32(tk_mask_f32(r < -1.0f), -1.0f, r);
    return tk_sel_f32(tk_mask_f32(fabsf(x) >= 3.832506856900711f), copysignf(1.0f, x), r);
}

/* ---- nx cpu/math.rs sin_f32 / cos_f32 (Sin and Cos on f32) --------------- */
/* sincos_f32_impl: Cody-Waite reduction by pi/2 in four parts, musl's sin and
 * Cephes' cos polynomials, the quadrant from the bits of the rounded
 * multiple. Accurate for |x| <= 32768 (TRIG_BOUND); beyond (and inf, NaN)
 * the result is replaced by glibc's sinf/cosf. No UB for any input.
 * always_inline: gcc -O2 otherwise keeps this call out of line (too large
 * for its inliner), and a loop with a call does not vectorize. */
static inline __attribute__((always_inline)) float tk_sincos_f32_fast(float x, uint32_t cos_q) {
    const float magic = 12582912.0f; /* 1.5*2^23 */
    float t = tk_mla_f32(x, 0.63661975f, magic), n = t - magic, r, z, s, c, sv, cv, v;
    uint32_t q = tk_f32_bits(t) + cos_q;
    r = tk_mla_f32(n, -1.5703125f, x);
    r = tk_mla_f32(n, -4.8351288e-4f, r);
    r = tk_mla_f32(n, -3.138557e-7f, r);
    r = tk_mla_f32(n, -6.0771006e-11f, r);
    z = r * r;
    s = 2.7183114e-6f;
    s = tk_mla_f32(s, z, -1.9839335e-4f);
    s = tk_mla_f32(s, z, 8.333329e-3f);
    s = tk_mla_f32(s, z, -0.16666667f);
    sv = tk_mla_f32(r * z, s, r);
    c = 2.4433157e-5f;
    c = tk_mla_f32(c, z, -1.3887316e-3f);
    c = tk_mla_f32(c, z, 4.1666646e-2f);
    cv = tk_mla_f32(z * z, c, tk_mla_f32(z, -0.5f, 1.0f));
    v = tk_sel_f32(tk_mask_f32((int)(q & 1u)), cv, sv);
    return tk_f32_from_bits(tk_f32_bits(v) ^ ((q & 2u) << 30));
}
/* trig_big: whether x takes libm's path (|x| > 32768, inf, NaN). */
#define TK_TRIG_LIMIT 32768.0f
static inline int tk_trig_big_f32(float x) { return !(fabsf(x) <= TK_TRIG_LIMIT); }
/* The polynomial alone (what a vectorized kernel computes for every element
 * before re-running itself with tk_sin_f32 when tk_trig_big_f32 held for
 * any). sin(-0) = -0: the polynomial gives +0 there. */
TK_VFN float tk_sin_f32_fast(float x) {
    float v = tk_sincos_f32_fast(x, 0u);
    return tk_sel_f32(tk_mask_f32(x == 0.0f), x, v);
}
TK_VFN float tk_cos_f32_fast(float x) { return tk_sincos_f32_fast(x, 1u); }
/* sin_f32 / cos_f32: one element, exactly. */
static inline float tk_sin_f32(float x) { return tk_trig_big_f32(x) ? sinf(x) : tk_sin_f32_fast(x); }
static inline float tk_cos_f32(float x) { return tk_trig_big_f32(x) ? cosf(x) : tk_cos_f32_fast(x); }

/* ---- the libm crate (0.2.16): erff/erf, and the expf/exp/scalbn they call.
 * nx's Erf calls libm::erff / libm::erf (FreeBSD msun ports), not glibc. ---- */
static inline float tk_libm_scalbnf(float x, int32_t n) {
    /* libm generic/scalbn.rs for f32 */
    if (n > 127) {
        x *= 0x1p127f; n -= 127;
        if (n > 127) { x *= 0x1p127f; n -= 127; if (n > 127) n = 127; }
    } else if (n < -126) {
        x *= 0x1p-102f; n += 102;
        if (n < -126) { x *= 0x1p-102f; n += 102; if (n < -126) n = -126; }
    }
    return x * tk_f32_from_bits((uint32_t)(127 + n) << 23);
}
static inline double tk_libm_scalbn(double x, int32_t n) {
    if (n > 1023) {
        x *= 0x1p1023; n -= 1023;
        if (n > 1023) { x *= 0x1p1023; n -= 1023; if (n > 1023) n = 1023; }
    } else if (n < -1022) {
        x *= 0x1p-969; n += 969;
        if (n < -1022) { x *= 0x1p-969; n += 969; if (n < -1022) n = -1022; }
    }
    return x * tk_f64_from_bits((uint64_t)(1023 + n) << 52);
}
static inline float tk_libm_expf(float x) {
    /* libm expf.rs (FreeBSD e_expf.c) */
    uint32_t hx = tk_f32_bits(x);
    int32_t sign = (int32_t)(hx >> 31), k;
    float hi, lo, xx, c, y;
    hx &= 0x7fffffffu;
    if (hx >= 0x42aeac50u) {
        if (hx > 0x7f800000u) return x;
        if (hx >= 0x42b17218u && !sign) return x * 0x1p127f;
        if (sign && hx >= 0x42cff1b5u) return 0.0f;
    }
    if (hx > 0x3eb17218u) {
        if (hx > 0x3f851592u) k = (int32_t)(1.4426950216e+00f * x + (sign ? -0.5f : 0.5f));
        else k = 1 - sign - sign;
        hi = x - (float)k * 6.9314575195e-01f;
        lo = (float)k * 1.4286067653e-06f;
        x = hi - lo;
    } else if (hx > 0x39000000u) {
        k = 0; hi = x; lo = 0.0f;
    } else {
        return 1.0f + x;
    }
    xx = x * x;
    c = x - xx * (1.6666625440e-1f + xx * -2.7667332906e-3f);
    y = 1.0f + (x * c / (2.0f - c) - lo + hi);
    return k == 0 ? y : tk_libm_scalbnf(y, k);
}
static inline double tk_libm_exp(double x) {
    /* libm exp.rs (FreeBSD e_exp.c) */
    uint32_t hx = (uint32_t)(tk_f64_bits(x) >> 32);
    int32_t sign = (int32_t)(hx >> 31), k;
    double hi, lo, xx, c, y;
    hx &= 0x7fffffffu;
    if (hx >= 0x4086232bu) {
        if (x != x) return x;
        if (x > 709.782712893383973096) return x * 0x1p1023;
        if (x < -708.39641853226410622 && x < -745.13321910194110842) return 0.0;
    }
    if (hx > 0x3fd62e42u) {
        if (hx >= 0x3ff0a2b2u) k = (int32_t)(1.44269504088896338700e+00 * x + (sign ? -0.5 : 0.5));
        else k = 1 - sign - sign;
        hi = x - (double)k * 6.93147180369123816490e-01;
        lo = (double)k * 1.90821492927058770002e-10;
        x = hi - lo;
    } else if (hx > 0x3e300000u) {
        k = 0; hi = x; lo = 0.0;
    } else {
        return 1.0 + x;
    }
    xx = x * x;
    c = x - xx * (1.66666666666666019037e-01 + xx * (-2.77777777770155933842e-03 + xx * (6.61375632143793436117e-05 + xx * (-1.65339022054652515390e-06 + xx * 4.13813679705723846039e-08))));
    y = 1.0 + (x * c / (2.0 - c) - lo + hi);
    return k == 0 ? y : tk_libm_scalbn(y, k);
}
static inline float tk_libm_erff(float x) {
    /* libm erff.rs (FreeBSD s_erff.c): f16's and bf16's Erf, through f32 */
    uint32_t ix = tk_f32_bits(x);
    int32_t sign = (int32_t)(ix >> 31);
    float r, s, z, y;
    ix &= 0x7fffffffu;
    if (ix >= 0x7f800000u) return 1.0f - 2.0f * (float)sign + 1.0f / x;
    if (ix < 0x3f580000u) {
        if (ix < 0x31800000u) return 0.125f * (8.0f * x + 1.0270333290e+00f * x);
        z = x * x;
        r = 1.2837916613e-01f + z * (-3.2504209876e-01f + z * (-2.8481749818e-02f + z * (-5.7702702470e-03f + z * -2.3763017452e-05f)));
        s = 1.0f + z * (3.9791721106e-01f + z * (6.5022252500e-02f + z * (5.0813062117e-03f + z * (1.3249473704e-04f + z * -3.9602282413e-06f))));
        y = r / s;
        return x + x * y;
    }
    if (ix < 0x40c00000u) {
        float erfc;
        if (ix < 0x3fa00000u) { /* erfc1 */
            float p, q;
            s = fabsf(x) - 1.0f;
            p = -2.3621185683e-03f + s * (4.1485610604e-01f + s * (-3.7220788002e-01f + s * (3.1834661961e-01f + s * (-1.1089469492e-01f + s * (3.5478305072e-02f + s * -2.1663755178e-03f)))));
            q = 1.0f + s * (1.0642088205e-01f + s * (5.4039794207e-01f + s * (7.1828655899e-02f + s * (1.2617121637e-01f + s * (1.3637083583e-02f + s * 1.1984500103e-02f)))));
            erfc = 1.0f - 8.4506291151e-01f - p / q;
        } else { /* erfc2 */
            float big_s, ax = fabsf(x);
            s = 1.0f / (ax * ax);
            if (ix < 0x4036db6du) {
                r = -9.8649440333e-03f + s * (-6.9385856390e-01f + s * (-1.0558626175e+01f + s * (-6.2375331879e+01f + s * (-1.6239666748e+02f + s * (-1.8460508728e+02f + s * (-8.1287437439e+01f + s * -9.8143291473e+00f))))));
                big_s = 1.0f + s * (1.9651271820e+01f + s * (1.3765776062e+02f + s * (4.3456588745e+02f + s * (6.4538726807e+02f + s * (4.2900814819e+02f + s * (1.0863500214e+02f + s * (6.5702495575e+00f + s * -6.0424413532e-02f)))))));
            } else {
                r = -9.8649431020e-03f + s * (-7.9928326607e-01f + s * (-1.7757955551e+01f + s * (-1.6063638306e+02f + s * (-6.3756646729e+02f + s * (-1.0250950928e+03f + s * -4.8351919556e+02f)))));
                big_s = 1.0f + s * (3.0338060379e+01f + s * (3.2579251099e+02f + s * (1.5367296143e+03f + s * (3.1998581543e+03f + s * (2.5530502930e+03f + s * (4.7452853394e+02f + s * -2.2440952301e+01f))))));
            }
            z = tk_f32_from_bits(tk_f32_bits(ax) & 0xffffe000u);
            erfc = tk_libm_expf(-z * z - 0.5625f) * tk_libm_expf((z - ax) * (z + ax) + r / big_s) / ax;
        }
        y = 1.0f - erfc;
    } else {
        y = 1.0f - 0x1p-120f;
    }
    return sign ? -y : y;
}
static inline double tk_erf_f64(double x) {
    /* libm erf.rs (FreeBSD s_erf.c) */
    uint32_t ix = (uint32_t)(tk_f64_bits(x) >> 32);
    int32_t sign = (int32_t)(ix >> 31);
    double r, s, z, y;
    ix &= 0x7fffffffu;
    if (ix >= 0x7ff00000u) return 1.0 - 2.0 * (double)sign + 1.0 / x;
    if (ix < 0x3feb0000u) {
        if (ix < 0x3e300000u) return 0.125 * (8.0 * x + 1.02703333676410069053e+00 * x);
        z = x * x;
        r = 1.28379167095512558561e-01 + z * (-3.25042107247001499370e-01 + z * (-2.84817495755985104766e-02 + z * (-5.77027029648944159157e-03 + z * -2.37630166566501626084e-05)));
        s = 1.0 + z * (3.97917223959155352819e-01 + z * (6.50222499887672944485e-02 + z * (5.08130628187576562776e-03 + z * (1.32494738004321644526e-04 + z * -3.96022827877536812320e-06))));
        y = r / s;
        return x + x * y;
    }
    if (ix < 0x40180000u) {
        double erfc;
        if (ix < 0x3ff40000u) { /* erfc1 */
            double p, q;
            s = fabs(x) - 1.0;
            p = -2.36211856075265944077e-03 + s * (4.14856118683748331666e-01 + s * (-3.72207876035701323847e-01 + s * (3.18346619901161753674e-01 + s * (-1.10894694282396677476e-01 + s * (3.54783043256182359371e-02 + s * -2.16637559486879084300e-03)))));
            q = 1.0 + s * (1.06420880400844228286e-01 + s * (5.40397917702171048937e-01 + s * (7.18286544141962662868e-02 + s * (1.26171219808761642112e-01 + s * (1.36370839120290507362e-02 + s * 1.19844998467991074170e-02)))));
            erfc = 1.0 - 8.45062911510467529297e-01 - p / q;
        } else { /* erfc2 */
            double big_s, ax = fabs(x);
            s = 1.0 / (ax * ax);
            if (ix < 0x4006db6du) {
                r = -9.86494403484714822705e-03 + s * (-6.93858572707181764372e-01 + s * (-1.05586262253232909814e+01 + s * (-6.23753324503260060396e+01 + s * (-1.62396669462573470355e+02 + s * (-1.84605092906711035994e+02 + s * (-8.12874355063065934246e+01 + s * -9.81432934416914548592e+00))))));
                big_s = 1.0 + s * (1.96512716674392571292e+01 + s * (1.37657754143519042600e+02 + s * (4.34565877475229228821e+02 + s * (6.45387271733267880336e+02 + s * (4.29008140027567833386e+02 + s * (1.08635005541779435134e+02 + s * (6.57024977031928170135e+00 + s * -6.04244152148580987438e-02)))))));
            } else {
                r = -9.86494292470009928597e-03 + s * (-7.99283237680523006574e-01 + s * (-1.77579549177547519889e+01 + s * (-1.60636384855821916062e+02 + s * (-6.37566443368389627722e+02 + s * (-1.02509513161107724954e+03 + s * -4.83519191608651397019e+02)))));
                big_s = 1.0 + s * (3.03380607434824582924e+01 + s * (3.25792512996573918826e+02 + s * (1.53672958608443695994e+03 + s * (3.19985821950859553908e+03 + s * (2.55305040643316442583e+03 + s * (4.74528541206955367215e+02 + s * -2.24409524465858183362e+01))))));
            }
            z = tk_f64_from_bits(tk_f64_bits(ax) & 0xffffffff00000000ull);
            erfc = tk_libm_exp(-z * z - 0.5625) * tk_libm_exp((z - ax) * (z + ax) + r / big_s) / ax;
        }
        y = 1.0 - erfc;
    } else {
        y = 1.0 - 0x1p-1022;
    }
    return sign ? -y : y;
}

/* ---- f32 / f64 math that Rust std writes itself (std/src/num/f32.rs) ----- */
/* Everything else (sin, tan, exp2, log1p, powf, fmod, atan2, ...) is the
 * system libm in both Rust and here. */
static inline float tk_asinh_f32(float x) {
    float ax = fabsf(x), ix = 1.0f / ax;
    return copysignf(log1pf(ax + (ax / (hypotf(1.0f, ix) + ix))), x);
}
static inline float tk_acosh_f32(float x) {
    return x < 1.0f ? tk_f32_from_bits(0x7fc00000u) : logf(x + (sqrtf(x - 1.0f) * sqrtf(x + 1.0f)));
}
static inline float tk_atanh_f32(float x) { return 0.5f * log1pf((2.0f * x) / (1.0f - x)); }
static inline double tk_asinh_f64(double x) {
    double ax = fabs(x), ix = 1.0 / ax;
    return copysign(log1p(ax + (ax / (hypot(1.0, ix) + ix))), x);
}
static inline double tk_acosh_f64(double x) {
    return x < 1.0 ? tk_f64_from_bits(0x7ff8000000000000ull) : log(x + (sqrt(x - 1.0) * sqrt(x + 1.0)));
}
static inline double tk_atanh_f64(double x) { return 0.5 * log1p((2.0 * x) / (1.0 - x)); }

/* ---- nx elementwise.rs float rules, for f32 (F) and f64 (D) -------------- */
/* F: C type, S: suffix, E: exp used by sigmoid (exp_fast). */
#define TK_FLOAT_RULES(S, F, FABS, ROUND, TRUNC, E) \
    static inline F tk_sign_##S(F v) { return v > (F)0 ? (F)1 : v < (F)0 ? (F)-1 : v; } \
    /* NaN-propagating; equal values: +0 over -0 (max), -0 over +0 (min) */ \
    static inline F tk_max_##S(F x, F y) { \
        if (x != x || x > y) return x; \
        if (y != y || y > x) return y; \
        return signbit(x) ? y : x; } \
    static inline F tk_min_##S(F x, F y) { \
        if (x != x || x < y) return x; \
        if (y != y || y < x) return y; \
        return signbit(x) ? x : y; } \
    /* half to even: round half away, then fix exact ties */ \
    static inline F tk_round_##S(F v) { \
        F r = ROUND(v); \
        return FABS(v - TRUNC(v)) == (F)0.5 ? ROUND(v / (F)2) * (F)2 : r; } \
    /* 1/(1+e^-|x|), e/(1+e) for x < 0 */ \
    static inline F tk_sigmoid_##S(F v) { \
        F e = E(-FABS(v)); \
        F s = (F)1 / ((F)1 + e); \
        return v < (F)0 ? e * s : s; }
TK_FLOAT_RULES(f32, float, fabsf, roundf, truncf, tk_exp_f32)
TK_FLOAT_RULES(f64, double, fabs, round, trunc, exp)
/* tk_sigmoid_f32 through tk_exp_f32_fast: e^-|x| is in the fast form's
 * range for every x but NaN (c_ops::unary_vectorized guards it). */
TK_VFN float tk_sigmoid_f32_fast(float v) {
    float e = tk_exp_f32_fast_body(-fabsf(v));
    float s = 1.0f / (1.0f + e);
    float es = e * s;
    return tk_sel_f32(tk_mask_f32(v < 0.0f), es, s);
}

/* ---- f16 and bf16 (P) arithmetic as half does it: to f32, compute, round
 * back (each operation rounds). Comparisons on the f32 values equal half's
 * bitwise PartialOrd/PartialEq. ONE/NEG_ONE/TWO/HALF_: bit patterns. ------- */
#define TK_HALF_RULES(P, ONE, NEG_ONE, TWO) \
    static inline uint16_t tk_##P##_add(uint16_t a, uint16_t b) { return tk_f32_to_##P(tk_##P##_to_f32(a) + tk_##P##_to_f32(b)); } \
    static inline uint16_t tk_##P##_sub(uint16_t a, uint16_t b) { return tk_f32_to_##P(tk_##P##_to_f32(a) - tk_##P##_to_f32(b)); } \
    static inline uint16_t tk_##P##_mul(uint16_t a, uint16_t b) { return tk_f32_to_##P(tk_##P##_to_f32(a) * tk_##P##_to_f32(b)); } \
    static inline uint16_t tk_##P##_div(uint16_t a, uint16_t b) { return tk_f32_to_##P(tk_##P##_to_f32(a) / tk_##P##_to_f32(b)); } \
    static inline uint16_t tk_##P##_rem(uint16_t a, uint16_t b) { return tk_f32_to_##P(fmodf(tk_##P##_to_f32(a), tk_##P##_to_f32(b))); } \
    static inline uint16_t tk_##P##_pow(uint16_t a, uint16_t b) { return tk_f32_to_##P(powf(tk_##P##_to_f32(a), tk_##P##_to_f32(b))); } \
    static inline uint16_t tk_##P##_atan2(uint16_t a, uint16_t b) { return tk_f32_to_##P(atan2f(tk_##P##_to_f32(a), tk_##P##_to_f32(b))); } \
    /* num_traits Float::abs goes through f32 (so it quiets a NaN); Neg flips the sign bit */ \
    static inline uint16_t tk_##P##_abs(uint16_t a) { return tk_f32_to_##P(fabsf(tk_##P##_to_f32(a))); } \
    static inline uint16_t tk_##P##_neg(uint16_t a) { return (uint16_t)(a ^ 0x8000u); } \
    static inline uint16_t tk_##P##_sqrt(uint16_t a) { return tk_f32_to_##P(sqrtf(tk_##P##_to_f32(a))); } \
    static inline uint16_t tk_##P##_exp(uint16_t a) { return tk_f32_to_##P(expf(tk_##P##_to_f32(a))); } \
    static inline uint16_t tk_##P##_max(uint16_t a, uint16_t b) { \
        float x = tk_##P##_to_f32(a), y = tk_##P##_to_f32(b); \
        if (x != x || x > y) return a; \
        if (y != y || y > x) return b; \
        return (a & 0x8000u) ? b : a; } \
    static inline uint16_t tk_##P##_min(uint16_t a, uint16_t b) { \
        float x = tk_##P##_to_f32(a), y = tk_##P##_to_f32(b); \
        if (x != x || x < y) return a; \
        if (y != y || y < x) return b; \
        return (a & 0x8000u) ? a : b; } \
    static inline uint16_t tk_##P##_sign(uint16_t a) { \
        float v = tk_##P##_to_f32(a); \
        return v > 0.0f ? (uint16_t)(ONE) : v < 0.0f ? (uint16_t)(NEG_ONE) : a; } \
    static inline uint16_t tk_##P##_round(uint16_t v) { \
        uint16_t r = tk_f32_to_##P(roundf(tk_##P##_to_f32(v))); \
        uint16_t t = tk_f32_to_##P(truncf(tk_##P##_to_f32(v))); \
        if (tk_##P##_to_f32(tk_##P##_abs(tk_##P##_sub(v, t))) == 0.5f) \
            return tk_##P##_mul(tk_f32_to_##P(roundf(tk_##P##_to_f32(tk_##P##_div(v, (TWO))))), (TWO)); \
        return r; } \
    static inline uint16_t tk_##P##_sigmoid(uint16_t v) { \
        uint16_t e = tk_##P##_exp(tk_##P##_neg(tk_##P##_abs(v))); \
        uint16_t s = tk_##P##_div((ONE), tk_##P##_add((ONE), e)); \
        return tk_##P##_to_f32(v) < 0.0f ? tk_##P##_mul(e, s) : s; }
TK_HALF_RULES(f16, 0x3C00u, 0xBC00u, 0x4000u)
TK_HALF_RULES(bf16, 0x3F80u, 0xBF80u, 0x4000u)

/* ---- integer rules (nx elementwise.rs IntElem): wrapping arithmetic, x/0 = 0,
 * MIN/-1 wraps, shifts by >= width (or a negative amount) give 0 or -1.
 * A: the unsigned type the arithmetic wraps in (at least unsigned int, so
 * that small types do not promote to signed int and overflow). Converting an
 * out-of-range value back to a signed type wraps in gcc and clang. ---------- */
#define TK_INT_RULES(S, T, A, BITS, SIGNED) \
    static inline T tk_neg_##S(T a) { return (T)(0u - (A)a); } \
    static inline T tk_abs_##S(T a) { return (SIGNED && a < 0) ? (T)(0u - (A)a) : a; } \
    static inline T tk_sign_##S(T a) { return a > 0 ? (T)1 : a == 0 ? (T)0 : (T)(0u - (A)1); } \
    static inline T tk_add_##S(T a, T b) { return (T)((A)a + (A)b); } \
    static inline T tk_sub_##S(T a, T b) { return (T)((A)a - (A)b); } \
    static inline T tk_mul_##S(T a, T b) { return (T)((A)a * (A)b); } \
    static inline T tk_div_##S(T a, T b) { \
        return b == 0 ? (T)0 : (SIGNED && b == (T)-1) ? (T)(0u - (A)a) : (T)(a / b); } \
    static inline T tk_rem_##S(T a, T b) { \
        return b == 0 ? (T)0 : (SIGNED && b == (T)-1) ? (T)0 : (T)(a % b); } \
    static inline T tk_max_##S(T a, T b) { return a > b ? a : b; } \
    static inline T tk_min_##S(T a, T b) { return a < b ? a : b; } \
    static inline T tk_pow_##S(T a, T b) { \
        A r = 1, base = (A)a; \
        uint64_t e; \
        if (SIGNED && b < 0) /* only 1 and -1 have integer reciprocals */ \
            return a == 1 ? (T)1 : (SIGNED && a == (T)-1) ? ((b % 2 == 0) ? (T)1 : a) : (T)0; \
        for (e = (uint64_t)b; e; e >>= 1) { \
            if (e & 1u) r = (A)(r * base); \
            base = (A)(base * base); } \
        return (T)r; } \
    static inline T tk_shl_##S(T a, T b) { \
        return ((SIGNED && b < 0) || (uint64_t)b >= BITS) ? (T)0 : (T)((A)a << b); } \
    static inline T tk_shr_##S(T a, T b) { \
        if ((SIGNED && b < 0) || (uint64_t)b >= BITS) return a < 0 ? (T)-1 : (T)0; \
        return a < 0 ? (T)~(T)(~a >> b) : (T)(a >> b); /* arithmetic, without impl-defined >> */ }
TK_INT_RULES(u8, uint8_t, uint32_t, 8, 0)
TK_INT_RULES(u16, uint16_t, uint32_t, 16, 0)
TK_INT_RULES(u32, uint32_t, uint32_t, 32, 0)
TK_INT_RULES(u64, uint64_t, uint64_t, 64, 0)
TK_INT_RULES(i8, int8_t, uint32_t, 8, 1)
TK_INT_RULES(i16, int16_t, uint32_t, 16, 1)
TK_INT_RULES(i32, int32_t, uint32_t, 32, 1)
TK_INT_RULES(i64, int64_t, uint64_t, 64, 1)
