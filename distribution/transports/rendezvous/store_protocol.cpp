// The rendezvous store's protocol, table and sessions (see the header).
#include "distribution/transports/rendezvous/store_protocol.h"

#include <algorithm>
#include <cstring>

#include "engine/errors.h"

namespace keras::distribution {

StoreLimits limits_for_job(std::int64_t processes) {
  StoreLimits limits;
  auto count = static_cast<std::size_t>(std::max<std::int64_t>(processes, 1));
  limits.connections = 2 * count + 64;
  // A Gloo group of n processes takes n * (n - 1) keys (one per pair, gloo_communicator.cpp):
  // room for the world and a few smaller groups.
  limits.keys = 4096 + 64 * count + 2 * count * count;
  // A group's Gloo addresses take about 136 * count^2 bytes; room for a few groups.
  limits.total_bytes = (std::size_t{64} << 20) + 512 * count * count;
  limits.value_bytes = static_cast<std::uint32_t>(std::min<std::size_t>(std::max<std::size_t>(1 << 20, 256 * count), 1u << 30));
  return limits;
}

void append_uint32(std::string& out, std::uint32_t value) {
  for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<char>((value >> shift) & 0xff));
}

std::uint32_t read_uint32(const char* in) {
  std::uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(in[i]);
  return value;
}

std::string encode_request(char operation, std::string_view key, std::string_view value) {
  std::string out(1, operation);
  append_uint32(out, static_cast<std::uint32_t>(key.size()));
  append_uint32(out, static_cast<std::uint32_t>(value.size()));
  out.append(key);
  out.append(value);
  return out;
}

std::string refusal_greeting(std::string_view reason) {
  std::string out(kStoreMagic);
  out.push_back(kStoreRefused);
  append_uint32(out, static_cast<std::uint32_t>(reason.size()));
  out.append(reason);
  return out;
}

std::optional<std::string> StoreTable::put(const std::string& key, std::string value) {
  auto found = entries_.find(key);
  std::size_t released = found == entries_.end() ? 0 : cost(key, found->second.size());
  std::size_t needed = cost(key, value.size());
  if (found == entries_.end() && entries_.size() >= limits_.keys) {
    return str("the store holds its limit of ", limits_.keys, " keys");
  }
  if (bytes_ - released + needed > limits_.total_bytes) {
    return str("the store holds ", bytes_, " bytes of its limit of ", limits_.total_bytes,
               " and this key and value take ", needed);
  }
  bytes_ = bytes_ - released + needed;
  if (found == entries_.end()) {
    entries_.emplace(key, std::move(value));
  } else {
    found->second = std::move(value);
  }
  return std::nullopt;
}

StoreReply StoreTable::apply(char operation, const std::string& key, std::string_view value) {
  switch (operation) {
    case kSet: {
      if (auto refused = put(key, std::string(value))) return {kReplyRefused, *refused};
      return {};
    }
    case kGet: {
      auto found = entries_.find(key);
      if (found == entries_.end()) return {kReplyMissing, {}};
      return {kReplyDone, found->second};
    }
    case kAdd: {
      std::int64_t delta = 0, current = 0;
      if (value.size() != sizeof delta) {
        return {kReplyRefused, str("an add carries an 8-byte integer, got ", value.size(), " bytes")};
      }
      std::memcpy(&delta, value.data(), sizeof delta);
      auto found = entries_.find(key);
      if (found != entries_.end() && found->second.size() == sizeof current) {
        std::memcpy(&current, found->second.data(), sizeof current);
      }
      // Wraps as two's complement instead of overflowing (undefined for int64).
      current = static_cast<std::int64_t>(static_cast<std::uint64_t>(current) + static_cast<std::uint64_t>(delta));
      std::string encoded(reinterpret_cast<const char*>(&current), sizeof current);
      if (auto refused = put(key, encoded)) return {kReplyRefused, *refused};
      return {kReplyDone, encoded};
    }
    case kDelete: {
      auto found = entries_.find(key);
      if (found != entries_.end()) {
        bytes_ -= cost(key, found->second.size());
        entries_.erase(found);
      }
      return {};
    }
    default: break;
  }
  return {kReplyRefused, "unknown operation"};
}

StoreSession::StoreSession(const StoreLimits& limits, const JobToken* token, const Challenge& challenge)
    : limits_(limits), token_(token), challenge_(challenge) {
  output_.assign(kStoreMagic);
  if (token_ != nullptr) {
    output_.push_back(kStoreNeedsToken);
    output_.append(reinterpret_cast<const char*>(challenge_.data()), challenge_.size());
  } else {
    output_.push_back(kStoreOpen);
  }
}

std::size_t StoreSession::largest_request() const {
  return kRequestHeaderBytes + limits_.key_bytes + limits_.value_bytes;
}

void StoreSession::receive(const char* data, std::size_t size) {
  if (closing_) return;  // nothing more is read from a session that is over
  if (input_start_ > 0) {
    input_.erase(0, input_start_);
    input_start_ = 0;
  }
  input_.append(data, size);
}

void StoreSession::sent(std::size_t bytes) {
  output_sent_ += std::min(bytes, output_.size() - output_sent_);
  if (output_sent_ == output_.size()) {
    output_.clear();
    output_sent_ = 0;
  }
}

bool StoreSession::wants_input() const {
  return !closing_ && output().empty() && buffered() < largest_request();
}

void StoreSession::reply(char status, std::string_view body) {
  output_.push_back(status);
  append_uint32(output_, static_cast<std::uint32_t>(body.size()));
  output_.append(body);
}

void StoreSession::refuse_and_close(const std::string& reason) {
  refusal_ = reason;
  reply(kReplyRefused, reason);
  closing_ = true;
  input_.clear();
  input_start_ = 0;
}

bool StoreSession::answer_handshake() {
  constexpr std::size_t kAnswer = sizeof(Challenge) + sizeof(Proof);
  if (buffered() < kAnswer) return false;
  Challenge client_challenge{};
  Proof proof{};
  const char* at = input_.data() + input_start_;
  std::memcpy(client_challenge.data(), at, client_challenge.size());
  std::memcpy(proof.data(), at + client_challenge.size(), proof.size());
  input_start_ += kAnswer;
  if (!same_proof(proof, token_->client_proof(challenge_, client_challenge))) {
    refuse_and_close("wrong job token: the proof does not match this job's token and this connection's challenge");
    return false;
  }
  Proof answer = token_->store_proof(challenge_, client_challenge);
  output_.push_back(kReplyDone);
  output_.append(reinterpret_cast<const char*>(answer.data()), answer.size());
  proven_ = true;
  return true;
}

void StoreSession::answer(StoreTable& table) {
  while (!closing_ && output().size() <= limits_.value_bytes) {
    if (token_ != nullptr && !proven_) {
      if (!answer_handshake()) return;
      continue;
    }
    if (buffered() < kRequestHeaderBytes) return;
    const char* at = input_.data() + input_start_;
    char operation = at[0];
    std::uint32_t key_length = read_uint32(at + 1), value_length = read_uint32(at + 5);
    if (operation != kSet && operation != kGet && operation != kAdd && operation != kDelete) {
      refuse_and_close(str("unknown operation byte ", static_cast<int>(static_cast<unsigned char>(operation)),
                           " (expected S, G, A or D: is the client a keras rendezvous client of the same "
                           "version?)"));
      return;
    }
    if (key_length > limits_.key_bytes) {
      refuse_and_close(str("a key of ", key_length, " bytes is over the store's limit of ", limits_.key_bytes));
      return;
    }
    if (value_length > limits_.value_bytes) {
      refuse_and_close(str("a value of ", value_length, " bytes is over the store's limit of ", limits_.value_bytes));
      return;
    }
    std::size_t whole = kRequestHeaderBytes + key_length + value_length;
    if (buffered() < whole) return;
    std::string key(at + kRequestHeaderBytes, key_length);
    std::string_view value(at + kRequestHeaderBytes + key_length, value_length);
    StoreReply result = table.apply(operation, key, value);
    input_start_ += whole;
    reply(result.status, result.body);
    proven_ = true;
  }
}

}  // namespace keras::distribution
