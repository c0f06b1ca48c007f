// The trial result a worker sends back to an executor (executors::Trial's JSON): a round trip, and each
// missing or mistyped key named in the error.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "executors/executor.h"

namespace autooptim::executors {
namespace {

using nlohmann::json;

std::string error_of(const json& j) {
  try {
    Trial::from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Trial sample() {
  Trial t;
  t.flags = {{"fused_qkv", true}};
  t.label = "qkv";
  t.prompts = 2;
  t.baseline_s = 2.0;
  t.candidate_s = 1.6;
  t.speedup = 1.25;
  t.psnr_min = 48.5;
  t.ssim_min = 0.985;
  t.skip_ratio = 0.25;
  t.not_engaged = {"fused_qkv: no fused projection ran"};
  return t;
}

TEST(TrialResult, RoundTrips) {
  const json wire = sample().to_json();
  EXPECT_TRUE(wire["density"].is_null());  // not counted
  const Trial back = Trial::from_json(wire);
  EXPECT_EQ(back.to_json().dump(), wire.dump());
  EXPECT_EQ(back.skip_ratio, 0.25);
  EXPECT_EQ(back.ssim_min, 0.985);
  EXPECT_EQ(back.density, -1);
  EXPECT_EQ(back.not_engaged, sample().not_engaged);
}

TEST(TrialResult, NamesEachMissingOrMistypedKey) {
  const json wire = sample().to_json();
  for (const auto& [key, value] : wire.items()) {
    json missing = wire;
    missing.erase(key);
    EXPECT_EQ(error_of(missing), "trial result: missing key '" + key + "'");
    json mistyped = wire;
    mistyped[key] = value.is_array() ? json("not an array") : json::array({true});
    EXPECT_EQ(error_of(mistyped).rfind("trial result: key '" + key + "': expected ", 0), 0u) << key;
  }
}

}  // namespace
}  // namespace autooptim::executors
