// The job token of a job started by hand (KERAS_DISTRIBUTION_JOB_TOKEN, or initialize()'s
// job_token): a secret every process of the job is given, so that the rendezvous store serves
// only them. Each connection proves knowledge of it without sending it: the store sends a fresh
// random challenge, the client answers with an HMAC-SHA256 of both sides' challenges, and the
// store answers with one of its own, so each side knows the other holds the token (a client
// never joins an impostor's job either). A recorded answer is worthless on another connection:
// every connection has its own challenge.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace keras::distribution {

using Challenge = std::array<unsigned char, 32>;
using Proof = std::array<unsigned char, 32>;

// 32 bytes from OpenSSL's CSPRNG; Error when it cannot supply them.
Challenge random_challenge();

// Initializes libcrypto now, so that its exit handler (which frees what random_challenge and
// the proofs use) is registered now: exit handlers registered after this call run before it.
void initialize_crypto();

class JobToken {
 public:
  // ValueError for an empty token (`source` names where it came from, for the message).
  JobToken(std::string secret, std::string_view source);
  // The client's proof: HMAC(token, "client" | store's challenge | client's challenge).
  Proof client_proof(const Challenge& store_challenge, const Challenge& client_challenge) const;
  // The store's answer: the same over the challenges in the other order, with its own label,
  // so a client's proof can never be played back to it as the store's.
  Proof store_proof(const Challenge& store_challenge, const Challenge& client_challenge) const;

 private:
  Proof proof(std::string_view label, const Challenge& first, const Challenge& second) const;
  std::string secret_;
};

// Compares two proofs in time that does not depend on where they differ.
bool same_proof(const Proof& a, const Proof& b);

}  // namespace keras::distribution
