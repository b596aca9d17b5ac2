// Turns RoCEv2 packets into PDUs: one per packet, carrying the o2iblnd
// message of an RC SEND (reassembled per queue pair when it took several
// packets) or the CM message of a UD SEND to QP1 with its rdma_cm header and
// o2iblnd CONNREQ / CONNACK / reject.  RDMA WRITE and ACK packets become
// transport-only PDUs.  Retransmitted requests (a PSN already seen on the
// queue pair) are marked and not decoded twice.
#pragma once

#include <map>
#include <optional>
#include <vector>

#include "cli/decode/pdu.hpp"

namespace lnetr::decode {

class RoceDecoder {
 public:
  // One UDP datagram to port 4791.
  void add(const ParsedFrame& f, FrameRef frame, std::vector<Pdu>& out);
  // SENDs still being reassembled when the capture ended.
  void finish(std::vector<Pdu>& out);

 private:
  struct QpKey {
    IpAddress src, dst;
    std::uint32_t qp = 0;
    friend auto operator<=>(const QpKey&, const QpKey&) = default;
  };
  // A multi-packet SEND being put together.
  struct Assembly {
    std::vector<std::uint8_t> bytes;
    FrameSpan frames;
    RoceWhere last;
  };
  struct QpState {
    std::optional<std::uint32_t> next_psn;  // of the next request packet
    std::optional<Assembly> send;
  };

  Pdu send_pdu(const ParsedFrame& f, const RocePacket& pkt, FrameRef frame, QpState& qp);
  static Pdu message_pdu(std::vector<std::uint8_t> bytes);
  static Pdu cm_pdu(ByteSpan mad);

  std::map<QpKey, QpState> qps_;
};

}  // namespace lnetr::decode
