/* tolk CUDA prelude: what the C prelude (c_prelude.h, emitted after this)
 * takes from <stdint.h>, <math.h> and the C compiler's builtins, for NVRTC,
 * which compiles C++ and ships no C headers (the NVRTC of the Python
 * wheels has no <cuda_fp16.h> either: f16 and bf16 stay raw bits, converted
 * by the C prelude's software conversions). Every function is a device
 * function (NVRTC's -default-device), so the C prelude's helpers, the same
 * algorithms as the CPU's, compile unchanged. */
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define INT8_MIN (-128)
#define INT8_MAX 127
#define INT16_MIN (-32768)
#define INT16_MAX 32767
#define INT32_MIN (-2147483647 - 1)
#define INT32_MAX 2147483647
#define INT64_MIN (-9223372036854775807LL - 1)
#define INT64_MAX 9223372036854775807LL
#define UINT8_MAX 255
#define UINT16_MAX 65535
#define UINT32_MAX 4294967295u
#define UINT64_MAX 18446744073709551615ull
#define INFINITY (__int_as_float(0x7f800000))
static inline int tk_signbit(float x) { return (int)(__float_as_uint(x) >> 31); }
static inline int tk_signbit(double x) { return (int)((unsigned long long)__double_as_longlong(x) >> 63); }
#define signbit(x) tk_signbit(x)
#define TK_CLZLL(m) __clzll((long long)(m))
#define restrict __restrict__
/* The CPU's fused multiply-adds where nx's kernels fuse them (its level has
 * FMA); NVRTC runs with --fmad=false, so nothing else is fused. */
