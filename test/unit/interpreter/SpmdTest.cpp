// Simulated ranks: the shard dialect's collectives on hand-computable data.
#include "compiler/interpreter/Interpreter.h"
#include "compiler/interpreter/ReferenceOps.h"
#include "dialects/kiln/KilnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

namespace kiln::interp {
namespace {

class SpmdTest : public ::testing::Test {
protected:
  SpmdTest() {
    context.loadDialect<KilnDialect, mlir::func::FuncDialect, mlir::shard::ShardDialect>();
  }

  // Parses `body` and runs @f on one input per rank.
  std::vector<std::vector<HostTensor>> run(const std::string &ir,
                                           const std::vector<HostTensor> &perRank) {
    module = mlir::parseSourceString<mlir::ModuleOp>(ir, &context);
    EXPECT_TRUE(module);
    auto f = module->lookupSymbol<mlir::func::FuncOp>("f");
    std::vector<std::vector<HostTensor>> inputs;
    for (const HostTensor &t : perRank)
      inputs.push_back({t});
    return interpreter.runRanks(f, inputs);
  }

  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  MapWeights weights;
  Interpreter interpreter{weights};
};

HostTensor vec(std::vector<float> v) {
  int64_t n = static_cast<int64_t>(v.size());
  return HostTensor::floats({1, n}, std::move(v));
}

TEST_F(SpmdTest, AllReduceSumsEveryRank) {
  auto out = run(R"(
    shard.grid @tp(shape = 2)
    func.func @f(%x: tensor<1x3xf32>) -> tensor<1x3xf32> {
      %y = shard.all_reduce %x on @tp grid_axes = [0] : tensor<1x3xf32> -> tensor<1x3xf32>
      return %y : tensor<1x3xf32>
    })",
                 {vec({1, 2, 3}), vec({10, 20, 30})});
  EXPECT_EQ(out[0][0].f, (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(out[1][0].f, (std::vector<float>{11, 22, 33}));
}

TEST_F(SpmdTest, AllGatherConcatenatesInRankOrder) {
  auto out = run(R"(
    shard.grid @tp(shape = 2)
    func.func @f(%x: tensor<1x2xf32>) -> tensor<1x4xf32> {
      %y = shard.all_gather %x on @tp grid_axes = [0] gather_axis = 1 : tensor<1x2xf32> -> tensor<1x4xf32>
      return %y : tensor<1x4xf32>
    })",
                 {vec({1, 2}), vec({3, 4})});
  EXPECT_EQ(out[0][0].f, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(out[1][0].shape, (std::vector<int64_t>{1, 4}));
}

TEST_F(SpmdTest, ReduceScatterGivesEachRankItsSliceOfTheSum) {
  auto out =
      run(R"(
    shard.grid @sp(shape = 2)
    func.func @f(%x: tensor<4x1xf32>) -> tensor<2x1xf32> {
      %y = shard.reduce_scatter %x on @sp grid_axes = [0] scatter_axis = 0 : tensor<4x1xf32> -> tensor<2x1xf32>
      return %y : tensor<2x1xf32>
    })",
          {HostTensor::floats({4, 1}, {1, 2, 3, 4}), HostTensor::floats({4, 1}, {10, 20, 30, 40})});
  EXPECT_EQ(out[0][0].f, (std::vector<float>{11, 22}));
  EXPECT_EQ(out[1][0].f, (std::vector<float>{33, 44}));
}

TEST_F(SpmdTest, AllToAllExchangesPieces) {
  auto out = run(R"(
    shard.grid @ep(shape = 2)
    func.func @f(%x: tensor<2x1xf32>) -> tensor<2x1xf32> {
      %y = shard.all_to_all %x on @ep grid_axes = [0] split_axis = 0 concat_axis = 0 : tensor<2x1xf32> -> tensor<2x1xf32>
      return %y : tensor<2x1xf32>
    })",
                 {HostTensor::floats({2, 1}, {11, 12}), HostTensor::floats({2, 1}, {21, 22})});
  EXPECT_EQ(out[0][0].f, (std::vector<float>{11, 21}));
  EXPECT_EQ(out[1][0].f, (std::vector<float>{12, 22}));
}

TEST_F(SpmdTest, GroupsFollowTheListedGridAxes) {
  // A 2x2 grid reduced over axis 1: ranks {0, 1} and {2, 3} form the groups.
  auto out = run(R"(
    shard.grid @g(shape = 2x2)
    func.func @f(%x: tensor<1x1xf32>) -> tensor<1x1xf32> {
      %y = shard.all_reduce %x on @g grid_axes = [1] : tensor<1x1xf32> -> tensor<1x1xf32>
      return %y : tensor<1x1xf32>
    })",
                 {vec({1}), vec({2}), vec({4}), vec({8})});
  EXPECT_EQ(out[0][0].f[0], 3);
  EXPECT_EQ(out[1][0].f[0], 3);
  EXPECT_EQ(out[2][0].f[0], 12);
  EXPECT_EQ(out[3][0].f[0], 12);
}

TEST_F(SpmdTest, KilnOpsRunPerRankBetweenCollectives) {
  // Row-parallel linear: each rank multiplies its half of the inputs by its
  // half of the weight; the all-reduce completes the dot product.
  weights.tensors["w"] = HostTensor::floats({1, 2}, {1, 1});
  auto out = run(R"(
    shard.grid @tp(shape = 2)
    func.func @f(%x: tensor<1x2xf32>) -> tensor<1x1xf32> {
      %w = kiln.weight "w" : tensor<1x2xf32>
      %p = kiln.linear %x, %w : tensor<1x2xf32>, tensor<1x2xf32> -> tensor<1x1xf32>
      %y = shard.all_reduce %p on @tp grid_axes = [0] : tensor<1x1xf32> -> tensor<1x1xf32>
      return %y : tensor<1x1xf32>
    })",
                 {vec({1, 2}), vec({3, 4})});
  EXPECT_EQ(out[0][0].f[0], 10);
  EXPECT_EQ(out[1][0].f[0], 10);
}

TEST_F(SpmdTest, RankCountMustMatchTheGrid) {
  EXPECT_THROW(run(R"(
    shard.grid @tp(shape = 4)
    func.func @f(%x: tensor<1x1xf32>) -> tensor<1x1xf32> {
      %y = shard.all_reduce %x on @tp grid_axes = [0] : tensor<1x1xf32> -> tensor<1x1xf32>
      return %y : tensor<1x1xf32>
    })",
                   {vec({1}), vec({2})}),
               InterpreterError);
}

} // namespace
} // namespace kiln::interp
