// The rendezvous store in one process: its sessions fed bytes directly (handshake, parsing,
// limits, backpressure), and its server on loopback with short deadlines, where a stalled,
// flooding or silent client must not stop the others. The same attacks from other processes,
// on a real job, are tests/rendezvous/check_strangers.py.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "distribution/runtime/communicator.h"
#include "distribution/transports/rendezvous/job_token.h"
#include "distribution/transports/rendezvous/store_client.h"
#include "distribution/transports/rendezvous/store_protocol.h"
#include "distribution/transports/rendezvous/store_server.h"
#include "tests/test_helpers.h"

namespace keras::distribution {
namespace {

using keras::testing::expect_throw_with;
using namespace std::chrono_literals;

Challenge fixed_challenge(unsigned char fill) {
  Challenge challenge{};
  challenge.fill(fill);
  return challenge;
}

// The replies in `output` after the greeting (status, body).
std::vector<StoreReply> replies(std::string_view output) {
  std::vector<StoreReply> result;
  while (output.size() >= 5) {
    std::uint32_t length = read_uint32(output.data() + 1);
    result.push_back({output[0], std::string(output.substr(5, length))});
    output.remove_prefix(5 + length);
  }
  return result;
}

std::string_view after_greeting(const StoreSession& session, std::size_t greeting) {
  return session.output().substr(greeting);
}

TEST(RendezvousSession, OpenStoreAnswersPipelinedRequests) {
  StoreLimits limits;
  StoreTable table(limits);
  StoreSession session(limits, nullptr, fixed_challenge(1));
  EXPECT_EQ(session.output(), std::string(kStoreMagic) + kStoreOpen);
  std::int64_t three = 3;
  std::string input = encode_request(kSet, "a", "value") + encode_request(kGet, "a", "") +
                      encode_request(kGet, "absent", "") +
                      encode_request(kAdd, "n", std::string_view(reinterpret_cast<char*>(&three), 8)) +
                      encode_request(kDelete, "a", "") + encode_request(kGet, "a", "");
  // Byte by byte: a request split anywhere is still one request.
  for (char byte : input) {
    session.receive(&byte, 1);
    session.answer(table);
  }
  std::vector<StoreReply> got = replies(after_greeting(session, kStoreMagic.size() + 1));
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[1].body, "value");
  EXPECT_EQ(got[2].status, kReplyMissing);
  EXPECT_EQ(got[3].body, std::string(reinterpret_cast<char*>(&three), 8));
  EXPECT_EQ(got[5].status, kReplyMissing);
  EXPECT_TRUE(session.proven());
  EXPECT_FALSE(session.closing());
  EXPECT_EQ(table.keys(), 1u);  // the counter
}

TEST(RendezvousSession, OversizedOrUnknownRequestsAreRefusedAndClosed) {
  StoreLimits limits;
  StoreTable table(limits);
  // A 4 GiB value announced in the header: refused before anything is allocated for it.
  StoreSession huge(limits, nullptr, fixed_challenge(1));
  std::string header(1, kSet);
  append_uint32(header, 1);
  append_uint32(header, 0xFFFFFFFFu);
  huge.receive(header.data(), header.size());
  huge.answer(table);
  std::vector<StoreReply> got = replies(after_greeting(huge, kStoreMagic.size() + 1));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, kReplyRefused);
  EXPECT_NE(got[0].body.find("a value of 4294967295 bytes is over the store's limit of 1048576"), std::string::npos);
  EXPECT_TRUE(huge.closing());
  EXPECT_FALSE(huge.wants_input());

  StoreSession key(limits, nullptr, fixed_challenge(1));
  std::string long_key = encode_request(kGet, std::string(limits.key_bytes + 1, 'k'), "");
  key.receive(long_key.data(), long_key.size());
  key.answer(table);
  EXPECT_TRUE(key.closing());

  StoreSession unknown(limits, nullptr, fixed_challenge(1));
  std::string junk = "X12345678";
  unknown.receive(junk.data(), junk.size());
  unknown.answer(table);
  got = replies(after_greeting(unknown, kStoreMagic.size() + 1));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].body.find("unknown operation byte 88"), std::string::npos);
  EXPECT_TRUE(unknown.closing());
  EXPECT_EQ(table.keys(), 0u);
}

TEST(RendezvousSession, TokenHandshakeProvesBothSidesAndRefusesReplays) {
  StoreLimits limits;
  StoreTable table(limits);
  JobToken token("secret", "test");
  Challenge client = fixed_challenge(9);
  std::size_t greeting = kStoreMagic.size() + 1 + sizeof(Challenge);

  StoreSession first(limits, &token, fixed_challenge(1));
  EXPECT_EQ(first.output().substr(0, kStoreMagic.size() + 1), std::string(kStoreMagic) + kStoreNeedsToken);
  // Before the handshake, a request is read as the (wrong) answer to the challenge.
  std::string request = encode_request(kSet, "join/error", "stop") + std::string(64, '\0');
  StoreSession eager(limits, &token, fixed_challenge(1));
  eager.receive(request.data(), request.size());
  eager.answer(table);
  EXPECT_TRUE(eager.closing());
  EXPECT_EQ(table.keys(), 0u);

  Proof proof = token.client_proof(fixed_challenge(1), client);
  std::string answer(reinterpret_cast<const char*>(client.data()), client.size());
  answer.append(reinterpret_cast<const char*>(proof.data()), proof.size());
  first.receive(answer.data(), answer.size());
  first.answer(table);
  ASSERT_TRUE(first.proven());
  std::string_view reply = after_greeting(first, greeting);
  ASSERT_EQ(reply.size(), 1 + sizeof(Proof));
  EXPECT_EQ(reply[0], kReplyDone);
  Proof store{};
  std::memcpy(store.data(), reply.data() + 1, store.size());
  EXPECT_TRUE(same_proof(store, token.store_proof(fixed_challenge(1), client)));
  // The store's proof is not the client's, so neither can be played back as the other.
  EXPECT_FALSE(same_proof(store, proof));

  // The same answer on a connection with another challenge: refused, and closed.
  StoreSession replayed(limits, &token, fixed_challenge(2));
  replayed.receive(answer.data(), answer.size());
  replayed.answer(table);
  EXPECT_FALSE(replayed.proven());
  EXPECT_TRUE(replayed.closing());
  std::vector<StoreReply> got = replies(after_greeting(replayed, greeting));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].body.find("wrong job token"), std::string::npos);
}

TEST(RendezvousSession, AClientThatDoesNotReadCannotMakeTheStoreHoldMore) {
  StoreLimits limits;
  StoreTable table(limits);
  StoreSession writer(limits, nullptr, fixed_challenge(1));
  std::string big = encode_request(kSet, "big", std::string(limits.value_bytes, 'v'));
  writer.receive(big.data(), big.size());
  writer.answer(table);
  // A thousand GETs of the 1 MiB value at once: one reply is prepared at a time.
  StoreSession reader(limits, nullptr, fixed_challenge(1));
  std::string gets;
  for (int i = 0; i < 1000; ++i) gets += encode_request(kGet, "big", "");
  reader.receive(gets.data(), gets.size());
  reader.answer(table);
  EXPECT_LE(reader.output().size(), 2 * std::size_t{limits.value_bytes} + 64);
  EXPECT_FALSE(reader.wants_input());
  // Taking the replies lets the rest be answered, a bounded amount at a time.
  std::size_t answered = 0;
  while (!reader.output().empty()) {
    answered += replies(reader.output().substr(answered == 0 ? kStoreMagic.size() + 1 : 0)).size();
    reader.sent(reader.output().size());
    reader.answer(table);
    EXPECT_LE(reader.output().size(), 2 * std::size_t{limits.value_bytes} + 64);
  }
  EXPECT_EQ(answered, 1000u);
  EXPECT_TRUE(reader.wants_input());
}

TEST(RendezvousTable, LimitsOnKeysAndBytesRefuseWithAReason) {
  StoreLimits limits;
  limits.keys = 3;
  limits.total_bytes = 1000;
  StoreTable table(limits);
  EXPECT_EQ(table.apply(kSet, "a", "1").status, kReplyDone);
  EXPECT_EQ(table.apply(kSet, "b", "2").status, kReplyDone);
  EXPECT_EQ(table.apply(kSet, "c", "3").status, kReplyDone);
  StoreReply refused = table.apply(kSet, "d", "4");
  EXPECT_EQ(refused.status, kReplyRefused);
  EXPECT_NE(refused.body.find("limit of 3 keys"), std::string::npos);
  EXPECT_EQ(table.apply(kSet, "a", "replaced").status, kReplyDone);  // not a new key
  refused = table.apply(kSet, "b", std::string(900, 'x'));
  EXPECT_EQ(refused.status, kReplyRefused);
  EXPECT_NE(refused.body.find("of its limit of 1000"), std::string::npos);
  EXPECT_EQ(table.apply(kGet, "b", "").body, "2");  // the refused SET changed nothing
  EXPECT_EQ(table.apply(kDelete, "c", "").status, kReplyDone);
  EXPECT_EQ(table.apply(kSet, "d", "4").status, kReplyDone);
  EXPECT_EQ(table.apply(kAdd, "d", "short").status, kReplyRefused);
}

// A raw connection to the server, for playing the stranger.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    timeval limit{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  }
  ~RawConnection() { ::close(fd_); }
  void send(const std::string& bytes) { EXPECT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size())); }
  // Everything the server sends until it closes (or 5 s pass).
  std::string read_until_closed() {
    std::string all;
    char chunk[4096];
    while (true) {
      ssize_t got = ::recv(fd_, chunk, sizeof chunk, 0);
      if (got <= 0) return all;
      all.append(chunk, static_cast<std::size_t>(got));
    }
  }

 private:
  int fd_ = -1;
};

StoreLimits short_deadlines() {
  StoreLimits limits;
  limits.handshake_timeout = 1s;
  limits.request_timeout = 1s;
  return limits;
}

TEST(RendezvousServer, AStalledClientIsDroppedAndTheOthersAreServedMeanwhile) {
  KeyValueServer server("127.0.0.1", 0, short_deadlines());
  RawConnection stalled(server.port());
  stalled.send("S");  // one byte of a request, then nothing
  KeyValueClient client("127.0.0.1", server.port(), std::chrono::steady_clock::now() + 5s);
  auto started = std::chrono::steady_clock::now();
  client.set("key", {'v'});
  EXPECT_EQ(client.try_get("key"), std::vector<char>{'v'});
  EXPECT_LT(std::chrono::steady_clock::now() - started, 800ms);  // well before the stalled one's deadline
  // The stalled connection is dropped at its deadline: its read ends with the greeting alone.
  EXPECT_EQ(stalled.read_until_closed(), std::string(kStoreMagic) + kStoreOpen);
  // The client is proven: an idle client is never dropped.
  std::this_thread::sleep_for(1200ms);
  EXPECT_EQ(client.add("n", 2), 2);
}

TEST(RendezvousServer, AtItsConnectionLimitTheStoreEvictsStrangersThenRefusesWithAReason) {
  StoreLimits limits = short_deadlines();
  limits.handshake_timeout = 10s;
  limits.connections = 3;
  KeyValueServer server("127.0.0.1", 0, limits);
  auto deadline = [] { return std::chrono::steady_clock::now() + 5s; };
  RawConnection idle_one(server.port()), idle_two(server.port());
  KeyValueClient first("127.0.0.1", server.port(), deadline());
  first.set("a", {'1'});
  // Full with one proven client and two idle strangers: new clients take the strangers' places.
  KeyValueClient second("127.0.0.1", server.port(), deadline());
  second.set("b", {'2'});
  KeyValueClient third("127.0.0.1", server.port(), deadline());
  third.set("c", {'3'});
  EXPECT_EQ(idle_one.read_until_closed(), std::string(kStoreMagic) + kStoreOpen);
  EXPECT_EQ(idle_two.read_until_closed(), std::string(kStoreMagic) + kStoreOpen);
  // Full of proven clients: the next one is refused, with the reason.
  RawConnection refused(server.port());
  std::string greeting = refused.read_until_closed();
  EXPECT_EQ(greeting.substr(0, kStoreMagic.size() + 1), std::string(kStoreMagic) + kStoreRefused);
  EXPECT_NE(greeting.find("already serves its limit of 3 connections"), std::string::npos);
  expect_throw_with<CollectiveError>(
      [&] { KeyValueClient("127.0.0.1", server.port(), std::chrono::steady_clock::now() + 200ms); },
      "already serves its limit of 3 connections");
  EXPECT_EQ(first.try_get("c"), std::vector<char>{'3'});
}

// A connection that has not proved itself yet keeps its place for eviction_grace: a flood of
// strangers right after a process of the job connected must not push it out before it sends its
// first request (that happened to process 0's own client in CI); after the grace it makes room.
TEST(RendezvousServer, AYoungUnprovenConnectionIsNotEvictedWithinItsGrace) {
  StoreLimits limits = short_deadlines();
  limits.handshake_timeout = 10s;
  limits.connections = 2;
  limits.eviction_grace = 600ms;
  KeyValueServer server("127.0.0.1", 0, limits);
  KeyValueClient first("127.0.0.1", server.port(), std::chrono::steady_clock::now() + 5s);
  first.set("a", {'1'});
  RawConnection young(server.port());
  std::this_thread::sleep_for(50ms);
  // Within the young one's grace a newcomer is refused, with the reason, and the young one stays.
  expect_throw_with<CollectiveError>(
      [&] { KeyValueClient("127.0.0.1", server.port(), std::chrono::steady_clock::now() + 150ms); },
      "none of them a stranger past its grace");
  // Past it, the newcomer (retrying until its deadline) takes the unproven one's place.
  KeyValueClient second("127.0.0.1", server.port(), std::chrono::steady_clock::now() + 5s);
  second.set("b", {'2'});
  EXPECT_EQ(young.read_until_closed(), std::string(kStoreMagic) + kStoreOpen);
  EXPECT_EQ(first.try_get("b"), std::vector<char>{'2'});
}

TEST(RendezvousServer, AClientThatNeverReadsItsRepliesIsDroppedWithoutStoppingTheStore) {
  KeyValueServer server("127.0.0.1", 0, short_deadlines());
  KeyValueClient client("127.0.0.1", server.port(), std::chrono::steady_clock::now() + 5s);
  client.set("big", std::vector<char>(1 << 20, 'v'));
  {
    RawConnection greedy(server.port());
    std::string gets;
    for (int i = 0; i < 200; ++i) gets += encode_request(kGet, "big", "");
    greedy.send(gets);  // 200 MiB of replies asked for, none read
    std::this_thread::sleep_for(50ms);
    auto started = std::chrono::steady_clock::now();
    EXPECT_EQ(client.add("n", 1), 1);
    EXPECT_LT(std::chrono::steady_clock::now() - started, 800ms);  // well before the greedy one's deadline
    std::this_thread::sleep_for(1500ms);  // past it, the greedy one is gone
  }
  EXPECT_EQ(client.add("n", 1), 2);
}

TEST(RendezvousClient, TokensMustMatchOnBothSides) {
  KeyValueServer with_token("127.0.0.1", 0, {}, JobToken("right", "test"));
  KeyValueServer open("127.0.0.1", 0);
  auto deadline = [] { return std::chrono::steady_clock::now() + 2s; };
  KeyValueClient good("127.0.0.1", with_token.port(), deadline(), JobToken("right", "test"));
  good.set("k", {'v'});
  EXPECT_EQ(good.try_get("k"), std::vector<char>{'v'});
  expect_throw_with<ValueError>([&] { KeyValueClient("127.0.0.1", with_token.port(), deadline()); },
                                "requires a job token and this process has none");
  expect_throw_with<ValueError>(
      [&] { KeyValueClient("127.0.0.1", with_token.port(), deadline(), JobToken("wrong", "test")); },
      "refused this process's job token (wrong job token");
  expect_throw_with<ValueError>(
      [&] { KeyValueClient("127.0.0.1", open.port(), deadline(), JobToken("right", "test")); },
      "was given a job token but the coordinator at 127.0.0.1:");
  expect_throw_with<ValueError>([] { JobToken("", "KERAS_DISTRIBUTION_JOB_TOKEN"); },
                                "KERAS_DISTRIBUTION_JOB_TOKEN is set but empty");
}

}  // namespace
}  // namespace keras::distribution
