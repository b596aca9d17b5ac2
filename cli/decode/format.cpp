#include "cli/decode/format.hpp"

#include <algorithm>
#include <cinttypes>

#include "cli/decode/text.hpp"

namespace lnetr::decode {
namespace {

constexpr std::size_t kFieldHexBytes = 16;  // wire bytes shown per field line
constexpr int kHexColumn = 48;
constexpr int kNameColumn = 22;
constexpr const char* kDetailIndent = "      ";

std::string indent_of(std::string_view section_id) {
  return section_id == section::ping ? "        " : kDetailIndent;
}

std::string value_text(const Field& f) {
  std::string out;
  switch (f.radix) {
    case Field::Radix::dec: out = strprintf("%" PRIu64, f.value); break;
    case Field::Radix::sdec: out = strprintf("%" PRId64, static_cast<std::int64_t>(f.value)); break;
    case Field::Radix::hex:  // as wide as the field
      out = strprintf("0x%0*" PRIx64, static_cast<int>(std::min<std::size_t>(f.size, 8) * 2), f.value);
      break;
    case Field::Radix::none: return f.meaning;
  }
  if (!f.meaning.empty()) out += " = " + f.meaning;
  return out;
}

bool is_plain_ack(const Pdu& p) {
  const RoceWhere* r = p.roce();
  return r && !p.error && r->packet && r->packet->aeth && r->packet->bth.operation() == IbOperation::acknowledge &&
         (r->packet->aeth->syndrome >> 5) == 0;
}

bool is_write_middle(const Pdu& p) {
  const RoceWhere* r = p.roce();
  return r && !p.error && r->packet && !r->packet->retransmission && r->packet->is_write() &&
         r->packet->part() == MsgPart::middle;
}

}  // namespace

std::string frames_text(const FrameSpan& f) {
  if (f.count == 0) return "frame ?";
  if (f.first == f.last) return "frame " + std::to_string(f.first);
  return "frames " + std::to_string(f.first) + ".." + std::to_string(f.last) + " (" + std::to_string(f.count) +
         " frames)";
}

std::string pdu_line(const Pdu& p, const Description& d) {
  std::string out = frames_text(p.frames) + strprintf("  t=%.6f  ", p.frames.time);
  if (const SockWhere* w = p.sock()) {
    out += "conn " + std::to_string(w->conn) + "  " + to_string(w->src) + " -> " + to_string(w->dst) +
           "  stream bytes " + std::to_string(w->begin) + ".." +
           (w->end > w->begin ? std::to_string(w->end - 1) : std::to_string(w->begin)) + " (" +
           std::to_string(w->end - w->begin) + " B): ";
  } else if (const RoceWhere* r = p.roce()) {
    out += to_string(r->src.ip) + " -> " + to_string(r->dst.ip) + "  ";
  }
  return out + d.summary;
}

std::string field_line(const Field& f, ByteSpan section_bytes) {
  std::string hex;
  if (f.offset < section_bytes.size()) {
    const std::size_t n = std::min({f.size, kFieldHexBytes, section_bytes.size() - f.offset});
    hex = hex_bytes(section_bytes.subspan(f.offset, n));
    if (n < f.size) hex += "...";
  }
  return strprintf("+%-4zu %-*s %-*s ", f.offset, kHexColumn, hex.c_str(), kNameColumn, f.name.c_str()) +
         value_text(f);
}

std::string connection_line(const SockConnection& c) {
  std::string out = "conn " + std::to_string(c.index) + "  " + to_string(c.connector) + " -> " +
                    to_string(c.acceptor);
  if (c.connector_ctype) out += "  " + conn_type_name(*c.connector_ctype) + " (connector's view)";
  if (!c.saw_start) out += "  [opened before the capture started]";
  if (c.unprivileged_port()) out += "  [unprivileged source port: a Linux acceptor refuses it]";
  for (const TcpEvent& e : c.events) {
    std::string what;
    if (e.flags & tcp_flag::syn) what = e.flags & tcp_flag::ack ? "SYN+ACK" : "SYN";
    else if (e.flags & tcp_flag::rst) what = "RST";
    else if (e.flags & tcp_flag::fin) what = "FIN";
    out += "\n" + std::string(kDetailIndent) + "frame " + std::to_string(e.frame.number) + " " +
           (e.from_client ? "connector" : "acceptor") + " " + what;
  }
  return out;
}

std::string stats_text(const CaptureStats& s) {
  std::string out = "frames: " + std::to_string(s.frames) + " (socklnd " + std::to_string(s.socklnd_frames) +
                    ", RoCEv2 " + std::to_string(s.roce_frames) + ", other IP " + std::to_string(s.other_ip_frames);
  for (std::size_t i = 0; i < s.skipped.size(); ++i) {
    if (s.skipped[i] == 0) continue;
    out += ", " + std::string(name(static_cast<FrameSkip>(i))) + " " + std::to_string(s.skipped[i]);
  }
  out += "); PDUs: " + std::to_string(s.pdus) + ", undecodable " + std::to_string(s.undecodable_pdus);
  return out;
}

std::string PduPrinter::print(const Pdu& p) {
  if (is_write_middle(p)) {
    const RoceWhere& r = *p.roce();
    const bool extends = run_ && run_->src == r.src && run_->dst == r.dst && run_->qp == r.packet->bth.dest_qp;
    std::string out = extends ? "" : flush();
    if (!extends) run_ = Run{r.src, r.dst, r.packet->bth.dest_qp, p.frames.first, 0, 0, p.frames.time, 0};
    run_->last = p.frames.last;
    ++run_->packets;
    run_->bytes += r.packet->payload_size;
    return out;
  }
  std::string out = flush();
  if (!opts_.transport && is_plain_ack(p)) return out;
  const Description d = describe(p);
  out += pdu_line(p, d) + "\n";
  for (const std::string& line : d.details) out += kDetailIndent + line + "\n";
  if (!opts_.fields) return out;
  for (const Section& s : d.sections) {
    const std::string indent = indent_of(s.id);
    if (!s.title.empty()) out += indent + s.title + ":\n";
    const ByteSpan bytes = s.base <= p.bytes.size() ? ByteSpan(p.bytes).subspan(s.base) : ByteSpan();
    for (const Field& f : s.fields) out += indent + field_line(f, bytes) + "\n";
  }
  return out;
}

std::string PduPrinter::flush() {
  if (!run_) return "";
  const FrameSpan span{run_->first, run_->last, run_->packets, run_->time};
  const std::string text =
      frames_text(span) + strprintf("  t=%.6f  %s -> %s  %u x RC RDMA WRITE Middle dstQP=0x%x (%zu data bytes)\n",
                                    run_->time, to_string(run_->src.ip).c_str(), to_string(run_->dst.ip).c_str(),
                                    run_->packets, run_->qp, run_->bytes);
  run_.reset();
  return text;
}

}  // namespace lnetr::decode
