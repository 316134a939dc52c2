// Challenges and proofs of the job token (see the header), on OpenSSL's libcrypto.
#include "distribution/transports/rendezvous/job_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "engine/errors.h"

namespace keras::distribution {

Challenge random_challenge() {
  Challenge challenge{};
  if (RAND_bytes(challenge.data(), static_cast<int>(challenge.size())) != 1) {
    throw Error("the rendezvous could not draw a random challenge from OpenSSL (RAND_bytes failed)");
  }
  return challenge;
}

void initialize_crypto() {
  // A real option: OPENSSL_init_crypto(0, ...) returns at once without initializing anything
  // (0 is always "done"), and the exit handler was then registered by the first RAND_bytes, on
  // the store's thread, after ours.
  if (OPENSSL_init_crypto(OPENSSL_INIT_ADD_ALL_DIGESTS, nullptr) != 1) throw Error("the rendezvous could not initialize OpenSSL's libcrypto");
}

JobToken::JobToken(std::string secret, std::string_view source) : secret_(std::move(secret)) {
  if (secret_.empty()) {
    throw ValueError(str(source, " is set but empty; give every process of the job the same "
                         "non-empty secret (for example `openssl rand -hex 32`), or unset it"));
  }
}

Proof JobToken::proof(std::string_view label, const Challenge& first, const Challenge& second) const {
  std::string message(label);
  message.append(reinterpret_cast<const char*>(first.data()), first.size());
  message.append(reinterpret_cast<const char*>(second.data()), second.size());
  Proof result{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), result.data(),
           &length) == nullptr ||
      length != result.size()) {
    throw Error("the rendezvous could not compute its HMAC-SHA256 with OpenSSL");
  }
  return result;
}

Proof JobToken::client_proof(const Challenge& store_challenge, const Challenge& client_challenge) const {
  return proof("keras rendezvous client", store_challenge, client_challenge);
}

Proof JobToken::store_proof(const Challenge& store_challenge, const Challenge& client_challenge) const {
  return proof("keras rendezvous store", client_challenge, store_challenge);
}

bool same_proof(const Proof& a, const Proof& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

}  // namespace keras::distribution
