#include "cli/decode/capture.hpp"

namespace lnetr::decode {

void CaptureDecoder::add_frame(const CapturedFrame& frame, std::vector<Pdu>& out) {
  const std::size_t before = out.size();
  constexpr double kNsPerSecond = 1e9;
  if (!t0_ns_) t0_ns_ = frame.time_ns;
  const FrameRef ref{static_cast<std::uint32_t>(++stats_.frames),
                     static_cast<double>(frame.time_ns - *t0_ns_) / kNsPerSecond};
  auto f = parse_frame(link_, frame.data);
  if (!f) {
    ++stats_.skipped[static_cast<std::size_t>(f.error())];
    return;
  }
  if (f->transport == Transport::tcp && (f->src.port == sock::kAcceptPort || f->dst.port == sock::kAcceptPort)) {
    ++stats_.socklnd_frames;
    add_socklnd(*f, ref, out);
  } else if (f->transport == Transport::udp && f->dst.port == kRoceV2Port) {
    ++stats_.roce_frames;
    roce_.add(*f, ref, out);
  } else {
    ++stats_.other_ip_frames;
  }
  count(out, before);
}

void CaptureDecoder::add_socklnd(const ParsedFrame& f, FrameRef ref, std::vector<Pdu>& out) {
  const TcpReassembler::Delivery d = tcp_.add(f, ref);
  while (walkers_.size() < tcp_.connections().size()) {
    const bool from_start = tcp_.connections()[walkers_.size()].saw_syn;
    walkers_.push_back(Walkers{{SockStreamWalker(Side::connector, from_start),
                                SockStreamWalker(Side::acceptor, from_start)},
                               std::nullopt});
  }
  drain(*d.conn, d.direction, false, out);
  if (d.conn->dir[static_cast<std::size_t>(d.direction)].stream.held_bytes() > kHoleGiveUp) {
    skip_hole(*d.conn, d.direction, false, out);
  }
}

void CaptureDecoder::drain(TcpConnection& c, int d, bool at_end, std::vector<Pdu>& out) {
  const auto di = static_cast<std::size_t>(d);
  StreamBuffer& s = c.dir[di].stream;
  std::vector<Pdu> fresh;
  Walkers& w = walkers_[c.index];
  const std::size_t used = w.dir[di].walk(s.data(), at_end, fresh);
  if (d == 0 && !w.connector_ctype) w.connector_ctype = w.dir[0].claimed_ctype();
  const Side side = d == 0 ? Side::connector : Side::acceptor;
  const Endpoint& src = d == 0 ? c.client : c.server;
  const Endpoint& dst = d == 0 ? c.server : c.client;
  std::uint64_t pos = s.offset();
  for (Pdu& p : fresh) {
    const std::uint64_t end = pos + p.bytes.size();
    p.frames = s.frames(pos, end);
    p.where = SockWhere{c.index, side, src, dst, pos, end};
    pos = end;
    out.push_back(std::move(p));
  }
  s.consume(used);
}

void CaptureDecoder::skip_hole(TcpConnection& c, int d, bool at_end, std::vector<Pdu>& out) {
  const auto di = static_cast<std::size_t>(d);
  StreamBuffer& s = c.dir[di].stream;
  drain(c, d, true, out);  // the element the hole cut short
  const std::uint64_t hole_begin = s.end();
  const std::uint64_t hole = s.skip_hole();
  const Side side = d == 0 ? Side::connector : Side::acceptor;
  Pdu gap;
  gap.what = StreamBytesPdu{StreamBytesPdu::Why::gap};
  gap.frames = s.frames(s.offset(), s.offset() + 1);  // where the stream resumes
  gap.where = SockWhere{c.index, side, d == 0 ? c.client : c.server, d == 0 ? c.server : c.client, hole_begin,
                        hole_begin + hole};
  out.push_back(std::move(gap));
  walkers_[c.index].dir[di] = SockStreamWalker(side, false);
  drain(c, d, at_end, out);
}

void CaptureDecoder::finish(std::vector<Pdu>& out) {
  const std::size_t before = out.size();
  for (TcpConnection& c : tcp_.connections()) {
    for (int d = 0; d < 2; ++d) {
      drain(c, d, true, out);
      while (c.dir[static_cast<std::size_t>(d)].stream.held_bytes() != 0) skip_hole(c, d, true, out);
    }
  }
  roce_.finish(out);
  count(out, before);
}

void CaptureDecoder::count(const std::vector<Pdu>& out, std::size_t from) {
  for (std::size_t i = from; i < out.size(); ++i) {
    ++stats_.pdus;
    if (out[i].error) ++stats_.undecodable_pdus;
  }
}

std::vector<SockConnection> CaptureDecoder::connections() const {
  std::vector<SockConnection> v;
  for (const TcpConnection& c : tcp_.connections()) {
    SockConnection s;
    s.index = c.index;
    s.connector = c.client;
    s.acceptor = c.server;
    s.saw_start = c.saw_syn;
    s.events = c.events;
    s.connector_ctype = walkers_[c.index].connector_ctype;
    v.push_back(std::move(s));
  }
  return v;
}

}  // namespace lnetr::decode
