// FlatOptimizer::setOptions (chorus/flat_optimizer.h): new hyperparameters between steps, worked
// by hand on one element (parameter 1, gradient 1), and refusals that change nothing. The update
// rules themselves are checked against torch.optim in tests/python/test_11_flat_optimizers.py.
#include "chorus/flat_optimizer.h"

#include <gtest/gtest.h>

#include "chorus/error.h"

namespace chorus::parallel {
namespace {

TEST(FlatOptimizerOptions, SgdTakesANewLearningRateForItsNextStep) {
  auto sgd = makeSgd(1, SgdOptions{.lr = 0.1});
  float param = 1.0F;
  const float grad = 1.0F;
  sgd->step(&param, &grad);  // 1 - 0.1
  sgd->setOptions(SgdOptions{.lr = 0.01}, AdamOptions{});
  sgd->step(&param, &grad);  // 0.9 - 0.01
  EXPECT_FLOAT_EQ(param, 0.89F);
}

TEST(FlatOptimizerOptions, SgdMomentumKeepsItsBufferAcrossAChange) {
  auto sgd = makeSgd(1, SgdOptions{.lr = 1.0, .momentum = 0.5});
  float param = 0.0F;
  const float grad = 1.0F;
  sgd->step(&param, &grad);  // buf = 1; p = -1
  sgd->setOptions(SgdOptions{.lr = 1.0, .momentum = 0.25}, AdamOptions{});
  sgd->step(&param, &grad);  // buf = 0.25 * 1 + 1 = 1.25; p = -2.25
  EXPECT_FLOAT_EQ(param, -2.25F);
}

TEST(FlatOptimizerOptions, AdamWStaysAdamWAndTakesItsNewLearningRate) {
  auto adamw = makeOptimizer("adamw", 1, SgdOptions{},
                             AdamOptions{.lr = 0.1, .eps = 0.0, .weightDecay = 0.5});
  float param = 1.0F;
  const float grad = 1.0F;
  // Adam without eps, with a constant gradient, moves by lr: m / sqrt(v) is 1 after bias
  // correction at every step.
  adamw->step(&param, &grad);  // 1 * (1 - 0.1 * 0.5) - 0.1 = 0.85
  adamw->setOptions(SgdOptions{}, AdamOptions{.lr = 0.2, .eps = 0.0, .weightDecay = 0.5});
  EXPECT_EQ(adamw->name(), "adamw");
  adamw->step(&param, &grad);        // decoupled decay first: 0.85 * (1 - 0.2 * 0.5) - 0.2 = 0.565
  EXPECT_NEAR(param, 0.565F, 1e-5);  // float32 rounding of the moments
}

TEST(FlatOptimizerOptions, RefusedOptionsChangeNothing) {
  auto sgd = makeSgd(1, SgdOptions{.lr = 0.1});
  EXPECT_THROW(sgd->setOptions(SgdOptions{.lr = -1.0}, AdamOptions{}), InvalidArgumentError);
  // Momentum from zero to non-zero would need a buffer made at construction.
  EXPECT_THROW(sgd->setOptions(SgdOptions{.lr = 0.5, .momentum = 0.9}, AdamOptions{}),
               InvalidArgumentError);
  auto adam = makeAdam(1, AdamOptions{.lr = 0.1, .eps = 0.0});
  EXPECT_THROW(adam->setOptions(SgdOptions{}, AdamOptions{.lr = 0.5, .beta1 = 1.0}),
               InvalidArgumentError);
  float param = 1.0F;
  const float grad = 1.0F;
  sgd->step(&param, &grad);
  EXPECT_FLOAT_EQ(param, 0.9F);  // still lr 0.1
  param = 1.0F;
  adam->step(&param, &grad);
  EXPECT_NEAR(param, 0.9F, 1e-5);  // still lr 0.1 (float32 rounding of the moments)
}

}  // namespace
}  // namespace chorus::parallel
