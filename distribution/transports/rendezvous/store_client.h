// A client of the rendezvous store (store_server.h). Processes of a job started by hand use it
// to check that the job is what each of them was told (ids, counts), to agree on the seed and
// to exchange Gloo's connection details; it plays the role of PyTorch's TCPStore client and of
// JAX's coordination service client.
//
// A request and its reply at a time: SET, GET (found or not), ADD (an int64 counter) and
// DELETE. Waiting for a key is the client polling GET with a short backoff until its
// deadline, so the server never holds a reply that a client which gave up could later read as
// the answer to another request. Rendezvous is a handful of keys per process, so polling costs
// nothing measurable.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "distribution/transports/rendezvous/job_token.h"

namespace keras::distribution {

class KeyValueClient {
 public:
  // Connects to `host`:`port`, retrying until `deadline` (the server may not be up yet, or be
  // full of strangers' connections), and passes the handshake: with `token`, each side proves
  // it knows it. ValueError for an unresolvable host or a token that does not match the
  // store's (one side has none, or another); CollectiveError when no store answers in time, or
  // what answers is not a keras store of this job. A reply that takes longer than
  // `reply_timeout` (a foreign program on the port, a wedged coordinator) is a CollectiveError.
  KeyValueClient(const std::string& host, int port, std::chrono::steady_clock::time_point deadline,
                 std::optional<JobToken> token = std::nullopt,
                 std::chrono::milliseconds reply_timeout = std::chrono::seconds(10));
  ~KeyValueClient();
  KeyValueClient(const KeyValueClient&) = delete;
  KeyValueClient& operator=(const KeyValueClient&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  std::optional<std::vector<char>> try_get(const std::string& key);
  // Waits for the key until `timeout` has passed; CollectiveError naming the key otherwise.
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout);
  // Adds `delta` to the int64 counter at `key` (0 when absent) and returns the new value.
  std::int64_t add(const std::string& key, std::int64_t delta);
  void erase(const std::string& key);
  // The keys among `keys` still absent after waiting up to `timeout` (empty: all arrived).
  std::vector<std::string> wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  const std::string& address() const { return address_; }
  // How long a reply may take from now on.
  void set_reply_timeout(std::chrono::milliseconds reply_timeout);

 private:
  // Reads the store's greeting and passes its handshake; nullopt when done, or the reason the
  // store turned this connection away (worth another try). Throws where trying again is futile.
  std::optional<std::string> handshake(int fd);
  std::vector<char> request(char operation, const std::string& key, const std::vector<char>& value,
                            char* status);
  int fd_ = -1;
  std::string address_;
  std::optional<JobToken> token_;
};

}  // namespace keras::distribution
