// The rendezvous store's client (see the header).
#include "distribution/transports/rendezvous/store_client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "distribution/runtime/communicator.h"
#include "distribution/transports/rendezvous/address.h"
#include "distribution/transports/rendezvous/store_protocol.h"
#include "engine/errors.h"

namespace keras::distribution {
namespace {

enum class Transfer { done, closed, timed_out };

Transfer write_all(int fd, const void* data, std::size_t size) {
  const char* cursor = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t written = ::send(fd, cursor, size, MSG_NOSIGNAL);
    if (written < 0 && errno == EINTR) continue;
    // ETIMEDOUT: the kernel gave up on a silent peer (TCP_USER_TIMEOUT, end_when_silent).
    if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT)) return Transfer::timed_out;
    if (written <= 0) return Transfer::closed;
    cursor += written;
    size -= static_cast<std::size_t>(written);
  }
  return Transfer::done;
}

Transfer read_all(int fd, void* data, std::size_t size) {
  char* cursor = static_cast<char*>(data);
  while (size > 0) {
    ssize_t got = ::recv(fd, cursor, size, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT)) return Transfer::timed_out;
    if (got <= 0) return Transfer::closed;
    cursor += got;
    size -= static_cast<std::size_t>(got);
  }
  return Transfer::done;
}

// A length-prefixed body of at most `limit` bytes.
Transfer read_body(int fd, std::string& body, std::size_t limit) {
  char length[4];
  Transfer result = read_all(fd, length, sizeof length);
  if (result != Transfer::done) return result;
  std::uint32_t size = read_uint32(length);
  if (size > limit) return Transfer::closed;
  body.resize(size);
  return read_all(fd, body.data(), size);
}

// Bodies the client takes from the store: the largest value any job's limits allow.
constexpr std::size_t kLargestReply = std::size_t{1} << 30;
// Reasons and refusals are short; a longer one is not from a keras store.
constexpr std::size_t kLargestReason = 4096;

// Bounds every send and receive on `fd` by `reply_timeout`, and lets the kernel end the
// connection when the store stays silent that long.
void apply_reply_timeout(int fd, std::chrono::milliseconds reply_timeout) {
  timeval limit{};
  limit.tv_sec = static_cast<time_t>(reply_timeout.count() / 1000);
  limit.tv_usec = static_cast<suseconds_t>(reply_timeout.count() % 1000 * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  // Half as long again for the kernel: the reply timeout fires first and says what happened
  // ("did not answer in time"); when the kernel's timer won the race, the connection was reset
  // and a black-holed coordinator read as "lost the connection".
  end_when_silent(fd, reply_timeout + reply_timeout / 2);
}

}  // namespace

void KeyValueClient::set_reply_timeout(std::chrono::milliseconds reply_timeout) {
  if (fd_ >= 0) apply_reply_timeout(fd_, reply_timeout);
}

KeyValueClient::KeyValueClient(const std::string& host, int port,
                               std::chrono::steady_clock::time_point deadline,
                               std::optional<JobToken> token, std::chrono::milliseconds reply_timeout)
    : address_(str(host, ":", port)), token_(std::move(token)) {
  AddressList addresses = resolve(host, port);
  auto pause = std::chrono::milliseconds(10);
  std::string last_error;
  while (fd_ < 0) {
    for (addrinfo* candidate = addresses.get(); candidate != nullptr && fd_ < 0; candidate = candidate->ai_next) {
      int fd = ::socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC, candidate->ai_protocol);
      if (fd < 0) continue;
      // connect() waits at most until the deadline (SO_SNDTIMEO bounds it on Linux): a host
      // that drops packets would otherwise hold it for the kernel's SYN retries, about 2 min.
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      left = std::clamp(left, std::chrono::milliseconds(100), std::max(reply_timeout, std::chrono::milliseconds(100)));
      timeval connect_limit{};
      connect_limit.tv_sec = static_cast<time_t>(left.count() / 1000);
      connect_limit.tv_usec = static_cast<suseconds_t>(left.count() % 1000 * 1000);
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &connect_limit, sizeof connect_limit);
      if (::connect(fd, candidate->ai_addr, candidate->ai_addrlen) != 0) {
        last_error = std::strerror(errno);
        ::close(fd);
        continue;
      }
      int yes = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
      apply_reply_timeout(fd, reply_timeout);
      std::optional<std::string> turned_away;
      try {
        turned_away = handshake(fd);
      } catch (...) {
        ::close(fd);
        throw;
      }
      if (turned_away) {
        last_error = *turned_away;
        ::close(fd);
        continue;
      }
      fd_ = fd;
    }
    if (fd_ >= 0) break;
    if (std::chrono::steady_clock::now() + pause > deadline) {
      throw CollectiveError(str("no coordinator answered at ", address_, " before the deadline (last "
                                "error: ", last_error, "); process 0 serves it: is it running, and "
                                "is this its address?"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

KeyValueClient::~KeyValueClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<std::string> KeyValueClient::handshake(int fd) {
  char greeting[kStoreMagic.size() + 1];
  Transfer got = read_all(fd, greeting, sizeof greeting);
  if (got == Transfer::closed) return std::string("the store closed the connection before its greeting");
  if (got == Transfer::timed_out) {
    throw CollectiveError(str("what listens at ", address_, " sent no greeting in time: it is not a keras "
                              "rendezvous store, or the coordinator is wedged"));
  }
  if (std::string_view(greeting, kStoreMagic.size()) != kStoreMagic) {
    throw CollectiveError(str("what listens at ", address_, " is not a keras rendezvous store of this version ",
                              "(its greeting does not begin with '", kStoreMagic, "')"));
  }
  char mode = greeting[kStoreMagic.size()];
  if (mode == kStoreRefused) {
    std::string reason;
    if (read_body(fd, reason, kLargestReason) != Transfer::done) reason = "no reason given";
    return str("the store refused the connection: ", reason);
  }
  if (mode == kStoreOpen) {
    if (token_) {
      throw ValueError(str("this process was given a job token but the coordinator at ", address_, " asks for ",
                           "none; give every process of the job the same KERAS_DISTRIBUTION_JOB_TOKEN (or ",
                           "job_token), or none to all"));
    }
    return std::nullopt;
  }
  if (mode != kStoreNeedsToken) {
    throw CollectiveError(str("the rendezvous store at ", address_, " greeted with an unknown mode byte ",
                              static_cast<int>(static_cast<unsigned char>(mode))));
  }
  if (!token_) {
    throw ValueError(str("the coordinator at ", address_, " requires a job token and this process has none: set "
                         "KERAS_DISTRIBUTION_JOB_TOKEN (or pass job_token) to the job's token"));
  }
  Challenge store_challenge{};
  if (read_all(fd, store_challenge.data(), store_challenge.size()) != Transfer::done) {
    return std::string("the store closed the connection during the handshake");
  }
  Challenge own_challenge = random_challenge();
  Proof proof = token_->client_proof(store_challenge, own_challenge);
  std::string answer(reinterpret_cast<const char*>(own_challenge.data()), own_challenge.size());
  answer.append(reinterpret_cast<const char*>(proof.data()), proof.size());
  if (write_all(fd, answer.data(), answer.size()) != Transfer::done) {
    return std::string("the store closed the connection during the handshake");
  }
  char status = 0;
  if (read_all(fd, &status, 1) != Transfer::done) {
    return std::string("the store closed the connection during the handshake");
  }
  if (status == kReplyRefused) {
    std::string reason;
    if (read_body(fd, reason, kLargestReason) != Transfer::done) reason = "no reason given";
    throw ValueError(str("the coordinator at ", address_, " refused this process's job token (", reason,
                         "); every process of the job must be given the same KERAS_DISTRIBUTION_JOB_TOKEN"));
  }
  Proof store_proof{};
  if (status != kReplyDone || read_all(fd, store_proof.data(), store_proof.size()) != Transfer::done ||
      !same_proof(store_proof, token_->store_proof(store_challenge, own_challenge))) {
    throw CollectiveError(str("what listens at ", address_, " could not prove that it knows the job token: it ",
                              "is not this job's coordinator"));
  }
  return std::nullopt;
}

std::vector<char> KeyValueClient::request(char operation, const std::string& key,
                                          const std::vector<char>& value, char* status) {
  std::string message = encode_request(operation, key, std::string_view(value.data(), value.size()));
  std::string reply;
  Transfer result = write_all(fd_, message.data(), message.size());
  if (result == Transfer::done) result = read_all(fd_, status, 1);
  if (result == Transfer::done) result = read_body(fd_, reply, kLargestReply);
  if (result == Transfer::timed_out) {
    throw CollectiveError(str("the coordinator at ", address_, " did not answer a request on '", key,
                              "' in time (is process 0 stopped, or wedged?)"));
  }
  if (result != Transfer::done) {
    throw CollectiveError(str("lost the connection to the coordinator at ", address_,
                              " (process 0 has probably ended, or what listens there is not a "
                              "keras coordinator)"));
  }
  if (*status == kReplyRefused) {
    throw CollectiveError(str("the coordinator at ", address_, " refused a request on '", key, "': ", reply));
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
  if (status == kReplyMissing) return std::nullopt;
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
