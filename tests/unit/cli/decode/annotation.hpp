// Parser of the annotated walk (Part 2) of the capture descriptions in the
// vectors directory: the reference the vector test compares lnetr's decode
// with.  It only splits the text into its parts (PDU lines, key=value pairs,
// field lines, hex dumps); it decodes nothing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lnetr::test {

// "key=value" tokens of a line and the words around them, with parenthesised
// remarks removed.
struct KvLine {
  std::map<std::string, std::string> kv;
  std::vector<std::string> words;  // non key=value tokens, in order
  bool has_word(const std::string& w) const;
};
KvLine parse_kv(const std::string& line);

// One "+N  hex  name  value" line.
struct AnnotField {
  std::string section;  // "pdu", "ping" or "cma" (as lnetr's describe.hpp names them)
  std::size_t offset = 0;
  std::vector<std::uint8_t> bytes;
  bool bytes_cut = false;  // the hex ended in "...": only a prefix is shown
  std::string name;
  std::string value;
  std::size_t line_no = 0;
};

// A hex dump ("raw: ..." or "0000: ..." lines) and how many bytes it stands for.
struct AnnotDump {
  std::string label;
  std::vector<std::uint8_t> bytes;
  std::size_t more = 0;  // "... (N more bytes)"
};

struct AnnotPayload {
  std::size_t size = 0;
  std::vector<std::uint8_t> first;
};

struct AnnotPdu {
  std::size_t line_no = 0;
  std::string line;
  // Frames: "frame F" or "frame F..L (N frames)" / "frames F..L".
  std::uint32_t first_frame = 0, last_frame = 0, frame_count = 0;
  std::string src, dst;  // "P:1023" (socklnd) or "P" (RoCE)
  // socklnd
  std::optional<std::size_t> conn;
  std::uint64_t begin = 0, end = 0;  // stream bytes [begin, end)
  // RoCE: a folded run of RDMA WRITE Middle packets
  bool middle_run = false;
  std::uint32_t run_packets = 0;
  std::size_t run_bytes = 0;
  std::string head;  // what follows the location
  std::vector<AnnotField> fields;
  std::vector<AnnotDump> dumps;
  std::optional<AnnotPayload> payload;
  std::vector<std::string> details;  // CM header lines, o2iblnd message of a CM MAD
  bool ping_block = false;           // has a "ping info buffer" breakdown
};

struct AnnotEvent {
  std::uint32_t frame = 0;
  std::string src, dst;  // "HOST:1023"
  std::string what;      // SYN, SYN+ACK, FIN, RST
};

struct AnnotConn {
  std::size_t index = 0;
  std::string connector, acceptor;  // "P:1023", "Q:988"
  std::string label;                // "CONTROL", "NONE (-1)", "" (no HELLO)
  std::vector<AnnotEvent> events;
};

struct Annotation {
  // The walk names hosts ("--names 10.201.1.2=P,..."); several addresses may
  // share a name (a router's NIs), so lnetr's addresses are mapped to names.
  std::map<std::string, std::string> name_of;  // "10.201.1.2" -> "P"
  std::vector<AnnotConn> conns;
  std::vector<AnnotPdu> pdus;
  // "P:1023" for ip "10.201.1.2" and port 1023 (port 0: just "P").
  std::string named(const std::string& ip, std::uint16_t port = 0) const;
};

// Throws std::runtime_error if the file cannot be read or has no Part 2.
Annotation parse_annotation(const std::string& path);

// Integer in decimal, "0x" hex, or negative decimal; nothing otherwise.
std::optional<std::uint64_t> parse_number(const std::string& s);
// Whether two values are the same: as numbers when both are numbers (any
// radix), else as text.
bool same_value(const std::string& a, const std::string& b);
std::vector<std::uint8_t> parse_hex_tokens(const std::string& s, bool* cut = nullptr);

}  // namespace lnetr::test
