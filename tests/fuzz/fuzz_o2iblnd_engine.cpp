// The o2iblnd engine against arbitrary peers on the simulated fabric.  The
// fuzz bytes are a script: peers that connect with any private data,
// accept with any CONNACK or reject with any private data, send arbitrary
// bytes or well-formed messages with chosen fields (cookies among those
// the node used, credits, lengths, descriptors) on their connections,
// disconnect or vanish; the node's LNet layer that sends PUTs and GETs of
// any size to them, accepts, discards, defers or rejects what arrives and
// resumes it later; and the clock.
//
// Whatever happens: nothing crashes or reads out of bounds; the node never
// misuses the fabric (a SEND without a receive posted at the other end,
// memory outside its key, more work than its queue pair holds, an
// identifier destroyed twice or with work posted); no connection's
// credits exceed its queue depth; every message handed to the engine is
// handed back exactly once; and after shutdown every descriptor, receive
// buffer, queue pair and registration is released.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <vector>

#include "lnd/o2iblnd/engine.hpp"
#include "router/local_msgs.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/support/o2ib_fabric.hpp"

using namespace lnetr;
using namespace lnetr::o2ib;

namespace {

class Script {
 public:
  Script(const std::uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  bool done() const { return at_ >= n_; }
  std::uint8_t u8() { return at_ < n_ ? d_[at_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() { return u16() | (std::uint32_t{u16()} << 16); }
  std::vector<std::uint8_t> bytes(std::size_t max) {
    const std::size_t n = std::min<std::size_t>(u16() % (max + 1), n_ - std::min(at_, n_));
    std::vector<std::uint8_t> v(d_ + at_, d_ + at_ + n);
    at_ += n;
    return v;
  }

 private:
  const std::uint8_t* d_;
  std::size_t n_;
  std::size_t at_ = 0;
};

class FuzzUpper final : public lnd::Upper {
 public:
  std::uint8_t policy = 0;  // 0 accept, 1 discard, 2 defer, 3 reject
  Node* node = nullptr;
  std::deque<lnd::Rx> deferred;
  std::map<const lnd::Tx*, int> handed_back;
  std::deque<std::vector<std::uint8_t>> sinks;
  struct Reply {
    lnd::Tx tx;
    std::vector<std::uint8_t> payload;
    Nid dest;
  };
  std::list<Reply> replies;
  std::vector<Reply*> owed;

  lnd::RxVerdict on_head(lnd::Rx& rx) override {
    if (rx.hdr.type == lnetr::MsgType::get && (policy & 4)) {
      Reply& r = replies.emplace_back();
      r.payload.assign(std::min<std::uint32_t>(rx.hdr.get().sink_length, 1u << 20), 0x5a);
      r.tx.hdr = make_reply(rx.hdr, rx.ni, static_cast<std::uint32_t>(r.payload.size()));
      r.tx.payload = r.payload;
      r.dest = rx.from;
      rx.reply = &r.tx;
      owed.push_back(&r);
      rx.discard = true;
      return lnd::RxVerdict::accept;
    }
    switch (policy & 3) {
      case 1:
        rx.discard = true;
        return lnd::RxVerdict::accept;
      case 2:
        deferred.push_back(rx);
        return lnd::RxVerdict::defer;
      case 3:
        return lnd::RxVerdict::reject;
      default:
        break;
    }
    auto& s = sinks.emplace_back(rx.hdr.payload_length);
    rx.sink = MutableByteSpan(s.data(), s.size());
    return lnd::RxVerdict::accept;
  }
  void on_received(lnd::Rx&) override {}
  void on_rx_aborted(lnd::Rx& rx) override {
    // An aborted deferred receive is never resumed.
    for (auto it = deferred.begin(); it != deferred.end(); ++it)
      if (it->conn == rx.conn && it->hdr == rx.hdr) {
        deferred.erase(it);
        break;
      }
  }
  void on_sent(lnd::Tx& tx, int status) override {
    FUZZ_CHECK(handed_back.count(&tx) == 0);  // exactly once
    handed_back[&tx] = status;
  }
  void on_peer_down(const Nid&) override {}
  void resume(std::size_t n) {
    for (std::size_t i = 0; i < n && !deferred.empty(); ++i) {
      lnd::Rx rx = deferred.front();
      deferred.pop_front();
      auto& s = sinks.emplace_back(rx.hdr.payload_length);
      rx.sink = MutableByteSpan(s.data(), s.size());
      node->resume(rx);
    }
  }
  void pump() {
    auto o = std::move(owed);
    owed.clear();
    for (Reply* r : o)
      if (node->send(r->dest, r->tx) < 0) handed_back[&r->tx] = -1;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Script in(data, size);
  auto now = lnd::Clock::time_point(std::chrono::seconds(1'000'000));
  sim::Fabric fabric;
  sim::SimTransport tr(fabric, "node");
  const Nid me = *parse_nid("10.0.0.1@o2ib");
  tr.add_address(me.addr4());
  const std::uint8_t mode = in.u8();
  tr.all_registered = (mode & 1) == 0;
  tr.windows = (mode & 2) != 0;  // per-transfer sink keys, invalidated before the memory moves on
  Options opts;
  opts.cksum = in.u8() & 1;
  LocalNi ni;
  ni.nid = me;
  ni.transport = &tr;
  ni.tunables.peer_credits = 8 + in.u8() % 9;
  ni.tunables.concurrent_sends = in.u8() % 20;
  FuzzUpper upper;
  auto node = std::make_unique<Node>(opts, std::vector<LocalNi>{ni}, 77, upper, [&now] { return now; });
  upper.node = node.get();
  tr.listen(me.addr4(), kServicePort, [&](ConnRequest&& r) { node->accept_request(std::move(r)); });

  std::list<sim::RawPeer> peers;
  auto peer = [&](std::uint8_t k) -> sim::RawPeer& {
    k %= 3;
    while (peers.size() <= k) {
      const std::string n = "10.0.0." + std::to_string(10 + peers.size()) + "@o2ib";
      auto& p = peers.emplace_back(fabric, n.c_str(), 1000 + peers.size());
      p.tr.untrusted_sinks = true;  // its PUT_ACKs name whatever the input says
      p.listen();
    }
    auto it = peers.begin();
    std::advance(it, k);
    return *it;
  };
  std::list<lnd::Tx> txs;
  std::deque<std::vector<std::uint8_t>> payloads;

  static const bool trace = std::getenv("LNETR_FUZZ_TRACE") != nullptr;
  for (int ops = 0; !in.done() && ops < 200; ++ops) {
    const std::uint8_t op = in.u8();
    if (trace) std::fprintf(stderr, "op %d (%u)\n", op % 12, op);
    switch (op % 12) {
      case 0: {  // a peer connects with any private data
        sim::RawPeer& p = peer(in.u8());
        auto priv = in.bytes(80);
        if (in.u8() & 1) priv = sim::connreq(p.me, p.stamp, me, in.u8() & 1 ? 0 : 77,
                                              {static_cast<std::uint16_t>(in.u8()), in.u16(), in.u16()},
                                              in.u8() & 1 ? kVersion1 : kVersion2);
        p.connect(me, priv, static_cast<std::uint16_t>(in.u16() % 2048));
        break;
      }
      case 1: {  // raw bytes on a peer's connection
        sim::RawPeer& p = peer(in.u8());
        if (p.established && p.id && !p.id->error) p.send(in.bytes(4096));
        break;
      }
      case 2: {  // a well-formed message with fuzzed fields
        sim::RawPeer& p = peer(in.u8());
        if (!p.established || !p.id || p.id->error) break;
        const std::uint8_t t = in.u8() % 9;
        // Cookies the node used (seen in what it sent), or any.
        Cookie cookie = in.u32();
        auto got = p.messages();
        if (!got.empty() && (in.u8() & 1)) {
          const Msg& m = got[in.u8() % got.size()];
          if (auto* pr = m.put_req()) cookie = pr->cookie;
          if (auto* pa = m.put_ack()) cookie = pa->dst_cookie;
          if (auto* g = m.get_req()) cookie = g->cookie;
        }
        const std::uint8_t credits = in.u8() % 4;
        const std::uint32_t len = in.u32() % (2u << 20);
        LnetHeader h = make_put({kPidLustre, p.me}, {kPidLustre, me}, 4, 1, WireHandle::none(), 0,
                                std::min<std::uint32_t>(len, kImmediateMaxPayload));
        static std::vector<std::uint8_t> sink(2u << 20);
        const RdmaFrag frag{std::min<std::uint32_t>(len, 1u << 20),
                            reinterpret_cast<std::uint64_t>(sink.data()) + in.u8()};
        const RdmaDesc rd(in.u8() & 1 ? 0xa11 : in.u32(), std::span(&frag, 1));
        std::vector<std::uint8_t> pay(h.payload_length, 0x33);
        Msg m;
        switch (t) {
          case 0: m = Msg{p.header(o2ib::MsgType::noop, credits), Noop{}}; break;
          case 1: m = Msg{p.header(o2ib::MsgType::immediate, credits), Immediate{h, pay}}; break;
          case 2:
            h.payload_length = len;
            m = Msg{p.header(o2ib::MsgType::put_req, credits), PutReq{h, cookie}};
            break;
          case 3: m = Msg{p.header(o2ib::MsgType::put_ack, credits), PutAck{cookie, in.u32(), rd}}; break;
          case 4:
            m = Msg{p.header(o2ib::MsgType::put_done, credits), Completion{cookie, static_cast<std::int32_t>(in.u32())}};
            break;
          case 5:
            m = Msg{p.header(o2ib::MsgType::put_nak, credits), Completion{cookie, static_cast<std::int32_t>(in.u32())}};
            break;
          case 6: {
            LnetHeader g = make_get({kPidLustre, p.me}, {kPidLustre, in.u8() & 1 ? me : p.me}, 4, 1, WireHandle{1, 2},
                                    len);
            m = Msg{p.header(o2ib::MsgType::get_req, credits), GetReq{g, cookie, rd}};
            break;
          }
          case 7:
            m = Msg{p.header(o2ib::MsgType::get_done, credits), Completion{cookie, static_cast<std::int32_t>(in.u32())}};
            break;
          default: {
            LnetHeader g = make_get({kPidLustre, p.me}, {kPidLustre, me}, 0, 0, WireHandle{1, 2}, len % 5000);
            m = Msg{p.header(o2ib::MsgType::immediate, credits), Immediate{g, {}}};
            break;
          }
        }
        p.send(m);
        break;
      }
      case 3: {  // the node sends to a peer
        sim::RawPeer& p = peer(in.u8());
        const std::uint32_t n = in.u32() % (1u << 20);
        auto& pay = payloads.emplace_back(n, 0x44);
        lnd::Tx& tx = txs.emplace_back();
        if (in.u8() & 1) {
          tx.hdr = make_get({kPidLustre, me}, {kPidLustre, p.me}, 4, 1, WireHandle{3, 4}, n);
          tx.reply_sink = pay;
        } else {
          tx.hdr = make_put({kPidLustre, me}, {kPidLustre, p.me}, 4, 1, WireHandle::none(), 0, n);
          tx.payload = pay;
        }
        if (node->send(p.me, tx) < 0) upper.handed_back[&tx] = -1;
        break;
      }
      case 4:
        fabric.run(in.u8());
        break;
      case 5:
        now += std::chrono::seconds(in.u8());
        node->tick();
        break;
      case 6:
        upper.resume(in.u8() % 8);
        break;
      case 7: {  // a peer disconnects, or vanishes
        sim::RawPeer& p = peer(in.u8());
        if (p.id && !p.id->dead()) {
          if (in.u8() & 1) {
            p.close();
          } else {
            p.tr.vanish();
          }
        }
        break;
      }
      case 8: {  // a peer answers the next request with any CONNACK or reject
        sim::RawPeer& p = peer(in.u8());
        auto priv = in.bytes(80);
        const bool reject = in.u8() & 1;
        p.on_request = [&p, priv, reject](ConnRequest& r) {
          if (reject || p.busy()) {
            p.tr.reject(r.id, ByteSpan(priv.data(), priv.size()));
            p.tr.destroy(r.id);
            p.on_request = nullptr;
            return true;
          }
          p.accept_with(r, priv);
          p.on_request = nullptr;
          return true;
        };
        break;
      }
      case 9:
        upper.policy = in.u8();
        break;
      case 10:
        upper.pump();
        break;
      default:
        node->reap();
        break;
    }
    for (const auto& pi : node->peers())
      for (const auto& c : pi.conns) {
        FUZZ_CHECK(c.credits >= 0 && c.credits <= c.queue_depth);
        FUZZ_CHECK(c.reserved_credits >= 0 && c.reserved_credits <= c.queue_depth);
        FUZZ_CHECK(c.outstanding_credits >= 0 && c.outstanding_credits <= c.queue_depth);
      }
    FUZZ_CHECK(tr.violations.empty());
  }

  fabric.run(100000);
  upper.pump();
  fabric.run(100000);
  node->shutdown();
  fabric.run(100000);
  node->reap();
  for (const std::string& v : tr.violations) std::fprintf(stderr, "fabric violation: %s\n", v.c_str());
  if (trace) {
    const Stats& st = node->stats();
    for (std::size_t i = 0; i < st.tx_msgs.size(); ++i)
      if (st.tx_msgs[i] || st.rx_msgs[i])
        std::fprintf(stderr, "msg slot %zu: tx %llu rx %llu\n", i, static_cast<unsigned long long>(st.tx_msgs[i]),
                     static_cast<unsigned long long>(st.rx_msgs[i]));
  }
  FUZZ_CHECK(tr.violations.empty());
  FUZZ_CHECK(node->tx_descs_in_use() == 0);
  FUZZ_CHECK(node->connections() == 0);
  // Every message the node took was handed back.
  for (const lnd::Tx& t : txs) FUZZ_CHECK(upper.handed_back.count(&t) == 1);
  FUZZ_CHECK(tr.live_windows() == 0);
  node.reset();
  FUZZ_CHECK(tr.live_regions() == 0);
  return 0;
}
