// lnetr's decode of every capture in the vectors directory, compared with the
// annotated walk (Part 2) of its description: the same PDUs at the same
// place, the same kind, every key=value of the summary line, every
// field-by-field line (wire bytes at that offset and decoded value), every
// hex dump and payload excerpt; every PDU re-encoded by lnetr's encoders to
// the captured bytes; and the v2 router's forwarded messages unchanged
// between its two hops.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <ostream>
#include <regex>
#include <string>

#include "annotation.hpp"
#include "capture_support.hpp"
#include "cli/decode/describe.hpp"
#include "cli/decode/format.hpp"

namespace lnetr::test {
namespace {

using namespace lnetr::decode;

// What a comparison covered.  Each capture's expected counts are what its
// description contains, so a parser or matcher that silently compares
// nothing fails.
struct Counts {
  std::size_t pdus = 0;         // annotated PDUs matched with lnetr's
  std::size_t kvs = 0;          // key=value pairs (summary and detail lines)
  std::size_t fields = 0;       // field-by-field lines (bytes, value, meaning)
  std::size_t ping_blocks = 0;  // ping-info payload breakdowns
  std::size_t dumps = 0;        // hex dumps
  std::size_t payloads = 0;     // payload excerpts
  std::size_t undecodable = 0;  // broken PDUs reported with the expected WireError
  std::size_t reencoded = 0;    // lnetr PDUs re-encoded to exactly their bytes
  std::size_t conns = 0;        // socklnd connections
  std::size_t events = 0;       // their SYN / SYN+ACK / FIN / RST frames
  friend bool operator==(const Counts&, const Counts&) = default;
};

void PrintTo(const Counts& c, std::ostream* os) {
  *os << "{pdus " << c.pdus << ", kvs " << c.kvs << ", fields " << c.fields << ", ping_blocks " << c.ping_blocks
      << ", dumps " << c.dumps << ", payloads " << c.payloads << ", undecodable " << c.undecodable << ", reencoded "
      << c.reencoded << ", conns " << c.conns << ", events " << c.events << "}";
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The annotation's symbolic value ("0x15aac0de = UP"), when it is a name
// lnetr must print the same way: a NID or an UPPER_CASE identifier.
std::optional<std::string> symbol_of(const std::string& value) {
  static const std::regex kSymbolRe(R"(= ([^ ,(]+))");
  static const std::regex kNameRe(R"(^(?:[A-Z][A-Z0-9_|]*|\S+@\S+)$)");
  std::smatch m;
  if (!std::regex_search(value, m, kSymbolRe)) return std::nullopt;
  const std::string sym = m[1];
  if (!std::regex_match(sym, kNameRe)) return std::nullopt;
  return sym;
}

// ---- comparison of one capture ----------------------------------------------------

class Comparer {
 public:
  Comparer(const Annotation& a, const DecodedCapture& d) : a_(a), d_(d) {
    for (const Pdu& p : d_.pdus) {
      if (const SockWhere* w = p.sock()) sock_[{w->conn, w->begin, ep(w->src)}] = &p;
      else if (p.roce()) roce_[p.frames.last] = &p;
    }
  }

  Counts run() {
    compare_connections();
    for (const AnnotPdu& ap : a_.pdus) compare(ap);
    check_coverage();
    check_reencoding();
    return c_;
  }

 private:
  using SockKey = std::tuple<std::size_t, std::uint64_t, std::string>;

  std::string ep(const Endpoint& e) const { return a_.named(to_string(e.ip), e.port); }
  std::string host(const Endpoint& e) const { return a_.named(to_string(e.ip)); }

  void compare_connections() {
    if (a_.conns.empty()) return;
    ASSERT_EQ(d_.conns.size(), a_.conns.size()) << "socklnd connections";
    for (const AnnotConn& ac : a_.conns) {
      SCOPED_TRACE("conn " + std::to_string(ac.index));
      const SockConnection& c = d_.conns.at(ac.index);
      EXPECT_EQ(ep(c.connector), ac.connector);
      EXPECT_EQ(ep(c.acceptor), ac.acceptor);
      // The walk labels NONE as "NONE (-1)"; compare the name.
      const auto label = parse_kv(ac.label).words;
      EXPECT_EQ(c.connector_ctype ? conn_type_name(*c.connector_ctype) : "", label.empty() ? "" : label.front());
      ASSERT_EQ(c.events.size(), ac.events.size());
      for (std::size_t i = 0; i < ac.events.size(); ++i) {
        const TcpEvent& e = c.events[i];
        const AnnotEvent& ae = ac.events[i];
        EXPECT_EQ(e.frame.number, ae.frame);
        EXPECT_EQ(e.from_client ? ep(c.connector) : ep(c.acceptor), ae.src);
        std::string what = e.flags & tcp_flag::syn   ? (e.flags & tcp_flag::ack ? "SYN+ACK" : "SYN")
                           : e.flags & tcp_flag::rst ? "RST"
                                                     : "FIN";
        EXPECT_EQ(what, ae.what) << "frame " << ae.frame;
        ++c_.events;
      }
      ++c_.conns;
    }
  }

  void compare(const AnnotPdu& ap) {
    SCOPED_TRACE("annotation line " + std::to_string(ap.line_no) + ": " + ap.line);
    if (ap.middle_run) return compare_middle_run(ap);
    const Pdu* p = find(ap);
    ASSERT_NE(p, nullptr) << "lnetr has no PDU there";
    ++c_.pdus;
    EXPECT_EQ(p->frames.first, ap.first_frame);
    EXPECT_EQ(p->frames.last, ap.last_frame);
    EXPECT_EQ(p->frames.count, ap.frame_count);
    const Description d = describe(*p);
    SCOPED_TRACE("lnetr: " + d.summary);
    if (p->sock()) check_sock_kind(ap, *p);
    else check_roce_kind(ap, *p);
    expect_kv_subset(parse_kv(ap.head), parse_kv(d.summary), "summary");
    compare_details(ap, d);
    compare_fields(ap, *p, d);
    compare_dumps(ap, *p);
    compare_payload(ap, *p);
  }

  const Pdu* find(const AnnotPdu& ap) const {
    if (ap.conn) {
      auto it = sock_.find({*ap.conn, ap.begin, ap.src});
      if (it == sock_.end()) return nullptr;
      const SockWhere* w = it->second->sock();
      EXPECT_EQ(w->end, ap.end) << "stream range";
      EXPECT_EQ(ep(w->dst), ap.dst);
      return it->second;
    }
    auto it = roce_.find(ap.last_frame);
    if (it == roce_.end()) return nullptr;
    EXPECT_EQ(host(it->second->roce()->src), ap.src);
    EXPECT_EQ(host(it->second->roce()->dst), ap.dst);
    return it->second;
  }

  // The WireError lnetr must report for a PDU the annotation shows broken.
  void expect_error(const Pdu& p, std::optional<WireError> want) {
    if (want) {
      ASSERT_TRUE(p.error.has_value()) << "lnetr decoded a PDU the annotation shows broken";
      EXPECT_EQ(lnetr::name(*p.error), lnetr::name(*want));
      ++c_.undecodable;
    } else {
      EXPECT_FALSE(p.error.has_value()) << "unexpected " << lnetr::name(*p.error);
    }
  }

  std::optional<std::uint64_t> annotated_value(const AnnotPdu& ap, const std::string& field) const {
    for (const AnnotField& f : ap.fields) {
      if (f.name == field) return parse_number(f.value.substr(0, f.value.find(' ')));
    }
    return std::nullopt;
  }

  void check_sock_kind(const AnnotPdu& ap, const Pdu& p) {
    static const std::regex kHelloRe(R"(^socklnd HELLO V(\d+) \((connecting|accepting) side\) ctype=(\S+))");
    static const std::regex kBadHelloRe(
        R"(^HELLO-shaped bytes with WRONG magic (0x[0-9a-f]+), V(\d+) \((connecting|accepting) side\) ctype=(\S+))");
    static const std::regex kZcAckRe(R"(^KSOCK_MSG_NOOP = zero-copy ACK for cookie (\d+))");
    static const std::regex kLnetRe(R"(^KSOCK_MSG_LNET LNET (\w+) (\S+) -> (\S+))");
    static const std::regex kZcReqRe(R"(ZC-request cookie (\d+))");
    const std::string& h = ap.head;
    std::smatch m;
    if (starts_with(h, "ACCEPTOR REQUEST") || starts_with(h, "ACCEPTOR-FORMAT ANSWER")) {
      const auto* acc = p.as<AcceptorPdu>();
      ASSERT_NE(acc, nullptr);
      EXPECT_EQ(acc->answer, starts_with(h, "ACCEPTOR-FORMAT ANSWER"));
      const auto magic = annotated_value(ap, "acr_magic");
      const auto version = annotated_value(ap, "acr_version");
      ASSERT_TRUE(magic && version) << "annotation lacks acr_magic / acr_version";
      expect_error(p, *magic != kAcceptorMagic             ? std::optional(WireError::bad_magic)
                      : (*version != 1 && *version != 2)         ? std::optional(WireError::bad_version)
                                                                 : std::nullopt);
    } else if (std::regex_search(h, m, kHelloRe) || std::regex_search(h, m, kBadHelloRe)) {
      const bool bad_magic = m.size() == 5;
      const auto* hello = p.as<HelloPdu>();
      ASSERT_NE(hello, nullptr);
      const std::size_t g = bad_magic ? 2 : 1;  // regex group of the version
      if (bad_magic) {
        EXPECT_EQ(hello->magic, *parse_number(m[1]));
      }
      EXPECT_EQ(hello->version, std::stoul(m[g]));
      EXPECT_EQ(hello->from == Side::connector, m[g + 1] == "connecting");
      ASSERT_TRUE(hello->view.has_value());
      EXPECT_EQ(conn_type_name(hello->view->ctype), m[g + 2].str());
      const std::uint32_t v = hello->version;
      expect_error(p, bad_magic ? std::optional(WireError::bad_magic)
                      : (v < 1 || v > 4) ? std::optional(WireError::bad_version)
                                         : std::nullopt);
    } else if (starts_with(h, "KSOCK_MSG_NOOP")) {
      const auto* s = p.as<SockMsgPdu>();
      ASSERT_TRUE(s && s->msg.sock && s->msg.sock->type == sock::kMsgNoop);
      const sock::ZcAck z = sock::zc_ack_of(*s->msg.sock, s->version);
      if (std::regex_search(h, m, kZcAckRe)) {
        EXPECT_EQ(z, (sock::ZcAck{sock::ZcAck::Kind::single, std::stoull(m[1]), std::stoull(m[1])}));
      } else {
        ASSERT_TRUE(starts_with(h, "KSOCK_MSG_NOOP = keepalive ping")) << "unknown NOOP kind";
        EXPECT_EQ(z.kind, sock::ZcAck::Kind::keepalive);
      }
      expect_error(p, std::nullopt);
    } else if (std::regex_search(h, m, kLnetRe)) {
      const auto* s = p.as<SockMsgPdu>();
      ASSERT_TRUE(s && s->msg.sock && s->msg.lnet);
      expect_lnet(*s->msg.lnet, m[1], m[2], m[3]);
      std::smatch z;
      const std::uint64_t zc = std::regex_search(h, z, kZcReqRe) ? std::stoull(z[1]) : 0;
      EXPECT_EQ(s->msg.sock->zc_req_cookie, zc);
      expect_error(p, std::nullopt);
    } else {
      ADD_FAILURE() << "annotation kind not recognised by the test";
    }
  }

  void expect_lnet(const LnetHeader& h, const std::string& type, const std::string& src, const std::string& dst) {
    EXPECT_EQ(to_string(h.type), type);
    EXPECT_EQ(to_string(h.src_nid), src);
    EXPECT_EQ(to_string(h.dest_nid), dst);
  }

  void check_roce_kind(const AnnotPdu& ap, const Pdu& p) {
    static const std::regex kOpRe(R"(^((?:RC|UC|UD) .+?) dstQP=)");
    static const std::regex kO2ibRe(R"( o2iblnd (\w+))");
    static const std::regex kLnetRe(R"(\| LNET (\w+) (\S+) -> (\S+))");
    static const std::regex kCmRe(R"(IB CM (\w+))");
    static const std::regex kDataRe(R"(\((?:data in this packet (\d+) B|(\d+) data bytes))");
    ASSERT_TRUE(p.roce()->packet.has_value());
    const RocePacket& pkt = *p.roce()->packet;
    const std::string& h = ap.head;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(h, m, kOpRe)) << "no opcode in the annotation";
    EXPECT_EQ(name_of(pkt.bth), m[1].str());
    EXPECT_EQ(pkt.bth.ack_req, parse_kv(h).has_word("AckReq"));
    if (std::regex_search(h, m, kO2ibRe)) {
      const auto* o = p.as<O2ibPdu>();
      ASSERT_NE(o, nullptr) << "lnetr has no o2iblnd message here";
      EXPECT_EQ(o2ib::to_string(o->msg.msg.hdr.type), m[1].str());
    }
    if (std::regex_search(h, m, kLnetRe)) {
      const LnetHeader* lh = lnet_header_of(p);
      ASSERT_NE(lh, nullptr);
      expect_lnet(*lh, m[1], m[2], m[3]);
    }
    if (std::regex_search(h, m, kCmRe)) {
      const auto* c = p.as<CmPdu>();
      ASSERT_NE(c, nullptr);
      EXPECT_TRUE(starts_with(std::string(to_string(c->cm.attr)), m[1].str()));
    }
    if (std::regex_search(h, m, kDataRe)) {
      EXPECT_EQ(pkt.payload_size, std::stoul(m[1].matched ? m[1] : m[2]));
    }
    expect_error(p, std::nullopt);
  }

  void compare_middle_run(const AnnotPdu& ap) {
    std::uint32_t packets = 0;
    std::size_t bytes = 0;
    for (std::uint32_t f = ap.first_frame; f <= ap.last_frame; ++f) {
      auto it = roce_.find(f);
      ASSERT_NE(it, roce_.end()) << "frame " << f;
      const RoceWhere& r = *it->second->roce();
      if (host(r.src) != ap.src || !r.packet || !r.packet->is_write() || r.packet->part() != MsgPart::middle) continue;
      ++packets;
      bytes += r.packet->payload_size;
    }
    EXPECT_EQ(packets, ap.run_packets);
    EXPECT_EQ(bytes, ap.run_bytes);
    c_.pdus += packets;
  }

  void expect_kv_subset(const KvLine& want, const KvLine& got, const char* what) {
    for (const auto& [k, v] : want.kv) {
      auto it = got.kv.find(k);
      if (it == got.kv.end()) {
        ADD_FAILURE() << what << ": lnetr has no " << k << "= (annotation: " << k << "=" << v << ")";
        continue;
      }
      EXPECT_TRUE(same_value(v, it->second)) << what << ": " << k << "=" << v << " vs lnetr " << it->second;
      ++c_.kvs;
    }
  }

  // CM header lines and the o2iblnd message carried in CM private data.
  void compare_details(const AnnotPdu& ap, const Description& d) {
    for (const std::string& line : ap.details) {
      const bool o2ib = starts_with(line, "o2iblnd ");
      const std::string* got = nullptr;
      for (const std::string& l : d.details) {
        if (starts_with(l, "o2iblnd ") == o2ib) {
          got = &l;
          break;
        }
      }
      ASSERT_NE(got, nullptr) << "lnetr has no detail line for: " << line;
      const KvLine want = parse_kv(line);
      const KvLine have = parse_kv(*got);
      if (o2ib) {
        EXPECT_EQ(want.words.at(1), have.words.at(1)) << "o2iblnd message type";
      }
      expect_kv_subset(want, have, "detail");
    }
  }

  void compare_fields(const AnnotPdu& ap, const Pdu& p, const Description& d) {
    std::map<std::pair<std::string, std::string>, std::pair<const Field*, std::size_t>> by_name;
    for (const Section& s : d.sections)
      for (const Field& f : s.fields) by_name[{std::string(s.id), f.name}] = {&f, s.base};
    if (ap.ping_block) {
      const auto* s = p.as<SockMsgPdu>();
      const auto* o = p.as<O2ibPdu>();
      EXPECT_TRUE((s && s->ping) || (o && o->ping)) << "lnetr did not decode the ping info";
      ++c_.ping_blocks;
    }
    for (const AnnotField& af : ap.fields) {
      if (starts_with(af.name, "(")) continue;  // "(unused)" padding
      SCOPED_TRACE("annotation line " + std::to_string(af.line_no) + " " + af.section + " +" +
                   std::to_string(af.offset) + " " + af.name);
      auto it = by_name.find({af.section, af.name});
      if (it == by_name.end()) {
        ADD_FAILURE() << "lnetr has no such field";
        continue;
      }
      const Field& f = *it->second.first;
      const std::size_t at = it->second.second + f.offset;
      EXPECT_EQ(f.offset, af.offset);
      if (!af.bytes_cut) {
        EXPECT_EQ(f.size, af.bytes.size());
      }
      ASSERT_LE(at + af.bytes.size(), p.bytes.size());
      EXPECT_EQ(std::vector<std::uint8_t>(p.bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                          p.bytes.begin() + static_cast<std::ptrdiff_t>(at + af.bytes.size())),
                af.bytes)
          << "wire bytes";
      const std::string first = af.value.substr(0, af.value.find(' '));
      if (const auto n = parse_number(first); n && f.radix != Field::Radix::none) {
        EXPECT_EQ(f.value, *n) << "value";
      } else {
        EXPECT_EQ(f.meaning, first) << "value";
      }
      if (const auto sym = symbol_of(af.value)) {
        EXPECT_EQ(f.meaning, *sym) << "meaning";
      }
      ++c_.fields;
    }
  }

  void compare_dumps(const AnnotPdu& ap, const Pdu& p) {
    static const std::regex kSizeRe(R"(\((\d+) B)");
    for (const AnnotDump& dump : ap.dumps) {
      SCOPED_TRACE("dump " + dump.label);
      ASSERT_LE(dump.bytes.size(), p.bytes.size());
      EXPECT_EQ(std::vector<std::uint8_t>(p.bytes.begin(), p.bytes.begin() + static_cast<std::ptrdiff_t>(dump.bytes.size())),
                dump.bytes);
      std::smatch m;
      // "raw socklnd+LNet header (96 B)" shows a prefix; other sizes are the whole PDU's.
      if (dump.label.find("header") == std::string::npos) {
        const std::size_t total = std::regex_search(dump.label, m, kSizeRe) ? std::stoul(m[1])
                                                                            : dump.bytes.size() + dump.more;
        EXPECT_EQ(p.bytes.size(), total);
        if (dump.more != 0) {
          EXPECT_EQ(dump.bytes.size() + dump.more, total);
        }
      }
      ++c_.dumps;
    }
  }

  void compare_payload(const AnnotPdu& ap, const Pdu& p) {
    if (!ap.payload) return;
    ByteSpan payload;
    if (const auto* s = p.as<SockMsgPdu>()) payload = s->msg.payload;
    else if (const auto* o = p.as<O2ibPdu>(); o && o->msg.msg.immediate()) payload = o->msg.msg.immediate()->payload;
    ASSERT_EQ(payload.size(), ap.payload->size);
    ASSERT_LE(ap.payload->first.size(), payload.size());
    EXPECT_EQ(std::vector<std::uint8_t>(payload.begin(), payload.begin() + static_cast<std::ptrdiff_t>(ap.payload->first.size())),
              ap.payload->first);
    ++c_.payloads;
  }

  // Every PDU lnetr found is in the walk (no extra and no missing ones),
  // and every PDU it reports broken is one the walk shows broken.
  void check_coverage() {
    std::size_t annotated = 0;
    for (const AnnotPdu& ap : a_.pdus) annotated += ap.middle_run ? ap.run_packets : 1;
    EXPECT_EQ(d_.pdus.size(), annotated) << "lnetr PDUs vs annotated PDUs";
    std::size_t errors = 0;
    for (const Pdu& p : d_.pdus) errors += p.error.has_value();
    EXPECT_EQ(errors, c_.undecodable) << "PDUs lnetr reports undecodable";
  }

  void check_reencoding() {
    for (const Pdu& p : d_.pdus) {
      if (p.error) continue;
      const bool codec_pdu = p.as<AcceptorPdu>() || p.as<HelloPdu>() || p.as<SockMsgPdu>() || p.as<O2ibPdu>() ||
                             (p.as<CmPdu>() && (p.as<CmPdu>()->msg || p.as<CmPdu>()->rej));
      const auto bytes = reencode(p);
      if (!bytes) {
        EXPECT_FALSE(codec_pdu) << frames_text(p.frames) << ": lnetr could not re-encode " << describe(p).summary;
        continue;
      }
      EXPECT_EQ(*bytes, p.bytes) << frames_text(p.frames) << ": re-encoding differs: " << describe(p).summary;
      ++c_.reencoded;
    }
  }

  const Annotation& a_;
  const DecodedCapture& d_;
  std::map<SockKey, const Pdu*> sock_;
  std::map<std::uint32_t, const Pdu*> roce_;
  Counts c_;
};

struct VectorCase {
  const char* stem;
  Counts expected;
};

void PrintTo(const VectorCase& v, std::ostream* os) { *os << v.stem; }

class VectorTest : public testing::TestWithParam<VectorCase> {};

TEST_P(VectorTest, DecodeAgreesWithAnnotatedWalk) {
  const VectorCase& vc = GetParam();
  const Annotation a = parse_annotation(vector_path(std::string(vc.stem) + ".txt"));
  const DecodedCapture d = decode_capture(vector_path(std::string(vc.stem) + ".pcap"));
  const Counts c = Comparer(a, d).run();
  EXPECT_EQ(c, vc.expected);
}

// Expected counts: PDU lines (RoCE: packets) of each walk, and its
// key=value pairs, field lines (without "(unused)"), ping-info blocks, hex
// dumps, payload excerpts, broken PDUs, connections and connection events.
INSTANTIATE_TEST_SUITE_P(
    Captures, VectorTest,
    testing::Values(
        //                                     pdus kvs fields ping dumps payl undec reenc conns events
        VectorCase{"v1-socklnd-pair-tcp", /*     */ {62, 178, 319, 4, 27, 36, 0, 62, 3, 6}},
        VectorCase{"v2-kernel-router-A-side-li-br1", {103, 303, 558, 25, 26, 36, 0, 103, 3, 6}},
        VectorCase{"v2-kernel-router-B-side-li-br2", {101, 298, 545, 24, 26, 36, 0, 101, 3, 6}},
        VectorCase{"v3-o2iblnd-pair-rxe", /*     */ {401, 810, 339, 4, 17, 28, 0, 61, 0, 0}},
        VectorCase{"v5-socklnd-bad-peer", /*     */ {40, 26, 286, 0, 40, 0, 6, 34, 16, 57}},
        VectorCase{"v5b-socklnd-userspace-peer-ping", {36, 24, 272, 1, 36, 0, 6, 30, 14, 49}}),
    [](const testing::TestParamInfo<VectorCase>& i) {
      std::string n = i.param.stem;
      for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

// ---- v2: what the kernel router forwarded ---------------------------------------------

// One row of the xref file: a message seen on both hops.
struct XrefRow {
  std::size_t line_no = 0;
  std::uint32_t a_first = 0, a_last = 0, a_count = 0;  // frames in the A-side capture
  std::uint32_t b_first = 0, b_last = 0, b_count = 0;  // frames in the B-side capture
  std::uint64_t zc1[2] = {}, zc2[2] = {};               // socklnd cookies [request, ack] per hop
  std::string hop1_src, hop1_dst, hop2_src, hop2_dst;
  std::string message;
};

std::vector<XrefRow> parse_xref(const std::string& path) {
  static const std::regex kRowRe(
      R"(^(\d+)(?:\.\.(\d+) \((\d+) frames\))?\s+\| (\d+)(?:\.\.(\d+) \((\d+) frames\))?\s+\|\s+[\d.]+ s \| )"
      R"(zc \[(\d+), (\d+)\] / \[(\d+), (\d+)\] \| hop1 (\S+)->(\S+), hop2 (\S+)->(\S+) \| (.*)$)");
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<XrefRow> rows;
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    std::smatch m;
    if (!std::regex_match(line, m, kRowRe)) continue;
    auto u32 = [&](int i, std::uint32_t dflt) { return m[i].matched ? static_cast<std::uint32_t>(std::stoul(m[i])) : dflt; };
    XrefRow r;
    r.line_no = n;
    r.a_first = u32(1, 0);
    r.a_last = u32(2, r.a_first);
    r.a_count = u32(3, 1);
    r.b_first = u32(4, 0);
    r.b_last = u32(5, r.b_first);
    r.b_count = u32(6, 1);
    r.zc1[0] = std::stoull(m[7]);
    r.zc1[1] = std::stoull(m[8]);
    r.zc2[0] = std::stoull(m[9]);
    r.zc2[1] = std::stoull(m[10]);
    r.hop1_src = m[11];
    r.hop1_dst = m[12];
    r.hop2_src = m[13];
    r.hop2_dst = m[14];
    r.message = m[15];
    rows.push_back(std::move(r));
  }
  return rows;
}

// The 72-byte LNet header of a socklnd LNET message.
std::vector<std::uint8_t> lnet_header_bytes(const Pdu& p) {
  const auto at = static_cast<std::ptrdiff_t>(sock::kMsgHeaderSize);
  return {p.bytes.begin() + at, p.bytes.begin() + at + static_cast<std::ptrdiff_t>(kLnetHeaderSize)};
}

// lnetr's LNET message carried by exactly these frames and summarised as `message`.
const Pdu* find_forwarded(const DecodedCapture& d, std::uint32_t first, std::uint32_t last, std::uint32_t count,
                          const std::string& message) {
  const KvLine want = parse_kv(message);
  for (const Pdu& p : d.pdus) {
    const auto* s = p.as<SockMsgPdu>();
    if (!s || !s->msg.lnet || p.frames.first != first || p.frames.last != last || p.frames.count != count) continue;
    const KvLine got = parse_kv(lnet_summary(*s->msg.lnet));
    if (got.words == want.words && got.kv == want.kv) return &p;
  }
  return nullptr;
}

TEST(RouterXref, ForwardedLnetHeadersAreIdenticalOnBothHops) {
  const std::string a_stem = "v2-kernel-router-A-side-li-br1", b_stem = "v2-kernel-router-B-side-li-br2";
  const DecodedCapture a = decode_capture(vector_path(a_stem + ".pcap"));
  const DecodedCapture b = decode_capture(vector_path(b_stem + ".pcap"));
  const Annotation names = parse_annotation(vector_path(a_stem + ".txt"));  // the same --names on both sides
  const std::vector<XrefRow> rows = parse_xref(vector_path("v2-kernel-router-forwarded-messages-xref.txt"));
  ASSERT_EQ(rows.size(), 50u) << "R's route_count: 50 forwarded messages";

  std::uint64_t payload_bytes = 0;
  for (const XrefRow& r : rows) {
    SCOPED_TRACE("xref line " + std::to_string(r.line_no) + ": " + r.message);
    const Pdu* pa = find_forwarded(a, r.a_first, r.a_last, r.a_count, r.message);
    const Pdu* pb = find_forwarded(b, r.b_first, r.b_last, r.b_count, r.message);
    ASSERT_NE(pa, nullptr) << "not in lnetr's decode of the A side";
    ASSERT_NE(pb, nullptr) << "not in lnetr's decode of the B side";
    EXPECT_EQ(lnet_header_bytes(*pa), lnet_header_bytes(*pb)) << "the router changed the LNet header";
    EXPECT_TRUE(std::ranges::equal(pa->as<SockMsgPdu>()->msg.payload, pb->as<SockMsgPdu>()->msg.payload))
        << "the router changed the payload";
    payload_bytes += pa->as<SockMsgPdu>()->msg.lnet->payload_length;
    // Hop 1 is the sender's side: A's messages cross the A side first.
    const bool a_first = r.hop1_src.rfind("A:", 0) == 0;
    const Pdu* hop[2] = {a_first ? pa : pb, a_first ? pb : pa};
    const std::string src[2] = {r.hop1_src, r.hop2_src}, dst[2] = {r.hop1_dst, r.hop2_dst};
    const std::uint64_t* zc[2] = {r.zc1, r.zc2};
    for (int i = 0; i < 2; ++i) {
      const SockWhere& w = *hop[i]->sock();
      EXPECT_EQ(names.named(to_string(w.src.ip), w.src.port), src[i]) << "hop " << i + 1;
      EXPECT_EQ(names.named(to_string(w.dst.ip), w.dst.port), dst[i]) << "hop " << i + 1;
      const sock::MsgHeader& h = *hop[i]->as<SockMsgPdu>()->msg.sock;
      EXPECT_EQ(h.zc_req_cookie, zc[i][0]) << "hop " << i + 1;
      EXPECT_EQ(h.zc_ack_cookie, zc[i][1]) << "hop " << i + 1;
    }
  }
  EXPECT_EQ(payload_bytes, 283248u) << "R's route_length";

  // Conversely: exactly these 50 headers appear on both sides; the other
  // LNET messages (40 on the A side, 38 on the B side) are local to R.
  std::multiset<std::vector<std::uint8_t>> b_headers;
  std::size_t b_lnet = 0, a_lnet = 0, matched = 0;
  auto is_lnet = [](const Pdu& p) { return p.as<SockMsgPdu>() && p.as<SockMsgPdu>()->msg.lnet; };
  for (const Pdu& p : b.pdus) {
    if (!is_lnet(p)) continue;
    b_headers.insert(lnet_header_bytes(p));
    ++b_lnet;
  }
  for (const Pdu& p : a.pdus) {
    if (!is_lnet(p)) continue;
    ++a_lnet;
    auto it = b_headers.find(lnet_header_bytes(p));
    if (it == b_headers.end()) continue;
    b_headers.erase(it);
    ++matched;
  }
  EXPECT_EQ(matched, 50u);
  EXPECT_EQ(a_lnet - matched, 40u);
  EXPECT_EQ(b_lnet - matched, 38u);
}

}  // namespace
}  // namespace lnetr::test
