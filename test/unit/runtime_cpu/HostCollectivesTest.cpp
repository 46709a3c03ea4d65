// HostCollectives with threads as ranks (the file is shared the same way
// between processes): sums, gathers and scatters among groups, identical bits
// on every member, and the failures that must stop a job instead of hanging.
#include "runtime/comm/HostCollectives.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace kiln {
namespace {

std::string freshPath() {
  static std::atomic<int> count{0};
  const char *tmp = std::getenv("TMPDIR");
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-hc-test-" + std::to_string(getpid()) +
         "-" + std::to_string(count++);
}

// Four ranks: the world, and pairs {0, 2} {1, 3} (a TP group inside EP 4);
// two: the world.
std::vector<CommGroupSpec> groups(int ranks) {
  if (ranks == 2)
    return {{"world", 2, {0, 1}}};
  return {{"world", 4, {0, 1, 2, 3}}, {"pairs", 2, {0, 2, 1, 3}}};
}

// Runs `body(rank, collectives)` on `ranks` threads; returns each rank's error.
std::vector<std::string> runRanks(int ranks, double timeout,
                                  const std::function<void(int, Collectives &)> &body) {
  const std::string path = freshPath();
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        RankInfo info{r, ranks, path, timeout};
        HostCollectives collectives(info, groups(ranks), 4096);
        body(r, collectives);
      } catch (const std::exception &error) {
        errors[static_cast<size_t>(r)] = error.what();
      }
    });
  for (std::thread &t : threads)
    t.join();
  ::unlink(path.c_str());
  return errors;
}

CommAddress address(const std::vector<float> &v) { return reinterpret_cast<CommAddress>(v.data()); }

TEST(HostCollectivesTest, GroupsExchangeTheirMembersData) {
  std::vector<std::vector<float>> sums(4), gathers(4), scatters(4), pairSums(4);
  auto errors = runRanks(4, 20, [&](int r, Collectives &c) {
    std::vector<float> mine = {float(r), float(10 * r), 0.5f};
    sums[r].resize(3);
    c.allReduce(0, address(mine), address(sums[r]), 3, "sum");
    pairSums[r].resize(3);
    c.allReduce(1, address(mine), address(pairSums[r]), 3, "pair sum");
    gathers[r].resize(6);
    c.allGather(1, address(mine), address(gathers[r]), 3, "pair gather");
    std::vector<float> all = {1.0f * r, 2.0f * r, 3.0f * r, 4.0f * r};
    scatters[r].resize(1);
    c.reduceScatter(0, address(all), address(scatters[r]), 1, "scatter");
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(sums[r], (std::vector<float>{6, 60, 2}));
    const int partner = r ^ 2; // {0, 2} and {1, 3}
    EXPECT_EQ(pairSums[r], (std::vector<float>{float(r + partner), float(10 * (r + partner)), 1}));
    const int first = std::min(r, partner), second = std::max(r, partner);
    EXPECT_EQ(gathers[r], (std::vector<float>{float(first), float(10 * first), 0.5f, float(second),
                                              float(10 * second), 0.5f}));
    // Piece r of the sum over ranks of (k+1) * rank: (r + 1) * 6.
    EXPECT_EQ(scatters[r], (std::vector<float>{float((r + 1) * 6)}));
  }
}

TEST(HostCollectivesTest, ARankThatLeavesStopsTheOthers) {
  const auto start = std::chrono::steady_clock::now();
  auto errors = runRanks(4, 20, [&](int r, Collectives &c) {
    std::vector<float> v(4, 1.0f), out(4);
    c.allReduce(0, address(v), address(out), 4, "warm-up");
    if (r == 3)
      return; // leaves the job (destroys its collectives)
    c.allReduce(0, address(v), address(out), 4, "all_reduce for 'x' (steps[7])");
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(errors[3], "");
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(errors[r].find("all_reduce for 'x' (steps[7])"), std::string::npos) << errors[r];
  // The first to notice names the rank; the others say why they stopped.
  bool named = false;
  for (int r = 0; r < 3; ++r)
    named = named || errors[r].find("rank 3 left the job before it") != std::string::npos;
  EXPECT_TRUE(named);
}

TEST(HostCollectivesTest, AStalledRankTimesOut) {
  const auto start = std::chrono::steady_clock::now();
  auto errors = runRanks(2, 0.5, [&](int r, Collectives &c) {
    std::vector<float> v(4, 1.0f), out(4);
    if (r == 1)
      std::this_thread::sleep_for(std::chrono::seconds(2)); // stalls, then joins late
    c.allGather(0, address(v), address(out), 2, "all_gather for 'y'");
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_NE(errors[0].find("all_gather for 'y': timed out after 0.5 s waiting for rank 1"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1], "");
}

TEST(HostCollectivesTest, RefusesGroupsOfAnotherWorld) {
  RankInfo info{0, 2, freshPath(), 1};
  try {
    HostCollectives collectives(info, groups(4), 4096);
    FAIL() << "accepted groups of 4 ranks in a job of 2";
  } catch (const RuntimeError &error) {
    EXPECT_NE(std::string(error.what()).find("comm group 'world' lists 4 ranks; the job has 2"),
              std::string::npos)
        << error.what();
  }
}

TEST(HostCollectivesTest, RefusesWhatDoesNotFit) {
  auto errors = runRanks(2, 5, [&](int, Collectives &c) {
    std::vector<float> big(2048);
    c.allReduce(0, address(big), address(big), 2048, "all_reduce for 'z'");
  });
  EXPECT_NE(errors[0].find("all_reduce for 'z': 8192 bytes, past the 4096-byte slots"),
            std::string::npos)
      << errors[0];
}

} // namespace
} // namespace kiln
