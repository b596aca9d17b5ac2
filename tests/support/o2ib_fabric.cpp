#include "tests/support/o2ib_fabric.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace lnetr::o2ib::sim {
namespace {

constexpr std::uint32_t kAnyKey = 0xa11;         // "all memory registered"
constexpr std::uint32_t kRnrRetryExceeded = 13;  // IBV_WC_RNR_RETRY_EXC_ERR
constexpr std::uint32_t kRemAccessErr = 10;      // IBV_WC_REM_ACCESS_ERR
constexpr std::uint32_t kLocLenErr = 1;          // IBV_WC_LOC_LEN_ERR
constexpr std::uint32_t kLocProtErr = 4;         // IBV_WC_LOC_PROT_ERR
constexpr std::uint32_t kFlushErr = 5;           // IBV_WC_WR_FLUSH_ERR

std::string hex(std::uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "%#llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

SimTransport::SimTransport(Fabric& f, std::string name) : fabric_(f), name_(std::move(name)) { f.add(this); }

SimTransport::~SimTransport() {
  // Its identifiers stay (the fabric owns them) but are gone: a peer's
  // next send to them fails.
  for (SimId* id : ids_) id->gone = true;
  fabric_.remove(this);
}

void SimTransport::listen(std::uint32_t ip, std::uint16_t port, std::function<void(ConnRequest&&)> on_request) {
  listeners_.push_back({ip, port, std::move(on_request)});
}

void SimTransport::add_address(std::uint32_t ip) { listeners_.push_back({ip, 0, nullptr}); }

void SimTransport::register_payload(void* addr, std::size_t len) {
  Reg r;
  r.addr = reinterpret_cast<std::uintptr_t>(addr);
  r.len = len;
  r.lkey = r.rkey = next_key_++;
  r.remote_write = true;
  payload_.push_back(r);
}

std::size_t SimTransport::live_ids() const noexcept {
  return static_cast<std::size_t>(std::count_if(ids_.begin(), ids_.end(), [](const SimId* i) { return !i->destroyed; }));
}

std::vector<SimId*> SimTransport::ids() const {
  std::vector<SimId*> out;
  for (SimId* i : ids_)
    if (!i->destroyed) out.push_back(i);
  return out;
}

CmId* SimTransport::resolve(std::uint32_t src_ip, std::uint32_t dst_ip, std::uint16_t port, bool privileged, int,
                            int& error) {
  error = 0;
  SimId* id = fabric_.new_id();
  id->owner = this;
  id->local_ip = src_ip;
  id->remote_ip = dst_ip;
  id->remote_port = port;
  id->local_port = privileged ? next_port : static_cast<std::uint16_t>(next_port + 40000);
  next_port = next_port > 512 ? static_cast<std::uint16_t>(next_port - 1) : 1023;
  SimId* raw = id;
  ids_.push_back(id);
  const bool known = fabric_.by_address(dst_ip) != nullptr;
  fabric_.post([this, raw, known] {
    if (raw->dead() || !events_) return;
    events_->on_resolved(raw, known ? 0 : -EHOSTUNREACH);
  });
  return raw;
}

int SimTransport::create_qp(CmId* cid, const QpCaps& caps) {
  auto* id = static_cast<SimId*>(cid);
  if (id->has_qp) {
    violations.push_back("create_qp twice");
    return -EINVAL;
  }
  if (max_recv_wr != 0 && caps.max_recv_wr > max_recv_wr) return -ENOMEM;
  id->has_qp = true;
  id->caps = caps;
  return 0;
}

int SimTransport::connect(CmId* cid, const ConnectParams& p) {
  auto* id = static_cast<SimId*>(cid);
  SimTransport* target = fabric_.by_address(id->remote_ip);
  const Listener* l = nullptr;
  if (target)
    for (const Listener& x : target->listeners_)
      if (x.ip == id->remote_ip && x.port == id->remote_port && x.on_request) l = &x;
  if (!l) {
    fabric_.post([this, id] {
      if (!id->dead() && events_) events_->on_rejected(id, RejectKind::invalid_service_id, {});
    });
    return 0;
  }
  SimId* pid = fabric_.new_id();
  pid->owner = target;
  pid->local_ip = id->remote_ip;
  pid->local_port = id->remote_port;
  pid->remote_ip = id->local_ip;
  pid->remote_port = id->local_port;
  pid->peer = id;
  id->peer = pid;
  ConnRequest r;
  r.id = pid;
  r.via = target;
  r.local_ip = id->remote_ip;
  r.remote_ip = id->local_ip;
  r.remote_port = id->local_port;
  r.len = std::min(p.private_data.size(), r.data.size());
  if (r.len > 0) std::memcpy(r.data.data(), p.private_data.data(), r.len);
  target->ids_.push_back(pid);
  auto on_request = l->on_request;
  fabric_.post([on_request, r]() mutable { on_request(std::move(r)); });
  return 0;
}

int SimTransport::accept(CmId* cid, const ConnectParams& p) {
  auto* pid = static_cast<SimId*>(cid);
  SimId* aid = pid->peer;
  if (!aid || !pid->has_qp) {
    violations.push_back("accept without a queue pair or requester");
    return -EINVAL;
  }
  std::vector<std::uint8_t> data(p.private_data.begin(), p.private_data.end());
  fabric_.post([pid, aid, data] {
    if (aid->dead() || pid->dead()) return;
    aid->connected = pid->connected = true;
    if (aid->owner->events_) aid->owner->events_->on_established(aid, ByteSpan(data.data(), data.size()));
    // The passive side learns it from the RTU, a step later.
    if (aid->owner->withhold_rtu) return;
    aid->owner->fabric_.post([pid] {
      if (!pid->dead() && pid->owner->events_) pid->owner->events_->on_established(pid, {});
    });
  });
  return 0;
}

int SimTransport::reject(CmId* cid, ByteSpan private_data) {
  auto* pid = static_cast<SimId*>(cid);
  SimId* aid = pid->peer;
  if (!aid) return 0;
  std::vector<std::uint8_t> data(private_data.begin(), private_data.end());
  fabric_.post([aid, data] {
    if (!aid->dead() && aid->owner->events_)
      aid->owner->events_->on_rejected(aid, RejectKind::consumer, ByteSpan(data.data(), data.size()));
  });
  return 0;
}

// A receive posted to a queue pair in error completes flushed.
void SimTransport::flush_recv(SimId* id, const RecvWr& wr) {
  fabric_.post([id, wr] {
    if (id->dead() || !id->owner->events_) return;
    WorkCompletion wc;
    wc.wr_id = wr.wr_id;
    wc.op = WcOp::recv;
    wc.status = kFlushErr;
    wc.flushed = true;
    id->owner->events_->on_completion(wc);
  });
}

void SimTransport::flush(SimId* id) {
  while (!id->recvs.empty()) {
    flush_recv(id, id->recvs.front());
    id->recvs.pop_front();
  }
  // Sends held back run now and find the queue pair in error.
  release(id);
}

void SimTransport::vanish() {
  for (SimId* id : ids_)
    if (!id->destroyed) {
      id->gone = true;
      id->recvs.clear();
      id->held_work.clear();
    }
}

void SimTransport::release(SimId* id) {
  auto held = std::move(id->held_work);
  id->held_work.clear();
  id->held = false;
  for (auto& w : held) fabric_.post(std::move(w));
}

void SimTransport::disconnect(CmId* cid) {
  auto* id = static_cast<SimId*>(cid);
  if (id->gone) return;
  if (!id->error) {
    id->error = true;
    flush(id);
  }
  SimId* peer = id->peer;
  if (id->connected && peer && !peer->dead()) {
    // The peer's CM takes the DREQ: DISCONNECTED, its queue pair in error.
    if (!peer->disconnected_sent) {
      peer->disconnected_sent = true;
      fabric_.post([peer] {
        if (!peer->dead() && peer->owner->events_) peer->owner->events_->on_disconnected(peer);
      });
    }
    if (!peer->error) {
      peer->error = true;
      peer->owner->flush(peer);
    }
  }
  if (id->connected && !id->disconnected_sent) {
    id->disconnected_sent = true;
    fabric_.post([this, id] {
      if (!id->dead() && events_) events_->on_disconnected(id);
    });
  }
}

void SimTransport::destroy(CmId* cid) {
  auto* id = static_cast<SimId*>(cid);
  if (id->gone && !id->destroyed) {
    id->destroyed = true;
    return;
  }
  if (id->destroyed) {
    violations.push_back("destroy twice");
    return;
  }
  // (A queue pair in error may go with work still flushing: at shutdown.)
  if (!id->error && (!id->recvs.empty() || id->sends_outstanding > 0))
    violations.push_back("destroyed with " + std::to_string(id->recvs.size()) + " receives and " +
                         std::to_string(id->sends_outstanding) + " sends posted");
  id->destroyed = true;
  id->recvs.clear();
  std::erase_if(windows_, [id](const auto& kv) { return kv.second.id == id; });  // their keys die with it
  if (id->peer && id->peer->peer == id && id->connected && !id->peer->dead() && !id->peer->error) {
    // Destroying a connected identifier disconnects it.
    SimId* peer = id->peer;
    peer->error = true;
    peer->owner->flush(peer);
    if (!peer->disconnected_sent) {
      peer->disconnected_sent = true;
      fabric_.post([peer] {
        if (!peer->dead() && peer->owner->events_) peer->owner->events_->on_disconnected(peer);
      });
    }
  }
}

bool SimTransport::covers(std::uint32_t key, std::uint64_t addr, std::uint32_t len) const noexcept {
  if (key == kAnyKey) return all_registered;
  auto in = [&](const Reg& r) { return addr >= r.addr && addr + len <= r.addr + r.len; };
  if (auto it = regions_.find(key); it != regions_.end() && in(it->second)) return true;
  for (const Reg& r : payload_)
    if (r.lkey == key && in(r)) return true;
  return false;
}

bool SimTransport::remote_ok(std::uint32_t rkey, std::uint64_t addr, std::uint32_t len) const noexcept {
  if (windows) {
    auto w = windows_.find(rkey);
    return w != windows_.end() && addr >= w->second.addr && addr + len <= w->second.addr + w->second.len;
  }
  if (rkey == kAnyKey) return all_registered;
  auto in = [&](const Reg& r) { return addr >= r.addr && addr + len <= r.addr + r.len; };
  for (const auto& [k, r] : regions_)
    if (r.rkey == rkey && r.remote_write && in(r)) return true;
  for (const Reg& r : payload_)
    if (r.rkey == rkey && in(r)) return true;
  return false;
}

int SimTransport::post_recv(CmId* cid, const RecvWr& wr) {
  auto* id = static_cast<SimId*>(cid);
  if (id->gone) return 0;
  if (id->destroyed || !id->has_qp) {
    violations.push_back("post_recv without a queue pair");
    return -EINVAL;
  }
  if (!covers(wr.sge.lkey, wr.sge.addr, wr.sge.length)) {
    violations.push_back("receive buffer not registered under lkey " + hex(wr.sge.lkey));
    return -EINVAL;
  }
  if (id->recvs.size() >= id->caps.max_recv_wr) {
    violations.push_back("more receives posted than the queue pair holds");
    return -ENOMEM;
  }
  if (id->error) {
    // Posted to a queue pair in error: flushed at once.
    flush_recv(id, wr);
    return 0;
  }
  id->recvs.push_back(wr);
  return 0;
}

int SimTransport::post_send(CmId* cid, const SendWr* wrs, std::size_t n) {
  auto* id = static_cast<SimId*>(cid);
  if (id->gone) return 0;
  if (id->destroyed || !id->has_qp) {
    violations.push_back("post_send without a queue pair");
    return -EINVAL;
  }
  if (id->sends_outstanding + n > id->caps.max_send_wr) {
    violations.push_back("more sends posted than the queue pair holds");
    return -ENOMEM;
  }
  // Copy the chain: its memory is the caller's only until we return.
  struct Wr {
    SendWr wr;
    std::vector<Sge> sge;
  };
  std::vector<Wr> chain;
  for (std::size_t i = 0; i < n; ++i) {
    if (wrs[i].num_sge > sge_limit) {
      violations.push_back("work request with more entries than the device takes");
      return -EINVAL;
    }
    Wr w{wrs[i], std::vector<Sge>(wrs[i].sge, wrs[i].sge + wrs[i].num_sge)};
    for (const Sge& s : w.sge)
      if (!covers(s.lkey, s.addr, s.length)) {
        violations.push_back("send from memory not registered under lkey " + hex(s.lkey));
        return -EINVAL;
      }
    chain.push_back(std::move(w));
  }
  id->sends_outstanding += static_cast<std::uint32_t>(n);
  auto work = [id, chain] {
    auto complete = [](SimId* to, std::uint64_t wr_id, WcOp op, std::uint32_t status, std::uint32_t len) {
      to->owner->fabric_.post([to, wr_id, op, status, len] {
        if (to->dead() || !to->owner->events_) return;
        WorkCompletion wc;
        wc.wr_id = wr_id;
        wc.op = op;
        wc.status = status;
        wc.flushed = status == kFlushErr;
        wc.byte_len = len;
        to->owner->events_->on_completion(wc);
      });
    };
    auto fail_both = [](SimId* a) {
      if (!a->error) {
        a->error = true;
        a->owner->flush(a);
      }
      if (SimId* b = a->peer; b && !b->dead() && !b->error) {
        b->error = true;
        b->owner->flush(b);
      }
    };
    for (const Wr& w : chain) {
      --id->sends_outstanding;
      if (id->dead()) continue;
      const WcOp op = w.wr.op == WrOp::send ? WcOp::send : WcOp::rdma_write;
      SimId* peer = id->peer;
      if (id->error || !peer || peer->dead() || peer->error) {
        fail_both(id);
        complete(id, w.wr.wr_id, op, kFlushErr, 0);
        continue;
      }
      std::uint64_t total = 0;
      for (const Sge& s : w.sge) total += s.length;
      if (w.wr.op == WrOp::rdma_write) {
        if (!peer->owner->remote_ok(w.wr.rkey, w.wr.remote_addr, static_cast<std::uint32_t>(total))) {
          if (!peer->owner->untrusted_sinks)
            id->owner->violations.push_back("RDMA write outside the sink named by rkey " + hex(w.wr.rkey));
          fail_both(id);
          complete(id, w.wr.wr_id, op, kRemAccessErr, 0);
          continue;
        }
        auto* dst = reinterpret_cast<std::uint8_t*>(w.wr.remote_addr);
        for (const Sge& s : w.sge) {
          std::memmove(dst, reinterpret_cast<const void*>(s.addr), s.length);
          dst += s.length;
        }
        if (w.wr.signaled) complete(id, w.wr.wr_id, op, 0, 0);
        continue;
      }
      if (peer->recvs.empty()) {
        id->owner->violations.push_back("SEND with no receive posted at the peer (a credit overrun)");
        if (std::getenv("LNETR_FUZZ_TRACE")) std::fprintf(stderr, "RNR: %s -> %s, %zu bytes, first byte type %#x\n", id->owner->name().c_str(), peer->owner->name().c_str(), static_cast<std::size_t>(total), w.sge.empty() ? 0u : reinterpret_cast<const std::uint8_t*>(w.sge[0].addr)[6]);
        fail_both(id);
        complete(id, w.wr.wr_id, op, kRnrRetryExceeded, 0);
        continue;
      }
      const RecvWr r = peer->recvs.front();
      peer->recvs.pop_front();
      if (total > r.sge.length) {
        fail_both(id);
        complete(peer, r.wr_id, WcOp::recv, kLocLenErr, 0);
        complete(id, w.wr.wr_id, op, kLocProtErr, 0);
        continue;
      }
      auto* dst = reinterpret_cast<std::uint8_t*>(r.sge.addr);
      for (const Sge& s : w.sge) {
        std::memcpy(dst, reinterpret_cast<const void*>(s.addr), s.length);
        dst += s.length;
      }
      complete(peer, r.wr_id, WcOp::recv, 0, static_cast<std::uint32_t>(total));
      if (w.wr.signaled) complete(id, w.wr.wr_id, op, 0, 0);
    }
  };
  if (id->held) {
    id->held_work.push_back(std::move(work));
  } else {
    fabric_.post(std::move(work));
  }
  return 0;
}

bool SimTransport::register_memory(void* addr, std::size_t len, bool remote_write, Region& out) {
  Reg r;
  r.addr = reinterpret_cast<std::uintptr_t>(addr);
  r.len = len;
  r.lkey = next_key_++;
  r.rkey = r.lkey | 0x10000000;
  r.remote_write = remote_write;
  regions_[r.lkey] = r;
  out.handle = reinterpret_cast<void*>(std::uintptr_t{r.lkey});
  out.lkey = r.lkey;
  out.rkey = r.rkey;
  return true;
}

void SimTransport::deregister(Region& r) {
  if (regions_.erase(r.lkey) == 0) violations.push_back("deregister of an unknown region");
}

std::optional<std::uint32_t> SimTransport::lkey(const void* addr, std::size_t len) const noexcept {
  if (all_registered) return kAnyKey;
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  for (const Reg& r : payload_)
    if (a >= r.addr && a + len <= r.addr + r.len) return r.lkey;
  return std::nullopt;
}

std::optional<Sink> SimTransport::map_sink(CmId* cid, void* addr, std::size_t len, bool& busy) {
  busy = false;
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  std::optional<Sink> s;
  for (const auto& [k, r] : regions_)
    if (!s && r.remote_write && a >= r.addr && a + len <= r.addr + r.len) s = Sink{r.rkey, a, nullptr};
  for (const Reg& r : payload_)
    if (!s && a >= r.addr && a + len <= r.addr + r.len) s = Sink{r.rkey, a, nullptr};
  if (!s && all_registered) s = Sink{kAnyKey, a, nullptr};
  if (!s || !windows) return s;
  const std::uint32_t key = next_window_++;
  windows_[key] = Window{a, len, static_cast<SimId*>(cid)};
  return Sink{key, a, nullptr, key};
}

bool SimTransport::unmap_sink(const Sink& s, std::uint64_t done) noexcept {
  auto it = s.window != 0 ? windows_.find(s.rkey) : windows_.end();
  if (it == windows_.end() || it->second.invalidating) return false;
  SimId* id = it->second.id;
  if (id->dead()) {
    windows_.erase(it);
    return false;
  }
  it->second.invalidating = true;
  auto work = [this, id, key = s.rkey, done] {
    windows_.erase(key);
    if (done == 0 || id->dead() || !events_) return;
    WorkCompletion wc;
    wc.wr_id = done;
    wc.status = id->error ? kFlushErr : 0;
    wc.flushed = id->error;
    events_->on_completion(wc);
  };
  if (id->held) {
    id->held_work.push_back(std::move(work));
  } else {
    fabric_.post(std::move(work));
  }
  return done != 0;
}

void Fabric::remove(SimTransport* t) {
  transports_.erase(std::remove(transports_.begin(), transports_.end(), t), transports_.end());
}

SimTransport* Fabric::by_address(std::uint32_t ip) const noexcept {
  for (SimTransport* t : transports_)
    for (const auto& l : t->listeners_)
      if (l.ip == ip) return t;
  return nullptr;
}

std::size_t Fabric::run(std::size_t max) {
  std::size_t n = 0;
  while (!work_.empty() && n < max) {
    auto fn = std::move(work_.front());
    work_.pop_front();
    fn();
    ++n;
    ++steps;
  }
  return n;
}

std::vector<std::uint8_t> connreq(const Nid& src, std::uint64_t stamp, const Nid& dst, std::uint64_t dststamp,
                                  ConnParams cp, std::uint16_t version) {
  Msg m;
  m.hdr.version = version;
  m.hdr.type = MsgType::connreq;
  m.hdr.srcnid = src;
  m.hdr.srcstamp = stamp;
  m.hdr.dstnid = dst;
  m.hdr.dststamp = dststamp;
  m.body = cp;
  std::vector<std::uint8_t> out(kConnMsgSize);
  (void)encode_msg(m, out);
  return out;
}

}  // namespace lnetr::o2ib::sim
