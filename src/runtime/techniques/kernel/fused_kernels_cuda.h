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

// out[r] = bf16(LN(x[r]) * weight + bias): x and out bf16, weight and bias float32 [dim], float32 statistics.
int launch_layer_norm_affine(const void* x, void* out, const float* weight, const float* bias, int64_t rows,
                             int64_t dim, float eps, void* stream);

// sum[r] = bf16(float(x[r]) + float(y[r])); out[r] = launch_norm_modulate's output for sum[r]. sum must not
// alias x or y.
int launch_add_norm_modulate(const void* x, const void* y, void* sum, void* out, const float* table, const void* tproj,
                             int64_t rows, int64_t dim, int64_t tp_div, int k_shift, int k_scale, float eps,
                             void* stream);

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

// Element strides of a [B, C, T, H*W] view of a 5D video tensor (H and W flattened: the voxel stride is
// W's), and its batch count.
struct VaeStrides {
  int64_t batches, b, c, t, v;
};

// The VAE's RMS norm over channels and SiLU: out = bf16(silu(bf16(x / max(|x|_C, 1e-12) * sqrt(C) *
// gamma))), float32 statistics; x and out bf16, gamma float32 [C]. Channels-last tensors (c stride 1) get
// a warp per voxel with 16-byte loads; others a thread per voxel.
int launch_vae_norm_silu(const void* x, void* out, const float* gamma, VaeStrides xs, VaeStrides os, int64_t C,
                         int64_t T, int64_t HW, void* stream);

// The VAE up block's DupUp3D shortcut added in place: h[b, c, t, y, w] += x[b, ci, ti, y/2, w/2] with
// tf = t + t_shift, ti = tf / ft, a = tf % ft, k = ((c * ft + a) * 2 + y % 2) * 2 + w % 2, ci = k / repeats
// (x's channels repeated `repeats` times and unfolded into (ft, 2, 2)). bf16, any strides; the sum is
// rounded once, as at::add rounds it.
struct DupUpShape {
  int64_t B, C, T, H, W;  // h's sizes (the output)
  int64_t hs[5], xs[5];   // element strides of h and x ([B, C, T, H, W])
  int64_t ft, repeats, t_shift;
};
int launch_vae_dup_up_add(void* h, const void* x, const DupUpShape& s, void* stream);

// Element strides of one attention operand viewed as [B, H, L, head_dim] (head_dim contiguous).
struct AttentionOperand {
  int64_t batch, head, row;
};

// hopper_attention.cu: whether this build has the sm_90a kernel and `device` can run it (compute
// capability 9.0).
bool hopper_attention_supported(int device);

// out = softmax(q k^T * scale) v for bf16 q [B, H, Lq, 128], k and v [B, H, Lk, 128] (strides multiples of
// 8 elements, 16-byte aligned data) into out (bf16, its own strides, rows 4-byte aligned). variant: 0-3 =
// key tiles of 128 with {2, 3} shared-memory stages x {without, with} the two consumer warpgroups'
// ping-pong; 4-5 = key tiles of 176, 2 stages, without / with ping-pong.
// Returns cudaErrorInvalidValue (as int) for anything it does not take.
int launch_hopper_attention(const void* q, const void* k, const void* v, void* out, const AttentionOperand& qs,
                            const AttentionOperand& ks, const AttentionOperand& vs, const AttentionOperand& os,
                            int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t head_dim, float scale, int variant,
                            void* stream);

}  // namespace autooptim::cuda
