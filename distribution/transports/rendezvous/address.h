// Host and port of a rendezvous address: "host:port" split and checked, and resolved for
// connecting or listening.
#pragma once
#include <netdb.h>

#include <memory>
#include <string>
#include <utility>

namespace keras::distribution {

// "host:port" split ("[::1]:p" too); ValueError when it is not of that form.
std::pair<std::string, int> split_host_port(const std::string& address);

struct AddressListDeleter {
  void operator()(addrinfo* list) const { freeaddrinfo(list); }
};
using AddressList = std::unique_ptr<addrinfo, AddressListDeleter>;

// The addresses of `host` (TCP); ValueError naming the host when it does not resolve. A host
// is always given, so a listener binds that address and never every interface.
AddressList resolve(const std::string& host, int port);

}  // namespace keras::distribution
