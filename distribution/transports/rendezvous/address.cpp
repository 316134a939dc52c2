// Rendezvous addresses (see the header).
#include "distribution/transports/rendezvous/address.h"

#include <charconv>

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

}  // namespace keras::distribution
