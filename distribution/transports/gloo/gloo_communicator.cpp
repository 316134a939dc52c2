// Communicator over Gloo (see the header).
#include "distribution/transports/gloo/gloo_communicator.h"

#include "distribution/runtime/half_precision_reduction.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "distribution/runtime/collective_failure.h"
#include "distribution/runtime/collective_signature.h"

namespace keras::distribution {
namespace {

// Gloo's context, its pairs connected through our store one address at a time. Gloo's own
// connectFullMesh has every rank publish the addresses of all its pairs under one key and every
// rank read every rank's key whole, which moves about 136 * processes^3 bytes through the
// store's one thread: 2.1 GB at 250 processes, 136 GB at 1,000. Here rank r publishes the
// address of its pair for peer q under "<prefix>/r/q" and q reads that key alone: 136 bytes
// per pair, processes^2 small requests in all.
class MeshContext : public gloo::Context {
 public:
  MeshContext(int this_rank, int processes) : gloo::Context(this_rank, processes) {}
  void connect(KeyValueClient& store, const std::string& prefix,
               const std::shared_ptr<gloo::transport::Device>& device) {
    std::shared_ptr<gloo::transport::Context> transport = device->createContext(rank, size);
    transport->setTimeout(getTimeout());
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      store.set(str(prefix, "/", rank, "/", peer), transport->createPair(peer)->address().bytes());
    }
    const auto deadline = std::chrono::steady_clock::now() + getTimeout();
    // As the join's polls (rendezvous_job.cpp): about 500 a second at the store, whatever the size.
    const auto longest_pause = std::clamp(std::chrono::milliseconds(2 * size), std::chrono::milliseconds(50),
                                          std::chrono::milliseconds(1000));
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      const std::string key = str(prefix, "/", peer, "/", rank);
      auto pause = std::chrono::milliseconds(1);
      std::optional<std::vector<char>> address = store.try_get(key);
      while (!address) {
        if (std::chrono::steady_clock::now() >= deadline) {
          throw CollectiveError(str("connecting the Gloo group '", prefix, "': process ", peer, " never published ",
                                    "its address for this one (key '", key, "') within ", getTimeout().count(), " ms"));
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, longest_pause);
        address = store.try_get(key);
      }
      transport->getPair(peer)->connect(*address);
    }
    device_ = device;
    transportContext_ = std::move(transport);
  }
};

// Slots of our own point-to-point exchanges between two processes, apart from Gloo's
// algorithms' (gloo/types.h uses prefixes 0x01 to 0x08): signatures, all_reduce's values into
// a receive posted ahead, and its values the first time they outgrow that receive.
constexpr std::uint8_t kSignatureSlotPrefix = 0x40;
constexpr std::uint8_t kExchangeSlotPrefix = 0x41;
constexpr std::uint8_t kFirstExchangeSlotPrefix = 0x42;
// After signatures that disagree: each side confirms it read the other's (peer_signature_for).
constexpr std::uint8_t kConfirmSlotPrefix = 0x43;

// Gloo's reductions know no 16-bit floats: ours combine in float32
// (distribution/runtime/half_precision_reduction.h).
template <typename Half, ReduceOperation operation>
void half_reduction(void* out, const void* a, const void* b, size_t count) {
  half_precision::reduce(operation, static_cast<Half*>(out), static_cast<const Half*>(a),
                         static_cast<const Half*>(b), count);
}

template <typename Half>
gloo::AllreduceOptions::Func half_function(ReduceOperation operation) {
  switch (operation) {
    case ReduceOperation::max: return &half_reduction<Half, ReduceOperation::max>;
    case ReduceOperation::min: return &half_reduction<Half, ReduceOperation::min>;
    default: return &half_reduction<Half, ReduceOperation::sum>;
  }
}

gloo::AllreduceOptions::Func reduce_function(DType dtype, ReduceOperation operation) {
  auto pick = [operation](auto tag) -> gloo::AllreduceOptions::Func {
    using T = decltype(tag);
    using Elementwise = void (*)(void*, const void*, const void*, size_t);
    switch (operation) {
      case ReduceOperation::max: return static_cast<Elementwise>(&gloo::max<T>);
      case ReduceOperation::min: return static_cast<Elementwise>(&gloo::min<T>);
      case ReduceOperation::sum:
      case ReduceOperation::mean: break;
    }
    return static_cast<Elementwise>(&gloo::sum<T>);
  };
  switch (dtype) {
    case DType::float32: return pick(float{});
    case DType::float64: return pick(double{});
    case DType::int32: return pick(std::int32_t{});
    case DType::int64: return pick(std::int64_t{});
    case DType::bfloat16: return half_function<BFloat16>(operation);
    case DType::float16: return half_function<Float16>(operation);
    default: break;
  }
  throw DTypeError(str("collectives support float32, float64, int32, int64, bfloat16 and float16, got ",
                       dtype_name(dtype)));
}

void divide_in_place(void* data, std::int64_t count, DType dtype, int size) {
  auto divide = [&](auto* values) {
    for (std::int64_t i = 0; i < count; ++i) values[i] /= static_cast<std::remove_pointer_t<decltype(values)>>(size);
  };
  if (dispatch_half_precision(dtype, [&](auto zero) {
        half_precision::divide(static_cast<decltype(zero)*>(data), static_cast<std::size_t>(count), size);
      })) {
    return;
  }
  switch (dtype) {
    case DType::float32: divide(static_cast<float*>(data)); break;
    case DType::float64: divide(static_cast<double*>(data)); break;
    case DType::int32: divide(static_cast<std::int32_t*>(data)); break;
    case DType::int64: divide(static_cast<std::int64_t*>(data)); break;
    default: break;
  }
}

}  // namespace

GlooCommunicator::GlooCommunicator(std::shared_ptr<KeyValueClient> store, const std::string& prefix,
                                   const std::string& host, int rank, int size, std::string name)
    : Communicator(std::move(name), rank, size), store_(std::move(store)), prefix_(prefix), host_(host) {
  try {
    gloo::transport::tcp::attr attributes;
    attributes.hostname = host_;
    device_ = gloo::transport::tcp::CreateDevice(attributes);
    auto context = std::make_shared<MeshContext>(rank_, size_);
    context->setTimeout(timeout_);
    context->connect(*store_, prefix_, device_);
    context_ = context;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    throw CollectiveError(str("connecting ", name_, " (", size_, " processes over Gloo, this one rank ",
                              rank_, " on ", host_, ") failed: ", error.what()));
  }
}

GlooCommunicator::~GlooCommunicator() = default;

void GlooCommunicator::fail(const std::string& message) { poison(message); }

template <typename Body>
void GlooCommunicator::guarded(const char* what, Body&& body) {
  refuse_if_poisoned(what);
  context_->setTimeout(timeout_);
  try {
    body();
  } catch (const CollectiveError&) {
    throw;
  } catch (const gloo::IoException& error) {
    fail(str(what, " over ", name_, " failed on rank ", rank_, ": a peer closed its connection or did not "
             "answer within ", timeout_.count(), " ms (", error.what(), ")"));
  } catch (const std::exception& error) {
    fail(str(what, " over ", name_, " failed on rank ", rank_, ": ", error.what()));
  }
}

void GlooCommunicator::post_signature_receive() {
  signature_in_ = context_->createUnboundBuffer(peer_signature_.data(), sizeof peer_signature_);
  signature_in_->recv(1 - rank_, gloo::Slot::build(kSignatureSlotPrefix, signature_sequence_));
}

void GlooCommunicator::post_values_receive() {
  // A handle dropped here leaves no receive behind: Gloo holds it by a weak pointer.
  values_in_.reset();
  if (posted_capacity_ == 0) return;
  values_in_ = context_->createUnboundBuffer(peer_values_.data(), posted_capacity_);
  values_in_->recv(1 - rank_, gloo::Slot::build(kExchangeSlotPrefix, exchange_sequence_));
}

Communicator::Signature GlooCommunicator::peer_signature_for(const Signature& mine) {
  const int peer = 1 - rank_;
  // The first exchange posts its receive now: one posted while the mesh was still connecting
  // was never announced to the peer (both sides then waited for each other's notice).
  if (!signature_in_) post_signature_receive();
  own_signature_ = mine;
  auto signature_out = context_->createUnboundBuffer(own_signature_.data(), sizeof own_signature_);
  signature_out->send(peer, gloo::Slot::build(kSignatureSlotPrefix, signature_sequence_));
  signature_in_->waitRecv(timeout_);
  signature_out->waitSend(timeout_);
  Signature theirs = peer_signature_;
  signature_sequence_ += 1;
  post_signature_receive();
  if (theirs != mine) {
    // The caller reports the disagreement, and its process may end at once. Ending with unread
    // data in its socket makes the kernel reset the connection, which discards what the peer
    // has not read yet: this rank's signature, one run in 30 here (the peer then only saw "a
    // peer closed its connection"). So each side first confirms it holds the other's; a peer
    // that never confirms costs at most 2 s.
    const std::uint64_t slot = gloo::Slot::build(kConfirmSlotPrefix, signature_sequence_ - 1);
    std::int64_t confirmation = 1, peer_confirmation = 0;
    auto confirmation_in = context_->createUnboundBuffer(&peer_confirmation, sizeof peer_confirmation);
    auto confirmation_out = context_->createUnboundBuffer(&confirmation, sizeof confirmation);
    const auto limit = std::min(timeout_, std::chrono::milliseconds(2000));
    try {
      confirmation_in->recv(peer, slot);
      confirmation_out->send(peer, slot);
      confirmation_in->waitRecv(limit);
      confirmation_out->waitSend(limit);
    } catch (const std::exception&) {
      // The peer is gone or never confirms: the disagreement is reported all the same.
    }
  }
  return theirs;
}

void GlooCommunicator::exchange_and_reduce(void* data, std::int64_t count, DType dtype, std::int64_t code,
                                           const gloo::AllreduceOptions::Func& reduce) {
  refuse_if_poisoned("all_reduce");
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  const Signature mine = {code, static_cast<std::int64_t>(dtype), count};
  guarded("all_reduce", [&] {
    const int peer = 1 - rank_;
    // Fast: the peer has a receive posted that holds these bytes (both sides know its size:
    // the largest exchange so far), so the values go at once, beside the signature.
    const bool fast = bytes <= posted_capacity_;
    std::unique_ptr<gloo::transport::UnboundBuffer> values_out;
    if (fast) {
      values_out = context_->createUnboundBuffer(data, bytes);
      values_out->send(peer, gloo::Slot::build(kExchangeSlotPrefix, exchange_sequence_));
    }
    if (signature_checks()) {
      Signature theirs = peer_signature_for(mine);
      if (theirs != mine) {
        // The peer is in another collective. A send already under way reads the caller's
        // buffer: it is let finish (the peer's receive is posted) before the error returns.
        if (values_out) values_out->waitSend(timeout_);
        std::vector<std::int64_t> every(6);
        std::copy(mine.begin(), mine.end(), every.begin() + 3 * rank_);
        std::copy(theirs.begin(), theirs.end(), every.begin() + 3 * peer);
        poison(disagreement_message("all_reduce", every));
      }
    }
    const char* values = nullptr;
    std::vector<char> grown;
    if (fast) {
      values_in_->waitRecv(timeout_);
      values_out->waitSend(timeout_);
      values = peer_values_.data();
    } else {
      // Slow, once per new largest size: a receive posted now, after the signatures agreed
      // (a peer's larger values must never reach a smaller receive: Gloo aborts the process).
      grown.resize(bytes);
      const std::uint64_t slot = gloo::Slot::build(kFirstExchangeSlotPrefix, exchange_sequence_);
      auto values_in = context_->createUnboundBuffer(grown.data(), bytes);
      auto send = context_->createUnboundBuffer(data, bytes);
      values_in->recv(peer, slot);
      send->send(peer, slot);
      values_in->waitRecv(timeout_);
      send->waitSend(timeout_);
      values = grown.data();
    }
    reduce(data, data, values, static_cast<std::size_t>(count));
    exchange_sequence_ += 1;
    if (!fast) {
      values_in_.reset();  // the receive posted ahead into the old buffer, now unused
      posted_capacity_ = bytes;
      peer_values_.resize(bytes);
    }
    post_values_receive();
  });
}

std::optional<std::vector<std::int64_t>> GlooCommunicator::exchange_signatures(const Signature& mine,
                                                                               const char* what) {
  std::vector<std::int64_t> every(3 * static_cast<std::size_t>(size_));
  if (size_ == 2) {
    // Two processes: on the signature slots exchange_and_reduce uses (posted ahead), so that
    // a rank in any collective and its peer in an all_reduce see each other's signatures.
    guarded(what, [&] {
      Signature theirs = peer_signature_for(mine);
      std::copy(mine.begin(), mine.end(), every.begin() + 3 * rank_);
      std::copy(theirs.begin(), theirs.end(), every.begin() + 3 * (1 - rank_));
    });
    return every;
  }
  guarded(what, [&] {
    gloo::AllgatherOptions options(context_);
    options.setInput(const_cast<std::int64_t*>(mine.data()), 3);
    options.setOutput(every.data(), every.size());
    options.setTag(next_tag());
    gloo::allgather(options);
  });
  return every;
}

void GlooCommunicator::all_reduce(void* data, std::int64_t count, DType dtype, ReduceOperation operation) {
  gloo::AllreduceOptions::Func reduce = reduce_function(dtype, operation);
  const std::int64_t code = collective_code(CollectiveKind::all_reduce, static_cast<std::int64_t>(operation));
  if (size_ == 2 && count > 0) {
    exchange_and_reduce(data, count, dtype, code, reduce);
    if (operation == ReduceOperation::mean) divide_in_place(data, count, dtype, size_);
    return;
  }
  check_signature(code, dtype, count, "all_reduce");
  if (size_ == 1 || count == 0) return;
  guarded("all_reduce", [&] {
    gloo::AllreduceOptions options(context_);
    // Gloo's ring reduces elementSize-byte units: describe the buffer as `count` elements of
    // the dtype's size so the reduction sees whole numbers.
    switch (dtype) {
      case DType::float32: options.setOutput(static_cast<float*>(data), static_cast<std::size_t>(count)); break;
      case DType::float64: options.setOutput(static_cast<double*>(data), static_cast<std::size_t>(count)); break;
      case DType::int32: options.setOutput(static_cast<std::int32_t*>(data), static_cast<std::size_t>(count)); break;
      case DType::bfloat16:
      case DType::float16: options.setOutput(static_cast<std::uint16_t*>(data), static_cast<std::size_t>(count)); break;
      default: options.setOutput(static_cast<std::int64_t*>(data), static_cast<std::size_t>(count)); break;
    }
    options.setReduceFunction(reduce);
    options.setTag(next_tag());
    gloo::allreduce(options);
  });
  if (operation == ReduceOperation::mean) divide_in_place(data, count, dtype, size_);
}

void GlooCommunicator::all_gather(const void* send, void* receive, std::int64_t count, DType dtype) {
  reduce_function(dtype, ReduceOperation::sum);  // dtype check
  check_signature(collective_code(CollectiveKind::all_gather), dtype, count, "all_gather");
  std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  if (size_ == 1) {
    std::memcpy(receive, send, bytes);
    return;
  }
  // In place (send is this rank's block of receive): Gloo copies its input into that block, so
  // it gets a copy rather than the block itself.
  std::vector<char> own_block;
  if (send == static_cast<const char*>(receive) + static_cast<std::size_t>(rank_) * bytes) {
    own_block.assign(static_cast<const char*>(send), static_cast<const char*>(send) + bytes);
    send = own_block.data();
  }
  guarded("all_gather", [&] {
    gloo::AllgatherOptions options(context_);
    // Gloo's allgather takes bytes as char elements; its input is only read.
    options.setInput(const_cast<char*>(static_cast<const char*>(send)), bytes);
    options.setOutput(static_cast<char*>(receive), bytes * static_cast<std::size_t>(size_));
    options.setTag(next_tag());
    gloo::allgather(options);
  });
}

void GlooCommunicator::reduce_scatter(const void* send, void* receive, std::int64_t count, DType dtype,
                                      ReduceOperation operation) {
  check_signature(collective_code(CollectiveKind::reduce_scatter, static_cast<std::int64_t>(operation)), dtype, count,
                  "reduce_scatter");
  // Debian's Gloo has reduce-scatter only as the old per-call-setup halving-doubling class:
  // an all-reduce of the whole buffer, then this rank's block, moves twice the bytes but runs
  // the tuned ring.
  std::size_t block = static_cast<std::size_t>(count) * dtype_size(dtype);
  std::vector<char> whole(static_cast<const char*>(send),
                          static_cast<const char*>(send) + block * static_cast<std::size_t>(size_));
  if (size_ > 1) {
    gloo::AllreduceOptions::Func reduce = reduce_function(dtype, operation);
    guarded("reduce_scatter", [&] {
      gloo::AllreduceOptions options(context_);
      std::size_t elements = static_cast<std::size_t>(count) * static_cast<std::size_t>(size_);
      switch (dtype) {
        case DType::float32: options.setOutput(reinterpret_cast<float*>(whole.data()), elements); break;
        case DType::float64: options.setOutput(reinterpret_cast<double*>(whole.data()), elements); break;
        case DType::int32: options.setOutput(reinterpret_cast<std::int32_t*>(whole.data()), elements); break;
        case DType::bfloat16:
        case DType::float16: options.setOutput(reinterpret_cast<std::uint16_t*>(whole.data()), elements); break;
        default: options.setOutput(reinterpret_cast<std::int64_t*>(whole.data()), elements); break;
      }
      options.setReduceFunction(reduce);
      options.setTag(next_tag());
      gloo::allreduce(options);
    });
  }
  std::memcpy(receive, whole.data() + block * static_cast<std::size_t>(rank_), block);
  if (operation == ReduceOperation::mean) divide_in_place(receive, count, dtype, size_);
}

void GlooCommunicator::broadcast(void* data, std::int64_t count, DType dtype, int root) {
  if (root < 0 || root >= size_) {
    throw ValueError(str("broadcast over ", name_, ": root ", root, " is not a rank of this group of ", size_));
  }
  check_signature(collective_code(CollectiveKind::broadcast, root), dtype, count, "broadcast");
  if (size_ == 1) return;
  guarded("broadcast", [&] {
    gloo::BroadcastOptions options(context_);
    options.setOutput(static_cast<char*>(data), static_cast<std::size_t>(count) * dtype_size(dtype));
    options.setRoot(root);
    options.setTag(next_tag());
    gloo::broadcast(options);
  });
}

void GlooCommunicator::barrier() {
  check_signature(collective_code(CollectiveKind::barrier), DType::int64, 0, "barrier");
}

std::shared_ptr<Communicator> GlooCommunicator::split(int color, int key, const std::string& name) {
  std::int64_t mine[3] = {color, key, rank_};
  std::vector<std::int64_t> every(3 * static_cast<std::size_t>(size_));
  check_signature(collective_code(CollectiveKind::split), DType::int64, 3, "split");
  guarded("split", [&] {
    gloo::AllgatherOptions options(context_);
    options.setInput(mine, 3);
    options.setOutput(every.data(), every.size());
    options.setTag(next_tag());
    gloo::allgather(options);
  });
  std::vector<std::tuple<std::int64_t, std::int64_t>> members;  // (key, rank) of my color
  for (int r = 0; r < size_; ++r) {
    if (every[3 * r] == color) members.emplace_back(every[3 * r + 1], every[3 * r + 2]);
  }
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (std::get<1>(members[i]) == rank_) new_rank = static_cast<int>(i);
  }
  int number = splits_++;
  auto size = static_cast<int>(members.size());
  if (size == 1) return std::make_shared<LocalCommunicator>(name);
  auto group = std::make_shared<GlooCommunicator>(store_, str(prefix_, "/split", number, "/color", color), host_,
                                                  new_rank, size, name);
  group->set_timeout(timeout_);
  group->set_signature_checks(signature_checks());
  return group;
}

}  // namespace keras::distribution
