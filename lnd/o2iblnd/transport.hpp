// What the o2iblnd protocol engine needs from an RDMA device: connection
// management (rdma_cm's resolve / connect / accept / reject / disconnect),
// a reliable-connected queue pair per connection, work requests and their
// completions, and registered memory.  The verbs layer (verbs.*) implements
// it over libibverbs and librdmacm; the unit tests implement it with a
// simulated fabric, so that every protocol path runs without a device.
//
// One Transport is one worker's view of one device: its completion queue,
// its connection-management events and the memory registered on the
// device's protection domain.  Everything here is called on the owning
// worker's thread, and TransportEvents are delivered there (from poll()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "router/bytes.hpp"

namespace lnetr::o2ib {

// A connection-manager identifier and, once created, its queue pair (an
// rdma_cm_id).  Made by the transport; the engine keeps it until destroy().
struct CmId {
  void* context = nullptr;  // the engine's connection
};

// Local memory of a work request.
struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

enum class WrOp : std::uint8_t { send, rdma_write };

struct SendWr {
  std::uint64_t wr_id = 0;
  WrOp op = WrOp::send;
  bool signaled = false;
  const Sge* sge = nullptr;
  std::uint32_t num_sge = 0;
  std::uint64_t remote_addr = 0;  // rdma_write
  std::uint32_t rkey = 0;         // rdma_write
};

struct RecvWr {
  std::uint64_t wr_id = 0;
  Sge sge;
};

enum class WcOp : std::uint8_t { send, rdma_write, recv };

struct WorkCompletion {
  std::uint64_t wr_id = 0;
  WcOp op = WcOp::send;
  // 0: success; otherwise the device's status (ibv_wc_status).
  std::uint32_t status = 0;
  // The work request was flushed (its queue pair went to the error state,
  // as every outstanding request does when a connection closes).
  bool flushed = false;
  std::uint32_t byte_len = 0;  // recv: bytes received
};

// Queue-pair sizes the engine asks for.
struct QpCaps {
  std::uint32_t max_send_wr = 0;
  std::uint32_t max_recv_wr = 0;
  std::uint32_t max_send_sge = 0;
  // Sinks (map_sink) the connection may have open at once: a transport
  // that opens each through its queue pair sizes the send queue for them.
  std::uint32_t max_sinks = 0;
};

// Work requests whose wr_id has these low bits are a transport's own (the
// engine's use 1 to 3): their completions never reach the engine.
constexpr std::uint64_t kTransportWrTag = 7;

// rdma_conn_param as o2iblnd sets it: no RDMA READ or atomics (responder
// resources and initiator depth 0), flow control on.
struct ConnectParams {
  ByteSpan private_data;
  std::uint8_t retry_count = 5;
  std::uint8_t rnr_retry_count = 6;
};

// How a connection request was rejected (rdma_cm REJECTED event).
enum class RejectKind : std::uint8_t {
  consumer,            // by the peer's ULP: private data holds its reject
  stale_conn,          // IB CM "stale connection"
  invalid_service_id,  // nobody listens on the service (port)
  other,               // any other CM-level reason
};

// Registered memory.
struct Region {
  void* handle = nullptr;
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
};

// Where a peer may RDMA-write a sink: the key and address to advertise.
struct Sink {
  std::uint32_t rkey = 0;
  std::uint64_t addr = 0;
  void* handle = nullptr;     // the transport's, for unmap_sink()
  std::uint64_t window = 0;   // idem: the memory window the key is (0: none)
};

class TransportEvents {
 public:
  // Address and route resolved for an active connection (status 0), or
  // not (-errno: -EHOSTUNREACH, -ETIMEDOUT, ...).
  virtual void on_resolved(CmId* id, int status) = 0;
  // ESTABLISHED; the active side gets the accept's private data.
  virtual void on_established(CmId* id, ByteSpan private_data) = 0;
  virtual void on_rejected(CmId* id, RejectKind kind, ByteSpan private_data) = 0;
  // UNREACHABLE or CONNECT_ERROR while connecting.
  virtual void on_connect_error(CmId* id, int status) = 0;
  virtual void on_disconnected(CmId* id) = 0;
  virtual void on_completion(const WorkCompletion& wc) = 0;

 protected:
  ~TransportEvents() = default;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Where events about this transport's identifiers go.
  virtual void attach(TransportEvents* events) noexcept = 0;

  // ---- connection management ----
  // Begin an active connection from src_ip to dst_ip:port (IPv4, host
  // order): address then route resolution, 5 s each; on_resolved()
  // follows.  With `privileged` the source port is the highest free one
  // from 1023 down to 512.  tos >= 0 sets the IP type of service.  nullptr
  // with `error` (-errno) if it cannot even start.
  virtual CmId* resolve(std::uint32_t src_ip, std::uint32_t dst_ip, std::uint16_t port, bool privileged, int tos,
                        int& error) = 0;
  // The queue pair of `id`, on this transport's completion queue.  0, or
  // -errno (-ENOMEM: smaller sizes may still fit).
  virtual int create_qp(CmId* id, const QpCaps& caps) = 0;
  virtual int connect(CmId* id, const ConnectParams& p) = 0;
  virtual int accept(CmId* id, const ConnectParams& p) = 0;
  // Reject a connection request with consumer-defined private data.
  virtual int reject(CmId* id, ByteSpan private_data) = 0;
  // Start tearing down (the queue pair goes to the error state: whatever is
  // posted completes, flushed).
  virtual void disconnect(CmId* id) = 0;
  // Destroy the queue pair and the identifier; no event or completion of
  // it follows.
  virtual void destroy(CmId* id) = 0;

  // ---- data path ----
  virtual int post_recv(CmId* id, const RecvWr& wr) = 0;
  // Post n chained work requests.
  virtual int post_send(CmId* id, const SendWr* wrs, std::size_t n) = 0;
  // Scatter/gather entries a send work request may have.
  virtual std::uint32_t max_send_sge() const noexcept = 0;

  // ---- memory ----
  virtual bool register_memory(void* addr, std::size_t len, bool remote_write, Region& out) = 0;
  virtual void deregister(Region& r) = 0;
  // The local key of payload memory its owner registered with the device
  // (router buffers, DPDK mbuf pools), or nothing: the engine then copies
  // through its own registered memory.
  virtual std::optional<std::uint32_t> lkey(const void* addr, std::size_t len) const noexcept = 0;
  // Open [addr, addr + len) of such memory to RDMA writes from the peer of
  // `id`: the key and address to advertise, or nothing if the memory is
  // not registered for remote writes, or (`busy`) if it is but the
  // connection or the device has no key left to give.  unmap_sink() once
  // the transfer is over (the write has completed or the connection is
  // gone).
  virtual std::optional<Sink> map_sink(CmId* id, void* addr, std::size_t len, bool& busy) = 0;
  // Close a sink.  True: its key dies only when an invalidation queued on
  // its connection has run, and a completion whose wr_id is `done` says so
  // (successful, or flushed with the connection: the key is dead either
  // way); until then the peer can still write the memory.  False: the key
  // is dead already (or lives on, the whole pool's), and no completion
  // follows.  `done` 0: no completion is wanted.
  virtual bool unmap_sink(const Sink& s, std::uint64_t done) noexcept = 0;
};

}  // namespace lnetr::o2ib
