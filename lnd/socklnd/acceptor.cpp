#include "lnd/socklnd/acceptor.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "lnd/socklnd/socket.hpp"

namespace lnetr::sock {

class Acceptor::Listener final : public IoHandler {
 public:
  Listener(Acceptor& a, int fd, const IpAddr& ip) : acceptor_(a), fd_(fd), ip_(ip) {}
  ~Listener() {
    acceptor_.poller_.remove(fd_);
    ::close(fd_);
  }
  void on_io(std::uint32_t events) override;

  Acceptor& acceptor_;
  int fd_;
  IpAddr ip_;
};

// One incoming connection until its HELLO has been read.
class Acceptor::Pending final : public IoHandler {
 public:
  Pending(Acceptor& a, std::unique_ptr<Stream> s, const Endpoint& remote)
      : acceptor_(a), s_(std::move(s)), remote_(remote) {}
  void on_io(std::uint32_t events) override;
  void step();
  // Write a refusal record and close (best effort: the connection is fresh).
  void answer(ByteSpan bytes) noexcept {
    const iovec iov{const_cast<std::uint8_t*>(bytes.data()), bytes.size()};
    (void)s_->sendv(&iov, 1);
  }

  Acceptor& acceptor_;
  std::unique_ptr<Stream> s_;
  Endpoint remote_;
  Endpoint local_{};
  Clock::time_point deadline_{};
  bool have_request_ = false;
  AcceptorRequest request_;
  std::array<std::uint8_t, kHelloV1Size + 4 * kHelloMaxIps> buf_{};
  std::size_t len_ = 0;
  bool done_ = false;
};

Acceptor::Acceptor(Options opts, std::vector<LocalNi> nis, std::uint64_t incarnation, Poller& poller,
                   Handoff handoff)
    : opts_(opts), nis_(std::move(nis)), incarnation_(incarnation), poller_(poller), handoff_(std::move(handoff)),
      rate_(opts.connect_rate, 4 * opts.connect_rate) {}

Acceptor::~Acceptor() = default;

bool Acceptor::listen(std::string& err) {
  if (opts_.accept == AcceptMode::none) return true;
  std::vector<IpAddr> ips;
  for (const LocalNi& n : nis_)
    if (!n.transport && std::find(ips.begin(), ips.end(), IpAddr::of(n.nid)) == ips.end())
      ips.push_back(IpAddr::of(n.nid));
  for (const IpAddr& ip : ips) {
    const int fd = listen_on(ip, opts_.port, opts_.backlog, err);
    if (fd < 0) return false;
    auto l = std::make_unique<Listener>(*this, fd, ip);
    poller_.add(fd, l.get());
    listeners_.push_back(std::move(l));
  }
  return true;
}

void Acceptor::add_ni(const LocalNi& ni, int listen_fd) {
  nis_.push_back(ni);
  if (listen_fd < 0) return;
  auto l = std::make_unique<Listener>(*this, listen_fd, IpAddr::of(ni.nid));
  poller_.add(listen_fd, l.get());
  listeners_.push_back(std::move(l));
}

void Acceptor::del_ni(const Nid& nid) {
  std::erase_if(nis_, [&nid](const LocalNi& n) { return n.nid == nid; });
  const IpAddr ip = IpAddr::of(nid);
  const bool still = std::any_of(nis_.begin(), nis_.end(),
                                 [&ip](const LocalNi& n) { return !n.transport && IpAddr::of(n.nid) == ip; });
  if (!still) std::erase_if(listeners_, [&ip](const auto& l) { return l->ip_ == ip; });
}

void Acceptor::Listener::on_io(std::uint32_t) {
  for (;;) {
    Endpoint remote{};
    const int fd = accept_one(fd_, remote);
    if (fd < 0) return;
    acceptor_.take(std::make_unique<KernelStream>(fd, acceptor_.poller_, remote));
  }
}

void Acceptor::take(std::unique_ptr<Stream> s) {
  const Endpoint remote = s->remote();
  // accept=secure: only privileged source ports (a kernel peer).
  if (opts_.accept == AcceptMode::none ||
      (opts_.accept == AcceptMode::secure && remote.port > kPrivilegedPortMax)) {
    ++refused_[static_cast<std::size_t>(CloseReason::insecure_port)];
    return;
  }
  // What a flood of connections could hold: the stream is closed at once.
  if (handshaking_ >= opts_.max_handshakes) {
    ++refused_[static_cast<std::size_t>(CloseReason::refused_handshakes)];
    return;
  }
  const std::size_t ip_len = remote.ip.is_v4() ? 4 : 16;
  if (!rate_.allow(std::span(remote.ip.bytes.data(), ip_len), Clock::now())) {
    ++refused_[static_cast<std::size_t>(CloseReason::refused_rate)];
    return;
  }
  ++handshaking_;
  auto p = std::make_unique<Pending>(*this, std::move(s), remote);
  p->local_ = p->s_->local();
  p->deadline_ = Clock::now() + opts_.accept_timeout;
  Pending* raw = p.get();
  pending_.push_back(std::move(p));
  if (!raw->s_->watch(raw)) return refuse(raw, CloseReason::io_error);
  raw->step();
}

void Acceptor::Pending::on_io(std::uint32_t) {
  if (!done_) step();
}

void Acceptor::Pending::step() {
  for (;;) {
    const ByteSpan have(buf_.data(), len_);
    auto need = have_request_ ? hello_bytes_needed(have) : acceptor_bytes_needed(have);
    if (!need) {
      if (!have_request_) {
        // Linux answers a HELLO sent first, or an acceptor version it does
        // not know, with its own acceptor record; anything else is closed.
        if (is_hello_magic(have) || need.error() == WireError::bad_version) {
          std::uint8_t rec[kAcceptorV1Size];
          (void)encode_acceptor_request(acceptor_answer(), rec);
          answer(rec);
        }
        return acceptor_.refuse(this, CloseReason::bad_acceptor);
      }
      if (need.error() == WireError::bad_version) {
        // An unknown HELLO version: tell the peer ours (V3) with type NONE.
        Hello h;
        h.src_nid = request_.nid;
        h.src_incarnation = acceptor_.incarnation_;
        h.ctype = static_cast<std::int32_t>(ConnType::none);
        std::uint8_t out[kHelloV2Size];
        if (encode_hello(h, out)) answer(out);
      }
      return acceptor_.refuse(this, CloseReason::bad_hello);
    }
    if (len_ < *need) {
      const ssize_t n = s_->recv(buf_.data() + len_, *need - len_);
      if (n > 0) {
        len_ += static_cast<std::size_t>(n);
        continue;
      }
      if (n == -EAGAIN) return;
      return acceptor_.refuse(this, n == 0 ? CloseReason::peer_closed : CloseReason::io_error);
    }
    if (!have_request_) {
      auto r = decode_acceptor_request(have);
      const bool ours = r && std::any_of(acceptor_.nis_.begin(), acceptor_.nis_.end(),
                                         [&](const LocalNi& n) { return n.nid == r->nid; });
      if (!ours) return acceptor_.refuse(this, CloseReason::bad_acceptor);  // "No matching NI"
      request_ = *r;
      have_request_ = true;
      len_ = 0;
      deadline_ = Clock::now() + acceptor_.opts_.accept_timeout;
      continue;
    }
    auto h = decode_hello(have);
    if (!h || h->src_nid.is_any()) return acceptor_.refuse(this, CloseReason::bad_hello);
    done_ = true;
    --acceptor_.handshaking_;
    s_->watch(nullptr);
    Accepted a;
    a.stream = std::move(s_);
    a.local = local_;
    a.remote = remote_;
    a.request = request_;
    a.hello = *h;
    ++acceptor_.handed_off_;
    acceptor_.handoff_(std::move(a));
    return;
  }
}

void Acceptor::refuse(Pending* p, CloseReason why) {
  ++refused_[static_cast<std::size_t>(why)];
  if (!p->done_) --handshaking_;
  p->done_ = true;
  p->s_.reset();
}

void Acceptor::tick(Clock::time_point now) {
  for (auto& p : pending_)
    if (!p->done_ && now > p->deadline_) refuse(p.get(), CloseReason::timeout);
}

void Acceptor::reap() {
  auto finished = std::stable_partition(pending_.begin(), pending_.end(), [](const auto& p) { return !p->done_; });
  pending_.erase(finished, pending_.end());
}

}  // namespace lnetr::sock
