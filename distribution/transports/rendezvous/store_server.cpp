// The rendezvous store's server loop (see the header).
#include "distribution/transports/rendezvous/store_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <vector>

#include "distribution/transports/rendezvous/address.h"
#include "engine/errors.h"

namespace keras::distribution {
namespace {

using Clock = std::chrono::steady_clock;

// One read takes at most this much; a session asks for more only while it holds less than
// one request (StoreSession::wants_input).
constexpr std::size_t kReadChunk = 64 * 1024;
// New connections taken per wake-up, so a flood of them cannot starve the connected clients.
constexpr int kAcceptsPerRound = 64;

// Refusals logged one by one; past these a flood of strangers is counted, not printed.
constexpr std::size_t kLoggedRefusals = 20;

// "host:port" of the peer on `fd`, or "an unknown address".
std::string peer_of(int fd) {
  sockaddr_storage peer{};
  socklen_t length = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return "an unknown address";
  char host[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&peer);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
    return str("[", host, "]:", ntohs(v6->sin6_port));
  }
  const auto* v4 = reinterpret_cast<const sockaddr_in*>(&peer);
  ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
  return str(host, ":", ntohs(v4->sin_port));
}

struct Connection {
  Connection(int descriptor, const StoreLimits& limits, const JobToken* token)
      : fd(descriptor), session(limits, token, random_challenge()), accepted(Clock::now()) {}
  int fd;
  StoreSession session;
  Clock::time_point accepted;
  std::optional<Clock::time_point> busy_since;  // when the current request or reply began
};

// Sends what the session has to send without waiting; false when the peer is gone.
bool flush(Connection& connection) {
  while (!connection.session.output().empty()) {
    std::string_view pending = connection.session.output();
    ssize_t written = ::send(connection.fd, pending.data(), pending.size(), MSG_NOSIGNAL);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (written <= 0) return false;
    connection.session.sent(static_cast<std::size_t>(written));
  }
  return true;
}

}  // namespace

KeyValueServer::KeyValueServer(const std::string& host, int port, StoreLimits limits,
                               std::optional<JobToken> token)
    : limits_(limits), token_(std::move(token)), address_(str(host, ":", port)) {
  AddressList addresses = resolve(host, port);
  std::string last_error = "no address";
  for (addrinfo* candidate = addresses.get(); candidate != nullptr; candidate = candidate->ai_next) {
    int fd = ::socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                      candidate->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    // SO_REUSEADDR lets a restarted job bind while the last one's sockets sit in TIME_WAIT;
    // it does not let two live servers share the port (that still fails with EADDRINUSE).
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 && ::listen(fd, 512) == 0) {
      listen_fd_ = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  if (listen_fd_ < 0) {
    throw Error(str("the coordinator cannot listen on ", host, ":", port, ": ", last_error,
                    " (is another job, or another program, using that port?)"));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  address_ = str(host, ":", port_);
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
  StoreTable table(limits_);
  const JobToken* token = token_ ? &*token_ : nullptr;
  std::list<Connection> connections;  // oldest first; stable addresses for the poll map
  // A descriptor held in reserve: when the process runs out of descriptors, it is closed to
  // accept and refuse the waiting connection (otherwise poll would report it forever).
  int spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::vector<pollfd> fds;
  std::vector<Connection*> polled;

  auto drop = [&](std::list<Connection>::iterator at) {
    if (!at->session.refusal().empty()) note_refusal(peer_of(at->fd), at->session.refusal());
    ::close(at->fd);
    return connections.erase(at);
  };
  // At the limit, the connection that has waited longest without proving itself makes room,
  // once it has had its grace (StoreLimits::eviction_grace) to prove itself.
  auto evict_oldest_unproven = [&] {
    const Clock::time_point granted_before = Clock::now() - limits_.eviction_grace;
    for (auto at = connections.begin(); at != connections.end(); ++at) {
      if (at->accepted > granted_before) return false;  // oldest first: the rest are younger
      if (!at->session.proven()) {
        drop(at);
        return true;
      }
    }
    return false;
  };
  auto refuse = [&](int fd, const std::string& reason) {
    note_refusal(peer_of(fd), reason);
    std::string greeting = refusal_greeting(reason);
    if (::send(fd, greeting.data(), greeting.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
      // The stranger is gone already; nothing to tell it.
    }
    ::close(fd);
  };
  auto accept_new = [&] {
    for (int round = 0; round < kAcceptsPerRound; ++round) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if ((errno == EMFILE || errno == ENFILE) && !evict_oldest_unproven() && spare >= 0) {
          ::close(spare);
          int waiting = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
          if (waiting >= 0) refuse(waiting, "the coordinator's process has no file descriptors left");
          spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        return;
      }
      if (connections.size() >= limits_.connections && !evict_oldest_unproven()) {
        refuse(fd, str("the rendezvous store at ", address_, " already serves its limit of ", limits_.connections,
                       " connections, none of them a stranger past its grace; try again shortly"));
        continue;
      }
      int yes = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
      end_when_silent(fd, limits_.request_timeout);  // a client machine gone frees its connection
      connections.emplace_back(fd, limits_, token);
      if (!flush(connections.back())) drop(std::prev(connections.end()));
    }
  };

  std::size_t buffered = 0;  // bytes of incomplete requests over all sessions
  while (true) {
    // The nearest deadline bounds the wait.
    Clock::time_point now = Clock::now();
    Clock::time_point next = now + std::chrono::seconds(60);
    fds.assign({{wake_pipe_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    polled.clear();
    buffered = 0;
    for (Connection& connection : connections) {
      buffered += connection.session.buffered();
      if (!connection.session.proven()) next = std::min(next, connection.accepted + limits_.handshake_timeout);
      if (connection.busy_since) next = std::min(next, *connection.busy_since + limits_.request_timeout);
    }
    for (Connection& connection : connections) {
      short events = 0;
      if (!connection.session.output().empty()) events |= POLLOUT;
      // Over the budget, a session holding part of a request is not read (its deadline runs).
      bool may_grow = connection.session.buffered() == 0 || buffered < limits_.buffered_bytes;
      if (connection.session.wants_input() && may_grow) events |= POLLIN;
      fds.push_back({connection.fd, events, 0});
      polled.push_back(&connection);
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(wait, 0))) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents != 0) break;

    std::vector<bool> gone(polled.size(), false);
    for (std::size_t i = 0; i < polled.size(); ++i) {
      Connection& connection = *polled[i];
      short revents = fds[i + 2].revents;
      if (revents == 0) continue;
      if (revents & POLLIN) {
        char chunk[kReadChunk];
        ssize_t got = ::recv(connection.fd, chunk, sizeof chunk, 0);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          gone[i] = true;
          continue;
        }
        if (got > 0) connection.session.receive(chunk, static_cast<std::size_t>(got));
      } else if (revents & (POLLERR | POLLHUP | POLLNVAL)) {
        gone[i] = true;
        continue;
      }
    }
    // Answer, send, and keep the deadlines.
    now = Clock::now();
    std::size_t index = 0;
    for (auto at = connections.begin(); at != connections.end(); ++index) {
      bool polled_now = index < gone.size();
      if (polled_now && gone[index]) {
        at = drop(at);
        continue;
      }
      Connection& connection = *at;
      connection.session.answer(table);
      bool alive = flush(connection);
      if (connection.session.output().empty()) connection.session.answer(table);  // the rest of a pipeline
      alive = alive && flush(connection);
      bool finished = connection.session.closing() && connection.session.output().empty();
      if (!connection.session.busy()) {
        connection.busy_since.reset();
      } else if (!connection.busy_since) {
        connection.busy_since = now;
      }
      bool late = (!connection.session.proven() && now >= connection.accepted + limits_.handshake_timeout) ||
                  (connection.busy_since && now >= *connection.busy_since + limits_.request_timeout);
      if (!alive || finished || late) {
        at = drop(at);
        continue;
      }
      ++at;
    }
    if (fds[1].revents & POLLIN) accept_new();
  }
  for (Connection& connection : connections) ::close(connection.fd);
  if (spare >= 0) ::close(spare);
}

void KeyValueServer::note_refusal(const std::string& peer, const std::string& reason) {
  std::lock_guard lock(refusals_mutex_);
  ++refusal_count_;
  if (refusal_count_ > kLoggedRefusals) return;
  std::string line = str("from ", peer, " (", reason, ")");
  // Said when it happens: a process of the job given the wrong token is refused on its side at
  // once, and the coordinator's log is where its operator looks for why process 0 waits.
  std::fprintf(stderr, "keras: the coordinator at %s refused a connection %s%s\n", address_.c_str(), line.c_str(),
               refusal_count_ == kLoggedRefusals ? "; further refusals are counted, not logged" : "");
  std::fflush(stderr);
  refusals_.push_back(std::move(line));
}

std::string KeyValueServer::refusals() const {
  std::lock_guard lock(refusals_mutex_);
  if (refusal_count_ == 0) return "";
  std::string text = str("refused ", refusal_count_, refusal_count_ == 1 ? " connection: " : " connections: ");
  for (std::size_t i = 0; i < refusals_.size(); ++i) text += str(i ? ", " : "", refusals_[i]);
  if (refusal_count_ > refusals_.size()) text += str(" and ", refusal_count_ - refusals_.size(), " more");
  return text;
}

}  // namespace keras::distribution
