#pragma once
// What the fused kernel switches share (runtime compilation only: libtorch): whether a tensor can take
// the CUDA path, the stream to launch on, and a launch check.
#include <ATen/ATen.h>

#include <string>

#include "base/error.h"
#include "runtime/techniques/kernel/fused_kernels_cuda.h"

#ifdef AUTOOPTIM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace autooptim::runtime::techniques::fused {

#ifdef AUTOOPTIM_WITH_CUDA
constexpr bool kCudaBuild = true;
inline void* stream() { return at::cuda::getCurrentCUDAStream().stream(); }
#else
constexpr bool kCudaBuild = false;
inline void* stream() { return nullptr; }
#endif

inline bool gpu_bf16(const at::Tensor& t) { return kCudaBuild && t.is_cuda() && t.scalar_type() == at::kBFloat16; }

inline void check(int rc, const char* what) {
  if (rc != 0) throw Error(std::string(what) + ": CUDA launch failed (error " + std::to_string(rc) + ")");
}

// Rows per time-projection row: 1 when per token ([B, L, 6, D]), L when per sample ([B, 6, D]).
inline int64_t tp_div(const at::Tensor& x, const at::Tensor& tproj) { return tproj.dim() == 4 ? 1 : x.size(1); }

// The block's time projection fits x [B, L, D]: [B, 6, D] or [B, L, 6, D], bf16 on the GPU.
inline bool tproj_fits(const at::Tensor& x, const at::Tensor& tproj) {
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  if (!gpu_bf16(tproj) || tproj.size(-1) != D || tproj.size(-2) != 6 || tproj.size(0) != B) return false;
  return tproj.dim() == 3 || (tproj.dim() == 4 && tproj.size(1) == L);
}

}  // namespace autooptim::runtime::techniques::fused
