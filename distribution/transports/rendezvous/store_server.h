// The rendezvous store's server: process 0 of a job started by hand runs it on job 0's address
// (see store_client.h for what the job keeps in it). One thread serves every connection with
// non-blocking sockets and poll(), so no client can stop it: a connection that stalls in its
// handshake or mid-request is dropped at its deadline, one that never reads its replies is not
// read from, and connections, keys and bytes have limits (store_protocol.h) past which a
// client is refused with a reason while the others are served. When the job has a token, only
// clients that prove they know it reach the table.
#pragma once
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "distribution/transports/rendezvous/job_token.h"
#include "distribution/transports/rendezvous/store_protocol.h"

namespace keras::distribution {

class KeyValueServer {
 public:
  // Listens on `host`:`port` (that address only; port 0: any free port). Throws ValueError when
  // the host does not resolve and Error when the port is taken.
  KeyValueServer(const std::string& host, int port, StoreLimits limits = {},
                 std::optional<JobToken> token = std::nullopt);
  ~KeyValueServer();
  KeyValueServer(const KeyValueServer&) = delete;
  KeyValueServer& operator=(const KeyValueServer&) = delete;
  int port() const { return port_; }
  // The connections it refused (a wrong job token, a malformed request, over a limit), each
  // logged on stderr as it happens (the first kLoggedRefusals of them), in words for the
  // join-timeout message: "refused 2 connections: from 127.0.0.2:40112 (wrong job token: ...), ...".
  // Empty when it refused none.
  std::string refusals() const;

 private:
  void serve();
  void note_refusal(const std::string& peer, const std::string& reason);
  mutable std::mutex refusals_mutex_;
  std::vector<std::string> refusals_;  // the first kLoggedRefusals, "from <peer> (<reason>)"
  std::size_t refusal_count_ = 0;
  StoreLimits limits_;
  std::optional<JobToken> token_;
  std::string address_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::thread thread_;
};

}  // namespace keras::distribution
