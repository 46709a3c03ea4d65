// A fixed pool of threads that runs the parts of one parallel launch.
//
// A pool of N threads owns N-1 workers; the thread that calls run() is the
// N-th and takes part 0. Parts are handed out in order from a shared counter,
// so with parts <= N every part runs concurrently on its own thread, and with
// more parts the threads take the rest as they become free.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln {

class ThreadPool {
public:
  // `threads` <= 0 means one per CPU this process may run on (at least 1).
  // With `pin`, the constructing thread is bound to the first of those CPUs
  // and worker i to the i-th, as far as there are CPUs: otherwise a worker
  // woken after a pause may land on the caller's CPU and share it for
  // milliseconds, halving a parallel launch (seen on shared hosts).
  explicit ThreadPool(int threads = 0, bool pin = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  // Threads taking part in run(), the caller included.
  int numThreads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(0) .. fn(parts - 1) and returns when all have finished. If parts
  // throw, every part still runs and the first exception is rethrown here.
  // Calls from several threads are serialised; a call from inside a part runs
  // its parts one after another on that thread (no deadlock).
  void run(int parts, const std::function<void(int part)> &fn);

private:
  // One run() call. Workers hold it through a shared_ptr, so a worker that
  // wakes after the call returned only finds its part counter exhausted.
  struct Job {
    const std::function<void(int)> *fn = nullptr;
    int parts = 0;
    std::atomic<int> nextPart{0};
    std::atomic<int> finishedParts{0};
    std::mutex errorMutex;
    std::exception_ptr error;
  };

  void workerLoop();
  // Takes and runs parts of `job` until none are left.
  void drainParts(Job &job);

  std::vector<std::thread> workers_;
  std::mutex runMutex_; // one run() at a time

  std::mutex mutex_; // guards job_ and stopping_; pairs with the conditions
  std::condition_variable wake_;
  std::condition_variable done_;
  std::shared_ptr<Job> job_;
  std::atomic<uint64_t> generation_{0}; // bumped when a job is published
  std::atomic<bool> stopping_{false};
};

} // namespace kiln
