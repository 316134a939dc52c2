// The rendezvous of processes started by hand (without mpirun): process 0 serves a small
// key-value store on job 0's address, every process connects to it, and they use it to check
// that the job is what each of them was told (ids, counts), to agree on the seed and to
// exchange Gloo's connection details. It plays the role of PyTorch's TCPStore and of JAX's
// coordination service.
//
// The protocol is a request and one reply at a time per connection: SET, GET (found or not),
// ADD (an int64 counter) and DELETE. Waiting for a key is the client polling GET with a short
// backoff until its deadline, so the server never holds a reply that a client which gave up
// could later read as the answer to another request. Rendezvous is a handful of keys per
// process, so polling costs nothing measurable.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace keras::distribution {

// "host:port" split; ValueError when it is not of that form.
std::pair<std::string, int> split_host_port(const std::string& address);

class KeyValueServer {
 public:
  // Listens on `host`:`port` (port 0: any free port). Throws ValueError when the host does not
  // resolve and Error when the port is taken.
  KeyValueServer(const std::string& host, int port);
  ~KeyValueServer();
  KeyValueServer(const KeyValueServer&) = delete;
  KeyValueServer& operator=(const KeyValueServer&) = delete;
  int port() const { return port_; }

 private:
  void serve();
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::thread thread_;
};

class KeyValueClient {
 public:
  // Connects to `host`:`port`, retrying until `deadline` (the server may not be up yet).
  // ValueError for an unresolvable host; CollectiveError when no server answers in time. A
  // request whose reply takes longer than `reply_timeout` (a foreign program on the port, a
  // wedged coordinator) is a CollectiveError too.
  KeyValueClient(const std::string& host, int port, std::chrono::steady_clock::time_point deadline,
                 std::chrono::milliseconds reply_timeout = std::chrono::seconds(60));
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

 private:
  std::vector<char> request(char operation, const std::string& key, const std::vector<char>& value,
                            char* status);
  int fd_ = -1;
  std::string address_;
};

}  // namespace keras::distribution
