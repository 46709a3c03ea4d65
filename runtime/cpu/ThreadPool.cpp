#include "runtime/cpu/ThreadPool.h"

#include <pthread.h>
#include <sched.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln {
namespace {

// Launches follow each other closely (a decode step is hundreds of them), so
// a thread polls for a while before it sleeps on a condition variable: a
// wake-up through the kernel costs tens of microseconds.
constexpr int kSpinIterations = 4000;

// Set while a thread runs a part, so that a nested run() runs inline.
thread_local bool tlsInPart = false;

// The CPUs this process may run on (its affinity mask), in order.
std::vector<int> allowedCpus() {
  std::vector<int> cpus;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set))
        cpus.push_back(cpu);
#endif
  return cpus;
}

// Best effort: a thread that cannot be bound runs where the OS puts it.
void bindToCpu(pthread_t thread, int cpu) {
#if defined(__linux__)
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  pthread_setaffinity_np(thread, sizeof one, &one);
#else
  (void)thread;
  (void)cpu;
#endif
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

void runCapturing(const std::function<void(int)> &fn, int part, std::mutex &errorMutex,
                  std::exception_ptr &error) {
  const bool wasInPart = tlsInPart;
  tlsInPart = true;
  try {
    fn(part);
  } catch (...) {
    std::lock_guard<std::mutex> lock(errorMutex);
    if (!error)
      error = std::current_exception();
  }
  tlsInPart = wasInPart;
}

} // namespace

ThreadPool::ThreadPool(int threads, bool pin) {
  const std::vector<int> cpus = allowedCpus();
  if (threads <= 0)
    threads = cpus.empty() ? static_cast<int>(std::thread::hardware_concurrency())
                           : static_cast<int>(cpus.size());
  if (threads <= 0)
    threads = 1;
  if (pin && !cpus.empty())
    bindToCpu(pthread_self(), cpus[0]);
  workers_.reserve(threads - 1);
  for (int i = 1; i < threads; ++i) {
    workers_.emplace_back([this] { workerLoop(); });
    if (pin && i < static_cast<int>(cpus.size()))
      bindToCpu(workers_.back().native_handle(), cpus[static_cast<size_t>(i)]);
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread &worker : workers_)
    worker.join();
}

void ThreadPool::run(int parts, const std::function<void(int part)> &fn) {
  if (parts <= 0)
    return;
  if (parts == 1 || workers_.empty() || tlsInPart) {
    std::mutex errorMutex;
    std::exception_ptr error;
    for (int part = 0; part < parts; ++part)
      runCapturing(fn, part, errorMutex, error);
    if (error)
      std::rethrow_exception(error);
    return;
  }

  std::lock_guard<std::mutex> runLock(runMutex_);
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->parts = parts;
  job->nextPart = 1; // part 0 is the caller's
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = job;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();

  runCapturing(fn, 0, job->errorMutex, job->error);
  job->finishedParts.fetch_add(1, std::memory_order_acq_rel);
  drainParts(*job);

  for (int i = 0; i < kSpinIterations && job->finishedParts.load(std::memory_order_acquire) < parts;
       ++i)
    cpuRelax();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return job->finishedParts.load(std::memory_order_acquire) == parts; });
    job_.reset();
  }
  if (job->error)
    std::rethrow_exception(job->error);
}

void ThreadPool::drainParts(Job &job) {
  for (;;) {
    const int part = job.nextPart.fetch_add(1, std::memory_order_acq_rel);
    if (part >= job.parts)
      return;
    runCapturing(*job.fn, part, job.errorMutex, job.error);
    if (job.finishedParts.fetch_add(1, std::memory_order_acq_rel) + 1 == job.parts) {
      // Taking the lock orders this with the caller's predicate check, so
      // the notification cannot be lost.
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_all();
    }
  }
}

void ThreadPool::workerLoop() {
  uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpinIterations && generation_.load(std::memory_order_acquire) == seen &&
                    !stopping_.load(std::memory_order_relaxed);
         ++i)
      cpuRelax();
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return stopping_.load(std::memory_order_relaxed) ||
               generation_.load(std::memory_order_acquire) != seen;
      });
      if (stopping_.load(std::memory_order_relaxed))
        return;
      seen = generation_.load(std::memory_order_acquire);
      job = job_;
    }
    if (job)
      drainParts(*job);
  }
}

} // namespace kiln
