// Kernel technique (VAE decoder): cuDNN's autotuner on during the decode. The decoder's 3D convs come in a
// few dozen shapes (each stage's convs at the first chunk's and the later chunks' frame counts); with the
// autotuner cuDNN times its algorithms for each shape once and keeps the fastest, instead of taking its
// heuristic's first choice. The setting is restored after the decode (the transformer is not affected).
// Another algorithm sums in another order: not bit-identical, judged by the quality gate.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_cudnn_benchmark_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_cudnn_benchmark) {
  Technique t;
  t.name = "vae_cudnn_benchmark";
  t.family = "kernel";
  t.lossless = false;  // the fastest algorithm may sum in another order
  t.summary = "VAE decode with cuDNN's autotuner (the fastest conv algorithm per shape, timed once)";
  t.flags = {
      bool_flag("vae_cudnn_benchmark", field(&VaeCudnnBenchmarkOptions::on), "cuDNN autotuning of the VAE's convs")};
  t.switch_flag = "vae_cudnn_benchmark";
  t.hooks = {"pipeline.decode"};
  t.engagement = {
      {"kernel.vae_cudnn_benchmark.decodes", "vae_cudnn_benchmark is on but no decode ran on a CUDA device"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"vae_cudnn_benchmark", {{"vae_cudnn_benchmark", true}}}}
                 : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include <ATen/Context.h>

#include <memory>

#include "runtime/extension_points.h"
#include "runtime/wan_vae.h"

namespace autooptim::runtime::techniques {
namespace {

// cuDNN's autotuner for the decode only, restored afterwards (also on an error).
class CudnnBenchmark : public ext::DecodeStage {
 public:
  CudnnBenchmark() { at::globalContext().setBenchmarkCuDNN(true); }
  ~CudnnBenchmark() override { at::globalContext().setBenchmarkCuDNN(was_); }
  void decoded(const VaeRun& run) override { run.count("kernel.vae_cudnn_benchmark.decodes"); }

 private:
  bool was_ = at::globalContext().benchmarkCuDNN();
};

}  // namespace

AUTOOPTIM_EXTENSIONS(vae_cudnn_benchmark) {
  points.decode_stage.add({"vae_cudnn_benchmark", 10,
                           [](const RuntimeOptions& o) { return o.of<VaeCudnnBenchmarkOptions>().on; },
                           [](const at::Tensor& z, const VaeRun&) -> std::unique_ptr<ext::DecodeStage> {
                             if (!z.is_cuda()) return nullptr;  // cuDNN decodes only
                             return std::make_unique<CudnnBenchmark>();
                           }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
