// What an operator reads about a PDU: a one-line summary, detail lines and
// a field-by-field breakdown (offset, wire bytes, field name, decoded value).
//
// Field values come from the codecs' decoded structures; the offsets are
// the wire layouts of the specs (socklnd.md, o2iblnd.md, lnet-header.md,
// ping-discovery-health.md), named once in describe.cpp.  Field names are
// the C structure members Lustre operators know from the kernel sources and
// from debug logs (kshm_src_nid, ibm_credits, put.match_bits, ...).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cli/decode/pdu.hpp"
#include "cli/decode/text.hpp"

namespace lnetr::decode {

struct Field {
  // How the value reads best: unsigned or signed decimal, hex, or not a
  // number at all (a 16-byte address, shown by its meaning).
  enum class Radix : std::uint8_t { dec, sdec, hex, none };
  std::size_t offset = 0;  // from its section's base
  std::size_t size = 0;
  std::string name;
  std::uint64_t value = 0;  // as decoded (signed fields sign-extended)
  std::string meaning;      // NID, type or status name, ...; may be empty
  Radix radix = Radix::dec;
};

// A group of fields sharing one origin for their offsets.
namespace section {
inline constexpr std::string_view pdu = "pdu";    // the PDU (socklnd element, o2iblnd message)
inline constexpr std::string_view ping = "ping";  // a ping-info payload
inline constexpr std::string_view cma = "cma";    // CM private data (rdma_cm header)
}  // namespace section

struct Section {
  std::string_view id;   // one of section::*
  std::string title;     // printed before the fields
  std::size_t base = 0;  // where +0 of this section is in Pdu::bytes
  std::vector<Field> fields;
};

struct Description {
  std::string summary;               // one line, "key=value" tokens for values
  std::vector<std::string> details;  // CM header, o2iblnd message of a CM MAD, ping NIs, payload
  std::vector<Section> sections;
};

Description describe(const Pdu& p);

// Pieces of the summary, shared with other output (e.g. connection lists).
std::string lnet_summary(const LnetHeader& h);  // "LNET PUT a@tcp -> b@tcp plen=48 ptl=0 ..."
std::string o2ib_summary(const o2ib::DecodedMsg& m);
std::string conn_type_name(std::int32_t ctype);  // "CONTROL", "NONE", "7"
std::string ping_features(std::uint32_t features);  // "NI_STATUS|RTE_DISABLED|..."

}  // namespace lnetr::decode
