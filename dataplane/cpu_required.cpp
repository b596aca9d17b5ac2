// What this build of the program needs from the CPU: compiled with the same
// flags as the rest of it (DPDK's -march and rte_config.h included), so the
// compiler's feature macros say what it may have used, and DPDK's
// RTE_COMPILE_TIME_CPUFLAGS what DPDK's libraries were built for.  Constant
// data only: nothing here runs.
#include <rte_config.h>
#include <rte_cpuflags.h>

#include "dataplane/cpu_features.hpp"

namespace lnetr::cpu {
namespace {

constexpr std::uint64_t from_macros() {
  std::uint64_t m = 0;
#ifdef __SSE__
  m |= bit_of("sse");
#endif
#ifdef __SSE2__
  m |= bit_of("sse2");
#endif
#ifdef __SSE3__
  m |= bit_of("pni");
#endif
#ifdef __PCLMUL__
  m |= bit_of("pclmulqdq");
#endif
#ifdef __SSSE3__
  m |= bit_of("ssse3");
#endif
#ifdef __FMA__
  m |= bit_of("fma");
#endif
#ifdef __SSE4_1__
  m |= bit_of("sse4_1");
#endif
#ifdef __SSE4_2__
  m |= bit_of("sse4_2");
#endif
#ifdef __MOVBE__
  m |= bit_of("movbe");
#endif
#ifdef __POPCNT__
  m |= bit_of("popcnt");
#endif
#ifdef __AES__
  m |= bit_of("aes");
#endif
#ifdef __XSAVE__
  m |= bit_of("xsave");
#endif
#ifdef __AVX__
  m |= bit_of("avx");
#endif
#ifdef __F16C__
  m |= bit_of("f16c");
#endif
#ifdef __RDRND__
  m |= bit_of("rdrand");
#endif
#ifdef __BMI__
  m |= bit_of("bmi1");
#endif
#ifdef __AVX2__
  m |= bit_of("avx2");
#endif
#ifdef __BMI2__
  m |= bit_of("bmi2");
#endif
#ifdef __AVX512F__
  m |= bit_of("avx512f");
#endif
#ifdef __AVX512DQ__
  m |= bit_of("avx512dq");
#endif
#ifdef __RDSEED__
  m |= bit_of("rdseed");
#endif
#ifdef __ADX__
  m |= bit_of("adx");
#endif
#ifdef __AVX512IFMA__
  m |= bit_of("avx512ifma");
#endif
#ifdef __AVX512CD__
  m |= bit_of("avx512cd");
#endif
#ifdef __SHA__
  m |= bit_of("sha_ni");
#endif
#ifdef __AVX512BW__
  m |= bit_of("avx512bw");
#endif
#ifdef __AVX512VL__
  m |= bit_of("avx512vl");
#endif
#ifdef __AVX512VBMI__
  m |= bit_of("avx512vbmi");
#endif
#ifdef __GFNI__
  m |= bit_of("gfni");
#endif
#ifdef __VAES__
  m |= bit_of("vaes");
#endif
#ifdef __VPCLMULQDQ__
  m |= bit_of("vpclmulqdq");
#endif
#ifdef __AVX512VNNI__
  m |= bit_of("avx512_vnni");
#endif
#ifdef __AVX512BITALG__
  m |= bit_of("avx512_bitalg");
#endif
#ifdef __AVX512VPOPCNTDQ__
  m |= bit_of("avx512_vpopcntdq");
#endif
#ifdef __LZCNT__
  m |= bit_of("abm");
#endif
  return m;
}

constexpr std::uint64_t of_dpdk_flag(rte_cpu_flag_t f) {
  switch (f) {
    case RTE_CPUFLAG_SSE: return bit_of("sse");
    case RTE_CPUFLAG_SSE2: return bit_of("sse2");
    case RTE_CPUFLAG_SSE3: return bit_of("pni");
    case RTE_CPUFLAG_PCLMULQDQ: return bit_of("pclmulqdq");
    case RTE_CPUFLAG_SSSE3: return bit_of("ssse3");
    case RTE_CPUFLAG_FMA: return bit_of("fma");
    case RTE_CPUFLAG_SSE4_1: return bit_of("sse4_1");
    case RTE_CPUFLAG_SSE4_2: return bit_of("sse4_2");
    case RTE_CPUFLAG_CMPXCHG16B: return bit_of("cx16");
    case RTE_CPUFLAG_XSAVE: return bit_of("xsave");
    case RTE_CPUFLAG_MOVBE: return bit_of("movbe");
    case RTE_CPUFLAG_POPCNT: return bit_of("popcnt");
    case RTE_CPUFLAG_AES: return bit_of("aes");
    case RTE_CPUFLAG_AVX: return bit_of("avx");
    case RTE_CPUFLAG_F16C: return bit_of("f16c");
    case RTE_CPUFLAG_RDRAND: return bit_of("rdrand");
    case RTE_CPUFLAG_BMI1: return bit_of("bmi1");
    case RTE_CPUFLAG_AVX2: return bit_of("avx2");
    case RTE_CPUFLAG_BMI2: return bit_of("bmi2");
    case RTE_CPUFLAG_AVX512F: return bit_of("avx512f");
    case RTE_CPUFLAG_AVX512DQ: return bit_of("avx512dq");
    case RTE_CPUFLAG_RDSEED: return bit_of("rdseed");
    case RTE_CPUFLAG_AVX512IFMA: return bit_of("avx512ifma");
    case RTE_CPUFLAG_AVX512CD: return bit_of("avx512cd");
    case RTE_CPUFLAG_AVX512BW: return bit_of("avx512bw");
    case RTE_CPUFLAG_AVX512VL: return bit_of("avx512vl");
    case RTE_CPUFLAG_AVX512VBMI: return bit_of("avx512vbmi");
    case RTE_CPUFLAG_GFNI: return bit_of("gfni");
    case RTE_CPUFLAG_VAES: return bit_of("vaes");
    case RTE_CPUFLAG_VPCLMULQDQ: return bit_of("vpclmulqdq");
    case RTE_CPUFLAG_AVX512VNNI: return bit_of("avx512_vnni");
    case RTE_CPUFLAG_AVX512BITALG: return bit_of("avx512_bitalg");
    case RTE_CPUFLAG_AVX512VPOPCNTDQ: return bit_of("avx512_vpopcntdq");
    case RTE_CPUFLAG_LAHF_SAHF: return bit_of("lahf_lm");
    case RTE_CPUFLAG_LZCNT: return bit_of("abm");
    default: return 0;
  }
}

#ifdef RTE_COMPILE_TIME_CPUFLAGS
constexpr rte_cpu_flag_t kDpdkFlags[] = {RTE_COMPILE_TIME_CPUFLAGS};
#else
constexpr rte_cpu_flag_t kDpdkFlags[] = {RTE_CPUFLAG_SSE};
#endif

constexpr std::uint64_t from_dpdk() {
  std::uint64_t m = 0;
  for (rte_cpu_flag_t f : kDpdkFlags) m |= of_dpdk_flag(f);
  return m;
}

constexpr bool every_dpdk_flag_known() {
  for (rte_cpu_flag_t f : kDpdkFlags)
    if (of_dpdk_flag(f) == 0) return false;
  return true;
}
static_assert(every_dpdk_flag_known(), "DPDK was built for a CPU feature this check does not know: add it");

}  // namespace

extern const std::uint64_t kRequired = from_macros() | from_dpdk();

}  // namespace lnetr::cpu
