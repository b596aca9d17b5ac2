// Walks one direction of a socklnd TCP connection: the connecting side's
// acceptor request, each side's HELLO, then messages in the sender's
// negotiated version and byte order (socklnd.md §3-§6).
//
// The walker copes with what broken or hostile peers send, as a Linux node
// would see it: a wrong acceptor magic or version, a HELLO without acceptor
// request, the accepting kernel's 16-byte acceptor-format answer, HELLOs with
// a wrong magic or an unknown version.  Such elements are classified and
// reported with the codec's WireError; after one the connection is unusable
// and its remaining bytes are reported as undecodable.  A connection whose
// start was not captured is resynchronised on the first plausible message.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "cli/decode/pdu.hpp"

namespace lnetr::decode {

class SockStreamWalker {
 public:
  // `from`: which end sends this direction; `from_start`: the capture holds
  // the connection's first byte (its SYN was captured).
  SockStreamWalker(Side from, bool from_start) noexcept;

  // Decode the complete elements at the front of `in`, append them to `out`
  // (what, bytes and error set; where and frames are the caller's) and
  // return the bytes they used.  With `at_end` (no more bytes will come)
  // a trailing incomplete element is reported too and everything is used.
  std::size_t walk(ByteSpan in, bool at_end, std::vector<Pdu>& out);

  // Bytes that are not PDUs (after a fatal error, or skipped while
  // resynchronising) are reported in pieces of up to this size, not one
  // PDU per TCP segment.
  static constexpr std::size_t kSkipChunk = 64u << 10;

  // This direction's HELLO once it has decoded.
  const std::optional<sock::Hello>& hello() const noexcept { return hello_; }
  // The connection type this direction's HELLO claimed, even if the HELLO
  // was broken (wrong magic, unknown version) but still readable.
  std::optional<std::int32_t> claimed_ctype() const noexcept { return claimed_ctype_; }

 private:
  enum class State : std::uint8_t { first, hello, messages, resync, dead };
  struct Step {
    std::size_t size = 0;  // 0: need more bytes
    std::optional<Pdu> pdu;
  };

  Step step(ByteSpan in, bool at_end);
  Step first_element(ByteSpan in, bool at_end);
  Step acceptor_element(ByteSpan in, bool at_end, bool answer);
  Step hello_element(ByteSpan in, bool at_end);
  Step message_element(ByteSpan in, bool at_end);
  Step resync_element(ByteSpan in, bool at_end);
  Step dead_element(ByteSpan in, bool at_end);
  Step more(ByteSpan in, bool at_end);
  Step rest_element(ByteSpan in, StreamBytesPdu::Why why, std::optional<WireError> error);

  Side from_;
  State state_;
  std::uint32_t version_ = 3;
  ByteOrder order_ = ByteOrder::little;
  std::optional<sock::Hello> hello_;
  std::optional<std::int32_t> claimed_ctype_;
  std::optional<WireError> fatal_;  // what made the connection unusable
  std::size_t resync_scanned_ = 0;  // leading bytes known not to start a message
};

// Whether a socklnd LNET message with `version`/`order` plausibly starts at
// `in` (used to resynchronise inside a stream): the headers decode, pass
// LNet's checks and name NIDs of known LNDs.
bool plausible_message_at(ByteSpan in, std::uint32_t version, ByteOrder order) noexcept;

}  // namespace lnetr::decode
