// lnetr-o2ib-stale-key: an o2iblnd peer that keeps the remote key the
// router gave it for one PUT and writes with it again after the transfer,
// as a buggy or malicious node could.
//
//   lnetr-o2ib-stale-key --src IP --router NID --to NID [--size N] [--seed S]
//
// It connects from IP to the router's o2ib NID (CONNREQ, protocol version
// 0x12, 8 credits), PUTs `size` bytes of lnetr-peer's test pattern to `to`
// on the test portal with an ACK wanted (PUT_REQ, RDMA write into the sink
// the PUT_ACK names, PUT_DONE), waits for the ACK the router forwards back
// (so the router is done with the sink), then RDMA-writes 4 KiB of zeros
// into the same sink with the same key.  Prints one line:
//
//   put=ok ack=ok stale_write=<ibv_wc_status_str of that write>
//
// or `error <what>`, and exits 0 when it got as far as the stale write.
// The test judges the status: a per-transfer key is refused by the device
// (remote access error), a pool key is not.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/peer/pattern.hpp"
#include "lnd/o2iblnd/wire.hpp"

namespace lnetr::o2ib {
namespace {

constexpr int kRecvs = 8;
constexpr std::uint64_t kRecvTag = 1, kSendTag = 2, kWriteTag = 3, kStaleTag = 4;

int fail(const std::string& what) {
  std::printf("error %s\n", what.c_str());
  return 1;
}

struct Peer {
  rdma_event_channel* ch = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  std::vector<std::uint8_t> msgs;  // kRecvs receive buffers, then one send buffer
  std::vector<std::uint8_t> payload;
  ibv_mr* msgs_mr = nullptr;
  ibv_mr* payload_mr = nullptr;
  Nid me, router;
  std::uint64_t stamp = 0x57a1e0c0ffee0001ull, router_stamp = 0;

  ~Peer() {
    if (id && id->qp) rdma_destroy_qp(id);
    if (msgs_mr) ibv_dereg_mr(msgs_mr);
    if (payload_mr) ibv_dereg_mr(payload_mr);
    if (cq) ibv_destroy_cq(cq);
    if (id) rdma_destroy_id(id);
    if (ch) rdma_destroy_event_channel(ch);
  }

  std::uint8_t* recv_buf(int i) { return msgs.data() + static_cast<std::size_t>(i) * kMaxMsgSize; }
  std::uint8_t* send_buf() { return msgs.data() + kRecvs * kMaxMsgSize; }

  // The next CM event, which must be `want`; its private data copied out.
  bool cm(rdma_cm_event_type want, std::vector<std::uint8_t>* priv = nullptr) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch, &ev) != 0) return false;
    const bool ok = ev->event == want;
    if (!ok) std::fprintf(stderr, "cm event %s, wanted %s\n", rdma_event_str(ev->event), rdma_event_str(want));
    if (ok && priv && ev->param.conn.private_data) {
      const auto* p = static_cast<const std::uint8_t*>(ev->param.conn.private_data);
      priv->assign(p, p + ev->param.conn.private_data_len);
    }
    rdma_ack_cm_event(ev);
    return ok;
  }

  bool post_recv(int i) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(recv_buf(i)), kMaxMsgSize, msgs_mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = kRecvTag | (static_cast<std::uint64_t>(i) << 8);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(id->qp, &wr, &bad) == 0;
  }

  MsgHeader header(MsgType t) const {
    MsgHeader h;
    h.version = kVersion2;
    h.type = t;
    h.srcnid = me;
    h.srcstamp = stamp;
    h.dstnid = router;
    h.dststamp = router_stamp;
    return h;
  }

  bool send(const Msg& m) {
    auto n = encode_msg(m, MutableByteSpan(send_buf(), kMaxMsgSize));
    if (!n) return false;
    ibv_sge sge{reinterpret_cast<std::uint64_t>(send_buf()), static_cast<std::uint32_t>(*n), msgs_mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = kSendTag;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(id->qp, &wr, &bad) == 0 && wait_for(kSendTag).status == IBV_WC_SUCCESS;
  }

  bool write(std::uint64_t tag, std::uint8_t* from, std::uint32_t len, std::uint64_t addr, std::uint32_t rkey) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(from), len, payload_mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = tag;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(id->qp, &wr, &bad) == 0;
  }

  // Completions until the one tagged `tag` (or an error, or 20 s).  Each
  // receive met on the way is decoded into `received` and reposted.
  std::vector<std::vector<std::uint8_t>> received;
  ibv_wc wait_for(std::uint64_t tag) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    ibv_wc wc{};
    while (std::chrono::steady_clock::now() < end) {
      const int n = ibv_poll_cq(cq, 1, &wc);
      if (n < 0) break;
      if (n == 0) {
        ::poll(nullptr, 0, 1);
        continue;
      }
      if ((wc.wr_id & 0xff) == kRecvTag && wc.status == IBV_WC_SUCCESS) {
        const int i = static_cast<int>(wc.wr_id >> 8);
        received.emplace_back(recv_buf(i), recv_buf(i) + wc.byte_len);
        post_recv(i);
      }
      if ((wc.wr_id & 0xff) == tag || wc.status != IBV_WC_SUCCESS) return wc;
    }
    wc.status = IBV_WC_GENERAL_ERR;
    return wc;
  }

  // The next received message of type `t` (waiting for more as needed).
  std::optional<DecodedMsg> next(MsgType t) {
    for (int round = 0; round < 200; ++round) {
      while (!received.empty()) {
        auto bytes = std::move(received.front());
        received.erase(received.begin());
        keep_.push_back(std::move(bytes));
        auto d = decode_msg(ByteSpan(keep_.back().data(), keep_.back().size()));
        if (d && d->msg.hdr.type == t) return *d;
      }
      if (wait_for(kRecvTag).status != IBV_WC_SUCCESS) return std::nullopt;
    }
    return std::nullopt;
  }
  std::vector<std::vector<std::uint8_t>> keep_;  // what decoded messages view
};

int run(const std::string& src, const Nid& router, const Nid& to, std::uint32_t size, std::uint64_t seed) {
  Peer p;
  in_addr a{};
  if (inet_pton(AF_INET, src.c_str(), &a) != 1) return fail("--src " + src + ": not an IPv4 address");
  p.me = Nid::make(router.net(), ntohl(a.s_addr));
  p.router = router;
  p.ch = rdma_create_event_channel();
  if (!p.ch || rdma_create_id(p.ch, &p.id, nullptr, RDMA_PS_TCP) != 0) return fail("rdma_create_id");
  sockaddr_in from{}, dst{};
  from.sin_family = dst.sin_family = AF_INET;
  from.sin_addr = a;
  dst.sin_addr.s_addr = htonl(router.addr4());
  dst.sin_port = htons(kServicePort);
  if (rdma_resolve_addr(p.id, reinterpret_cast<sockaddr*>(&from), reinterpret_cast<sockaddr*>(&dst), 5000) != 0 ||
      !p.cm(RDMA_CM_EVENT_ADDR_RESOLVED))
    return fail("address resolution");
  if (rdma_resolve_route(p.id, 5000) != 0 || !p.cm(RDMA_CM_EVENT_ROUTE_RESOLVED)) return fail("route resolution");
  p.pd = p.id->pd ? p.id->pd : ibv_alloc_pd(p.id->verbs);
  p.cq = ibv_create_cq(p.id->verbs, 64, nullptr, nullptr, 0);
  if (!p.pd || !p.cq) return fail("pd/cq");
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = p.cq;
  init.cap.max_send_wr = 16;
  init.cap.max_recv_wr = kRecvs;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  init.qp_type = IBV_QPT_RC;
  if (rdma_create_qp(p.id, p.pd, &init) != 0) return fail("rdma_create_qp");
  p.msgs.resize((kRecvs + 1) * kMaxMsgSize);
  p.payload.resize(size);
  peer::fill_pattern(MutableByteSpan(p.payload.data(), size), seed, 0);
  p.msgs_mr = ibv_reg_mr(p.pd, p.msgs.data(), p.msgs.size(), IBV_ACCESS_LOCAL_WRITE);
  p.payload_mr = ibv_reg_mr(p.pd, p.payload.data(), p.payload.size(), IBV_ACCESS_LOCAL_WRITE);
  if (!p.msgs_mr || !p.payload_mr) return fail("ibv_reg_mr");
  for (int i = 0; i < kRecvs; ++i)
    if (!p.post_recv(i)) return fail("ibv_post_recv");

  // CONNREQ; the CONNACK gives the router's incarnation.
  Msg req;
  req.hdr = p.header(MsgType::connreq);
  req.body = ConnParams{kRecvs, kMaxRdmaFrags, kMaxMsgSize};
  std::array<std::uint8_t, kConnMsgSize> conn{};
  if (!encode_msg(req, conn)) return fail("encode CONNREQ");
  rdma_conn_param cp{};
  cp.private_data = conn.data();
  cp.private_data_len = static_cast<std::uint8_t>(conn.size());
  cp.flow_control = 1;
  cp.retry_count = 5;
  cp.rnr_retry_count = 6;
  std::vector<std::uint8_t> priv;
  if (rdma_connect(p.id, &cp) != 0 || !p.cm(RDMA_CM_EVENT_ESTABLISHED, &priv)) return fail("connect");
  auto ack = decode_msg(ByteSpan(priv.data(), priv.size()));
  if (!ack || ack->msg.hdr.type != MsgType::connack) return fail("no CONNACK");
  p.router_stamp = ack->msg.hdr.srcstamp;

  // PUT_REQ of the test pattern to `to`, an ACK wanted.
  LnetHeader h;
  h.dest_nid = to;
  h.src_nid = p.me;
  h.payload_length = size;
  PutFields pf;
  pf.ack_wmd = WireHandle{0x51a1e, 0x4b3e};
  pf.match_bits = seed;
  pf.ptl_index = peer::kTestPortal;
  h.set(pf);
  Msg put;
  put.hdr = p.header(MsgType::put_req);
  put.body = PutReq{h, 0x600d};
  if (!p.send(put)) return fail("PUT_REQ not sent");
  auto pa = p.next(MsgType::put_ack);
  if (!pa || !pa->msg.put_ack()) return fail("no PUT_ACK");
  const PutAck& sink = *pa->msg.put_ack();
  const std::uint32_t rkey = sink.rd.key();
  std::uint32_t at = 0;
  for (std::size_t i = 0; i < sink.rd.nfrags(); ++i) {
    const RdmaFrag f = sink.rd.frag(i);
    if (at + f.nob > size) return fail("sink larger than the PUT");
    if (!p.write(kWriteTag, p.payload.data() + at, f.nob, f.addr, rkey)) return fail("post RDMA write");
    at += f.nob;
  }
  for (std::size_t i = 0; i < sink.rd.nfrags(); ++i)
    if (auto wc = p.wait_for(kWriteTag); wc.status != IBV_WC_SUCCESS)
      return fail(std::string("RDMA write: ") + ibv_wc_status_str(wc.status));
  Msg done;
  done.hdr = p.header(MsgType::put_done);
  done.body = Completion{sink.dst_cookie, static_cast<std::int32_t>(size)};
  if (!p.send(done)) return fail("PUT_DONE not sent");

  // The ACK comes back once the PUT reached `to`: the router is done with
  // the sink by then.
  auto back = p.next(MsgType::immediate);
  if (!back || back->msg.immediate()->hdr.type != lnetr::MsgType::ack) return fail("no ACK");

  // The same key and address again, after the transfer.
  const RdmaFrag f0 = sink.rd.frag(0);
  std::vector<std::uint8_t> zeros(4096);
  std::memcpy(p.payload.data(), zeros.data(), std::min<std::size_t>(zeros.size(), size));
  if (!p.write(kStaleTag, p.payload.data(), std::min<std::uint32_t>(4096, f0.nob), f0.addr, rkey))
    return fail("post stale RDMA write");
  const ibv_wc wc = p.wait_for(kStaleTag);
  std::printf("put=ok ack=ok stale_write=%s\n", ibv_wc_status_str(wc.status));
  rdma_disconnect(p.id);
  return 0;
}

}  // namespace
}  // namespace lnetr::o2ib

int main(int argc, char** argv) {
  CLI::App app{"lnetr-o2ib-stale-key: reuse a router's remote key after its transfer"};
  std::string src, router_s, to_s;
  std::uint32_t size = 65536;
  std::uint64_t seed = 0x5ea1;
  app.add_option("--src", src, "this peer's IPv4 address (an RDMA device's)")->required();
  app.add_option("--router", router_s, "the router's o2ib NID")->required();
  app.add_option("--to", to_s, "the PUT's destination NID (an lnetr-peer server)")->required();
  app.add_option("--size", size, "PUT size (more than 3976: sent by RDMA)")->check(CLI::Range(4097u, 1u << 20));
  app.add_option("--seed", seed, "pattern seed (the match bits)");
  CLI11_PARSE(app, argc, argv);
  auto router = lnetr::parse_nid(router_s);
  auto to = lnetr::parse_nid(to_s);
  if (!router || !to) return lnetr::o2ib::fail("bad NID");
  return lnetr::o2ib::run(src, *router, *to, size, seed);
}
