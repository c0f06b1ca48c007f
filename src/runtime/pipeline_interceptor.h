#pragma once
// One interface through which code outside the runtime may watch and change a generation at fixed points:
// before and after it, the text encoding, the denoising loop's length, the transformer forwards it runs, the
// cache policy's warm-up, the dense work sparse attention honours, and the decoded clip before it is written.
// The only implementation is the gate's red team (src/redteam/, docs/gate-defences.md), installed by a worker
// that allows it; every hook's default is the honest path. A pipeline without an interceptor (the null
// pointer, as everywhere outside the harness's own tests) calls none of them.
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/options.h"
#include "runtime/techniques/sparse/video_sparse_attention_options.h"
#include "runtime/wan_pipeline.h"

namespace autooptim::runtime {

class PipelineInterceptor {
 public:
  PipelineInterceptor() = default;
  PipelineInterceptor(const PipelineInterceptor&) = delete;
  PipelineInterceptor& operator=(const PipelineInterceptor&) = delete;
  virtual ~PipelineInterceptor() = default;

  // Before a generation under `o`: a result to return at once instead of generating (written into
  // *out_video or not), else nullopt and the pipeline generates.
  virtual std::optional<GenerateResult> before_generation(WanPipeline& /*pipe*/, const RuntimeOptions& /*o*/,
                                                          const GenerateParams& /*p*/, at::Tensor* /*out_video*/) {
    return std::nullopt;
  }
  // After the pipeline generated `r` (its video is the caller's output buffer when one was given).
  virtual void after_generation(WanPipeline& /*pipe*/, const RuntimeOptions& /*o*/, const GenerateParams& /*p*/,
                                GenerateResult& /*r*/) {}
  // The embeddings of one prompt of the generation, instead of encoding it (an undefined tensor: the pipeline
  // encodes it). Sets *tokens_saved and adds the rows it encoded to *tokens_run, as WanPipeline::encode_text.
  virtual at::Tensor text_embeddings(WanPipeline& /*pipe*/, const RuntimeOptions& /*o*/, const std::string& /*prompt*/,
                                     int64_t* /*tokens_saved*/, int64_t* /*tokens_run*/) {
    return {};
  }
  // The denoising steps the loop runs (and its scheduler spaces) when `requested` are asked for.
  virtual int64_t denoising_steps(const RuntimeOptions& /*o*/, int64_t requested) { return requested; }
  // Transformer forwards to run and discard, uncounted, before each counted one.
  virtual int discarded_forwards(const RuntimeOptions& /*o*/) { return 0; }
  // The options the generation's cache policy is made with (its warm-up steps among them).
  virtual void cache_policy_options(RuntimeOptions& /*cache_options*/) {}
  // The dense steps and layers sparse attention honours (the loop's copy of the sparse options).
  virtual void sparse_dense_work(SparseAttentionOptions& /*sparse*/) {}
  // The decoded clip [T, 3, H, W] in [0, 1], before it is written to the output buffer.
  virtual void decoded(const RuntimeOptions& /*o*/, at::Tensor& /*video*/) {}
};

}  // namespace autooptim::runtime
