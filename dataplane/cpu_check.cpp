// The CPU check of programs built with DPDK (cpu_features.hpp).  This file
// is compiled for the x86-64 baseline and without sanitizers: it runs from
// the executable's .preinit_array, before the C library, DPDK's library
// constructors or any other code of the program, so it may use only CPUID,
// XGETBV and system calls.
#include <cpuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataplane/cpu_features.hpp"

namespace lnetr::cpu {
namespace {

std::size_t append(char* buf, std::size_t at, std::size_t size, const char* s) noexcept {
  while (*s && at + 1 < size) buf[at++] = *s++;
  if (size) buf[at < size ? at : size - 1] = '\0';
  return at;
}

std::uint64_t xcr0() noexcept {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (std::uint64_t{hi} << 32) | lo;
}

// stderr is the journal (JOURNAL_STREAM is "DEVICE:INODE" of it): the
// line then carries the journal's severity, as the programs' other lines.
bool stderr_is_journal(char** envp) noexcept {
  const char* v = nullptr;
  for (char** e = envp; e && *e; ++e) {
    const char* a = *e;
    const char* k = "JOURNAL_STREAM=";
    while (*k && *a == *k) ++a, ++k;
    if (!*k) v = a;
  }
  if (!v) return false;
  std::uint64_t dev = 0, ino = 0;
  while (*v >= '0' && *v <= '9') dev = dev * 10 + static_cast<std::uint64_t>(*v++ - '0');
  if (*v++ != ':') return false;
  while (*v >= '0' && *v <= '9') ino = ino * 10 + static_cast<std::uint64_t>(*v++ - '0');
  struct stat st {};
  return fstat(STDERR_FILENO, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

}  // namespace

std::uint64_t present() noexcept {
  std::uint32_t max_basic = __get_cpuid_max(0, nullptr);
  std::uint32_t max_ext = __get_cpuid_max(0x80000000, nullptr);
  std::uint32_t r1[4] = {}, r7[4] = {}, rx[4] = {};
  __cpuid(1, r1[0], r1[1], r1[2], r1[3]);
  if (max_basic >= 7) __cpuid_count(7, 0, r7[0], r7[1], r7[2], r7[3]);
  if (max_ext >= 0x80000001) __cpuid(0x80000001, rx[0], rx[1], rx[2], rx[3]);
  // OSXSAVE: the OS saves the extended registers; which, XCR0 says.
  const std::uint64_t enabled = (r1[2] & (1u << 27)) ? xcr0() : 0;
  std::uint64_t have = 0;
  for (std::size_t i = 0; i < kFeatureCount; ++i) {
    const Feature& f = kFeatures[i];
    const std::uint32_t* r = f.leaf == 1 ? r1 : f.leaf == 7 ? r7 : rx;
    if (!(r[static_cast<int>(f.reg)] & (1u << f.bit))) continue;
    if ((enabled & f.xsave) != f.xsave) continue;
    have |= std::uint64_t{1} << i;
  }
  return have;
}

std::size_t describe_missing(const char* program, std::uint64_t required, std::uint64_t have, char* buf,
                             std::size_t size) noexcept {
  const std::uint64_t missing = required & ~have;
  if (!missing || !size) return 0;
  std::size_t at = append(buf, 0, size, program);
  at = append(buf, at, size, ": this CPU lacks");
  for (std::size_t i = 0; i < kFeatureCount; ++i)
    if (missing & (std::uint64_t{1} << i)) {
      at = append(buf, at, size, " ");
      at = append(buf, at, size, kFeatures[i].name);
    }
  at = append(buf, at, size,
              ", which this build of it and of DPDK needs: run it on a CPU that has them (in qemu, "
              "-cpu host or a model such as Nehalem or newer; qemu's default model has too few)");
  return at;
}

namespace {

// From the executable's .preinit_array: (argc, argv, envp), before any
// library's constructor.
void check(int, char** argv, char** envp) {
  const std::uint64_t have = present();
  if ((kRequired & ~have) == 0) return;
  const char* name = argv && argv[0] ? argv[0] : "lnetr";
  for (const char* p = name; *p; ++p)
    if (*p == '/' && p[1]) name = p + 1;
  char line[768];
  std::size_t at = 0;
  if (stderr_is_journal(envp)) at = append(line, 0, sizeof line, "<2>");
  at += describe_missing(name, kRequired, have, line + at, sizeof line - at - 1);
  line[at++] = '\n';
  const ssize_t ignored = write(STDERR_FILENO, line, at);
  (void)ignored;
  _exit(kExitCpuUnsupported);
}

}  // namespace
}  // namespace lnetr::cpu

__attribute__((section(".preinit_array"), used)) static void (*const lnetr_cpu_check)(int, char**, char**) =
    &lnetr::cpu::check;
