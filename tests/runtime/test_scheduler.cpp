// UniPC flow scheduler against the reference for 50 and 4 steps, plus schedule properties.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint.h"
#include "base/error.h"
#include "runtime/nn.h"
#include "runtime/unipc_scheduler.h"
#include "test_util.h"

using namespace autooptim;
using namespace autooptim::runtime;

namespace {

UniPCScheduler golden_scheduler() {
  return UniPCScheduler(UniPCConfig::from_json(read_json_file(test::golden_dir() + "/unipc_io.json")["config"]));
}

void check_steps(int64_t n) {
  const auto io = TensorSource::open(test::golden_dir() + "/unipc_io.safetensors");
  auto s = golden_scheduler();
  s.set_timesteps(n);
  const std::string k = std::to_string(n);
  std::vector<float> ts(s.timesteps().begin(), s.timesteps().end());
  EXPECT_TRUE(at::equal(at::tensor(ts), io.tensor("timesteps_" + k))) << "timesteps " << n;
  EXPECT_LE(rel_l2(at::tensor(s.sigmas()), io.tensor("sigmas_" + k)), 1e-6);
  at::Tensor x = io.tensor("sample0_" + k);
  const at::Tensor ref = io.tensor("samples_" + k);
  for (int64_t i = 0; i < n; ++i) {
    x = s.step(io.tensor("model_output_" + k + "_" + std::to_string(i)), x);
    EXPECT_LE(rel_l2(x, ref[i]), 1e-5) << "step " << i << " of " << n;
  }
}

}  // namespace

TEST(UniPC, Golden50Steps) { check_steps(50); }
TEST(UniPC, Golden4Steps) { check_steps(4); }

TEST(UniPC, ScheduleShape) {
  UniPCScheduler s;
  s.set_timesteps(50);
  ASSERT_EQ(s.timesteps().size(), 50u);
  ASSERT_EQ(s.sigmas().size(), 51u);
  EXPECT_EQ(s.timesteps().front(), 999);
  EXPECT_EQ(s.timesteps()[4], 982);
  EXPECT_EQ(s.timesteps().back(), 96);
  EXPECT_EQ(s.sigmas().back(), 0.0f);
  for (size_t i = 1; i < s.sigmas().size(); ++i) EXPECT_LT(s.sigmas()[i], s.sigmas()[i - 1]);
}

TEST(UniPC, OrdersFollowWarmupAndLowerOrderFinal) {
  UniPCScheduler s;
  s.set_timesteps(5);
  std::vector<int64_t> orders;
  at::Tensor x = at::randn({3});
  for (int i = 0; i < 5; ++i) {
    orders.push_back(s.next_order());
    x = s.step(at::randn({3}), x);
  }
  EXPECT_EQ(orders, (std::vector<int64_t>{1, 2, 2, 2, 1}));
  EXPECT_THROW(s.step(at::randn({3}), x), Error);
}

TEST(UniPC, LastStepReturnsTheX0Prediction) {
  UniPCScheduler s;
  s.set_timesteps(1);
  const at::Tensor x = at::randn({4}), v = at::randn({4});
  const at::Tensor out = s.step(v, x);
  EXPECT_TRUE(at::allclose(out, x - s.sigmas()[0] * v));
}

TEST(UniPC, ConfigErrorsNameTheKey) {
  try {
    UniPCConfig::from_json({{"prediction_type", "epsilon"}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prediction_type"), std::string::npos);
  }
  EXPECT_THROW(UniPCConfig::from_json({{"solver_order", 7}}), Error);
  EXPECT_THROW(UniPCConfig::from_json({{"flow_shift", "five"}}), Error);
  UniPCScheduler s;
  EXPECT_THROW(s.set_timesteps(0), Error);
}
