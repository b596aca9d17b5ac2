// Small text helpers shared by the PDU descriptions and the tool's output.
#pragma once

#include <cstdint>
#include <string>

#include "router/bytes.hpp"

namespace lnetr::decode {

// printf into a std::string (lines here are short; longer output is cut).
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string hex64(std::uint64_t v);  // "0x1c11"
std::string hex_bytes(ByteSpan bytes);  // "c1 00 00 00"

}  // namespace lnetr::decode
