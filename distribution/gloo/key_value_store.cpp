// The rendezvous key-value store over TCP (see the header).
#include "distribution/gloo/key_value_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>

#include "distribution/communicator.h"
#include "engine/errors.h"

namespace keras::distribution {
namespace {

constexpr char kSet = 'S', kGet = 'G', kAdd = 'A', kDelete = 'D';
constexpr char kOk = 'o', kMissing = 'm';
// Keys and values are tiny (ids, counts, Gloo's addresses); anything larger is a corrupt or
// foreign peer, refused before allocating.
constexpr std::uint32_t kMaximumField = 1 << 20;

addrinfo* resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  std::string service = std::to_string(port);
  int status = getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (status != 0) {
    throw ValueError(str("the host '", host, "' does not resolve (", gai_strerror(status),
                         "); expected a host name or IP address this machine can reach"));
  }
  return result;
}

// Reads or writes exactly `size` bytes; false when the peer closed or failed.
bool write_all(int fd, const void* data, std::size_t size) {
  const char* cursor = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t written = ::send(fd, cursor, size, MSG_NOSIGNAL);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    cursor += written;
    size -= static_cast<std::size_t>(written);
  }
  return true;
}

bool read_all(int fd, void* data, std::size_t size) {
  char* cursor = static_cast<char*>(data);
  while (size > 0) {
    ssize_t got = ::recv(fd, cursor, size, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    cursor += got;
    size -= static_cast<std::size_t>(got);
  }
  return true;
}

bool write_field(int fd, const std::string& text) {
  auto size = static_cast<std::uint32_t>(text.size());
  return write_all(fd, &size, sizeof size) && write_all(fd, text.data(), text.size());
}

bool read_field(int fd, std::string& text) {
  std::uint32_t size = 0;
  if (!read_all(fd, &size, sizeof size) || size > kMaximumField) return false;
  text.resize(size);
  return read_all(fd, text.data(), size);
}

// One request on a server connection; false when the connection is done.
bool answer(int fd, std::map<std::string, std::string>& table) {
  char operation = 0;
  std::string key, value;
  if (!read_all(fd, &operation, 1) || !read_field(fd, key) || !read_field(fd, value)) return false;
  char status = kOk;
  std::string reply;
  if (operation == kSet) {
    table[key] = value;
  } else if (operation == kGet) {
    auto found = table.find(key);
    if (found == table.end()) {
      status = kMissing;
    } else {
      reply = found->second;
    }
  } else if (operation == kAdd) {
    std::int64_t delta = 0, current = 0;
    if (value.size() != sizeof delta) return false;
    std::memcpy(&delta, value.data(), sizeof delta);
    auto found = table.find(key);
    if (found != table.end() && found->second.size() == sizeof current) {
      std::memcpy(&current, found->second.data(), sizeof current);
    }
    current += delta;
    reply.assign(reinterpret_cast<const char*>(&current), sizeof current);
    table[key] = reply;
  } else if (operation == kDelete) {
    table.erase(key);
  } else {
    return false;
  }
  return write_all(fd, &status, 1) && write_field(fd, reply);
}

}  // namespace

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

KeyValueServer::KeyValueServer(const std::string& host, int port) {
  addrinfo* addresses = resolve(host, port, true);
  std::string last_error = "no address";
  for (addrinfo* candidate = addresses; candidate != nullptr; candidate = candidate->ai_next) {
    int fd = ::socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC, candidate->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    // SO_REUSEADDR lets a restarted job bind while the last one's sockets sit in TIME_WAIT;
    // it does not let two live servers share the port (that still fails with EADDRINUSE).
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(addresses);
  if (listen_fd_ < 0) {
    throw Error(str("the coordinator cannot listen on ", host, ":", port, ": ", last_error,
                    " (is another job, or another program, using that port?)"));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (::pipe2(wake_pipe_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    throw Error(str("the coordinator could not create its wake-up pipe: ", std::strerror(errno)));
  }
  thread_ = std::thread([this] { serve(); });
}

KeyValueServer::~KeyValueServer() {
  char byte = 0;
  if (::write(wake_pipe_[1], &byte, 1) < 0) {
    // Nothing to do: the thread also ends when the listening socket closes below.
  }
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

void KeyValueServer::serve() {
  std::map<std::string, std::string> table;
  std::vector<pollfd> fds = {{wake_pipe_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
  while (true) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents != 0) break;
    if (fds[1].revents & POLLIN) {
      int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) {
        int yes = 1;
        setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
        fds.push_back({client, POLLIN, 0});
      }
    }
    for (std::size_t i = 2; i < fds.size();) {
      if (fds[i].revents != 0 && !answer(fds[i].fd, table)) {
        ::close(fds[i].fd);
        fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      ++i;
    }
  }
  for (std::size_t i = 2; i < fds.size(); ++i) ::close(fds[i].fd);
}

KeyValueClient::KeyValueClient(const std::string& host, int port,
                               std::chrono::steady_clock::time_point deadline,
                               std::chrono::milliseconds reply_timeout)
    : address_(str(host, ":", port)) {
  addrinfo* addresses = resolve(host, port, false);
  auto pause = std::chrono::milliseconds(10);
  std::string last_error;
  while (fd_ < 0) {
    for (addrinfo* candidate = addresses; candidate != nullptr && fd_ < 0; candidate = candidate->ai_next) {
      int fd = ::socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC, candidate->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, candidate->ai_addr, candidate->ai_addrlen) == 0) {
        int yes = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
        timeval limit{};
        limit.tv_sec = static_cast<time_t>(reply_timeout.count() / 1000);
        limit.tv_usec = static_cast<suseconds_t>(reply_timeout.count() % 1000 * 1000);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
        fd_ = fd;
      } else {
        last_error = std::strerror(errno);
        ::close(fd);
      }
    }
    if (fd_ >= 0) break;
    if (std::chrono::steady_clock::now() + pause > deadline) {
      freeaddrinfo(addresses);
      throw CollectiveError(str("no coordinator answered at ", address_, " before the deadline (last "
                                "error: ", last_error, "); process 0 serves it: is it running, and "
                                "is this its address?"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
  freeaddrinfo(addresses);
}

KeyValueClient::~KeyValueClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<char> KeyValueClient::request(char operation, const std::string& key,
                                          const std::vector<char>& value, char* status) {
  std::string payload(value.begin(), value.end());
  std::string reply;
  if (!write_all(fd_, &operation, 1) || !write_field(fd_, key) || !write_field(fd_, payload) ||
      !read_all(fd_, status, 1) || !read_field(fd_, reply)) {
    throw CollectiveError(str("lost the connection to the coordinator at ", address_,
                              " (process 0 has probably ended, or what listens there is not a "
                              "keras coordinator)"));
  }
  return std::vector<char>(reply.begin(), reply.end());
}

void KeyValueClient::set(const std::string& key, const std::vector<char>& value) {
  char status = 0;
  request(kSet, key, value, &status);
}

std::optional<std::vector<char>> KeyValueClient::try_get(const std::string& key) {
  char status = 0;
  std::vector<char> value = request(kGet, key, {}, &status);
  if (status == kMissing) return std::nullopt;
  return value;
}

std::vector<char> KeyValueClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::vector<std::string> missing = wait({key}, timeout);
  if (!missing.empty()) {
    throw CollectiveError(str("the key '", key, "' did not appear in the coordinator's store at ",
                              address_, " within ", timeout.count(), " ms"));
  }
  return *try_get(key);
}

std::int64_t KeyValueClient::add(const std::string& key, std::int64_t delta) {
  std::vector<char> encoded(sizeof delta);
  std::memcpy(encoded.data(), &delta, sizeof delta);
  char status = 0;
  std::vector<char> reply = request(kAdd, key, encoded, &status);
  std::int64_t value = 0;
  if (reply.size() == sizeof value) std::memcpy(&value, reply.data(), sizeof value);
  return value;
}

void KeyValueClient::erase(const std::string& key) {
  char status = 0;
  request(kDelete, key, {}, &status);
}

std::vector<std::string> KeyValueClient::wait(const std::vector<std::string>& keys,
                                              std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  std::vector<std::string> missing = keys;
  while (true) {
    std::vector<std::string> still;
    for (const std::string& key : missing) {
      if (!try_get(key)) still.push_back(key);
    }
    missing = std::move(still);
    if (missing.empty() || std::chrono::steady_clock::now() >= deadline) return missing;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace keras::distribution
