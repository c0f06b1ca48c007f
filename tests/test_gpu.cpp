// GPU checks: the golden vectors on the device (float32 within 1e-4, the bf16 transformer within
// 2e-2) and a technique's off identity there. Skipped where the build or the machine has no CUDA.
#include <gtest/gtest.h>

#include "runtime/device.h"
#include "runtime/models.h"
#include "runtime/verify.h"
#include "test_util.h"

using namespace autooptim;
using namespace autooptim::runtime;

TEST(Gpu, GoldenFloat32OnTheDevice) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA in this build or on this machine";
  set_strict_fp32(true);
  VerifyOptions o;
  o.precision = Precision{at::kFloat, at::Device(at::kCUDA, 0)};
  o.tolerance = 1e-4;
  o.fp32_tolerance = 1e-4;
  const auto rep = verify_golden_dir(test::golden_dir(), o);
  for (const auto& r : rep.rows) EXPECT_TRUE(r.pass) << r.component << " " << r.tensor << " " << r.rel_l2;
  EXPECT_TRUE(rep.skipped.empty());
}

TEST(Gpu, GoldenBf16Transformer) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA in this build or on this machine";
  VerifyOptions o;
  o.precision = Precision{at::kBFloat16, at::Device(at::kCUDA, 0)};
  o.tolerance = 2e-2;
  o.fp32_tolerance = 1e-4;
  const auto rep = verify_golden_dir(test::golden_dir(), o);
  size_t transformer = 0;
  for (const auto& r : rep.rows) {
    if (r.component.rfind("transformer", 0) != 0) continue;
    ++transformer;
    EXPECT_TRUE(r.pass) << r.tensor << " " << r.rel_l2;
  }
  EXPECT_EQ(transformer, 10u);
}

TEST(Gpu, TinyModelTechniquesOffReproduceTheBaseline) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA in this build or on this machine";
  LoadRequest r;
  r.precision = Precision{at::kBFloat16, at::Device(at::kCUDA, 0)};
  auto m = load_model(r);
  GenerateParams p;
  p.prompt = "a red fox";
  p.height = 64;
  p.width = 96;
  p.frames = 9;
  p.steps = 4;
  const auto a = m.pipeline->generate(p);
  RuntimeOptions on;
  on.cross_kv_cache = true;
  on.timestep_dedup = true;
  on.fused_qkv = true;
  m.pipeline->set_options(on);
  const auto b = m.pipeline->generate(p);
  EXPECT_GT(b.trace.get("kernel.cross_kv_cache.hits"), 0);
  m.pipeline->set_options({});
  const auto c = m.pipeline->generate(p);
  EXPECT_TRUE(at::equal(a.video, c.video));
  EXPECT_LT(rel_l2(b.video, a.video), 1e-2);
}
