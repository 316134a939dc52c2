// Rendezvous addresses (see the header).
#include "distribution/transports/rendezvous/address.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>

#include "engine/environment.h"
#include "engine/errors.h"

namespace keras::distribution {

std::pair<std::string, int> split_host_port(const std::string& address) {
  std::size_t colon = address.rfind(':');
  int port = 0;
  if (colon != std::string::npos && colon > 0) {
    auto [end, error] = std::from_chars(address.data() + colon + 1, address.data() + address.size(), port);
    if (error == std::errc() && end == address.data() + address.size() && port > 0 && port < 65536) {
      std::string host = address.substr(0, colon);
      if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
      return {host, port};
    }
  }
  throw ValueError(str("address ", quote_input(address), " is not of the form host:port (port in 1-65535)"));
}

AddressList resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  std::string service = std::to_string(port);
  int status = getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (status != 0) {
    throw ValueError(str("the host '", host, "' does not resolve (", gai_strerror(status),
                         "); expected a host name or IP address this machine can reach"));
  }
  return AddressList(result);
}

void end_when_silent(int fd, std::chrono::milliseconds silence) {
  const int yes = 1;
  const auto seconds = static_cast<int>(std::max<std::int64_t>(1, silence.count() / 3000));
  const int probes = 3;
  const auto milliseconds = static_cast<unsigned>(std::max<std::int64_t>(1, silence.count()));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &yes, sizeof yes);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &seconds, sizeof seconds);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &seconds, sizeof seconds);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &milliseconds, sizeof milliseconds);
}

std::optional<std::string> listening_interface_override() {
  std::optional<std::string> interface = environment::get("KERAS_DISTRIBUTION_INTERFACE");
  if (interface && (interface->empty() || interface->find_first_of(" ,:/") != std::string::npos)) {
    throw ValueError(str("KERAS_DISTRIBUTION_INTERFACE=", quote_input(*interface), " is not a host name or "
                         "IPv4 address of this machine (the address this process listens on)"));
  }
  return interface;
}

}  // namespace keras::distribution
