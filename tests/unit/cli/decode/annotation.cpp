#include "annotation.hpp"

#include <cctype>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace lnetr::test {
namespace {

const std::regex kNamesRe(R"(--names (\S+))");
const std::regex kConnRe(R"(^  conn (\d+) \[(\S+)->([^\] ]+)(?: (.*) \(connector's view\))?\]$)");
const std::regex kEventRe(R"(^      frame (\d+) t=\S+ (\S+) -> (\S+) (\S+)$)");
const std::regex kSockPduRe(
    R"(^- conn (\d+) \[[^\]]*\] frame (\d+)(?:\.\.(\d+) \((\d+) frames\))?\s+t=\S+\s+(\S+) -> (\S+)\s+stream bytes (\d+)\.\.(\d+) \((\d+) B\): (.*)$)");
const std::regex kRocePduRe(R"(^- frame (\d+) t=\S+ (\S+) -> (\S+) (.*)$)");
const std::regex kMiddleRunRe(
    R"(^- frames (\d+)\.\.(\d+) (\S+) -> (\S+) (\d+) x RC RDMA WRITE Middle \((\d+) data bytes, not shown\)$)");
const std::regex kFieldRe(R"(^( +)\+(\d+) +(.*)$)");
const std::regex kRawInlineRe(R"(^ +raw: (.+)$)");
const std::regex kDumpLabelRe(R"(^ +((?:raw|\S+ private data).*):$)");
const std::regex kDumpRowRe(R"(^ +[0-9a-f]{4}: (.*)$)");
const std::regex kDumpMoreRe(R"(^ +\.\.\. \((\d+) more bytes\)$)");
const std::regex kPayloadRe(R"(^ +payload (\d+) bytes.*first \d+: (.*)$)");
const std::regex kUlpAtRe(R"(^ +o2iblnd message at private-data \+\d+ \(offsets below relative to it\): (.*)$)");
const std::regex kDetailRe(R"(^ +((?:CM \S+: |local_comm_id=|o2iblnd ).*)$)");
const std::regex kHexTokenRe(R"(^[0-9a-f]{2}(\.\.\.)?$)");

constexpr std::size_t kPingIndent = 8;

std::string strip_parens(const std::string& s) {
  std::string out;
  int depth = 0;
  for (char c : s) {
    if (c == '(') ++depth;
    else if (c == ')' && depth > 0) --depth;
    else if (depth == 0) out += c;
  }
  return out;
}

// State while reading one PDU's sub-lines.
struct PduContext {
  AnnotDump* dump = nullptr;
  bool in_cma = false;  // CM REQ: rdma_cm header fields come first
};

void parse_field(const std::smatch& m, std::size_t line_no, const PduContext& ctx, AnnotPdu& pdu) {
  AnnotField f;
  f.line_no = line_no;
  const std::size_t indent = m[1].length();
  f.section = indent >= kPingIndent && pdu.ping_block ? "ping" : ctx.in_cma ? "cma" : "pdu";
  f.offset = std::stoul(m[2]);
  const std::string rest = m[3];
  std::size_t pos = 0;
  // Hex byte tokens, then the field name, then the value (rest of the line).
  for (;;) {
    while (pos < rest.size() && rest[pos] == ' ') ++pos;
    const std::size_t end = rest.find(' ', pos);
    const std::string tok = rest.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (!std::regex_match(tok, kHexTokenRe)) break;
    bool cut = false;
    for (std::uint8_t b : parse_hex_tokens(tok, &cut)) f.bytes.push_back(b);
    f.bytes_cut = f.bytes_cut || cut;
    pos = end == std::string::npos ? rest.size() : end;
  }
  const std::size_t name_end = rest.find(' ', pos);
  f.name = rest.substr(pos, name_end == std::string::npos ? std::string::npos : name_end - pos);
  if (name_end != std::string::npos) {
    const std::size_t v = rest.find_first_not_of(' ', name_end);
    if (v != std::string::npos) f.value = rest.substr(v);
  }
  while (!f.value.empty() && f.value.back() == ' ') f.value.pop_back();
  pdu.fields.push_back(std::move(f));
}

void parse_sub_line(const std::string& line, std::size_t line_no, PduContext& ctx, AnnotPdu& pdu) {
  std::smatch m;
  if (std::regex_match(line, m, kDumpRowRe) && ctx.dump) {
    for (std::uint8_t b : parse_hex_tokens(m[1])) ctx.dump->bytes.push_back(b);
    return;
  }
  if (std::regex_match(line, m, kDumpMoreRe) && ctx.dump) {
    ctx.dump->more = std::stoul(m[1]);
    return;
  }
  ctx.dump = nullptr;
  if (std::regex_match(line, m, kFieldRe)) return parse_field(m, line_no, ctx, pdu);
  if (std::regex_match(line, m, kRawInlineRe)) {
    pdu.dumps.push_back({"raw", parse_hex_tokens(m[1]), 0});
  } else if (std::regex_match(line, m, kDumpLabelRe)) {
    pdu.dumps.push_back({m[1], {}, 0});
    ctx.dump = &pdu.dumps.back();
  } else if (std::regex_match(line, m, kPayloadRe)) {
    pdu.payload = AnnotPayload{std::stoul(m[1]), parse_hex_tokens(m[2])};
  } else if (line.find("ping info buffer") != std::string::npos) {
    pdu.ping_block = true;
  } else if (std::regex_match(line, m, kUlpAtRe)) {
    pdu.details.push_back(m[1]);
    ctx.in_cma = false;
  } else if (std::regex_match(line, m, kDetailRe)) {
    pdu.details.push_back(m[1]);
  }
}

std::uint32_t to_u32(const std::ssub_match& s) { return static_cast<std::uint32_t>(std::stoul(s.str())); }

}  // namespace

bool KvLine::has_word(const std::string& w) const {
  for (const std::string& x : words)
    if (x == w) return true;
  return false;
}

KvLine parse_kv(const std::string& line) {
  KvLine out;
  std::istringstream in(strip_parens(line));
  std::string tok;
  while (in >> tok) {
    const std::size_t eq = tok.find('=');
    if (eq != std::string::npos && eq > 0 && eq + 1 < tok.size()) out.kv[tok.substr(0, eq)] = tok.substr(eq + 1);
    else out.words.push_back(tok);
  }
  return out;
}

std::optional<std::uint64_t> parse_number(const std::string& s) {
  if (s.empty()) return std::nullopt;
  std::size_t used = 0;
  try {
    if (s.rfind("0x", 0) == 0) {
      const std::uint64_t v = std::stoull(s.substr(2), &used, 16);
      if (used + 2 == s.size()) return v;
    } else if (s[0] == '-') {
      const long long v = std::stoll(s, &used, 10);
      if (used == s.size()) return static_cast<std::uint64_t>(v);
    } else if (s[0] >= '0' && s[0] <= '9') {
      const std::uint64_t v = std::stoull(s, &used, 10);
      if (used == s.size()) return v;
    }
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

bool same_value(const std::string& a, const std::string& b) {
  const auto na = parse_number(a);
  const auto nb = parse_number(b);
  if (na && nb) return *na == *nb;
  return a == b;
}

std::vector<std::uint8_t> parse_hex_tokens(const std::string& s, bool* cut) {
  std::vector<std::uint8_t> out;
  std::istringstream in(s);
  std::string tok;
  while (in >> tok) {
    if (tok.size() >= 2 && std::isxdigit(static_cast<unsigned char>(tok[0])) &&
        std::isxdigit(static_cast<unsigned char>(tok[1]))) {
      out.push_back(static_cast<std::uint8_t>(std::stoul(tok.substr(0, 2), nullptr, 16)));
      if (tok.size() > 2 && cut) *cut = true;
    }
  }
  return out;
}

std::string Annotation::named(const std::string& ip, std::uint16_t port) const {
  auto it = name_of.find(ip);
  const std::string name = it == name_of.end() ? ip : it->second;
  return port == 0 ? name : name + ":" + std::to_string(port);
}

Annotation parse_annotation(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  Annotation a;
  enum class Part { before, walk, after } part = Part::before;
  PduContext ctx;
  std::string line;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.rfind("## Part 2.", 0) == 0) {
      part = Part::walk;
      std::smatch m;
      if (std::regex_search(line, m, kNamesRe)) {
        std::istringstream names(m[1].str());
        std::string pair;
        while (std::getline(names, pair, ',')) {
          const std::size_t eq = pair.find('=');
          if (eq != std::string::npos) a.name_of[pair.substr(0, eq)] = pair.substr(eq + 1);
        }
      }
      continue;
    }
    if (line.rfind("## Part 3.", 0) == 0) part = Part::after;
    if (part != Part::walk) continue;

    std::smatch m;
    if (std::regex_match(line, m, kConnRe)) {
      a.conns.push_back({std::stoul(m[1]), m[2], m[3], m[4].matched ? m[4].str() : "", {}});
    } else if (!a.conns.empty() && a.pdus.empty() && std::regex_match(line, m, kEventRe)) {
      a.conns.back().events.push_back({to_u32(m[1]), m[2], m[3], m[4]});
    } else if (std::regex_match(line, m, kSockPduRe)) {
      AnnotPdu p;
      p.line_no = line_no;
      p.line = line;
      p.conn = std::stoul(m[1]);
      p.first_frame = to_u32(m[2]);
      p.last_frame = m[3].matched ? to_u32(m[3]) : p.first_frame;
      p.frame_count = m[4].matched ? to_u32(m[4]) : 1;
      p.src = m[5];
      p.dst = m[6];
      p.begin = std::stoull(m[7]);
      p.end = std::stoull(m[8]) + 1;
      p.head = m[10];
      a.pdus.push_back(std::move(p));
      ctx = {};
    } else if (std::regex_match(line, m, kMiddleRunRe)) {
      AnnotPdu p;
      p.line_no = line_no;
      p.line = line;
      p.middle_run = true;
      p.first_frame = to_u32(m[1]);
      p.last_frame = to_u32(m[2]);
      p.src = m[3];
      p.dst = m[4];
      p.run_packets = to_u32(m[5]);
      p.run_bytes = std::stoul(m[6]);
      p.frame_count = p.run_packets;
      a.pdus.push_back(std::move(p));
      ctx = {};
    } else if (std::regex_match(line, m, kRocePduRe)) {
      AnnotPdu p;
      p.line_no = line_no;
      p.line = line;
      p.first_frame = p.last_frame = to_u32(m[1]);
      p.frame_count = 1;
      p.src = m[2];
      p.dst = m[3];
      p.head = m[4];
      a.pdus.push_back(std::move(p));
      ctx = {};
      ctx.in_cma = a.pdus.back().head.find("ConnectRequest") != std::string::npos;
    } else if (!a.pdus.empty() && line.rfind("  ", 0) == 0) {
      parse_sub_line(line, line_no, ctx, a.pdus.back());
    }
  }
  if (part == Part::before) throw std::runtime_error(path + ": no '## Part 2.' annotated walk");
  return a;
}

}  // namespace lnetr::test
