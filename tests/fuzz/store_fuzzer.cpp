// libFuzzer harness for the rendezvous store's request parser and table
// (distribution/transports/rendezvous/store_protocol.h): the input is what a stranger sends on one
// connection, cut into chunks as a network would, with the store's replies taken a few bytes at
// a time as a slow reader would. The first byte picks the store: open, asking for a token with
// the harness answering the challenge correctly first (so what follows is parsed as requests),
// or asking for a token with the input answering it. Checks, after every chunk: the session holds
// at most one request plus one chunk of input and at most about one largest reply of output,
// the table keeps within its key and byte limits, a closing session answers nothing more, and
// a session never counts as proven in token mode without the right answer.
#include <cstddef>
#include <cstdint>
#include <string>

#include "distribution/transports/rendezvous/job_token.h"
#include "distribution/transports/rendezvous/store_protocol.h"
#include "engine/errors.h"
#include "fuzz_util.h"

namespace {

namespace kd = keras::distribution;
using keras::fuzz::fail;
using keras::str;

// Small limits, so that the fuzzer reaches them.
kd::StoreLimits small_limits() {
  kd::StoreLimits limits;
  limits.keys = 8;
  limits.total_bytes = 2048;
  limits.key_bytes = 64;
  limits.value_bytes = 256;
  return limits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const kd::StoreLimits limits = small_limits();
  static const kd::JobToken token("fuzzing token", "harness");
  kd::Challenge challenge{};
  challenge.fill(0x5a);
  int mode = data[0] % 3;  // 0 open, 1 token answered by the harness, 2 token answered by the input
  kd::StoreTable table(limits);
  kd::StoreSession session(limits, mode == 0 ? nullptr : &token, challenge);
  std::size_t greeting = session.output().size();
  session.sent(greeting);
  if (mode == 1) {
    kd::Challenge own{};
    own.fill(0x11);
    kd::Proof proof = token.client_proof(challenge, own);
    std::string answer(reinterpret_cast<const char*>(own.data()), own.size());
    answer.append(reinterpret_cast<const char*>(proof.data()), proof.size());
    session.receive(answer.data(), answer.size());
    session.answer(table);
    if (!session.proven() || session.output().size() != 1 + sizeof(kd::Proof)) fail("the right answer was refused");
    session.sent(session.output().size());
  }
  std::size_t at = 1;
  std::size_t chunk_choice = 0;
  while (at < size) {
    // Chunk sizes and read sizes come from the input position, so the split varies.
    std::size_t chunk = 1 + (data[at] + chunk_choice++) % 97;
    if (chunk > size - at) chunk = size - at;
    bool was_closing = session.closing();
    std::size_t output_before = session.output().size();
    if (session.wants_input()) session.receive(reinterpret_cast<const char*>(data + at), chunk);
    at += chunk;
    session.answer(table);
    if (was_closing && session.output().size() > output_before) fail("a closing session answered again");
    if (session.buffered() > session.largest_request() + 97) {
      fail(str("the session holds ", session.buffered(), " bytes of input"));
    }
    if (session.output().size() > 2 * std::size_t{limits.value_bytes} + 64) {
      fail(str("the session holds ", session.output().size(), " bytes of replies"));
    }
    if (table.keys() > limits.keys || table.bytes() > limits.total_bytes) {
      fail(str("the table holds ", table.keys(), " keys and ", table.bytes(), " bytes"));
    }
    if (mode == 2 && session.proven()) fail("a session was proven without the token");
    // The reader takes a few bytes of the replies at a time.
    session.sent(1 + data[at - 1] % 300);
  }
  return 0;
}
