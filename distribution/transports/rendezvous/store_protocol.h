// The rendezvous store's protocol and its server side without sockets: the table of keys with
// its limits, and one connection's session (greeting, job-token handshake, request parsing and
// replies) as a state machine fed with bytes. The server (store_server.h) only moves bytes
// between sockets and sessions; the fuzz harness (tests/fuzz/store_fuzzer.cpp) drives sessions
// directly.
//
// On the wire (integers are little-endian uint32):
//   greeting, store to client, first on every connection: "kerasKV1", then one byte:
//     'o'  open store: requests follow;
//     't'  a job token is required: a 32-byte challenge follows; the client sends its own
//          32-byte challenge and its 32-byte proof (job_token.h); the store answers 'o' and its
//          own 32-byte proof, or 'e', length and reason, and closes;
//     'r'  refused (the store is full): length and reason follow, and the store closes.
//   request: operation ('S' set, 'G' get, 'A' add to an int64 counter, 'D' delete), key
//            length, value length, key, value.
//   reply:   status ('o' done, 'm' missing key, 'e' refused), length, body (the value, the
//            counter, or the reason). A refused request that was well formed (a full table)
//            leaves the connection open; a malformed one closes it after the reply.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "distribution/transports/rendezvous/job_token.h"

namespace keras::distribution {

inline constexpr std::string_view kStoreMagic = "kerasKV1";
inline constexpr char kStoreOpen = 'o', kStoreNeedsToken = 't', kStoreRefused = 'r';
inline constexpr char kSet = 'S', kGet = 'G', kAdd = 'A', kDelete = 'D';
inline constexpr char kReplyDone = 'o', kReplyMissing = 'm', kReplyRefused = 'e';
inline constexpr std::size_t kRequestHeaderBytes = 9;  // operation, key length, value length

// What one store holds and serves. Past a limit a client is refused with a reason and the
// store goes on serving the others.
struct StoreLimits {
  std::size_t connections = 512;
  std::size_t keys = 4096;
  std::size_t total_bytes = std::size_t{64} << 20;  // keys and values, 64 bytes more per key
  std::uint32_t key_bytes = 4096;
  std::uint32_t value_bytes = 1 << 20;
  // Bytes held for requests not yet complete, over all connections: past it, a connection
  // holding part of a request is not read from until its deadline drops it.
  std::size_t buffered_bytes = std::size_t{64} << 20;
  // A new connection must pass the handshake (or, without a token, complete its first request)
  // within this; a request, once begun, must arrive whole and its reply be taken within it.
  std::chrono::milliseconds handshake_timeout{10000};
  std::chrono::milliseconds request_timeout{10000};
  // At the connection limit, a connection still unproven after this makes room for a new one;
  // a younger one is not evicted (the newcomer is refused, and a keras client retries). Without
  // the grace, a flood of idle connections right after a process of the job connected evicted
  // it before it could send its first request: that process failed with "lost the connection"
  // in 2 of 40 runs of rendezvous_stranger_idle_connections_open on 2 cores. A client of the
  // job proves itself in well under a millisecond, unless its machine stalls it.
  std::chrono::milliseconds eviction_grace{2000};
};

// Limits for a job of `processes`: each process holds two connections and a few keys per
// group, and Gloo's address of a rank in a group is about 136 bytes per peer.
StoreLimits limits_for_job(std::int64_t processes);

void append_uint32(std::string& out, std::uint32_t value);
std::uint32_t read_uint32(const char* in);
// One request as the client sends it.
std::string encode_request(char operation, std::string_view key, std::string_view value);

struct StoreReply {
  char status = kReplyDone;
  std::string body;
};

// The keys and values, within the limits.
class StoreTable {
 public:
  explicit StoreTable(const StoreLimits& limits) : limits_(limits) {}
  StoreReply apply(char operation, const std::string& key, std::string_view value);
  std::size_t keys() const { return entries_.size(); }
  std::size_t bytes() const { return bytes_; }

 private:
  static std::size_t cost(const std::string& key, std::size_t value_bytes) { return key.size() + value_bytes + 64; }
  // Stores `value` under `key` if the limits allow; the reason otherwise.
  std::optional<std::string> put(const std::string& key, std::string value);
  StoreLimits limits_;
  std::map<std::string, std::string> entries_;
  std::size_t bytes_ = 0;
};

// One connection, seen from the store.
class StoreSession {
 public:
  // `token`: null for an open store; otherwise it must outlive the session. `challenge` is
  // this connection's (random in the server, fixed in the fuzz harness).
  StoreSession(const StoreLimits& limits, const JobToken* token, const Challenge& challenge);
  // Bytes that arrived from the client.
  void receive(const char* data, std::size_t size);
  // Answers the complete messages received, while less than one largest reply waits to be sent.
  void answer(StoreTable& table);
  // What is to be sent, and how much of it went.
  std::string_view output() const { return std::string_view(output_).substr(output_sent_); }
  void sent(std::size_t bytes);
  // Whether the store should read more from this client now: not while a reply waits (a client
  // that does not read its replies cannot make the store hold more for it), nor beyond one
  // request's worth.
  bool wants_input() const;
  // The client passed the handshake (with a token) or completed a request (without).
  bool proven() const { return proven_; }
  // Part of a request is held, or a reply waits: the request deadline runs.
  bool busy() const { return input_.size() > input_start_ || !output().empty(); }
  // The session is over once its output is sent (a malformed request, a wrong token).
  bool closing() const { return closing_; }
  // Why the store refused this client (a wrong token, a malformed request), if it did.
  const std::string& refusal() const { return refusal_; }
  std::size_t buffered() const { return input_.size() - input_start_; }
  // The largest request a session accepts, in bytes.
  std::size_t largest_request() const;

 private:
  void reply(char status, std::string_view body);
  void refuse_and_close(const std::string& reason);
  bool answer_handshake();
  const StoreLimits& limits_;
  const JobToken* token_;
  Challenge challenge_;
  std::string input_;
  std::size_t input_start_ = 0;
  std::string output_;
  std::size_t output_sent_ = 0;
  bool proven_ = false;
  bool closing_ = false;
  std::string refusal_;
};

// The greeting that refuses a connection, with its reason.
std::string refusal_greeting(std::string_view reason);

}  // namespace keras::distribution
