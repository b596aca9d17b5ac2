// A simulated RDMA fabric for the o2iblnd engine's tests and fuzzer: the
// Transport interface (lnd/o2iblnd/transport.hpp) without a device.
//
// It behaves as RC queue pairs over rdma_cm do, strictly enough to catch an
// engine's mistakes:
//   - connection management: resolve (known addresses only), connect to a
//     listener (none: "invalid service id"), accept (the active side gets
//     ESTABLISHED with the accept's private data, the passive side a step
//     later), reject (consumer-defined private data), disconnect (both
//     sides' queue pairs go to the error state; both get DISCONNECTED);
//   - a SEND needs a posted receive at the other end (none: the sender's
//     work request fails with "RNR retry exceeded", as a credit overrun
//     would end on a real fabric), and must fit it;
//   - every scatter/gather entry must lie in memory registered under the
//     key it names; an RDMA write must land in memory the target registered
//     for remote writes under the rkey it names;
//   - a queue pair in the error state completes everything posted, flushed;
//   - nothing happens until the test runs the fabric: work requests and
//     events wait in one FIFO, so the engine never sees a completion inside
//     its own post.
// Everything here is single-threaded and deterministic.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lnd/o2iblnd/engine.hpp"
#include "lnd/o2iblnd/transport.hpp"

namespace lnetr::o2ib::sim {

class Fabric;
class SimTransport;

struct SimId final : CmId {
  SimTransport* owner = nullptr;
  std::uint32_t local_ip = 0, remote_ip = 0;
  std::uint16_t local_port = 0, remote_port = 0;
  SimId* peer = nullptr;  // the other end, once a request reached it
  bool has_qp = false;
  QpCaps caps;
  std::deque<RecvWr> recvs;
  std::uint32_t sends_outstanding = 0;  // work requests posted, not yet processed
  bool error = false;                   // queue pair in the error state
  bool connected = false;
  bool destroyed = false;
  bool gone = false;  // its node vanished: no more events, no word to the peer
  bool disconnected_sent = false;
  bool dead() const noexcept { return destroyed || gone; }
  bool held = false;   // its sends wait (a stalled peer)
  bool silent = false; // its sends vanish (a black hole): never complete
  std::vector<std::function<void()>> held_work;
};

class SimTransport final : public Transport {
 public:
  SimTransport(Fabric& f, std::string name);
  ~SimTransport() override;

  // Connection requests to ip:port go to `on_request`.
  void listen(std::uint32_t ip, std::uint16_t port, std::function<void(ConnRequest&&)> on_request);
  // This transport answers for `ip` (resolve() succeeds towards it).
  void add_address(std::uint32_t ip);
  // Memory the owner registered (router buffers, pools): lkey() finds it
  // and map_sink() opens it.
  void register_payload(void* addr, std::size_t len);
  // When set (the default), lkey() and map_sink() answer for any memory,
  // as if the Upper's memory were all registered.
  bool all_registered = true;
  std::uint32_t sge_limit = 30;
  // create_qp() fails with -ENOMEM above this many receive requests (0: never).
  std::uint32_t max_recv_wr = 0;
  // A requester that never sends the RTU: the side that accepted it never
  // hears ESTABLISHED (a half-open connection).
  bool withhold_rtu = false;
  // Errors the fabric saw this transport's engine make (RNR, bad keys,
  // posting on a destroyed identifier, destroying one with work posted).
  std::vector<std::string> violations;
  // Sinks this transport's owner names may lie (a fuzzed peer): an RDMA
  // write outside them fails as a device fails it (remote access error,
  // both queue pairs in error) without counting against the writer.
  bool untrusted_sinks = false;
  // Per-transfer keys, as memory windows give them: map_sink() opens a
  // key of its own for each sink (the only key a peer may write it with),
  // and unmap_sink() kills it in the queue pair's order, behind whatever
  // was posted before, then completes the engine's wr_id.
  bool windows = false;
  // Sink keys map_sink() gave that are still live.
  std::size_t live_windows() const noexcept { return windows_.size(); }

  // Transport
  void attach(TransportEvents* events) noexcept override { events_ = events; }
  CmId* resolve(std::uint32_t src_ip, std::uint32_t dst_ip, std::uint16_t port, bool privileged, int tos,
                int& error) override;
  int create_qp(CmId* id, const QpCaps& caps) override;
  int connect(CmId* id, const ConnectParams& p) override;
  int accept(CmId* id, const ConnectParams& p) override;
  int reject(CmId* id, ByteSpan private_data) override;
  void disconnect(CmId* id) override;
  void destroy(CmId* id) override;
  int post_recv(CmId* id, const RecvWr& wr) override;
  int post_send(CmId* id, const SendWr* wrs, std::size_t n) override;
  std::uint32_t max_send_sge() const noexcept override { return sge_limit; }
  bool register_memory(void* addr, std::size_t len, bool remote_write, Region& out) override;
  void deregister(Region& r) override;
  std::optional<std::uint32_t> lkey(const void* addr, std::size_t len) const noexcept override;
  std::optional<Sink> map_sink(CmId* id, void* addr, std::size_t len, bool& busy) override;
  bool unmap_sink(const Sink& s, std::uint64_t done) noexcept override;

  TransportEvents* events() const noexcept { return events_; }
  const std::string& name() const noexcept { return name_; }
  // The node loses power: every identifier is gone at once, nothing more is
  // delivered to it, its peers are told nothing (their next send fails);
  // whatever the old engine still does with them is ignored.
  void vanish();
  // Let the sends of an identifier that was held go (in order).
  void release(SimId* id);
  // Identifiers not destroyed (0 at rest once the engine closed everything).
  std::size_t live_ids() const noexcept;
  std::size_t live_regions() const noexcept { return regions_.size(); }
  std::vector<SimId*> ids() const;
  // The port the next active connection binds (privileged ports 1023 down).
  std::uint16_t next_port = 1023;

 private:
  friend class Fabric;
  struct Reg {
    std::uintptr_t addr = 0;
    std::size_t len = 0;
    std::uint32_t lkey = 0, rkey = 0;
    bool remote_write = false;
  };
  bool covers(std::uint32_t lkey, std::uint64_t addr, std::uint32_t len) const noexcept;
  bool remote_ok(std::uint32_t rkey, std::uint64_t addr, std::uint32_t len) const noexcept;
  void flush(SimId* id);
  void flush_recv(SimId* id, const RecvWr& wr);

  Fabric& fabric_;
  std::string name_;
  TransportEvents* events_ = nullptr;
  struct Listener {
    std::uint32_t ip;
    std::uint16_t port;
    std::function<void(ConnRequest&&)> on_request;
  };
  std::vector<Listener> listeners_;
  std::vector<SimId*> ids_;  // owned by the fabric (they outlive us)
  std::map<std::uint32_t, Reg> regions_;  // by lkey
  std::vector<Reg> payload_;
  std::uint32_t next_key_ = 0x100;
  struct Window {
    std::uintptr_t addr = 0;
    std::size_t len = 0;
    SimId* id = nullptr;
    bool invalidating = false;
  };
  std::map<std::uint32_t, Window> windows_;  // by key
  std::uint32_t next_window_ = 0x20000001;
};

// The wire: one FIFO of things to happen.
class Fabric {
 public:
  void add(SimTransport* t) { transports_.push_back(t); }
  void remove(SimTransport* t);
  SimTransport* by_address(std::uint32_t ip) const noexcept;
  void post(std::function<void()> fn) { work_.push_back(std::move(fn)); }
  SimId* new_id() { return ids_.emplace_back(std::make_unique<SimId>()).get(); }
  // Run until nothing is left (or `max` steps); the steps run.
  std::size_t run(std::size_t max = 1'000'000);
  bool idle() const noexcept { return work_.empty(); }
  // Rejects seen by active sides (private data as sent).
  std::size_t steps = 0;

 private:
  std::vector<SimTransport*> transports_;
  std::deque<std::function<void()>> work_;
  std::vector<std::unique_ptr<SimId>> ids_;  // every identifier ever made
};

// A peer played by hand, as the tests of a kernel's reactions need: it
// connects with any private data (and keeps the reject it gets), or accepts
// with a CONNACK it builds, and sends raw messages on its connection while
// keeping whatever it receives.
class RawPeer final : public TransportEvents {
 public:
  RawPeer(Fabric& f, const char* nid_s, std::uint64_t incarnation = 0x5f1a2b3c4d5e6ull)
      : tr(f, "raw"), me(*parse_nid(nid_s)), stamp(incarnation) {
    tr.add_address(me.addr4());
    tr.attach(this);
    mem.resize(kBufs * kMaxMsgSize);
    tr.register_memory(mem.data(), mem.size(), false, region);
  }
  ~RawPeer() { tr.deregister(region); }

  // Whether it has a connection (made or being made) whose queue pair is
  // not dead: it plays one connection at a time (its buffers are one set).
  bool busy() const noexcept { return id && !id->dead() && !id->error; }
  // Connect to `to` with `private_data` (a CONNREQ, or anything); nothing
  // while busy().
  void connect(const Nid& to, std::vector<std::uint8_t> private_data, std::uint16_t from_port = 1023) {
    if (busy()) return;
    int err = 0;
    tr.next_port = from_port;
    id = static_cast<SimId*>(tr.resolve(me.addr4(), to.addr4(), kServicePort, true, -1, err));
    pending = std::move(private_data);
    if (from_port >= 1024) id->local_port = from_port;
  }
  // Listen, and accept each request with a CONNACK of `qd` (0: the
  // request's) unless `on_request` takes it first.
  void listen(std::uint16_t qd = 0) {
    tr.listen(me.addr4(), kServicePort, [this, qd](ConnRequest&& r) {
      requests.push_back(std::vector<std::uint8_t>(r.data.begin(), r.data.begin() + r.len));
      if (on_request && on_request(r)) return;
      if (busy()) {
        tr.reject(r.id, {});
        tr.destroy(r.id);
        return;
      }
      auto d = decode_msg(r.private_data());
      if (!d || !d->msg.connparams()) return;
      peer_stamp = d->msg.hdr.srcstamp;
      peer_nid = d->msg.hdr.srcnid;
      version = d->msg.hdr.version;
      const ConnParams cp = *d->msg.connparams();
      queue_depth = qd ? qd : cp.queue_depth;
      Msg ack;
      ack.hdr = header(MsgType::connack);
      ack.body = ConnParams{queue_depth, cp.max_frags, kMaxMsgSize};
      std::vector<std::uint8_t> out(kConnMsgSize);
      (void)encode_msg(ack, out);
      accept_with(r, out);
    });
  }
  // Accept `r` with these private data bytes (a CONNACK, or anything).
  void accept_with(ConnRequest& r, const std::vector<std::uint8_t>& private_data) {
    id = static_cast<SimId*>(r.id);
    if (auto d = decode_msg(ByteSpan(r.data.data(), r.len))) {
      peer_stamp = d->msg.hdr.srcstamp;
      peer_nid = d->msg.hdr.srcnid;
    }
    make_qp();
    ConnectParams p;
    p.private_data = ByteSpan(private_data.data(), private_data.size());
    tr.accept(id, p);
    established = true;
  }
  MsgHeader header(MsgType t, std::uint8_t credits = 0) const {
    MsgHeader h;
    h.version = version;
    h.type = t;
    h.credits = credits;
    h.srcnid = me;
    h.srcstamp = stamp;
    h.dstnid = peer_nid;
    h.dststamp = peer_stamp;
    return h;
  }
  // Send raw bytes as one message on the connection.
  void send(std::vector<std::uint8_t> bytes) {
    std::uint8_t* b = mem.data() + (kBufs - 1 - (sends++ % 8)) * kMaxMsgSize;
    if (!bytes.empty()) std::memcpy(b, bytes.data(), bytes.size());
    Sge sge{reinterpret_cast<std::uint64_t>(b), static_cast<std::uint32_t>(bytes.size()), region.lkey};
    SendWr wr;
    wr.wr_id = 1;
    wr.signaled = true;
    wr.sge = &sge;
    wr.num_sge = 1;
    tr.post_send(id, &wr, 1);
  }
  void send(const Msg& m) {
    std::vector<std::uint8_t> out(kMaxMsgSize);
    auto n = encode_msg(m, out);
    out.resize(n ? *n : 0);
    send(out);
  }
  // What it received, decoded.
  std::vector<Msg> messages() const {
    std::vector<Msg> out;
    for (const auto& b : got)
      if (auto d = decode_msg(b)) out.push_back(d->msg);
    return out;
  }

  // TransportEvents
  void on_resolved(CmId* cid, int status) override {
    if (status != 0) return;
    make_qp();
    ConnectParams p;
    p.private_data = ByteSpan(pending.data(), pending.size());
    tr.connect(cid, p);
  }
  void on_established(CmId*, ByteSpan private_data) override {
    established = true;
    connack.assign(private_data.begin(), private_data.end());
    if (auto d = decode_msg(private_data)) {
      peer_stamp = d->msg.hdr.srcstamp;
      peer_nid = d->msg.hdr.srcnid;
    }
  }
  void on_rejected(CmId*, RejectKind kind, ByteSpan private_data) override {
    rejected = true;
    reject_kind = kind;
    reject.assign(private_data.begin(), private_data.end());
  }
  void on_connect_error(CmId*, int) override {}
  void on_disconnected(CmId*) override { disconnected = true; }
  void on_completion(const WorkCompletion& wc) override {
    if (wc.op != WcOp::recv) return;
    if (wc.status != 0) return;
    auto* b = reinterpret_cast<std::uint8_t*>(wc.wr_id);
    got.emplace_back(b, b + wc.byte_len);
    RecvWr r;
    r.wr_id = wc.wr_id;
    r.sge = Sge{wc.wr_id, kMaxMsgSize, region.lkey};
    if (!id->error) tr.post_recv(id, r);
  }
  void close() {
    tr.disconnect(id);
  }

  static constexpr std::size_t kBufs = 48;
  SimTransport tr;
  Nid me;
  std::uint64_t stamp;
  std::vector<std::uint8_t> mem;
  Region region;
  SimId* id = nullptr;
  std::vector<std::uint8_t> pending;
  std::uint16_t version = kVersion2;
  std::uint16_t queue_depth = 8;
  Nid peer_nid;
  std::uint64_t peer_stamp = 0;
  std::function<bool(ConnRequest&)> on_request;
  std::vector<std::vector<std::uint8_t>> requests;
  bool established = false, rejected = false, disconnected = false;
  RejectKind reject_kind = RejectKind::other;
  std::vector<std::uint8_t> reject, connack;
  std::vector<std::vector<std::uint8_t>> got;
  int sends = 0;

 private:
  void make_qp() {
    QpCaps caps;
    caps.max_send_wr = 4096;
    caps.max_recv_wr = 40;
    caps.max_send_sge = 30;
    tr.create_qp(id, caps);
    for (std::size_t i = 0; i < 40; ++i) {
      RecvWr r;
      std::uint8_t* b = mem.data() + i * kMaxMsgSize;
      r.wr_id = reinterpret_cast<std::uint64_t>(b);
      r.sge = Sge{r.wr_id, kMaxMsgSize, region.lkey};
      tr.post_recv(id, r);
    }
  }
};

// The 56-byte CONNREQ of `src` (incarnation `stamp`) to `dst`, as Linux
// builds it, for tests that play a peer by hand.
std::vector<std::uint8_t> connreq(const Nid& src, std::uint64_t stamp, const Nid& dst, std::uint64_t dststamp = 0,
                                  ConnParams cp = {}, std::uint16_t version = kVersion2);

}  // namespace lnetr::o2ib::sim
