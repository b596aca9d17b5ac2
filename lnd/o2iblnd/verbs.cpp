#include "lnd/o2iblnd/verbs.hpp"

#include <arpa/inet.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace lnetr::o2ib {
namespace {

constexpr int kResolveTimeoutMs = 5000;  // address and route, each (o2iblnd.md §4.5)
constexpr int kMinCq = 4096;
constexpr std::size_t kMaxCqs = 8;
constexpr std::uint32_t kMaxSge = 30;
// Memory windows one transport keeps (bound, or free for the next sink).
constexpr std::size_t kMaxWindows = 65536;

// A window's work requests: its index and generation, and the tag that
// keeps their completions from the engine.
std::uint64_t window_wr_id(std::uint32_t index, std::uint32_t gen) {
  return (std::uint64_t{gen} << 32) | (std::uint64_t{index} << 3) | kTransportWrTag;
}

std::uint64_t elapsed_ns(std::chrono::steady_clock::time_point since) noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - since).count());
}

// IB CM reject reasons rdma_cm reports as a REJECTED event's status.
constexpr int kIbRejInvalidServiceId = 8;
constexpr int kIbRejStaleConn = 10;
constexpr int kIbRejConsumerDefined = 28;

sockaddr_in ipv4(std::uint32_t ip, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(ip);
  return a;
}

std::string ip_string(std::uint32_t ip) {
  char b[INET_ADDRSTRLEN];
  const in_addr a{htonl(ip)};
  inet_ntop(AF_INET, &a, b, sizeof b);
  return b;
}

bool nonblocking(int fd) {
  const int fl = fcntl(fd, F_GETFL);
  return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

int neg_errno(int fallback = EIO) { return -(errno ? errno : fallback); }

}  // namespace

bool verbs_available(std::string& why) {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) {
    why = std::string("no RDMA subsystem (") + std::strerror(errno ? errno : ENOSYS) + ")";
    return false;
  }
  ibv_free_device_list(list);
  if (n == 0) {
    why = "no RDMA device";
    return false;
  }
  return true;
}

// ---- VerbsDevice --------------------------------------------------------------------------

std::shared_ptr<VerbsDevice> VerbsDevice::open(std::uint32_t ip, std::string& err, RemoteKeys keys) {
  std::shared_ptr<VerbsDevice> d(new VerbsDevice());
  d->ip_ = ip;
  d->keys_ = keys;
  d->channel_ = rdma_create_event_channel();
  if (!d->channel_) {
    err = std::string("rdma_cm is not available (") + std::strerror(errno) + ")";
    return nullptr;
  }
  if (rdma_create_id(d->channel_, &d->anchor_, nullptr, RDMA_PS_TCP) != 0) {
    err = std::string("rdma_create_id: ") + std::strerror(errno);
    return nullptr;
  }
  sockaddr_in a = ipv4(ip, 0);
  if (rdma_bind_addr(d->anchor_, reinterpret_cast<sockaddr*>(&a)) != 0 || !d->anchor_->verbs) {
    err = "no RDMA device has address " + ip_string(ip) + " (" + std::strerror(errno) +
          "): the interface must be an IPoIB interface or the netdev of a RoCE device";
    return nullptr;
  }
  if (ibv_query_device(d->anchor_->verbs, &d->attr_) != 0) {
    err = std::string("ibv_query_device: ") + std::strerror(errno);
    return nullptr;
  }
  d->windows_ = keys == RemoteKeys::transfer && d->attr_.max_mw > 0 &&
                (d->attr_.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
  d->pd_ = ibv_alloc_pd(d->anchor_->verbs);
  if (!d->pd_) {
    err = std::string("ibv_alloc_pd: ") + std::strerror(errno);
    return nullptr;
  }
  return d;
}

VerbsDevice::~VerbsDevice() {
  for (Mr& m : mrs_) ibv_dereg_mr(m.mr);
  for (std::size_t i = 0; i < n_live_.load(); ++i) ibv_dereg_mr(live_[i].mr);
  if (pd_) ibv_dealloc_pd(pd_);
  if (anchor_) rdma_destroy_id(anchor_);
  if (channel_) rdma_destroy_event_channel(channel_);
}

std::string VerbsDevice::name() const {
  const char* n = ibv_get_device_name(anchor_->verbs->device);
  return n ? n : "?";
}

ibv_mr* VerbsDevice::reg(void* addr, std::size_t len, bool remote_write, std::string& err) {
  // Per-transfer keys: the pools themselves open nothing to peers (windows
  // are bound to them).
  int access = IBV_ACCESS_LOCAL_WRITE;
  if (remote_write && keys_ == RemoteKeys::pool) access |= IBV_ACCESS_REMOTE_WRITE;
  if (remote_write && windows_) access |= IBV_ACCESS_MW_BIND;
  ibv_mr* mr = ibv_reg_mr(pd_, addr, len, access);
  if (!mr)
    err = "ibv_reg_mr of " + std::to_string(len) + " bytes on " + name() + ": " + std::strerror(errno) +
          " (is the memlock limit high enough?)";
  return mr;
}

bool VerbsDevice::register_live(void* addr, std::size_t len, std::string& err) {
  const std::size_t n = n_live_.load(std::memory_order_relaxed);
  if (n == kLiveRegions) {
    err = name() + ": " + std::to_string(kLiveRegions) + " memory regions added since the start already";
    return false;
  }
  ibv_mr* mr = reg(addr, len, true, err);
  if (!mr) return false;
  live_[n] = Mr{reinterpret_cast<std::uintptr_t>(addr), len, mr, true};
  n_live_.store(n + 1, std::memory_order_release);
  return true;
}

bool VerbsDevice::register_payload(void* addr, std::size_t len, bool remote_write, std::string& err) {
  ibv_mr* mr = reg(addr, len, remote_write, err);
  if (!mr) return false;
  Mr m{reinterpret_cast<std::uintptr_t>(addr), len, mr, remote_write};
  mrs_.insert(std::upper_bound(mrs_.begin(), mrs_.end(), m, [](const Mr& x, const Mr& y) { return x.addr < y.addr; }),
              m);
  return true;
}

const VerbsDevice::Mr* VerbsDevice::find(const void* addr, std::size_t len) const noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  auto it = std::upper_bound(mrs_.begin(), mrs_.end(), a, [](std::uintptr_t v, const Mr& m) { return v < m.addr; });
  if (it != mrs_.begin() && a + len <= std::prev(it)->addr + std::prev(it)->len) return &*std::prev(it);
  // Memory added at run time (few regions, and only after a pool grew).
  const std::size_t n = n_live_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i)
    if (a >= live_[i].addr && a + len <= live_[i].addr + live_[i].len) return &live_[i];
  return nullptr;
}

std::optional<std::uint32_t> VerbsDevice::lkey(const void* addr, std::size_t len) const noexcept {
  const Mr* m = find(addr, len);
  if (!m) return std::nullopt;
  return m->mr->lkey;
}

std::optional<std::uint32_t> VerbsDevice::rkey(const void* addr, std::size_t len) const noexcept {
  const Mr* m = find(addr, len);
  if (!m || !m->remote || keys_ != RemoteKeys::pool) return std::nullopt;
  return m->mr->rkey;
}

ibv_mr* VerbsDevice::sink_mr(const void* addr, std::size_t len) const noexcept {
  const Mr* m = find(addr, len);
  return m && m->remote ? m->mr : nullptr;
}

// ---- VerbsTransport ----------------------------------------------------------------------------

struct VerbsTransport::Id final : CmId {
  rdma_cm_id* id = nullptr;
  bool has_qp = false;
  Cq* cq = nullptr;
  int reserve = 0;
  int tos = -1;
  std::vector<std::uint32_t> windows;  // bound through this queue pair
  std::uint32_t window_wrs = 0;        // send-queue slots their binds and invalidations hold
  std::uint32_t window_budget = 0;     // ... at most
};

VerbsTransport::VerbsTransport(std::shared_ptr<VerbsDevice> dev) : dev_(std::move(dev)) {
  max_sge_ = std::min<std::uint32_t>(kMaxSge, static_cast<std::uint32_t>(std::max(dev_->attr().max_sge, 1)));
}

VerbsTransport::~VerbsTransport() {
  for (Window& w : windows_)
    if (w.mw) ibv_dealloc_mw(w.mw);
  for (auto& l : listeners_) rdma_destroy_id(l->id);
  for (Own& o : own_) ibv_dereg_mr(o.mr);
  for (Cq& c : cqs_) ibv_destroy_cq(c.cq);
  if (comp_) ibv_destroy_comp_channel(comp_);
  if (channel_) rdma_destroy_event_channel(channel_);
}

bool VerbsTransport::init(std::string& err) {
  channel_ = rdma_create_event_channel();
  if (!channel_ || !nonblocking(channel_->fd)) {
    err = std::string("rdma_create_event_channel: ") + std::strerror(errno);
    return false;
  }
  comp_ = ibv_create_comp_channel(dev_->context());
  if (!comp_ || !nonblocking(comp_->fd)) {
    err = std::string("ibv_create_comp_channel: ") + std::strerror(errno);
    return false;
  }
  if (!cq_for(0)) {
    err = "cannot create a completion queue on " + dev_->name() + ": " + std::strerror(errno);
    return false;
  }
  wc_.resize(64);
  return true;
}

int VerbsTransport::cm_fd() const noexcept { return channel_ ? channel_->fd : -1; }
int VerbsTransport::comp_fd() const noexcept { return comp_ ? comp_->fd : -1; }

// A completion queue with room for `need` more outstanding completions:
// one that has it, the last one grown, or a new one.
VerbsTransport::Cq* VerbsTransport::cq_for(int need) {
  for (Cq& c : cqs_)
    if (c.size - c.reserved >= need) return &c;
  const int max_cqe = std::max(dev_->attr().max_cqe, kMinCq);
  if (!cqs_.empty()) {
    Cq& last = cqs_.back();
    const int want = std::min(max_cqe, std::max(last.size * 2, last.reserved + need));
    if (want > last.size && ibv_resize_cq(last.cq, want) == 0) {
      last.size = last.cq->cqe;
      if (last.size - last.reserved >= need) return &last;
    }
  }
  if (cqs_.size() >= kMaxCqs) return nullptr;
  const int size = std::min(max_cqe, std::max(kMinCq, need));
  ibv_cq* cq = ibv_create_cq(dev_->context(), size, nullptr, comp_, 0);
  if (!cq) return nullptr;
  cqs_.push_back(Cq{cq, cq->cqe, 0});
  if (armed_) ibv_req_notify_cq(cq, 0);
  return &cqs_.back();
}

bool VerbsTransport::listen(std::uint32_t ip, std::uint16_t port, std::function<void(ConnRequest&&)> on_request,
                            std::string& err) {
  auto l = std::make_unique<Listener>();
  l->on_request = std::move(on_request);
  if (rdma_create_id(channel_, &l->id, l.get(), RDMA_PS_TCP) != 0) {
    err = std::string("rdma_create_id: ") + std::strerror(errno);
    return false;
  }
  sockaddr_in a = ipv4(ip, port);
  if (rdma_bind_addr(l->id, reinterpret_cast<sockaddr*>(&a)) != 0) {
    err = "cannot listen on " + ip_string(ip) + ":" + std::to_string(port) + " (rdma_bind_addr: " +
          std::strerror(errno) + ")";
    rdma_destroy_id(l->id);
    return false;
  }
  if (rdma_listen(l->id, 0) != 0) {
    err = std::string("rdma_listen: ") + std::strerror(errno);
    rdma_destroy_id(l->id);
    return false;
  }
  listeners_.push_back(std::move(l));
  return true;
}

void VerbsTransport::unlisten() noexcept {
  for (auto& l : listeners_) rdma_destroy_id(l->id);
  listeners_.clear();
}

unsigned VerbsTransport::poll_cm(unsigned max) {
  unsigned n = 0;
  rdma_cm_event* ev = nullptr;
  cm_backlog_ = false;
  while (n < max && rdma_get_cm_event(channel_, &ev) == 0) {
    ++n;
    ++stats_.cm_events;
    const rdma_cm_event copy = *ev;
    std::array<std::uint8_t, 256> priv{};
    std::size_t plen = 0;
    if (ev->param.conn.private_data && ev->param.conn.private_data_len > 0) {
      plen = std::min<std::size_t>(ev->param.conn.private_data_len, priv.size());
      std::memcpy(priv.data(), ev->param.conn.private_data, plen);
    }
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      rdma_cm_id* raw = ev->id;
      auto* l = static_cast<Listener*>(ev->listen_id->context);
      rdma_ack_cm_event(ev);
      auto* id = new Id();
      id->id = raw;
      raw->context = id;
      ConnRequest r;
      r.id = id;
      r.via = this;
      if (const sockaddr* s = rdma_get_local_addr(raw); s && s->sa_family == AF_INET)
        r.local_ip = ntohl(reinterpret_cast<const sockaddr_in*>(s)->sin_addr.s_addr);
      if (const sockaddr* s = rdma_get_peer_addr(raw); s && s->sa_family == AF_INET) {
        r.remote_ip = ntohl(reinterpret_cast<const sockaddr_in*>(s)->sin_addr.s_addr);
        r.remote_port = ntohs(reinterpret_cast<const sockaddr_in*>(s)->sin_port);
      }
      r.len = std::min(plen, r.data.size());
      std::memcpy(r.data.data(), priv.data(), r.len);
      l->on_request(std::move(r));
      continue;
    }
    auto* id = static_cast<Id*>(ev->id->context);
    rdma_ack_cm_event(ev);
    if (id && events_) dispatch(copy, id, ByteSpan(priv.data(), plen));
  }
  cm_backlog_ = n == max;
  return n;
}

void VerbsTransport::dispatch(const rdma_cm_event& ev, Id* id, ByteSpan priv) {
  switch (ev.event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: {
      if (id->tos >= 0) {
        auto tos = static_cast<std::uint8_t>(id->tos);
        rdma_set_option(id->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos);
      }
      if (rdma_resolve_route(id->id, kResolveTimeoutMs) != 0) events_->on_resolved(id, neg_errno(EHOSTUNREACH));
      return;
    }
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      events_->on_resolved(id, -EHOSTUNREACH);
      return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      events_->on_resolved(id, 0);
      return;
    case RDMA_CM_EVENT_ESTABLISHED:
      events_->on_established(id, priv);
      return;
    case RDMA_CM_EVENT_REJECTED: {
      RejectKind k = RejectKind::other;
      if (ev.status == kIbRejConsumerDefined) k = RejectKind::consumer;
      if (ev.status == kIbRejStaleConn) k = RejectKind::stale_conn;
      if (ev.status == kIbRejInvalidServiceId) k = RejectKind::invalid_service_id;
      events_->on_rejected(id, k, priv);
      return;
    }
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
      events_->on_connect_error(id, ev.status < 0 ? ev.status : -ENETDOWN);
      return;
    case RDMA_CM_EVENT_DISCONNECTED:
      events_->on_disconnected(id);
      return;
    default:  // TIMEWAIT_EXIT, ADDR_CHANGE, DEVICE_REMOVAL, ...
      return;
  }
}

unsigned VerbsTransport::poll_cq(unsigned burst) {
  unsigned total = 0;
  if (wc_.size() < burst) wc_.resize(burst);
  for (Cq& c : cqs_) {
    const int n = ibv_poll_cq(c.cq, static_cast<int>(burst), wc_.data());
    if (n < 0) {
      ++stats_.cq_errors;
      continue;
    }
    if (n == 0) continue;
    ++stats_.polls;
    stats_.completions += static_cast<std::uint64_t>(n);
    for (int i = 0; i < n; ++i) {
      const ibv_wc& w = wc_[static_cast<std::size_t>(i)];
      if ((w.wr_id & 7) == kTransportWrTag) {
        window_done(w);
        continue;
      }
      WorkCompletion wc;
      wc.wr_id = w.wr_id;
      wc.status = static_cast<std::uint32_t>(w.status);
      wc.flushed = w.status == IBV_WC_WR_FLUSH_ERR;
      // (The opcode is only valid on success; the engine goes by wr_id.)
      wc.op = w.status != IBV_WC_SUCCESS             ? WcOp::send
              : (w.opcode & IBV_WC_RECV) != 0         ? WcOp::recv
              : w.opcode == IBV_WC_RDMA_WRITE         ? WcOp::rdma_write
                                                      : WcOp::send;
      wc.byte_len = w.byte_len;
      if (events_) events_->on_completion(wc);
    }
    total += static_cast<unsigned>(n);
  }
  return total;
}

bool VerbsTransport::arm() {
  for (Cq& c : cqs_)
    if (ibv_req_notify_cq(c.cq, 0) != 0) return false;
  armed_ = true;
  return true;
}

void VerbsTransport::on_wake() {
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  while (ibv_get_cq_event(comp_, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
  armed_ = false;
}

rdma_cm_id* VerbsTransport::release(CmId* cid, VerbsTransport& to) {
  auto* id = static_cast<Id*>(cid);
  rdma_cm_id* raw = id->id;
  // No context while it moves: an event the other worker takes before it
  // adopts the identifier is dropped there, never given a freed Id.
  raw->context = nullptr;
  if (rdma_migrate_id(raw, to.channel_) != 0) {
    raw->context = id;
    return nullptr;
  }
  delete id;
  return raw;
}

CmId* VerbsTransport::adopt(rdma_cm_id* raw) {
  auto* id = new Id();
  id->id = raw;
  raw->context = id;
  return id;
}

CmId* VerbsTransport::resolve(std::uint32_t src_ip, std::uint32_t dst_ip, std::uint16_t port, bool privileged,
                              int tos, int& error) {
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(channel_, &raw, nullptr, RDMA_PS_TCP) != 0) {
    error = neg_errno();
    return nullptr;
  }
  auto* id = new Id();
  id->id = raw;
  id->tos = tos;
  raw->context = id;
  sockaddr_in src = ipv4(src_ip, 0);
  sockaddr_in dst = ipv4(dst_ip, port);
  bool bound = false;
  if (privileged) {
    // As Linux: the highest free privileged port, reusable.
    int one = 1;
    rdma_set_option(raw, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one);
    for (int p = 1023; p > 0 && !bound; --p) {
      src.sin_port = htons(static_cast<std::uint16_t>(p));
      if (rdma_bind_addr(raw, reinterpret_cast<sockaddr*>(&src)) == 0) {
        bound = true;
      } else if (errno != EADDRINUSE) {
        break;
      }
    }
    if (!bound) {
      error = neg_errno(EADDRINUSE);
      destroy(id);
      return nullptr;
    }
  }
  if (rdma_resolve_addr(raw, bound ? nullptr : reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                        kResolveTimeoutMs) != 0) {
    error = neg_errno(EHOSTUNREACH);
    destroy(id);
    return nullptr;
  }
  return id;
}

int VerbsTransport::create_qp(CmId* cid, const QpCaps& caps) {
  auto* id = static_cast<Id*>(cid);
  const ibv_device_attr& a = dev_->attr();
  // Room for each sink's window binding and invalidation.
  const std::uint32_t window_wrs = dev_->windows() ? 2 * caps.max_sinks : 0;
  const std::uint32_t send_wr = caps.max_send_wr + window_wrs;
  if (send_wr > static_cast<std::uint32_t>(a.max_qp_wr) || caps.max_recv_wr > static_cast<std::uint32_t>(a.max_qp_wr))
    return -ENOMEM;
  const int need = static_cast<int>(send_wr + caps.max_recv_wr);
  Cq* cq = cq_for(need);
  if (!cq) return -ENOMEM;
  ibv_qp_init_attr init{};
  init.send_cq = cq->cq;
  init.recv_cq = cq->cq;
  init.cap.max_send_wr = send_wr;
  init.cap.max_recv_wr = caps.max_recv_wr;
  init.cap.max_send_sge = std::min(caps.max_send_sge, max_sge_);
  init.cap.max_recv_sge = 1;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  if (rdma_create_qp(id->id, dev_->pd(), &init) != 0) return neg_errno(ENOMEM);
  id->has_qp = true;
  id->window_budget = window_wrs;
  id->cq = cq;
  id->reserve = need;
  cq->reserved += need;
  return 0;
}

namespace {

rdma_conn_param conn_param(const ConnectParams& p) {
  rdma_conn_param c{};
  c.private_data = p.private_data.data();
  c.private_data_len = static_cast<std::uint8_t>(p.private_data.size());
  c.responder_resources = 0;  // no RDMA READ or atomics
  c.initiator_depth = 0;
  c.flow_control = 1;
  c.retry_count = p.retry_count;
  c.rnr_retry_count = p.rnr_retry_count;
  return c;
}

}  // namespace

int VerbsTransport::connect(CmId* cid, const ConnectParams& p) {
  rdma_conn_param c = conn_param(p);
  return rdma_connect(static_cast<Id*>(cid)->id, &c) == 0 ? 0 : neg_errno();
}

int VerbsTransport::accept(CmId* cid, const ConnectParams& p) {
  rdma_conn_param c = conn_param(p);
  return rdma_accept(static_cast<Id*>(cid)->id, &c) == 0 ? 0 : neg_errno();
}

int VerbsTransport::reject(CmId* cid, ByteSpan private_data) {
  return rdma_reject(static_cast<Id*>(cid)->id, private_data.data(), static_cast<std::uint8_t>(private_data.size())) == 0
             ? 0
             : neg_errno();
}

void VerbsTransport::disconnect(CmId* cid) {
  auto* id = static_cast<Id*>(cid);
  rdma_disconnect(id->id);  // (fails harmlessly if never connected)
  if (id->has_qp && id->id->qp) {
    // Whatever is posted completes, flushed: the engine waits for it all.
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(id->id->qp, &attr, IBV_QP_STATE);
  }
}

void VerbsTransport::destroy(CmId* cid) {
  auto* id = static_cast<Id*>(cid);
  // Windows still bound through it die with it (their keys with them).
  while (!id->windows.empty()) free_window(id->windows.back(), true);
  if (id->has_qp) {
    rdma_destroy_qp(id->id);
    id->cq->reserved -= id->reserve;
  }
  id->id->context = nullptr;
  rdma_destroy_id(id->id);
  delete id;
}

int VerbsTransport::post_recv(CmId* cid, const RecvWr& wr) {
  auto* id = static_cast<Id*>(cid);
  ibv_sge sge{wr.sge.addr, wr.sge.length, wr.sge.lkey};
  ibv_recv_wr w{};
  w.wr_id = wr.wr_id;
  w.sg_list = &sge;
  w.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ++stats_.recv_posts;
  const int rc = ibv_post_recv(id->id->qp, &w, &bad);
  if (rc != 0) ++stats_.post_failures;
  return -rc;
}

int VerbsTransport::post_send(CmId* cid, const SendWr* wrs, std::size_t n) {
  auto* id = static_cast<Id*>(cid);
  std::size_t nsge = 0;
  for (std::size_t i = 0; i < n; ++i) nsge += wrs[i].num_sge;
  swr_.assign(n, ibv_send_wr{});
  ssge_.resize(nsge);
  std::size_t k = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const SendWr& s = wrs[i];
    ibv_send_wr& w = swr_[i];
    w.wr_id = s.wr_id;
    w.sg_list = ssge_.data() + k;
    w.num_sge = static_cast<int>(s.num_sge);
    for (std::uint32_t j = 0; j < s.num_sge; ++j, ++k) ssge_[k] = ibv_sge{s.sge[j].addr, s.sge[j].length, s.sge[j].lkey};
    w.opcode = s.op == WrOp::rdma_write ? IBV_WR_RDMA_WRITE : IBV_WR_SEND;
    w.send_flags = s.signaled ? IBV_SEND_SIGNALED : 0;
    if (s.op == WrOp::rdma_write) {
      w.wr.rdma.remote_addr = s.remote_addr;
      w.wr.rdma.rkey = s.rkey;
    }
    w.next = i + 1 < n ? &swr_[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  ++stats_.send_posts;
  const int rc = ibv_post_send(id->id->qp, swr_.data(), &bad);
  if (rc != 0) ++stats_.post_failures;
  return -rc;
}

bool VerbsTransport::register_memory(void* addr, std::size_t len, bool remote_write, Region& out) {
  int access = IBV_ACCESS_LOCAL_WRITE;
  if (remote_write) access |= dev_->windows() ? IBV_ACCESS_MW_BIND : IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* mr = ibv_reg_mr(dev_->pd(), addr, len, access);
  if (!mr) return false;
  out.handle = mr;
  out.lkey = mr->lkey;
  out.rkey = mr->rkey;
  if (remote_write) own_.push_back(Own{reinterpret_cast<std::uintptr_t>(addr), len, mr});
  return true;
}

void VerbsTransport::deregister(Region& r) {
  auto* mr = static_cast<ibv_mr*>(r.handle);
  own_.erase(std::remove_if(own_.begin(), own_.end(), [mr](const Own& o) { return o.mr == mr; }), own_.end());
  ibv_dereg_mr(mr);
  r.handle = nullptr;
}

std::optional<std::uint32_t> VerbsTransport::lkey(const void* addr, std::size_t len) const noexcept {
  return dev_->lkey(addr, len);
}

std::optional<Sink> VerbsTransport::map_sink(CmId* cid, void* addr, std::size_t len, bool& busy) {
  busy = false;
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  ibv_mr* own = nullptr;
  for (const Own& o : own_)
    if (a >= o.addr && a + len <= o.addr + o.len) own = o.mr;
  if (dev_->windows()) {
    ibv_mr* mr = own ? own : dev_->sink_mr(addr, len);
    if (!mr) return std::nullopt;
    return bind_window(static_cast<Id*>(cid), mr, a, len, busy);
  }
  if (dev_->remote_keys() == RemoteKeys::transfer && dev_->lkey(addr, len)) {
    // This sink alone, for this transfer (its cost timed: the price of
    // the narrower key without windows).
    const auto t0 = std::chrono::steady_clock::now();
    ibv_mr* mr = ibv_reg_mr(dev_->pd(), addr, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    stats_.sink_registration_ns += elapsed_ns(t0);
    if (!mr) return std::nullopt;
    ++stats_.sink_registrations;
    return Sink{mr->rkey, a, mr, 0};
  }
  if (auto k = dev_->rkey(addr, len)) return Sink{*k, a, nullptr, 0};
  if (own) return Sink{own->rkey, a, nullptr, 0};
  return std::nullopt;
}

// Bind a free window to [addr, addr + len) for remote writes through the
// queue pair of `id`.  The binding is queued ahead of whatever the engine
// posts next on that queue pair (the PUT_ACK or GET_REQ naming the key), so
// the peer never holds the key before it opens anything.
std::optional<Sink> VerbsTransport::bind_window(Id* id, ibv_mr* mr, std::uintptr_t addr, std::size_t len,
                                               bool& busy) {
  busy = true;  // (whatever refuses a window below refuses any other memory too)
  if (!id->has_qp || id->window_wrs + 2 > id->window_budget) {
    ++stats_.sink_windows_refused;
    return std::nullopt;
  }
  std::uint32_t i;
  if (!free_windows_.empty()) {
    i = free_windows_.back();
    free_windows_.pop_back();
  } else if (windows_.size() < std::min<std::size_t>(kMaxWindows, static_cast<std::size_t>(dev_->attr().max_mw))) {
    i = static_cast<std::uint32_t>(windows_.size());
    windows_.emplace_back();
  } else {
    ++stats_.sink_windows_refused;
    return std::nullopt;
  }
  Window& w = windows_[i];
  if (!w.mw) {
    w.mw = ibv_alloc_mw(dev_->pd(), IBV_MW_TYPE_2);
    if (!w.mw) {
      free_windows_.push_back(i);
      ++stats_.sink_windows_refused;
      return std::nullopt;
    }
    ++stats_.windows_allocated;
    w.rkey = w.mw->rkey;
  }
  const std::uint32_t key = ibv_inc_rkey(w.rkey);  // a key never used by this window's last binding
  ibv_send_wr wr{};
  wr.wr_id = window_wr_id(i, w.gen);
  wr.opcode = IBV_WR_BIND_MW;
  wr.bind_mw.mw = w.mw;
  wr.bind_mw.rkey = key;
  wr.bind_mw.bind_info.mr = mr;
  wr.bind_mw.bind_info.addr = addr;
  wr.bind_mw.bind_info.length = len;
  wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ibv_send_wr* bad = nullptr;
  ++stats_.send_posts;
  if (ibv_post_send(id->id->qp, &wr, &bad) != 0) {
    ++stats_.post_failures;
    free_windows_.push_back(i);
    return std::nullopt;
  }
  // The window is named by its current key from now on (the next binding
  // or invalidation must give it).
  w.mw->rkey = key;
  w.rkey = key;
  w.id = id;
  w.done = 0;
  id->windows.push_back(i);
  id->window_wrs += 2;  // this binding and its invalidation
  ++stats_.sink_windows;
  return Sink{key, addr, nullptr, (std::uint64_t{w.gen} << 32) | (std::uint64_t{i} + 1)};
}

bool VerbsTransport::unmap_sink(const Sink& s, std::uint64_t done) noexcept {
  if (s.window != 0) {
    const auto i = static_cast<std::uint32_t>((s.window & 0xffffffffu) - 1);
    const auto gen = static_cast<std::uint32_t>(s.window >> 32);
    if (i >= windows_.size()) return false;
    Window& w = windows_[i];
    if (w.gen != gen || w.invalidating || !w.id) return false;  // already gone with its connection
    ibv_send_wr wr{};
    wr.wr_id = window_wr_id(i, gen);
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.send_flags = IBV_SEND_SIGNALED;  // free for another sink once this completes
    wr.invalidate_rkey = w.rkey;
    ibv_send_wr* bad = nullptr;
    ++stats_.send_posts;
    if (ibv_post_send(w.id->id->qp, &wr, &bad) != 0) {
      ++stats_.post_failures;
      free_window(i, true);  // deallocated: its key is dead now
      return false;
    }
    w.invalidating = true;
    w.done = done;
    return done != 0;
  }
  if (!s.handle) return false;
  const auto t0 = std::chrono::steady_clock::now();
  ibv_dereg_mr(static_cast<ibv_mr*>(s.handle));
  stats_.sink_registration_ns += elapsed_ns(t0);
  return false;
}

// A window's binding or invalidation completed.  Bindings are unsignaled:
// only a failed one completes (flushed with its connection, or refused).
// A window whose binding or invalidation failed may still be bound, so it
// is deallocated rather than reused; either way its key is dead, and the
// engine waiting for that hears it.
void VerbsTransport::window_done(const ibv_wc& c) noexcept {
  const auto i = static_cast<std::uint32_t>((c.wr_id & 0xffffffffu) >> 3);
  const auto gen = static_cast<std::uint32_t>(c.wr_id >> 32);
  if (i >= windows_.size() || windows_[i].gen != gen || !windows_[i].id) return;
  const bool ok = c.status == IBV_WC_SUCCESS;
  if (!ok && c.status != IBV_WC_WR_FLUSH_ERR) ++stats_.cq_errors;  // the device refused it
  const std::uint64_t done = windows_[i].invalidating ? windows_[i].done : 0;
  free_window(i, !ok);
  if (done != 0 && events_) {
    WorkCompletion wc;
    wc.wr_id = done;
    wc.status = static_cast<std::uint32_t>(c.status);
    wc.flushed = c.status == IBV_WC_WR_FLUSH_ERR;
    events_->on_completion(wc);
  }
}

void VerbsTransport::free_window(std::uint32_t i, bool lose) noexcept {
  Window& w = windows_[i];
  if (Id* id = w.id) {
    auto& v = id->windows;
    v.erase(std::find(v.begin(), v.end(), i));
    id->window_wrs -= 2;
  }
  if (lose && w.mw) {
    ibv_dealloc_mw(w.mw);  // whatever key it still had dies with it
    w.mw = nullptr;
    ++stats_.windows_lost;
  }
  w.id = nullptr;
  w.invalidating = false;
  ++w.gen;
  free_windows_.push_back(i);
}

}  // namespace lnetr::o2ib
