// Invariant checks inside fuzz targets: a violation is a finding.
#pragma once

#define FUZZ_CHECK(cond)          \
  do {                            \
    if (!(cond)) __builtin_trap(); \
  } while (0)
