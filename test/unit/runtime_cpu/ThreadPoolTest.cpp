// ThreadPool: each part runs exactly once, parts really run at the same
// time, exceptions reach the caller, and a one-thread pool runs inline.
#include "runtime/cpu/ThreadPool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kiln {
namespace {

TEST(ThreadPool, DefaultSizeIsHardwareConcurrency) {
  ThreadPool pool;
  const int expected = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(pool.numThreads(), expected);
}

TEST(ThreadPool, EveryPartRunsOnce) {
  ThreadPool pool(4);
  for (int parts : {1, 2, 3, 4, 7, 64}) {
    std::vector<std::atomic<int>> counts(parts);
    pool.run(parts, [&](int part) { counts[part].fetch_add(1); });
    for (int part = 0; part < parts; ++part)
      EXPECT_EQ(counts[part].load(), 1) << "part " << part << " of " << parts;
  }
}

TEST(ThreadPool, ZeroPartsRunsNothing) {
  ThreadPool pool(2);
  bool ran = false;
  pool.run(0, [&](int) { ran = true; });
  EXPECT_FALSE(ran);
}

TEST(ThreadPool, CallerTakesPartZero) {
  ThreadPool pool(3);
  std::thread::id partZeroThread;
  pool.run(3, [&](int part) {
    if (part == 0)
      partZeroThread = std::this_thread::get_id();
  });
  EXPECT_EQ(partZeroThread, std::this_thread::get_id());
}

// Every part waits until all parts have started: this only finishes if they
// run at the same time, on distinct threads.
TEST(ThreadPool, PartsRunConcurrently) {
  constexpr int kThreads = 4;
  ThreadPool pool(kThreads);
  std::mutex mutex;
  std::condition_variable allArrived;
  int arrived = 0;
  std::set<std::thread::id> threads;
  bool timedOut = false;
  pool.run(kThreads, [&](int) {
    std::unique_lock<std::mutex> lock(mutex);
    threads.insert(std::this_thread::get_id());
    if (++arrived == kThreads)
      allArrived.notify_all();
    if (!allArrived.wait_for(lock, std::chrono::seconds(20), [&] { return arrived == kThreads; }))
      timedOut = true;
  });
  EXPECT_FALSE(timedOut);
  EXPECT_EQ(threads.size(), static_cast<size_t>(kThreads));
}

TEST(ThreadPool, ExceptionReachesCallerAfterAllParts) {
  ThreadPool pool(4);
  std::atomic<int> ran{0};
  try {
    pool.run(8, [&](int part) {
      ran.fetch_add(1);
      if (part == 5)
        throw std::runtime_error("part five failed");
    });
    FAIL() << "nothing thrown";
  } catch (const std::runtime_error &error) {
    EXPECT_STREQ(error.what(), "part five failed");
  }
  EXPECT_EQ(ran.load(), 8);
  // The pool stays usable.
  std::atomic<int> after{0};
  pool.run(4, [&](int) { after.fetch_add(1); });
  EXPECT_EQ(after.load(), 4);
}

TEST(ThreadPool, ExceptionFromCallerPart) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run(2,
                        [](int part) {
                          if (part == 0)
                            throw std::logic_error("zero");
                        }),
               std::logic_error);
}

TEST(ThreadPool, OneThreadRunsInlineInOrder) {
  ThreadPool pool(1);
  EXPECT_EQ(pool.numThreads(), 1);
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<int> order;
  pool.run(5, [&](int part) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    order.push_back(part);
  });
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_THROW(pool.run(3,
                        [](int part) {
                          if (part == 1)
                            throw std::runtime_error("x");
                        }),
               std::runtime_error);
}

TEST(ThreadPool, NestedRunDoesNotDeadlock) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.run(2, [&](int) { pool.run(3, [&](int) { inner.fetch_add(1); }); });
  EXPECT_EQ(inner.load(), 6);
}

TEST(ThreadPool, ManyShortRuns) {
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  for (int i = 0; i < 5000; ++i)
    pool.run(4, [&](int part) { sum.fetch_add(part); });
  EXPECT_EQ(sum.load(), 5000 * 6);
}

TEST(ThreadPool, RunFromSeveralThreads) {
  ThreadPool pool(3);
  std::atomic<int> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        pool.run(3, [&](int) { total.fetch_add(1); });
    });
  for (std::thread &caller : callers)
    caller.join();
  EXPECT_EQ(total.load(), 4 * 200 * 3);
}

} // namespace
} // namespace kiln
