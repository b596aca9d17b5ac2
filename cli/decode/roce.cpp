#include "cli/decode/roce.hpp"

#include <algorithm>
#include <array>
#include <string>

namespace lnetr::decode {
namespace {

// ---- BTH (IBA 9.2) -----------------------------------------------------------
constexpr std::size_t kBthOpcode = 0;
constexpr std::size_t kBthFlags = 1;     // SE(1) M(1) PadCnt(2) TVer(4)
constexpr std::size_t kBthPkey = 2;
constexpr std::size_t kBthDestQp = 4;    // reserved byte + 24-bit QPN
constexpr std::size_t kBthPsn = 8;       // AckReq bit + 7 reserved + 24-bit PSN
constexpr std::uint8_t kBthSolicited = 0x80;
constexpr std::uint8_t kBthMigReq = 0x40;
constexpr std::uint8_t kBthAckReq = 0x80;

// ---- extension headers ---------------------------------------------------------
constexpr std::size_t kRethVa = 0, kRethRkey = 8, kRethLength = 12;
constexpr std::size_t kDethQkey = 0, kDethSrcQp = 4;

// ---- MAD (IBA 13.4.3) and CM messages (IBA 12.6) -----------------------------
constexpr std::size_t kMadBaseVersion = 0, kMadClass = 1, kMadClassVersion = 2, kMadMethod = 3,
                      kMadStatus = 4, kMadTid = 8, kMadAttrId = 16, kMadAttrMod = 20;
// Offsets inside the CM message (after the 24-byte MAD header).
constexpr std::size_t kCmLocalCommId = 0;
constexpr std::size_t kCmRemoteCommId = 4;
constexpr std::size_t kReqServiceId = 8;
constexpr std::size_t kReqLocalQpn = 32;
constexpr std::size_t kReqStartPsn = 44;
constexpr std::size_t kRepLocalQpn = 12;
constexpr std::size_t kRepStartPsn = 20;
constexpr std::size_t kRejReason = 10;
// Where each message's private data starts (it runs to the end of the MAD).
constexpr std::size_t kReqPrivate = 140;  // 92 bytes
constexpr std::size_t kMraPrivate = 10;   // 222 bytes
constexpr std::size_t kRejPrivate = 84;   // 148 bytes
constexpr std::size_t kRepPrivate = 36;   // 196 bytes
constexpr std::size_t kRtuPrivate = 8;    // 224 bytes
constexpr std::size_t kDreqPrivate = 12;  // 220 bytes
constexpr std::size_t kDrepPrivate = 8;   // 224 bytes
constexpr std::size_t kSidrReqPrivate = 16;  // 216 bytes
constexpr std::size_t kSidrRepPrivate = 96;  // 136 bytes
constexpr std::size_t kLapPrivate = 84;   // 148 bytes
constexpr std::size_t kAprPrivate = 84;   // 148 bytes
static_assert(kMadHeaderSize + kReqPrivate + 92 == kMadSize);
static_assert(kMadHeaderSize + kRepPrivate + 196 == kMadSize);
static_assert(kMadHeaderSize + kRejPrivate + 148 == kMadSize);

// ---- rdma_cm ---------------------------------------------------------------------
constexpr std::size_t kCmaIpv4InAddr = 12;  // an IPv4 address sits in the last 4 bytes
constexpr std::uint64_t kIpPortSpaceMask = 0xFFFFFFFFFFFF0000ull;
struct PortSpace {
  std::uint64_t prefix;
  std::string_view name;
};
constexpr std::array<PortSpace, 4> kPortSpaces{{
    {0x0000000001060000ull, "RDMA_PS_TCP"},
    {0x0000000001110000ull, "RDMA_PS_UDP"},
    {0x00000000013F0000ull, "RDMA_PS_IB"},
    {0x0000000000020000ull, "RDMA_PS_IPOIB"},
}};

// What each operation carries.
struct OpInfo {
  std::string_view name;  // empty: reserved
  MsgPart part;
  bool reth, aeth, imm, ieth, atomic_eth, atomic_ack;
};
constexpr OpInfo kNone{"", MsgPart::none, false, false, false, false, false, false};
constexpr std::array<OpInfo, 32> kOps = [] {
  std::array<OpInfo, 32> t{};
  t.fill(kNone);
  using O = IbOperation;
  auto at = [&](O o) -> OpInfo& { return t[static_cast<std::size_t>(o)]; };
  at(O::send_first) = {"SEND First", MsgPart::first, false, false, false, false, false, false};
  at(O::send_middle) = {"SEND Middle", MsgPart::middle, false, false, false, false, false, false};
  at(O::send_last) = {"SEND Last", MsgPart::last, false, false, false, false, false, false};
  at(O::send_last_imm) = {"SEND Last with Immediate", MsgPart::last, false, false, true, false, false, false};
  at(O::send_only) = {"SEND Only", MsgPart::only, false, false, false, false, false, false};
  at(O::send_only_imm) = {"SEND Only with Immediate", MsgPart::only, false, false, true, false, false, false};
  at(O::write_first) = {"RDMA WRITE First", MsgPart::first, true, false, false, false, false, false};
  at(O::write_middle) = {"RDMA WRITE Middle", MsgPart::middle, false, false, false, false, false, false};
  at(O::write_last) = {"RDMA WRITE Last", MsgPart::last, false, false, false, false, false, false};
  at(O::write_last_imm) = {"RDMA WRITE Last with Immediate", MsgPart::last, false, false, true, false, false, false};
  at(O::write_only) = {"RDMA WRITE Only", MsgPart::only, true, false, false, false, false, false};
  at(O::write_only_imm) = {"RDMA WRITE Only with Immediate", MsgPart::only, true, false, true, false, false, false};
  at(O::read_request) = {"RDMA READ Request", MsgPart::none, true, false, false, false, false, false};
  at(O::read_response_first) = {"RDMA READ Response First", MsgPart::first, false, true, false, false, false, false};
  at(O::read_response_middle) = {"RDMA READ Response Middle", MsgPart::middle, false, false, false, false, false, false};
  at(O::read_response_last) = {"RDMA READ Response Last", MsgPart::last, false, true, false, false, false, false};
  at(O::read_response_only) = {"RDMA READ Response Only", MsgPart::only, false, true, false, false, false, false};
  at(O::acknowledge) = {"Acknowledge", MsgPart::none, false, true, false, false, false, false};
  at(O::atomic_acknowledge) = {"Atomic Acknowledge", MsgPart::none, false, true, false, false, false, true};
  at(O::compare_swap) = {"CmpSwap", MsgPart::none, false, false, false, false, true, false};
  at(O::fetch_add) = {"FetchAdd", MsgPart::none, false, false, false, false, true, false};
  at(O::send_last_inv) = {"SEND Last with Invalidate", MsgPart::last, false, false, false, true, false, false};
  at(O::send_only_inv) = {"SEND Only with Invalidate", MsgPart::only, false, false, false, true, false, false};
  return t;
}();

constexpr std::array<std::string_view, 5> kServiceNames{"RC", "UC", "RD", "UD", "CNP"};

// The opcode's description, or nullptr for an opcode this parser does not
// handle (reserved ones, RD, and anything UD other than SEND Only).
const OpInfo* op_info(const Bth& b) noexcept {
  const OpInfo& op = kOps[static_cast<std::size_t>(b.operation())];
  if (op.name.empty()) return nullptr;
  switch (b.service()) {
    case IbService::rc:
      return &op;
    case IbService::uc:
      return b.operation() <= IbOperation::write_only_imm ? &op : nullptr;
    case IbService::ud:
      return b.operation() == IbOperation::send_only || b.operation() == IbOperation::send_only_imm ? &op
                                                                                                   : nullptr;
    default:
      return nullptr;
  }
}

std::uint32_t load_u24(const std::uint8_t* p) noexcept {
  return (std::uint32_t{p[0]} << 16) | (std::uint32_t{p[1]} << 8) | p[2];
}

// Consumes `n` bytes of extension header from the front of `rest`.
bool take(ByteSpan& rest, std::size_t n, ByteSpan& out) noexcept {
  if (rest.size() < n) return false;
  out = rest.first(n);
  rest = rest.subspan(n);
  return true;
}

std::size_t private_offset(CmAttr a) noexcept {
  switch (a) {
    case CmAttr::req: return kReqPrivate;
    case CmAttr::mra: return kMraPrivate;
    case CmAttr::rej: return kRejPrivate;
    case CmAttr::rep: return kRepPrivate;
    case CmAttr::rtu: return kRtuPrivate;
    case CmAttr::dreq: return kDreqPrivate;
    case CmAttr::drep: return kDrepPrivate;
    case CmAttr::sidr_req: return kSidrReqPrivate;
    case CmAttr::sidr_rep: return kSidrRepPrivate;
    case CmAttr::lap: return kLapPrivate;
    case CmAttr::apr: return kAprPrivate;
  }
  return kMadSize - kMadHeaderSize;
}

}  // namespace

MsgPart RocePacket::part() const noexcept {
  const OpInfo* op = op_info(bth);
  return op ? op->part : MsgPart::none;
}

bool RocePacket::is_send() const noexcept { return bth.operation() <= IbOperation::send_only_imm ||
                                                   bth.operation() == IbOperation::send_last_inv ||
                                                   bth.operation() == IbOperation::send_only_inv; }

bool RocePacket::is_write() const noexcept {
  return bth.operation() >= IbOperation::write_first && bth.operation() <= IbOperation::write_only_imm;
}

std::string name_of(const Bth& bth) {
  const OpInfo* op = op_info(bth);
  const auto service = static_cast<std::size_t>(bth.opcode >> 5);
  std::string s(service < kServiceNames.size() ? kServiceNames[service] : "?");
  s += ' ';
  if (op) s += op->name;
  else s += "opcode " + std::to_string(bth.opcode);
  return s;
}

Result<RocePacket> parse_roce(ByteSpan in) noexcept {
  if (in.size() < kBthSize + kIcrcSize) return fail(WireError::truncated);
  RocePacket p;
  const std::uint8_t* b = in.data();
  p.bth.opcode = b[kBthOpcode];
  p.bth.solicited = (b[kBthFlags] & kBthSolicited) != 0;
  p.bth.mig_req = (b[kBthFlags] & kBthMigReq) != 0;
  p.bth.pad_count = (b[kBthFlags] >> 4) & 0x3;
  p.bth.tver = b[kBthFlags] & 0x0f;
  p.bth.pkey = load_be<std::uint16_t>(b + kBthPkey);
  p.bth.dest_qp = load_u24(b + kBthDestQp + 1);
  p.bth.ack_req = (b[kBthPsn] & kBthAckReq) != 0;
  p.bth.psn = load_u24(b + kBthPsn + 1);
  const OpInfo* op = op_info(p.bth);
  if (!op) return fail(WireError::bad_type);

  ByteSpan rest = in.subspan(kBthSize, in.size() - kBthSize - kIcrcSize);
  ByteSpan h;
  // Extension headers in the order IBA 9.2 lays them out.
  if (p.bth.service() == IbService::ud) {
    if (!take(rest, kDethSize, h)) return fail(WireError::truncated);
    p.deth = Deth{load_be<std::uint32_t>(h.data() + kDethQkey), load_u24(h.data() + kDethSrcQp + 1)};
  }
  if (op->reth) {
    if (!take(rest, kRethSize, h)) return fail(WireError::truncated);
    p.reth = Reth{load_be<std::uint64_t>(h.data() + kRethVa), load_be<std::uint32_t>(h.data() + kRethRkey),
                  load_be<std::uint32_t>(h.data() + kRethLength)};
  }
  if (op->atomic_eth && !take(rest, kAtomicEthSize, h)) return fail(WireError::truncated);
  if (op->aeth) {
    if (!take(rest, kAethSize, h)) return fail(WireError::truncated);
    p.aeth = Aeth{h[0], load_u24(h.data() + 1)};
  }
  if (op->atomic_ack && !take(rest, kAtomicAckEthSize, h)) return fail(WireError::truncated);
  if (op->imm || op->ieth) {
    if (!take(rest, kImmDtSize, h)) return fail(WireError::truncated);
    p.immediate = load_be<std::uint32_t>(h.data());
  }
  static_assert(kImmDtSize == kIethSize);
  if (rest.size() < p.bth.pad_count) return fail(WireError::truncated);
  p.payload = rest.first(rest.size() - p.bth.pad_count);
  p.payload_size = p.payload.size();
  p.icrc = load_be<std::uint32_t>(in.data() + in.size() - kIcrcSize);
  return p;
}

std::string_view describe_syndrome(std::uint8_t s) noexcept {
  switch (s >> 5) {
    case 0: return "ACK";
    case 1: return "RNR NAK";
    case 3:
      switch (s & 0x1f) {
        case 0: return "NAK (PSN sequence error)";
        case 1: return "NAK (invalid request)";
        case 2: return "NAK (remote access error)";
        case 3: return "NAK (remote operational error)";
        case 4: return "NAK (invalid RD request)";
        default: return "NAK (reserved code)";
      }
    default: return "reserved syndrome";
  }
}

std::string_view to_string(CmAttr a) noexcept {
  switch (a) {
#define LNETR_X(n, v, text) \
  case CmAttr::n:           \
    return text;
    LNETR_CM_ATTRS(LNETR_X)
#undef LNETR_X
  }
  return "";
}

Result<CmMessage> parse_cm_mad(ByteSpan mad) noexcept {
  if (mad.size() < kMadSize) return fail(WireError::truncated);
  const std::uint8_t* m = mad.data();
  CmMessage cm;
  cm.mad.base_version = m[kMadBaseVersion];
  cm.mad.mgmt_class = m[kMadClass];
  cm.mad.class_version = m[kMadClassVersion];
  cm.mad.method = m[kMadMethod];
  cm.mad.status = load_be<std::uint16_t>(m + kMadStatus);
  cm.mad.tid = load_be<std::uint64_t>(m + kMadTid);
  cm.mad.attr_id = load_be<std::uint16_t>(m + kMadAttrId);
  cm.mad.attr_mod = load_be<std::uint32_t>(m + kMadAttrMod);
  if (cm.mad.mgmt_class != kMgmtClassCm) return fail(WireError::bad_type);
  cm.attr = static_cast<CmAttr>(cm.mad.attr_id);
  if (to_string(cm.attr).empty()) return fail(WireError::bad_type);

  const std::uint8_t* c = m + kMadHeaderSize;
  cm.local_comm_id = load_be<std::uint32_t>(c + kCmLocalCommId);
  if (cm.attr != CmAttr::req) cm.remote_comm_id = load_be<std::uint32_t>(c + kCmRemoteCommId);
  switch (cm.attr) {
    case CmAttr::req:
      cm.service_id = load_be<std::uint64_t>(c + kReqServiceId);
      cm.local_qpn = load_u24(c + kReqLocalQpn);
      cm.start_psn = load_u24(c + kReqStartPsn);
      break;
    case CmAttr::rep:
      cm.local_qpn = load_u24(c + kRepLocalQpn);
      cm.start_psn = load_u24(c + kRepStartPsn);
      break;
    case CmAttr::rej:
      cm.reject_reason = load_be<std::uint16_t>(c + kRejReason);
      break;
    default:
      break;
  }
  cm.private_offset = kMadHeaderSize + private_offset(cm.attr);
  cm.private_data = mad.subspan(cm.private_offset, kMadSize - cm.private_offset);
  return cm;
}

bool is_rdma_cm_service(std::uint64_t service_id, std::uint16_t* port) noexcept {
  for (const PortSpace& ps : kPortSpaces) {
    if ((service_id & kIpPortSpaceMask) == ps.prefix) {
      if (port) *port = static_cast<std::uint16_t>(service_id);
      return true;
    }
  }
  return false;
}

std::string_view port_space_name(std::uint64_t service_id) noexcept {
  for (const PortSpace& ps : kPortSpaces) {
    if ((service_id & kIpPortSpaceMask) == ps.prefix) return ps.name;
  }
  return "";
}

Result<CmaHeader> parse_cma_header(ByteSpan pd) noexcept {
  if (pd.size() < kCmaHeaderSize) return fail(WireError::truncated);
  CmaHeader h;
  h.version = pd[kCmaVersion];
  h.ip_version = pd[kCmaIpVersion];
  h.port = load_be<std::uint16_t>(pd.data() + kCmaPort);
  auto addr = [&](std::size_t at) {
    IpAddress a;
    if ((h.ip_version >> 4) == 4) {
      a = IpAddress::v4(load_be<std::uint32_t>(pd.data() + at + kCmaIpv4InAddr));
    } else {
      a.version = 6;
      std::copy_n(pd.data() + at, kCmaAddrSize, a.bytes.begin());
    }
    return a;
  };
  if ((h.ip_version >> 4) != 4 && (h.ip_version >> 4) != 6) return fail(WireError::bad_version);
  h.src = addr(kCmaSrc);
  h.dst = addr(kCmaDst);
  return h;
}

}  // namespace lnetr::decode
