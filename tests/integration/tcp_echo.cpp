// lnetr-tcp-echo (a test tool): the dataplane's TCP/IP stack
// (dataplane/tcp/stack.hpp) on a Linux interface through an AF_PACKET
// socket, so that it can be checked against the kernel's own TCP in
// network namespaces before DPDK ports carry it.  The interface must have
// no IP address of its own (the kernel would answer for it).
//
//   lnetr-tcp-echo --if IFACE --ip A.B.C.D [--listen PORT]
//       serve: echo every byte back on each connection, until SIGTERM
//   lnetr-tcp-echo --if IFACE --ip A.B.C.D --connect A.B.C.D:PORT --bytes N
//       send N pattern bytes, read them back, check them, close; exit 0 if
//       they all came back intact
//
// Prints one JSON line of counters at exit.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/tcp/stack.hpp"

namespace {

using namespace lnetr;
using namespace lnetr::tcp;

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

Time now() { return std::chrono::steady_clock::now().time_since_epoch(); }

std::uint8_t pattern_byte(std::uint64_t i) { return static_cast<std::uint8_t>(i * 131 + (i >> 11)); }

struct PacketPort : Port {
  int fd = -1;
  int ifindex = 0;
  void send(ByteSpan frame) override {
    sockaddr_ll a{};
    a.sll_family = AF_PACKET;
    a.sll_ifindex = ifindex;
    a.sll_halen = 6;
    std::memcpy(a.sll_addr, frame.data(), 6);
    (void)::sendto(fd, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
};

// Echo server side: what arrives goes back.
struct Echo : Upper {
  Stack* stack = nullptr;
  Endpoints ep;
  Conn* conn = nullptr;
  std::vector<std::uint8_t> pending;  // not yet taken by the send buffer
  std::uint64_t bytes = 0;
  void on_established() override { conn = stack->connection(ep.remote_ip, ep.remote_port, ep.local_port); }
  void on_data(ByteSpan b, void*) override {
    bytes += b.size();
    pending.insert(pending.end(), b.begin(), b.end());
    flush();
  }
  void flush() {
    if (!conn || pending.empty()) return;
    const std::size_t n = conn->send(pending, now());
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(n));
  }
  std::uint32_t receive_space() const override {
    return pending.size() > (8u << 20) ? 0 : (8u << 20) - static_cast<std::uint32_t>(pending.size());
  }
  void on_peer_closed() override {
    if (conn) conn->close(now());
  }
  void on_end(End) override { conn = nullptr; }
};

// Client side: send, check what comes back.
struct Client : Upper {
  Conn* conn = nullptr;
  std::uint64_t total = 0, sent = 0, got = 0, bad = 0;
  bool established = false, done = false;
  std::optional<End> ended;
  std::vector<std::uint8_t> chunk = std::vector<std::uint8_t>(65536);
  void on_established() override { established = true; }
  void on_data(ByteSpan b, void*) override {
    for (std::uint8_t c : b) bad += c != pattern_byte(got++);
  }
  std::uint32_t receive_space() const override { return 8u << 20; }
  void on_peer_closed() override { done = true; }
  void on_end(End why) override {
    ended = why;
    conn = nullptr;
  }
  void feed() {
    while (conn && sent < total) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), total - sent));
      for (std::size_t i = 0; i < n; ++i) chunk[i] = pattern_byte(sent + i);
      const std::size_t took = conn->send(ByteSpan(chunk).first(n), now());
      sent += took;
      if (took < n) break;
    }
  }
};

// "10.0.0.1", or an IPv6 address with or without brackets.
IpAddr parse_ip(std::string s) {
  if (s.size() > 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  in_addr a{};
  if (::inet_pton(AF_INET, s.c_str(), &a) == 1) return IpAddr::v4(ntohl(a.s_addr));
  IpAddr v6 = IpAddr::v6({});
  if (::inet_pton(AF_INET6, s.c_str(), v6.bytes.data()) == 1) return v6;
  std::fprintf(stderr, "lnetr-tcp-echo: expected an IPv4 or IPv6 address, got '%s'\n", s.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string iface, ip, connect_to;
  std::uint16_t listen_port = 988;
  std::uint64_t bytes = 0;
  double limit_s = 120;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--if") iface = v;
    else if (k == "--ip") ip = v;
    else if (k == "--listen") listen_port = static_cast<std::uint16_t>(std::stoi(v));
    else if (k == "--connect") connect_to = v;
    else if (k == "--bytes") bytes = std::stoull(v);
    else if (k == "--limit") limit_s = std::stod(v);
    else {
      std::fprintf(stderr, "lnetr-tcp-echo: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (iface.empty() || ip.empty()) {
    std::fprintf(stderr, "usage: lnetr-tcp-echo --if IFACE --ip A.B.C.D [--listen PORT | --connect IP:PORT --bytes N]\n");
    return 2;
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);

  PacketPort port;
  port.fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
  port.ifindex = static_cast<int>(::if_nametoindex(iface.c_str()));
  if (port.fd < 0 || port.ifindex == 0) {
    std::perror("lnetr-tcp-echo: AF_PACKET socket or interface");
    return 1;
  }
  sockaddr_ll bind_to{};
  bind_to.sll_family = AF_PACKET;
  bind_to.sll_protocol = htons(ETH_P_ALL);
  bind_to.sll_ifindex = port.ifindex;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, iface.c_str(), IFNAMSIZ - 1);
  if (::bind(port.fd, reinterpret_cast<sockaddr*>(&bind_to), sizeof bind_to) != 0 ||
      ::ioctl(port.fd, SIOCGIFHWADDR, &ifr) != 0) {
    std::perror("lnetr-tcp-echo: bind or MAC");
    return 1;
  }
  StackConfig cfg;
  std::memcpy(cfg.mac.data(), ifr.ifr_hwaddr.sa_data, 6);
  cfg.ip = parse_ip(ip);
  cfg.prefix_len = cfg.ip.is_v4() ? 24 : 64;
  Stack stack(cfg, port);

  std::vector<std::unique_ptr<Echo>> owners;  // of accepted connections
  Client client;
  if (connect_to.empty()) {
    stack.listen(listen_port, [&](const Endpoints& ep) -> Upper* {
      owners.push_back(std::make_unique<Echo>());
      owners.back()->stack = &stack;
      owners.back()->ep = ep;
      return owners.back().get();
    });
  } else {
    const auto colon = connect_to.rfind(':');
    client.total = bytes;
    client.conn = stack.connect(parse_ip(connect_to.substr(0, colon)),
                                static_cast<std::uint16_t>(std::stoi(connect_to.substr(colon + 1))), 0, client, now());
  }
  std::fprintf(stderr, "lnetr-tcp-echo: %s on %s\n", connect_to.empty() ? "serving" : "connecting", iface.c_str());

  const Time end = now() + std::chrono::duration_cast<Time>(std::chrono::duration<double>(limit_s));
  std::vector<std::uint8_t> buf(65536);
  while (!g_stop.load() && now() < end) {
    pollfd p{port.fd, POLLIN, 0};
    ::poll(&p, 1, 1);
    for (int i = 0; i < 256; ++i) {
      sockaddr_ll from{};
      socklen_t fl = sizeof from;
      const ssize_t n = ::recvfrom(port.fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &fl);
      if (n <= 0) break;
      if (from.sll_pkttype == PACKET_OUTGOING) continue;  // our own
      stack.receive(ByteSpan(buf.data(), static_cast<std::size_t>(n)), now());
    }
    stack.tick(now());
    // Bind accepted connections to their owners, and keep echoing.
    if (connect_to.empty()) {
      for (auto& o : owners) o->flush();
    } else {
      if (client.established) client.feed();
      if (client.sent == client.total && client.got == client.total && client.conn &&
          client.conn->state() == State::established)
        client.conn->close(now());
      if (client.ended || client.done) {
        if (client.conn && client.conn->state() == State::close_wait) client.conn->close(now());
        if (client.ended) break;
      }
      // Both FINs exchanged: the rest is TIME-WAIT's to sit out.
      if (client.conn && client.conn->state() == State::time_wait) break;
    }
  }
  const StackStats& s = stack.stats();
  std::printf("{\"frames_in\": %llu, \"frames_out\": %llu, \"resets_out\": %llu, \"dropped_malformed\": %llu, "
              "\"sent\": %llu, \"echoed\": %llu, \"bad\": %llu, \"ended\": \"%s\"}\n",
              static_cast<unsigned long long>(s.frames_in), static_cast<unsigned long long>(s.frames_out),
              static_cast<unsigned long long>(s.resets_out), static_cast<unsigned long long>(s.dropped_malformed),
              static_cast<unsigned long long>(client.sent), static_cast<unsigned long long>(client.got),
              static_cast<unsigned long long>(client.bad),
              client.ended ? std::string(name(*client.ended)).c_str()
              : client.conn ? std::string(name(client.conn->state())).c_str()
                            : "");
  if (connect_to.empty()) return 0;
  const bool closed = client.ended == End::closed || (client.conn && client.conn->state() == State::time_wait);
  return client.got == client.total && client.bad == 0 && closed ? 0 : 1;
}
