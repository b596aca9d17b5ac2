// Kernel TCP socket set-up for socklnd: listeners, connects from a
// privileged port, and the per-connection options Linux ksocklnd sets.
#pragma once

#include <cstdint>
#include <string>

#include "lnd/socklnd/address.hpp"

namespace lnetr::sock {

struct Options;

// A non-blocking listening socket on ip:port (IPv4 or IPv6, as `ip`); -1
// with `err` set on failure.
int listen_on(const IpAddr& ip, std::uint16_t port, int backlog, std::string& err);

// Start a non-blocking connect from local_ip and the highest free
// privileged port (1023 down to 512, as Linux does) to remote:port.
// Returns the fd (connection in progress) or -1 with `error` the errno of
// the failure (EADDRINUSE: every privileged port taken; EACCES: not allowed
// to bind one; EAFNOSUPPORT: the addresses are of different families).
int connect_privileged(const IpAddr& local_ip, const IpAddr& remote_ip, std::uint16_t port, int& error);

// Accept one pending connection, non-blocking; -1 when none (or error).
int accept_one(int listen_fd, Endpoint& remote) noexcept;

// Options of an established socklnd connection: TCP_NODELAY unless nagle,
// TCP keepalive, buffer sizes, and SO_LINGER 0 so that a close aborts what
// is still buffered (Linux sets the same); the tos as IP_TOS or, on IPv6,
// IPV6_TCLASS.
void setup_conn_socket(int fd, const Options& opts) noexcept;

bool local_address(int fd, Endpoint& a) noexcept;

}  // namespace lnetr::sock
