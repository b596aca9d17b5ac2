#include "cli/decode/sock_walker.hpp"

#include <array>

namespace lnetr::decode {
namespace {

// Both the acceptor request and the HELLO start with magic and version.
constexpr std::size_t kMagicSize = 4;
constexpr std::size_t kVersionOffset = 4;
constexpr std::size_t kMagicVersionSize = 8;
// A structure with a wrong magic or version is shown decoded as this version.
constexpr std::uint32_t kLenientHelloVersion = 3;

// The byte order of a structure whose magic is not recognised: the one in
// which its version field reads as a small number.
ByteOrder guess_order(const std::uint8_t* version) noexcept {
  return load_le<std::uint32_t>(version) <= 0xffff ? ByteOrder::little : ByteOrder::big;
}

bool is_hello_magic(ByteSpan in) noexcept {
  return match_magic(in.data(), kLnetProtoMagic).matched || load_le<std::uint32_t>(in.data()) == kTcpProtoMagic;
}

Pdu pdu_of(ByteSpan bytes) {
  Pdu p;
  p.bytes.assign(bytes.begin(), bytes.end());
  return p;
}

// A copy of `in` with a valid magic (and version, if given) patched in, for
// decoding a broken structure as far as it goes.
std::vector<std::uint8_t> patched(ByteSpan in, std::uint32_t magic, std::optional<std::uint32_t> version,
                                  ByteOrder order) {
  std::vector<std::uint8_t> copy(in.begin(), in.end());
  store(copy.data(), magic, order);
  if (version) store(copy.data() + kVersionOffset, *version, order);
  return copy;
}

}  // namespace

bool plausible_message_at(ByteSpan in, std::uint32_t version, ByteOrder order) noexcept {
  if (version < 2) return false;  // V1 has no socklnd header to anchor on
  const HeaderForm form = sock::header_form(version);
  if (in.size() < sock::kMsgHeaderSize + header_size(form)) return false;
  if (load<std::uint32_t>(in.data(), order) != sock::kMsgLnet) return false;  // cheap filter for the scan
  auto mh = sock::decode_msg_header(in, order);
  if (!mh || mh->type != sock::kMsgLnet) return false;
  auto h = decode_header(in.subspan(sock::kMsgHeaderSize), form);
  if (!h || check_header(*h)) return false;
  for (const Nid* nid : {&h->dest_nid, &h->src_nid}) {
    if (nid->is_any() || !lnd_by_type(nid->type)) return false;
  }
  for (std::uint32_t pid : {h->dest_pid, h->src_pid}) {
    if (pid != kPidLustre && !(pid & kPidUserFlag)) return false;
  }
  return true;
}

SockStreamWalker::SockStreamWalker(Side from, bool from_start) noexcept
    : from_(from), state_(from_start ? State::first : State::resync) {}

std::size_t SockStreamWalker::walk(ByteSpan in, bool at_end, std::vector<Pdu>& out) {
  std::size_t used = 0;
  while (used < in.size()) {
    Step s = step(in.subspan(used), at_end);
    if (s.size == 0) break;
    used += s.size;
    if (s.pdu) out.push_back(std::move(*s.pdu));
  }
  return used;
}

SockStreamWalker::Step SockStreamWalker::step(ByteSpan in, bool at_end) {
  switch (state_) {
    case State::first: return first_element(in, at_end);
    case State::hello: return hello_element(in, at_end);
    case State::messages: return message_element(in, at_end);
    case State::resync: return resync_element(in, at_end);
    case State::dead: return dead_element(in, at_end);
  }
  return {};
}

SockStreamWalker::Step SockStreamWalker::rest_element(ByteSpan in, StreamBytesPdu::Why why,
                                                      std::optional<WireError> error) {
  Pdu p = pdu_of(in);
  p.what = StreamBytesPdu{why};
  p.error = error;
  return {in.size(), std::move(p)};
}

// Not enough bytes for the next element: wait, or at the end of the
// capture report what is there as unfinished.
SockStreamWalker::Step SockStreamWalker::more(ByteSpan in, bool at_end) {
  if (!at_end) return {};
  state_ = State::dead;
  fatal_ = WireError::truncated;
  return rest_element(in, StreamBytesPdu::Why::unfinished, WireError::truncated);
}

SockStreamWalker::Step SockStreamWalker::first_element(ByteSpan in, bool at_end) {
  if (in.size() < kMagicSize) return more(in, at_end);
  const bool acceptor_magic = match_magic(in.data(), kAcceptorMagic).matched;
  // The accepting side answers a request it cannot parse with an
  // acceptor-format record; anything else it sends first is its HELLO.
  if (from_ == Side::acceptor) {
    if (acceptor_magic) return acceptor_element(in, at_end, true);
    state_ = State::hello;
    return hello_element(in, at_end);
  }
  // A connector starts with the acceptor request, or (broken or very old
  // peers) directly with a HELLO; any other magic is a bad request.
  if (!acceptor_magic && is_hello_magic(in)) {
    state_ = State::hello;
    return hello_element(in, at_end);
  }
  return acceptor_element(in, at_end, false);
}

SockStreamWalker::Step SockStreamWalker::acceptor_element(ByteSpan in, bool at_end, bool answer) {
  if (in.size() < kMagicVersionSize) return more(in, at_end);
  const MagicMatch m = match_magic(in.data(), kAcceptorMagic);
  const ByteOrder order = m.matched ? m.order : guess_order(in.data() + kVersionOffset);
  const auto version = load<std::uint32_t>(in.data() + kVersionOffset, order);
  const std::size_t size = version == 2 ? sock::kAcceptorV2Size : sock::kAcceptorV1Size;
  if (in.size() < size) return more(in, at_end);

  Pdu p = pdu_of(in.first(size));
  AcceptorPdu a{answer, load<std::uint32_t>(p.bytes.data(), order), version, std::nullopt};
  auto r = sock::decode_acceptor_request(p.bytes);
  if (r) {
    a.view = *r;
    state_ = State::hello;
  } else {
    p.error = r.error();
    fatal_ = r.error();
    state_ = State::dead;
    // A wrong magic with a known version still tells which NID was asked for.
    if (version == 1 || version == 2) {
      auto lenient = sock::decode_acceptor_request(patched(p.bytes, kAcceptorMagic, std::nullopt, order));
      if (lenient) a.view = *lenient;
    }
  }
  p.what = a;
  return {size, std::move(p)};
}

SockStreamWalker::Step SockStreamWalker::hello_element(ByteSpan in, bool at_end) {
  if (in.size() < kMagicVersionSize) return more(in, at_end);
  const bool v1 = load_le<std::uint32_t>(in.data()) == kTcpProtoMagic;
  const MagicMatch m = match_magic(in.data(), kLnetProtoMagic);
  const ByteOrder order = v1 ? ByteOrder::little : m.matched ? m.order : guess_order(in.data() + kVersionOffset);
  HelloPdu h{from_, load<std::uint32_t>(in.data(), order), load<std::uint32_t>(in.data() + kVersionOffset, order),
             order, std::nullopt};

  auto need = sock::hello_bytes_needed(in);
  if (need) {
    if (in.size() < *need) return more(in, at_end);
    Pdu p = pdu_of(in.first(*need));
    auto hello = sock::decode_hello(p.bytes);
    if (hello) {
      h.view = *hello;
      h.version = hello->version;
      hello_ = *hello;
      claimed_ctype_ = hello->ctype;
      version_ = hello->version;
      order_ = hello->order;
      state_ = State::messages;
    } else {
      p.error = hello.error();
      fatal_ = hello.error();
      state_ = State::dead;
    }
    p.what = h;
    return {*need, std::move(p)};
  }

  // A wrong magic or unknown version: take the V2/V3 layout's size and show
  // the fields as a V3 HELLO would carry them.
  const std::size_t size = std::min(in.size(), sock::kHelloV2Size);
  if (size < sock::kHelloV2Size && !at_end) return {};
  Pdu p = pdu_of(in.first(size));
  p.error = need.error();
  fatal_ = need.error();
  state_ = State::dead;
  auto lenient = sock::decode_hello(patched(p.bytes, kLnetProtoMagic, kLenientHelloVersion, order));
  if (lenient) {
    h.view = *lenient;
    h.view->version = h.version;
    claimed_ctype_ = lenient->ctype;
  }
  p.what = h;
  return {size, std::move(p)};
}

SockStreamWalker::Step SockStreamWalker::message_element(ByteSpan in, bool at_end) {
  auto need = sock::message_bytes_needed(in, version_, order_);
  if (!need) {
    state_ = State::dead;
    fatal_ = need.error();
    return rest_element(in, StreamBytesPdu::Why::undecodable, need.error());
  }
  if (in.size() < *need) return more(in, at_end);
  Pdu p = pdu_of(in.first(*need));
  auto msg = sock::decode_message(p.bytes, version_, order_);
  if (!msg) {
    // The framing is known, so the walk goes on with the next message.
    p.error = msg.error();
    p.what = StreamBytesPdu{StreamBytesPdu::Why::undecodable};
    return {*need, std::move(p)};
  }
  SockMsgPdu s{version_, order_, *msg, std::nullopt};
  if (msg->lnet) {
    if (auto ping = ping_info_in(*msg->lnet, msg->payload)) {
      if (*ping) s.ping = **ping;
      else p.error = ping->error();
    }
  }
  p.what = std::move(s);
  return {*need, std::move(p)};
}

SockStreamWalker::Step SockStreamWalker::resync_element(ByteSpan in, bool at_end) {
  struct Candidate {
    std::uint32_t version;
    ByteOrder order;
  };
  static constexpr std::array<Candidate, 4> kCandidates{
      {{3, ByteOrder::little}, {3, ByteOrder::big}, {4, ByteOrder::little}, {4, ByteOrder::big}}};
  // Bytes a candidate position needs before it can be judged.
  constexpr std::size_t kWindow = sock::kMsgHeaderSize + kLnetHeader16Size;
  // Positions before resync_scanned_ were judged by an earlier call.
  std::size_t i = std::min(resync_scanned_, in.size());
  for (; i < in.size(); ++i) {
    if (!at_end && in.size() - i < kWindow) break;
    for (const Candidate& c : kCandidates) {
      if (!plausible_message_at(in.subspan(i), c.version, c.order)) continue;
      version_ = c.version;
      order_ = c.order;
      state_ = State::messages;
      resync_scanned_ = 0;
      if (i == 0) return message_element(in, at_end);
      return rest_element(in.first(i), StreamBytesPdu::Why::mid_stream, std::nullopt);
    }
  }
  resync_scanned_ = i;
  if (i == 0 || (!at_end && i < kSkipChunk)) return {};
  resync_scanned_ = 0;
  return rest_element(in.first(i), StreamBytesPdu::Why::mid_stream, std::nullopt);
}

SockStreamWalker::Step SockStreamWalker::dead_element(ByteSpan in, bool at_end) {
  if (!at_end && in.size() < kSkipChunk) return {};
  return rest_element(in.first(std::min(in.size(), kSkipChunk)), StreamBytesPdu::Why::undecodable, fatal_);
}

}  // namespace lnetr::decode
