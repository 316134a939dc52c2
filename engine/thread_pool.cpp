// A fork-join pool: the caller publishes a job, wakes the sleeping workers, takes the first
// range itself and waits until every range is done.
#include "engine/thread_pool.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/environment.h"
#include "engine/errors.h"

namespace keras {
namespace {

thread_local bool inside_parallel_region = false;

class ThreadPool {
 public:
  explicit ThreadPool(int threads) { start(threads); }
  ~ThreadPool() { stop(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int threads) {
    std::lock_guard job_lock(job_mutex_);
    stop();
    start(threads);
  }

  void run(std::int64_t count, std::int64_t grain,
           const std::function<void(std::int64_t, std::int64_t)>& body) {
    std::int64_t max_parts = std::max<std::int64_t>(1, count / std::max<std::int64_t>(grain, 1));
    int parts = static_cast<int>(std::min<std::int64_t>(size(), max_parts));
    if (parts <= 1 || inside_parallel_region) {
      body(0, count);
      return;
    }
    std::lock_guard job_lock(job_mutex_);  // one job at a time; other callers wait here
    {
      std::lock_guard lock(mutex_);
      body_ = &body;
      count_ = count;
      parts_ = parts;
      remaining_ = parts - 1;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    run_part(0);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return remaining_ == 0; });
    body_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void start(int threads) {
    stopping_ = false;
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& worker : workers_) worker.join();
    workers_.clear();
  }

  void run_part(int part) {
    std::int64_t begin = count_ * part / parts_;
    std::int64_t end = count_ * (part + 1) / parts_;
    inside_parallel_region = true;
    try {
      (*body_)(begin, end);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    inside_parallel_region = false;
  }

  void worker_loop(int worker_index) {
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      if (worker_index >= parts_) continue;
      lock.unlock();
      run_part(worker_index);
      lock.lock();
      if (--remaining_ == 0) done_.notify_one();
    }
  }

  std::mutex job_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::vector<std::thread> workers_;
  const std::function<void(std::int64_t, std::int64_t)>* body_ = nullptr;
  std::int64_t count_ = 0;
  int parts_ = 0;
  int remaining_ = 0;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
};

int default_thread_count() {
  if (auto count = environment::integer("KERAS_NUM_THREADS", 1, 1024)) {
    return static_cast<int>(*count);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool& pool() {
  static ThreadPool instance(default_thread_count());
  return instance;
}

}  // namespace

int num_threads() { return pool().size(); }

void set_num_threads(int count) {
  if (count < 1) throw ValueError(str("set_num_threads: got ", count, "; expected at least 1"));
  pool().resize(count);
}

void parallel_for(std::int64_t count, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (count <= 0) return;
  pool().run(count, grain, body);
}

}  // namespace keras
