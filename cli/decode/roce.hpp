// RoCEv2 transport headers (InfiniBand BTH and its extension headers, in
// UDP to port 4791) and the IB communication-manager MADs that rdma_cm, and
// so o2iblnd, uses to connect.  Pure parsing over the packet bytes; payload
// and private-data spans view the caller's buffer.
//
// All InfiniBand header fields are big-endian.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "cli/decode/frame.hpp"
#include "router/bytes.hpp"
#include "router/result.hpp"

namespace lnetr::decode {

inline constexpr std::uint16_t kRoceV2Port = 4791;
inline constexpr std::size_t kBthSize = 12;
inline constexpr std::size_t kRethSize = 16;
inline constexpr std::size_t kAethSize = 4;
inline constexpr std::size_t kDethSize = 8;
inline constexpr std::size_t kImmDtSize = 4;
inline constexpr std::size_t kIethSize = 4;
inline constexpr std::size_t kAtomicEthSize = 28;
inline constexpr std::size_t kAtomicAckEthSize = 8;
inline constexpr std::size_t kIcrcSize = 4;
inline constexpr std::uint32_t kPsnMask = 0xffffff;  // PSNs and QPNs are 24-bit

// Transport service: the top three bits of the BTH opcode.
enum class IbService : std::uint8_t { rc = 0, uc = 1, rd = 2, ud = 3, cnp = 4 };

// What a packet does, independent of the service (low five opcode bits).
enum class IbOperation : std::uint8_t {
  send_first = 0x00,
  send_middle = 0x01,
  send_last = 0x02,
  send_last_imm = 0x03,
  send_only = 0x04,
  send_only_imm = 0x05,
  write_first = 0x06,
  write_middle = 0x07,
  write_last = 0x08,
  write_last_imm = 0x09,
  write_only = 0x0a,
  write_only_imm = 0x0b,
  read_request = 0x0c,
  read_response_first = 0x0d,
  read_response_middle = 0x0e,
  read_response_last = 0x0f,
  read_response_only = 0x10,
  acknowledge = 0x11,
  atomic_acknowledge = 0x12,
  compare_swap = 0x13,
  fetch_add = 0x14,
  send_last_inv = 0x16,
  send_only_inv = 0x17,
};

// Position of a packet in a multi-packet message.
enum class MsgPart : std::uint8_t { none, first, middle, last, only };

struct Bth {
  std::uint8_t opcode = 0;
  bool solicited = false;
  bool mig_req = false;
  std::uint8_t pad_count = 0;  // bytes of padding before the ICRC
  std::uint8_t tver = 0;
  std::uint16_t pkey = 0;
  std::uint32_t dest_qp = 0;
  bool ack_req = false;
  std::uint32_t psn = 0;

  IbService service() const noexcept { return static_cast<IbService>(opcode >> 5); }
  IbOperation operation() const noexcept { return static_cast<IbOperation>(opcode & 0x1f); }
};

struct Reth {
  std::uint64_t va = 0;
  std::uint32_t rkey = 0;
  std::uint32_t dma_length = 0;
};

struct Aeth {
  std::uint8_t syndrome = 0;  // 0x00-0x1f ACK (credits), 0x20 RNR NAK, 0x60 NAK
  std::uint32_t msn = 0;
};

struct Deth {
  std::uint32_t qkey = 0;
  std::uint32_t src_qp = 0;
};

// One RoCEv2 packet: BTH, the extension headers its opcode carries, the
// payload (pad bytes and ICRC removed) and the ICRC.
struct RocePacket {
  Bth bth;
  std::optional<Deth> deth;
  std::optional<Reth> reth;
  std::optional<Aeth> aeth;
  std::optional<std::uint32_t> immediate;  // ImmDt or IETH (invalidated rkey)
  std::size_t payload_size = 0;
  std::uint32_t icrc = 0;
  ByteSpan payload;  // view of the UDP payload
  bool retransmission = false;  // set by RoceDecoder: a PSN already seen on this QP

  MsgPart part() const noexcept;
  bool is_send() const noexcept;   // SEND of any part
  bool is_write() const noexcept;  // RDMA WRITE of any part
};

// "RC SEND Only", "RC RDMA WRITE First", "RC Acknowledge", "UD SEND Only", ...
std::string name_of(const Bth& bth);

// Errors: truncated (shorter than BTH + its extension headers + ICRC);
// bad_type (an opcode this parser does not know, or a reserved one).
Result<RocePacket> parse_roce(ByteSpan udp_payload) noexcept;

// AETH syndrome as text: "ACK", "RNR NAK", "NAK (PSN sequence error)", ...
std::string_view describe_syndrome(std::uint8_t syndrome) noexcept;

// ---- IB communication manager (MADs on QP1) --------------------------------------

inline constexpr std::uint32_t kGsiQp = 1;
inline constexpr std::size_t kMadSize = 256;
inline constexpr std::size_t kMadHeaderSize = 24;
inline constexpr std::uint8_t kMgmtClassCm = 0x07;

// name, attribute id, text
#define LNETR_CM_ATTRS(X)                          \
  X(req, 0x0010, "ConnectRequest (REQ)")           \
  X(mra, 0x0011, "MsgRcptAck (MRA)")               \
  X(rej, 0x0012, "ConnectReject (REJ)")            \
  X(rep, 0x0013, "ConnectReply (REP)")             \
  X(rtu, 0x0014, "ReadyToUse (RTU)")               \
  X(dreq, 0x0015, "DisconnectRequest (DREQ)")      \
  X(drep, 0x0016, "DisconnectReply (DREP)")        \
  X(sidr_req, 0x0017, "ServiceIDResRequest (SIDR_REQ)") \
  X(sidr_rep, 0x0018, "ServiceIDResReply (SIDR_REP)")   \
  X(lap, 0x0019, "LoadAlternatePath (LAP)")        \
  X(apr, 0x001a, "AlternatePathResponse (APR)")

enum class CmAttr : std::uint16_t {
#define LNETR_X(n, v, text) n = v,
  LNETR_CM_ATTRS(LNETR_X)
#undef LNETR_X
};
std::string_view to_string(CmAttr a) noexcept;  // "ConnectRequest (REQ)", or "" if unknown

// The CM consumer-defined reject reason that carries o2iblnd's reject.
inline constexpr std::uint16_t kCmRejectConsumer = 28;

struct MadHeader {
  std::uint8_t base_version = 0;
  std::uint8_t mgmt_class = 0;
  std::uint8_t class_version = 0;
  std::uint8_t method = 0;
  std::uint16_t status = 0;
  std::uint64_t tid = 0;
  std::uint16_t attr_id = 0;
  std::uint32_t attr_mod = 0;
};

// The fields of a CM message that matter to an LNet operator.  Fields a
// message does not carry stay 0.
struct CmMessage {
  MadHeader mad;
  CmAttr attr = CmAttr::req;
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;  // all but REQ
  std::uint64_t service_id = 0;      // REQ
  std::uint32_t local_qpn = 0;       // REQ, REP
  std::uint32_t start_psn = 0;       // REQ, REP
  std::uint16_t reject_reason = 0;   // REJ
  std::size_t private_offset = 0;    // of the private data, from the start of the MAD
  ByteSpan private_data;             // view of the MAD
};

// Errors: truncated (shorter than a MAD); bad_type (not the CM class, or an
// attribute other than the CM messages above).
Result<CmMessage> parse_cm_mad(ByteSpan mad) noexcept;

// The rdma_cm private-data header that precedes the consumer's data in the
// REQ of an IP-based service id (RDMA_PS_TCP / UDP / IB / IPOIB).
inline constexpr std::size_t kCmaHeaderSize = 36;
// Its fields' offsets; each address takes 16 bytes.
inline constexpr std::size_t kCmaVersion = 0, kCmaIpVersion = 1, kCmaPort = 2, kCmaSrc = 4, kCmaDst = 20,
                             kCmaAddrSize = 16;
struct CmaHeader {
  std::uint8_t version = 0;
  std::uint8_t ip_version = 0;  // upper nibble 4 or 6
  std::uint16_t port = 0;       // the connecting rdma_cm id's source port
  IpAddress src;
  IpAddress dst;
};

// True if the service id is rdma_cm's IP port space (then REQ private data
// starts with a CmaHeader); `port` gets the service's port (987 for o2iblnd).
bool is_rdma_cm_service(std::uint64_t service_id, std::uint16_t* port = nullptr) noexcept;
// The port space name of an rdma_cm service id: "RDMA_PS_TCP", ...
std::string_view port_space_name(std::uint64_t service_id) noexcept;
// Errors: truncated; bad_version for an IP version other than 4 and 6.
Result<CmaHeader> parse_cma_header(ByteSpan private_data) noexcept;

}  // namespace lnetr::decode
