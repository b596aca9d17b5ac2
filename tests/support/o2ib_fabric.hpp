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
  // Errors the fabric saw this transport's engine make (RNR, bad keys,
  // posting on a destroyed identifier, destroying one with work posted).
  std::vector<std::string> violations;

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
  std::optional<Sink> map_sink(CmId* id, void* addr, std::size_t len) override;
  void unmap_sink(const Sink& s) noexcept override;

  TransportEvents* events() const noexcept { return events_; }
  const std::string& name() const noexcept { return name_; }
  // The node loses power: every identifier is gone at once, nothing more is
  // delivered to it, its peers are told nothing (their next send fails);
  // whatever the old engine still does with them is ignored.
  void vanish();
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

// The 56-byte CONNREQ of `src` (incarnation `stamp`) to `dst`, as Linux
// builds it, for tests that play a peer by hand.
std::vector<std::uint8_t> connreq(const Nid& src, std::uint64_t stamp, const Nid& dst, std::uint64_t dststamp = 0,
                                  ConnParams cp = {}, std::uint16_t version = kVersion2);

}  // namespace lnetr::o2ib::sim
