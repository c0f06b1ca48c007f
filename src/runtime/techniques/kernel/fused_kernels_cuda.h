#pragma once
// Launchers of the fused CUDA kernels, on raw pointers so that the .cu files need no libtorch headers
// (they build fast and the CPU machine's nvcc can check them). Declared in every build; defined only in
// GPU builds (AUTOOPTIM_WITH_CUDA). Each returns a cudaError_t as int (0 = launched).
#include <cstdint>

namespace autooptim::cuda {

// Modulation vector k of row r: table[k, :] (float32 [6, D]) + tproj[(r / tp_div) * 6 + k, :] (bf16).
// tp_div = 1 when the time projection is per token ([B, L, 6, D]), L when per sample ([B, 6, D]).

// out[r] = bf16(LN(x[r]) * (1 + mod(k_scale)) + mod(k_shift)), LN without affine, float32 statistics.
int launch_norm_modulate(const void* x, void* out, const float* table, const void* tproj, int64_t rows, int64_t dim,
                         int64_t tp_div, int k_shift, int k_scale, float eps, void* stream);

// out[r] = bf16(float(x[r]) + float(y[r]) * mod(k_gate)); out may alias x.
int launch_gate_residual(const void* x, const void* y, void* out, const float* table, const void* tproj, int64_t rows,
                         int64_t dim, int64_t tp_div, int k_gate, void* stream);

// In place on q and k (bf16 rows of `dim` = heads * head_dim with row stride `stride` elements):
// RMS-normalise each row over all heads with its gain (wq / wk, bf16), round to bf16, then rotate each
// (even, odd) pair of every head by the token's angle: cos/sin float32 [tokens, head_dim / 2], token =
// row % tokens.
int launch_qk_norm_rope(void* q, void* k, int64_t stride, const void* wq, const void* wk, const float* cos,
                        const float* sin, int64_t rows, int64_t tokens, int64_t dim, int64_t head_dim, float eps,
                        void* stream);

// FP8 (e4m3) quantisation of bf16 rows: scale[r] = max(|x[r]|) / 448 (at least `min_scale`),
// out[r] = e4m3(x[r] / scale[r]). With gelu, x is first replaced by gelu_tanh(x) (rounded to bf16, as the
// unfused FFN does).
int launch_quantize_rows_e4m3(const void* x, int64_t x_stride, void* out, float* scale, int64_t rows, int64_t cols,
                              bool gelu, float min_scale, void* stream);

}  // namespace autooptim::cuda
