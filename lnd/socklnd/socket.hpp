// Kernel TCP socket set-up for socklnd: listeners, connects from a
// privileged port, and the per-connection options Linux ksocklnd sets.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>

namespace lnetr::sock {

struct Options;

// IPv4 address (host order) and port as a sockaddr.
sockaddr_in make_addr(std::uint32_t ip, std::uint16_t port) noexcept;
std::uint32_t addr_ip(const sockaddr_in& a) noexcept;  // host order
std::uint16_t addr_port(const sockaddr_in& a) noexcept;
std::string to_string(const sockaddr_in& a);

// A non-blocking listening socket on ip:port; -1 with `err` set on failure.
int listen_on(std::uint32_t ip, std::uint16_t port, int backlog, std::string& err);

// Start a non-blocking connect from local_ip and the highest free
// privileged port (1023 down to 512, as Linux does) to remote:port.
// Returns the fd (connection in progress) or -1 with `error` the errno of
// the failure (EADDRINUSE: every privileged port taken; EACCES: not allowed
// to bind one).
int connect_privileged(std::uint32_t local_ip, std::uint32_t remote_ip, std::uint16_t port, int& error);

// Accept one pending connection, non-blocking; -1 when none (or error).
int accept_one(int listen_fd, sockaddr_in& remote) noexcept;

// Options of an established socklnd connection: TCP_NODELAY unless nagle,
// TCP keepalive, buffer sizes, and SO_LINGER 0 so that a close aborts what
// is still buffered (Linux sets the same).
void setup_conn_socket(int fd, const Options& opts) noexcept;

bool local_address(int fd, sockaddr_in& a) noexcept;

}  // namespace lnetr::sock
