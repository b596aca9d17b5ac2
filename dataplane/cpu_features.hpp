// The CPU features a program built with DPDK needs, checked before any of
// its code (or DPDK's) runs.
//
// Debian's DPDK is built for -march=corei7 and its pkg-config flags give
// every user of it the same, so DPDK's library constructors and lnetr's
// own code may use SSSE3, SSE4.x and POPCNT anywhere.  On a CPU without
// them (qemu's default model, an old hypervisor's CPU) the process dies
// of SIGILL before main() and says nothing.  Instead, a function in the
// executable's .preinit_array, compiled for the x86-64 baseline, compares
// what the build needs (kRequired: the compiler's feature macros and
// DPDK's RTE_COMPILE_TIME_CPUFLAGS, fixed at build time) with what CPUID
// says, and refuses with one line naming what is missing and exit status
// kExitCpuUnsupported.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lnetr::cpu {

enum class Reg : std::uint8_t { eax, ebx, ecx, edx };

struct Feature {
  const char* name;  // as /proc/cpuinfo spells it
  std::uint32_t leaf;
  std::uint32_t subleaf;
  Reg reg;
  std::uint8_t bit;
  std::uint8_t xsave;  // XCR0 bits the OS must enable (AVX: YMM; AVX-512: ZMM)
};

// The features checked; a mask's bit i stands for kFeatures[i].
inline constexpr std::uint8_t kYmm = 0x06, kZmm = 0xe6;
inline constexpr Feature kFeatures[] = {
    {"sse", 1, 0, Reg::edx, 25, 0},
    {"sse2", 1, 0, Reg::edx, 26, 0},
    {"pni", 1, 0, Reg::ecx, 0, 0},  // SSE3
    {"pclmulqdq", 1, 0, Reg::ecx, 1, 0},
    {"ssse3", 1, 0, Reg::ecx, 9, 0},
    {"fma", 1, 0, Reg::ecx, 12, kYmm},
    {"cx16", 1, 0, Reg::ecx, 13, 0},
    {"sse4_1", 1, 0, Reg::ecx, 19, 0},
    {"sse4_2", 1, 0, Reg::ecx, 20, 0},
    {"movbe", 1, 0, Reg::ecx, 22, 0},
    {"popcnt", 1, 0, Reg::ecx, 23, 0},
    {"aes", 1, 0, Reg::ecx, 25, 0},
    {"xsave", 1, 0, Reg::ecx, 26, 0},
    {"avx", 1, 0, Reg::ecx, 28, kYmm},
    {"f16c", 1, 0, Reg::ecx, 29, kYmm},
    {"rdrand", 1, 0, Reg::ecx, 30, 0},
    {"bmi1", 7, 0, Reg::ebx, 3, 0},
    {"avx2", 7, 0, Reg::ebx, 5, kYmm},
    {"bmi2", 7, 0, Reg::ebx, 8, 0},
    {"avx512f", 7, 0, Reg::ebx, 16, kZmm},
    {"avx512dq", 7, 0, Reg::ebx, 17, kZmm},
    {"rdseed", 7, 0, Reg::ebx, 18, 0},
    {"adx", 7, 0, Reg::ebx, 19, 0},
    {"avx512ifma", 7, 0, Reg::ebx, 21, kZmm},
    {"avx512cd", 7, 0, Reg::ebx, 28, kZmm},
    {"sha_ni", 7, 0, Reg::ebx, 29, 0},
    {"avx512bw", 7, 0, Reg::ebx, 30, kZmm},
    {"avx512vl", 7, 0, Reg::ebx, 31, kZmm},
    {"avx512vbmi", 7, 0, Reg::ecx, 1, kZmm},
    {"gfni", 7, 0, Reg::ecx, 8, 0},
    {"vaes", 7, 0, Reg::ecx, 9, kYmm},
    {"vpclmulqdq", 7, 0, Reg::ecx, 10, kYmm},
    {"avx512_vnni", 7, 0, Reg::ecx, 11, kZmm},
    {"avx512_bitalg", 7, 0, Reg::ecx, 12, kZmm},
    {"avx512_vpopcntdq", 7, 0, Reg::ecx, 14, kZmm},
    {"lahf_lm", 0x80000001, 0, Reg::ecx, 0, 0},
    {"abm", 0x80000001, 0, Reg::ecx, 5, 0},  // LZCNT
};
inline constexpr std::size_t kFeatureCount = sizeof(kFeatures) / sizeof(kFeatures[0]);
static_assert(kFeatureCount <= 64);

constexpr std::uint64_t bit_of(const char* name) {
  for (std::size_t i = 0; i < kFeatureCount; ++i) {
    const char* a = kFeatures[i].name;
    const char* b = name;
    while (*a && *a == *b) ++a, ++b;
    if (*a == *b) return std::uint64_t{1} << i;
  }
  return 0;
}

// What this build needs (cpu_required.cpp, compiled with the flags the
// rest of the program is).
extern const std::uint64_t kRequired;

// The exit status of a refusal: the units do not restart on it.
inline constexpr int kExitCpuUnsupported = 79;

// What this CPU has, from CPUID and XGETBV (compiled for the baseline).
std::uint64_t present() noexcept;

// "NAME: this CPU lacks A B ..., which this build needs: ..." for the
// features of `required` not in `have`, into buf (NUL-terminated, cut to
// size); its length, 0 when nothing is missing.
std::size_t describe_missing(const char* program, std::uint64_t required, std::uint64_t have, char* buf,
                             std::size_t size) noexcept;

}  // namespace lnetr::cpu
