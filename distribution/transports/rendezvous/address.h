// Host and port of a rendezvous address: "host:port" split and checked, and resolved for
// connecting or listening.
#pragma once
#include <netdb.h>

#include <chrono>
#include <memory>
#include <optional>
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

// Lets the kernel end the connection on `fd` when its peer stays silent for about `silence`:
// TCP keepalive probes from a third of it, and TCP_USER_TIMEOUT, so that data unacknowledged
// for `silence` (a peer cut off or black-holed: no reset ever comes) fails the socket instead
// of retransmitting for the kernel's default of about 15 minutes.
void end_when_silent(int fd, std::chrono::milliseconds silence);

// KERAS_DISTRIBUTION_INTERFACE, checked (ValueError for an empty value or one with a port,
// comma, slash or space): the host name or address this process listens on, when set.
std::optional<std::string> listening_interface_override();

}  // namespace keras::distribution
