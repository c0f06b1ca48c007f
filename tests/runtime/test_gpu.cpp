// GPU checks: the golden vectors on the device (float32 within 1e-4, the bf16 transformer within
// 2e-2) and a technique's off identity there. Skipped where the build or the machine has no CUDA.
#include <gtest/gtest.h>

#include "runtime/device.h"
#include "runtime/models.h"
#include "runtime/techniques/engagement.h"
#include "runtime/verify.h"
#include "test_util.h"
#include "tiny_gpu.h"
#include "runtime/techniques/kernel/cross_kv_cache_options.h"
#include "runtime/techniques/kernel/cuda_graph_options.h"
#include "runtime/techniques/kernel/fused_qkv_options.h"
#include "runtime/techniques/kernel/rope_cache_options.h"
#include "runtime/techniques/kernel/timestep_dedup_options.h"
#include "runtime/techniques/sparse/video_sparse_attention_options.h"
#include "runtime/techniques/vae/vae_cudnn_benchmark_options.h"

using namespace autooptim;
using namespace autooptim::runtime;
using test::small_clip;
using test::tiny_bf16_on_gpu;

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
  auto m = tiny_bf16_on_gpu();
  const GenerateParams p = small_clip(4);
  const auto a = m.pipeline->generate(p);
  RuntimeOptions on;
  on.of<CrossKvCacheOptions>().on = true;
  on.of<TimestepDedupOptions>().on = true;
  on.of<FusedQkvOptions>().on = true;
  m.pipeline->set_options(on);
  const auto b = m.pipeline->generate(p);
  EXPECT_GT(b.trace.get("kernel.cross_kv_cache.hits"), 0);
  m.pipeline->set_options({});
  const auto c = m.pipeline->generate(p);
  EXPECT_TRUE(at::equal(a.video, c.video));
  EXPECT_LT(rel_l2(b.video, a.video), 1e-2);
  // rope_cache on the device: the same tables kept, so the same clip bit for bit, every forward but
  // the first served from the cache.
  RuntimeOptions rc;
  rc.of<RopeCacheOptions>().on = true;
  m.pipeline->set_options(rc);
  const auto r = m.pipeline->generate(p);
  m.pipeline->set_options({});
  EXPECT_TRUE(at::equal(r.video, a.video)) << "rope_cache changes the clip on the GPU";
  EXPECT_EQ(r.trace.get("kernel.rope_cache.hits") + r.trace.get("kernel.rope_cache.misses"),
            r.trace.get("transformer.forwards"));
  EXPECT_LE(r.trace.get("kernel.rope_cache.misses"), 1);
}

// CUDA-graph capture: off reproduces the baseline bit-exactly; on, the clip matches the eager run of the
// same switches, one graph is captured per prompt and attention phase, every later forward replays, and
// the other techniques' engagement counters are the same as in the eager run.
TEST(Gpu, CudaGraphReplaysTheForwardAndKeepsOtherCountersTrue) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA in this build or on this machine";
  auto m = tiny_bf16_on_gpu();
  const GenerateParams p = small_clip(6);
  const auto base = m.pipeline->generate(p);

  RuntimeOptions g;
  g.of<CudaGraphOptions>().on = true;
  m.pipeline->set_options(g);
  const auto graphed = m.pipeline->generate(p);
  EXPECT_LT(rel_l2(graphed.video, base.video), 1e-3);
  // 2 prompts (CFG) x 1 phase: step 0 eager, step 1 captures, steps 1..5 replay.
  EXPECT_EQ(graphed.trace.get("kernel.cuda_graph.captures"), 2);
  EXPECT_EQ(graphed.trace.get("kernel.cuda_graph.eager_runs"), 2);
  EXPECT_EQ(graphed.trace.get("kernel.cuda_graph.replays"), 10);
  m.pipeline->set_options({});
  EXPECT_TRUE(at::equal(m.pipeline->generate(p).video, base.video));

  // With the other kernel switches and a sparse pattern that starts at step 2: two phases, two graphs each.
  RuntimeOptions e;
  e.of<CrossKvCacheOptions>().on = true;
  e.of<TimestepDedupOptions>().on = true;
  e.of<FusedQkvOptions>().on = true;
  e.of<SparseAttentionOptions>().pattern = "spatial_temporal";
  e.of<SparseAttentionOptions>().dense_steps = 2;
  e.of<SparseAttentionOptions>().dense_layers = 1;
  m.pipeline->set_options(e);
  const auto eager = m.pipeline->generate(p);
  RuntimeOptions eg = e;
  eg.of<CudaGraphOptions>().on = true;
  m.pipeline->set_options(eg);
  const auto both = m.pipeline->generate(p);
  m.pipeline->set_options({});
  EXPECT_LT(rel_l2(both.video, eager.video), 1e-3);
  EXPECT_EQ(both.trace.get("kernel.cuda_graph.captures"), 4);
  EXPECT_EQ(both.trace.get("kernel.cuda_graph.eager_runs"), 4);
  EXPECT_EQ(both.trace.get("kernel.cuda_graph.replays"), 8);
  for (const char* k : {"sparse.attention.calls", "sparse.attention.dense_calls", "sparse.attention.density",
                        "kernel.cross_kv_cache.hits", "kernel.fused_qkv.launches", "kernel.timestep_dedup.rows_saved"})
    EXPECT_DOUBLE_EQ(both.trace.get(k), eager.trace.get(k)) << k;
  EXPECT_TRUE(engagement_problems(eg, both.trace).empty());
}

// vae_cudnn_benchmark: cuDNN's autotuner is on for the decode only. The decode counts itself, the
// process-wide setting is what it was before (off and on), and the tuned decode is the plain one within
// the float32 VAE's tolerance (another conv algorithm, possibly TF32). Skipped without CUDA.
TEST(Gpu, VaeCudnnBenchmarkTunesTheDecodeOnlyAndRestoresTheSetting) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA in this build or on this machine";
  auto m = tiny_bf16_on_gpu();
  auto gen = at::detail::createCPUGenerator(31);
  const at::Tensor latents = at::randn({1, m.pipeline->vae()->config().z_dim, 3, 4, 6}, gen, at::kFloat);
  const bool before = at::globalContext().benchmarkCuDNN();
  for (const bool initially : {false, true}) {
    SCOPED_TRACE(initially ? "benchmark on before" : "benchmark off before");
    at::globalContext().setBenchmarkCuDNN(initially);
    m.pipeline->set_options({});
    Trace plain_trace;
    const at::Tensor plain = m.pipeline->decode(latents, &plain_trace).to(at::kCPU, at::kFloat);
    EXPECT_EQ(plain_trace.get("kernel.vae_cudnn_benchmark.decodes"), 0);
    RuntimeOptions o;
    o.of<VaeCudnnBenchmarkOptions>().on = true;
    m.pipeline->set_options(o);
    Trace trace;
    const at::Tensor tuned = m.pipeline->decode(latents, &trace).to(at::kCPU, at::kFloat);
    EXPECT_EQ(trace.get("kernel.vae_cudnn_benchmark.decodes"), 1);
    EXPECT_EQ(at::globalContext().benchmarkCuDNN(), initially);
    EXPECT_TRUE(engagement_problems(o, trace).empty());
    EXPECT_LT(rel_l2(tuned, plain), 1e-2);
  }
  m.pipeline->set_options({});
  at::globalContext().setBenchmarkCuDNN(before);
}
