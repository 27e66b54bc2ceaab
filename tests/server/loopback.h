// Test helper: a raw TCP connection to the server on 127.0.0.1, for clients that do not speak
// proper HTTP (partial requests, missing headers).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>

namespace ds4::server::test {

/// Connects to 127.0.0.1:port with a receive timeout of timeout_s seconds (recv then fails
/// with EAGAIN). Returns the socket, or -1 when the connection fails (the socket is closed).
inline int connect_loopback(int port, int timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace ds4::server::test
