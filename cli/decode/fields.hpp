// The field-by-field breakdown of PDUs (used by describe()): offsets and
// field names from the wire layouts of the specs (socklnd.md,
// lnet-header.md, ping-discovery-health.md, o2iblnd.md), values from the
// codecs' decoded structures.  Each layout is named once, here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/decode/describe.hpp"

namespace lnetr::decode {

std::vector<Section> sections_of(const Pdu& p);

// Names of values, shared with the summaries.
std::string hello_magic_name(std::uint32_t magic);  // "LNET_PROTO_MAGIC", "LNET_PROTO_TCP_MAGIC" or ""
std::string ni_status_name(std::uint32_t status);   // "UP", "DOWN", "INVALID" or ""

}  // namespace lnetr::decode
