#include "runtime/wan_vae.h"

#include "runtime/profile.h"

#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint.h"
#include "runtime/config_json.h"
#include "base/error.h"
#include "runtime/torch_compat.h"
#include "runtime/verify.h"

namespace autooptim::runtime {
namespace {

// Wan2.2 VAE latent statistics (Wan2.2 vae2_2.py; diffusers vae/config.json of TI2V-5B).
const std::vector<double> kTi2vLatentsMean = {
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174,  0.1838,  0.1557,  -0.1382, 0.0542,  0.2813,  0.0891,
    0.1570,  -0.0098, 0.0375,  -0.1825, -0.2246, -0.1207, -0.0698, 0.5109,  0.2665,  -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109,  0.1567,  -0.0729, 0.0899,  -0.2799, -0.1230, -0.0313, -0.1649, 0.0117,  0.0723,
    -0.2839, -0.2083, -0.0520, 0.3748,  0.0152,  0.1957,  0.1433,  -0.2944, 0.3573,  -0.0548, -0.1681, -0.0667};
const std::vector<double> kTi2vLatentsStd = {
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901,
    0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944,
    0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744};
// Wan2.1 VAE latent statistics (diffusers AutoencoderKLWan's defaults, the A14B checkpoints' vae/config.json).
const std::vector<double> kWan21LatentsMean = {-0.7571, -0.7089, -0.9113, 0.1075,  -0.1745, 0.9653,  -0.1517, 1.5508,
                                               0.4134,  -0.0715, 0.5517,  -0.3632, -0.1922, -0.9497, 0.2503,  -0.2921};
const std::vector<double> kWan21LatentsStd = {2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                                              3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160};

std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// Last min(n, T) frames of x [B, C, T, H, W].
at::Tensor last_frames(const at::Tensor& x, int64_t n) {
  const int64_t T = x.size(2);
  return x.narrow(2, std::max<int64_t>(0, T - n), std::min(n, T));
}

// A cache slot's context for the next chunk: a copy of `keep`, so the chunk's activation can be freed
// (a keep-context override may keep it elsewhere).
void keep_context(at::Tensor& frames, const at::Tensor& keep, const VaeRun* run) {
  if (run && ext::first_taker(run->points().keep_context, frames, keep, *run)) return;
  frames = keep.clone();
}

// Whether this decode keeps its activations channels-last.
bool channels_last(const VaeRun* run) { return run && run->points().channels_last; }

// Conv2d applied to every frame of x [B, C, T, H, W] as a (1, kh, kw) Conv3d.
at::Tensor conv2d_per_frame(const Conv2d& conv, const at::Tensor& x, std::vector<int64_t> stride,
                            std::vector<int64_t> padding, const VaeRun* run = nullptr) {
  const at::Tensor in = x.to(conv->weight.scalar_type()), w = conv->weight.unsqueeze(2);
  if (run) {
    const ext::VaeConv c{w, conv->bias, stride, padding, /*causal=*/false, nullptr};
    if (auto y = ext::first_taker(run->points().conv, in, c, *run)) return *y;
  }
  ProfileScope ps("conv", [&] { return conv_detail(in, w, stride, padding); });
  return at::conv3d(in, w, conv->bias, stride, padding);
}

// AvgDown3D: x [B, in, T, H, W] -> [B, out, ceil(T/ft), H/fs, W/fs]; T is front-padded with zeros to a
// multiple of ft, (ft, fs, fs) folded into channels, then the mean over groups of in*ft*fs*fs/out.
at::Tensor avg_down_3d(const at::Tensor& x, int64_t out, int64_t ft, int64_t fs) {
  const int64_t pad_t = (ft - x.size(2) % ft) % ft;
  const at::Tensor xp = pad_t ? at::constant_pad_nd(x, {0, 0, 0, 0, pad_t, 0}) : x;
  const int64_t B = xp.size(0), C = xp.size(1), T = xp.size(2), H = xp.size(3), W = xp.size(4);
  const int64_t group = C * ft * fs * fs / out;
  return xp.view({B, C, T / ft, ft, H / fs, fs, W / fs, fs})
      .permute({0, 1, 3, 5, 7, 2, 4, 6})  // [B, C, ft, fs, fs, T', H', W']
      .reshape({B, out, group, T / ft, H / fs, W / fs})
      .mean(2);
}

// DupUp3D: x [B, in, T, H, W] -> [B, out, T*ft, H*fs, W*fs]; each channel repeated out*ft*fs*fs/in
// times, the copies unfolded into (ft, fs, fs). On the first chunk the first ft-1 frames are dropped.
at::Tensor dup_up_3d(const at::Tensor& x, int64_t out, int64_t ft, int64_t fs, bool first_chunk) {
  const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t repeats = out * ft * fs * fs / C;
  at::Tensor y = x.unsqueeze(2).expand({B, C, repeats, T, H, W}).reshape({B, out, ft, fs, fs, T, H, W});
  y = y.permute({0, 1, 5, 2, 6, 3, 7, 4}).reshape({B, out, T * ft, H * fs, W * fs});  // [B, out, T, ft, H, fs, W, fs]
  if (first_chunk && ft > 1) y = y.narrow(2, ft - 1, T * ft - (ft - 1));
  return y;
}

// Nearest-neighbour 2x of each frame: [B, C, T, H, W] -> [B, C, T, 2H, 2W].
at::Tensor upsample_nearest_2x(const at::Tensor& x) {
  const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  return x.unsqueeze(4).unsqueeze(6).expand({B, C, T, H, 2, W, 2}).reshape({B, C, T, 2 * H, 2 * W});
}

void check_divisible(const char* what, int64_t a, int64_t b) {
  if (b <= 0 || a % b != 0)
    throw Error(std::string("vae config: ") + what + " needs " + std::to_string(a) + " divisible by " +
                std::to_string(b));
}

// The module holders forward their arguments through a template, which cannot take braced lists.
WanCausalConv3d make_causal(int64_t in, int64_t out, std::vector<int64_t> k, std::vector<int64_t> pad,
                            std::vector<int64_t> stride, const at::TensorOptions& o) {
  return WanCausalConv3d(in, out, std::move(k), std::move(pad), std::move(stride), o);
}
Conv2d make_conv2d(int64_t in, int64_t out, std::vector<int64_t> k, const at::TensorOptions& o,
                   std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> pad = {0, 0}) {
  return Conv2d(in, out, std::move(k), o, std::move(stride), std::move(pad));
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Config

WanVAEConfig WanVAEConfig::ti2v_5b() {
  WanVAEConfig c;
  c.latents_mean = kTi2vLatentsMean;
  c.latents_std = kTi2vLatentsStd;
  return c;
}

WanVAEConfig WanVAEConfig::wan21() {
  WanVAEConfig c;
  c.base_dim = c.decoder_base_dim = 96;
  c.z_dim = 16;
  c.is_residual = false;
  c.in_channels = c.out_channels = 3;
  c.patch_size = 1;
  c.scale_factor_spatial = 8;
  c.latents_mean = kWan21LatentsMean;
  c.latents_std = kWan21LatentsStd;
  return c;
}

WanVAEConfig WanVAEConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("vae config: not a JSON object");
  WanVAEConfig c = ti2v_5b();
  const ConfigReader cfg(j, "vae");
  cfg.read("base_dim", c.base_dim);
  // diffusers: a missing or null decoder_base_dim means base_dim (TI2V-5B's default when neither is given).
  if (j.contains("base_dim") || j.contains("decoder_base_dim")) c.decoder_base_dim = c.base_dim;
  cfg.read_nullable("decoder_base_dim", c.decoder_base_dim);
  cfg.read("z_dim", c.z_dim);
  cfg.read("dim_mult", c.dim_mult);
  cfg.read("num_res_blocks", c.num_res_blocks);
  cfg.read("attn_scales", c.attn_scales);
  cfg.read("temperal_downsample", c.temperal_downsample);
  cfg.read("is_residual", c.is_residual);
  cfg.read("in_channels", c.in_channels);
  cfg.read("out_channels", c.out_channels);
  if (j.contains("patch_size") && j["patch_size"].is_null()) c.patch_size = 1;
  cfg.read_nullable("patch_size", c.patch_size);
  cfg.read("scale_factor_spatial", c.scale_factor_spatial);
  cfg.read("scale_factor_temporal", c.scale_factor_temporal);
  cfg.read("latents_mean", c.latents_mean);
  cfg.read("latents_std", c.latents_std);
  double dropout = 0.0;
  cfg.read("dropout", dropout);
  if (dropout != 0.0)
    throw Error("vae config: 'dropout' = " + j["dropout"].dump() + " is not supported (inference only, 0)");

  if (!c.attn_scales.empty())
    throw Error("vae config: 'attn_scales' = " + j.value("attn_scales", nlohmann::json::array()).dump() +
                " is not supported (the Wan VAEs have no attention outside the mid blocks)");
  cfg.dimension("base_dim", c.base_dim);
  cfg.dimension("decoder_base_dim", c.decoder_base_dim);
  cfg.dimension("z_dim", c.z_dim);
  cfg.dimension("num_res_blocks", c.num_res_blocks, 1000);
  cfg.dimension("in_channels", c.in_channels);
  cfg.dimension("out_channels", c.out_channels);
  cfg.dimension("patch_size", c.patch_size, 64);
  if (c.dim_mult.size() < 2) throw Error("vae config: 'dim_mult' needs at least 2 entries");
  if (c.dim_mult.size() > 16) throw Error("vae config: 'dim_mult' has more than 16 entries");
  for (auto m : c.dim_mult) cfg.dimension("dim_mult", m, 1024);
  if (c.temperal_downsample.size() != c.dim_mult.size() - 1)
    throw Error("vae config: 'temperal_downsample' must have " + std::to_string(c.dim_mult.size() - 1) +
                " entries (one per downsampling stage), got " + std::to_string(c.temperal_downsample.size()));
  const int64_t pp = c.patch_size * c.patch_size;
  if (c.in_channels % pp || c.out_channels % pp)
    throw Error("vae config: 'in_channels'/'out_channels' must be multiples of patch_size^2 = " + std::to_string(pp));
  if (c.latents_mean.size() != static_cast<size_t>(c.z_dim))
    throw Error("vae config: 'latents_mean' has " + std::to_string(c.latents_mean.size()) + " values, z_dim is " +
                std::to_string(c.z_dim));
  if (c.latents_std.size() != static_cast<size_t>(c.z_dim))
    throw Error("vae config: 'latents_std' has " + std::to_string(c.latents_std.size()) + " values, z_dim is " +
                std::to_string(c.z_dim));
  for (double s : c.latents_std)
    if (!(s > 0)) throw Error("vae config: 'latents_std' values must be positive");
  int64_t spatial = c.patch_size, temporal = 1;
  for (size_t i = 0; i < c.temperal_downsample.size(); ++i) {
    spatial *= 2;
    temporal *= c.temperal_downsample[i] ? 2 : 1;
  }
  if (c.scale_factor_spatial != spatial)
    throw Error("vae config: 'scale_factor_spatial' = " + std::to_string(c.scale_factor_spatial) +
                " but patch_size and dim_mult give " + std::to_string(spatial));
  if (c.scale_factor_temporal != temporal)
    throw Error("vae config: 'scale_factor_temporal' = " + std::to_string(c.scale_factor_temporal) +
                " but temperal_downsample gives " + std::to_string(temporal));
  return c;
}

nlohmann::json WanVAEConfig::to_json() const {
  return {{"_class_name", "AutoencoderKLWan"},
          {"base_dim", base_dim},
          {"decoder_base_dim", decoder_base_dim},
          {"z_dim", z_dim},
          {"dim_mult", dim_mult},
          {"num_res_blocks", num_res_blocks},
          {"attn_scales", attn_scales},
          {"temperal_downsample", temperal_downsample},
          {"dropout", 0.0},
          {"is_residual", is_residual},
          {"in_channels", in_channels},
          {"out_channels", out_channels},
          {"patch_size", patch_size == 1 ? nlohmann::json(nullptr) : nlohmann::json(patch_size)},
          {"scale_factor_spatial", scale_factor_spatial},
          {"scale_factor_temporal", scale_factor_temporal},
          {"latents_mean", latents_mean},
          {"latents_std", latents_std}};
}

// ---------------------------------------------------------------------------------------------------
// Building blocks

const ext::VaePoints& VaeRun::points() const {
  if (!resolved) resolved = std::make_shared<const ext::VaePoints>(ext::VaePoints::resolve(options));
  return *resolved;
}

WanCausalCache::Slot& WanCausalCache::take() {
  if (next == slots.size()) slots.emplace_back();
  return slots[next++];
}

WanCausalConv3dImpl::WanCausalConv3dImpl(int64_t in, int64_t out, std::vector<int64_t> k, std::vector<int64_t> padding,
                                         std::vector<int64_t> stride_in, const at::TensorOptions& opts)
    : front_pad(2 * padding.at(0)), stride(std::move(stride_in)), spatial_pad{0, padding.at(1), padding.at(2)} {
  weight = add_param(*this, "weight", {out, in, k.at(0), k.at(1), k.at(2)}, opts);
  bias = add_param(*this, "bias", {out}, opts);
}

at::Tensor WanCausalConv3dImpl::forward(const at::Tensor& x, const at::Tensor& cache, const VaeRun* run) const {
  at::Tensor in;
  {
    ProfileScope ps("layout", [] { return ProfileDetail{"causal context (cat, pad)"}; });
    in = x.to(weight.scalar_type());
    int64_t front = front_pad;
    if (cache.defined() && front_pad > 0) {
      in = at::cat({cache.to(in.scalar_type()), in}, 2);  // cached frames replace (part of) the front pad
      front -= cache.size(2);
    }
    if (front > 0) in = at::constant_pad_nd(in, {0, 0, 0, 0, front, 0});
    // The concatenation and the pad may fall back to channels-first (a one- or two-frame part is both
    // layouts at once); cuDNN would convert such an input to the weights' layout itself, once per call.
    if (channels_last(run) && in.dim() == 5 && !in.is_contiguous(at::MemoryFormat::ChannelsLast3d))
      in = in.contiguous(at::MemoryFormat::ChannelsLast3d);
  }
  return conv(in, run);
}

at::Tensor WanCausalConv3dImpl::conv(const at::Tensor& in, const VaeRun* run) const {
  if (run) {
    const ext::VaeConv c{weight, bias, stride, spatial_pad, /*causal=*/front_pad > 0, this};
    if (auto y = ext::first_taker(run->points().conv, in, c, *run)) return *y;
  }
  ProfileScope ps("conv", [&] { return conv_detail(in, weight, stride, spatial_pad); });
  return at::conv3d(in, weight, bias, stride, spatial_pad);
}

at::Tensor WanCausalConv3dImpl::forward_cached(const at::Tensor& x, WanCausalCache& cache) const {
  auto& slot = cache.take();
  at::Tensor keep = last_frames(x, 2);
  if (keep.size(2) < 2 && slot.frames.defined())
    keep = at::cat({last_frames(slot.frames, 1), keep}, 2);  // previous chunk's last frame + this one
  at::Tensor out = forward(x, slot.frames, cache.run);
  ProfileScope ps("layout", [] { return ProfileDetail{"causal context kept"}; });
  keep_context(slot.frames, keep, cache.run);
  return out;
}

at::Tensor WanCausalConv3dImpl::forward_cached_norm_silu(const at::Tensor& x, const WanRMSNormImpl& norm,
                                                         WanCausalCache& cache) const {
  if (cache.run)
    if (auto y = ext::first_taker(cache.run->points().cached_norm_silu_conv, *this, x, norm, cache)) return *y;
  return forward_cached(norm.forward_silu(x, cache.run), cache);
}

WanRMSNormImpl::WanRMSNormImpl(int64_t dim, bool images, const at::TensorOptions& opts) {
  gamma = images ? add_param(*this, "gamma", {dim, 1, 1}, opts) : add_param(*this, "gamma", {dim, 1, 1, 1}, opts);
}

at::Tensor WanRMSNormImpl::forward(const at::Tensor& x) const {
  // F.normalize(x, dim=1) * sqrt(C) * gamma, in float32.
  ProfileScope ps("norm_elementwise");
  const at::Tensor xf = x.to(at::kFloat);
  const int64_t C = x.size(1);
  std::vector<int64_t> gshape(x.dim(), 1);
  gshape[1] = C;
  const std::vector<int64_t> channel_dim{1};
  const at::Tensor denom = at::linalg_vector_norm(xf, 2, channel_dim, /*keepdim=*/true).clamp_min(1e-12);
  const at::Tensor out = xf / denom * std::sqrt(static_cast<double>(C)) * gamma.to(at::kFloat).reshape(gshape);
  return out.to(x.scalar_type());
}

at::Tensor WanRMSNormImpl::forward_silu(const at::Tensor& x, const VaeRun* run) const {
  if (run)
    if (auto y = ext::first_taker(run->points().norm_silu, x, gamma, at::Tensor(), *run)) return *y;
  const at::Tensor n = forward(x);
  ProfileScope ps("norm_elementwise");
  return at::silu(n);
}

void WanRMSNormImpl::forward_silu_into(const at::Tensor& x, const at::Tensor& dst, const VaeRun* run) const {
  if (run && ext::first_taker(run->points().norm_silu, x, gamma, dst, *run)) return;
  const at::Tensor y = forward_silu(x, nullptr);
  ProfileScope ps("layout");
  dst.copy_(y);
}

WanResidualBlockImpl::WanResidualBlockImpl(int64_t in, int64_t out, const at::TensorOptions& opts) {
  norm1 = register_module("norm1", WanRMSNorm(in, false, opts));
  conv1 = register_module("conv1", make_causal(in, out, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, opts));
  norm2 = register_module("norm2", WanRMSNorm(out, false, opts));
  conv2 = register_module("conv2", make_causal(out, out, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, opts));
  if (in != out)
    conv_shortcut = register_module("conv_shortcut", make_causal(in, out, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, opts));
}

at::Tensor WanResidualBlockImpl::forward(const at::Tensor& x, WanCausalCache& cache) const {
  const at::Tensor shortcut = conv_shortcut ? conv_shortcut->forward(x, {}, cache.run) : x;  // [B, Cout, T, H, W]
  at::Tensor h = conv1->forward_cached_norm_silu(x, *norm1, cache);
  h = conv2->forward_cached_norm_silu(h, *norm2, cache);
  ProfileScope ps("norm_elementwise");
  return h + shortcut;
}

WanAttentionBlockImpl::WanAttentionBlockImpl(int64_t dim, const at::TensorOptions& opts) {
  norm = register_module("norm", WanRMSNorm(dim, true, opts));
  to_qkv = register_module("to_qkv", make_conv2d(dim, 3 * dim, {1, 1}, opts));
  proj = register_module("proj", make_conv2d(dim, dim, {1, 1}, opts));
}

at::Tensor WanAttentionBlockImpl::forward(const at::Tensor& x) const {
  ProfileScope ps("attention");
  const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  const at::Tensor frames = norm->forward(x).permute({0, 2, 1, 3, 4}).reshape({B * T, C, H, W});
  at::Tensor qkv = to_qkv->forward(frames);                           // [BT, 3C, H, W]
  qkv = qkv.reshape({B * T, 1, 3 * C, H * W}).permute({0, 1, 3, 2});  // [BT, 1, HW, 3C]
  const auto parts = qkv.chunk(3, -1);                                // q, k, v [BT, 1, HW, C]
  at::Tensor o = compat::sdpa(parts[0].contiguous(), parts[1].contiguous(), parts[2].contiguous());
  o = o.squeeze(1).permute({0, 2, 1}).reshape({B * T, C, H, W});
  o = proj->forward(o).view({B, T, C, H, W}).permute({0, 2, 1, 3, 4});  // [B, C, T, H, W]
  return x + o;  // x first: the sum takes x's layout (channels-last in such a decode), not o's permuted one
}

WanMidBlockImpl::WanMidBlockImpl(int64_t dim, const at::TensorOptions& opts) {
  auto res = register_module("resnets", List());
  auto attn = register_module("attentions", List());
  resnets.push_back(res->add("0", WanResidualBlock(dim, dim, opts)));
  attention = attn->add("0", WanAttentionBlock(dim, opts));
  resnets.push_back(res->add("1", WanResidualBlock(dim, dim, opts)));
}

at::Tensor WanMidBlockImpl::forward(const at::Tensor& x, WanCausalCache& cache) const {
  at::Tensor h = resnets[0]->forward(x, cache);
  h = attention->forward(h);
  return resnets[1]->forward(h, cache);
}

WanResampleImpl::WanResampleImpl(int64_t dim, Mode m, const at::TensorOptions& opts, int64_t upsample_out) : mode(m) {
  auto seq = register_module("resample", List());
  const bool up = m == Mode::kUpsample2d || m == Mode::kUpsample3d;
  const int64_t up_out = upsample_out > 0 ? upsample_out : dim;
  resample = seq->add(
      "1", up ? make_conv2d(dim, up_out, {3, 3}, opts, {1, 1}, {1, 1}) : make_conv2d(dim, dim, {3, 3}, opts, {2, 2}));
  if (m == Mode::kUpsample3d)
    time_conv = register_module("time_conv", make_causal(dim, 2 * dim, {3, 1, 1}, {1, 0, 0}, {1, 1, 1}, opts));
  if (m == Mode::kDownsample3d)
    time_conv = register_module("time_conv", make_causal(dim, dim, {3, 1, 1}, {0, 0, 0}, {2, 1, 1}, opts));
}

at::Tensor WanResampleImpl::forward(const at::Tensor& x_in, WanCausalCache& cache) const {
  at::Tensor x = x_in;
  if (mode == Mode::kUpsample3d) {
    auto& slot = cache.take();
    if (!slot.frames.defined() && !slot.rep) {
      slot.rep = true;  // first chunk: no time_conv, the frame stays single
    } else {
      at::Tensor keep = last_frames(x, 2);
      if (keep.size(2) < 2) keep = at::cat({slot.rep ? at::zeros_like(keep) : last_frames(slot.frames, 1), keep}, 2);
      // After "Rep" the second chunk pads with zeros, not with the first chunk's frame.
      at::Tensor y = slot.rep ? time_conv->forward(x, {}, cache.run)
                              : time_conv->forward(x, slot.frames, cache.run);  // [B, 2C, T, H, W]
      keep_context(slot.frames, keep, cache.run);
      slot.rep = false;
      const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
      // Channel halves [0, C) and [C, 2C) become frames 2t and 2t+1.
      ProfileScope ps("layout", [] { return ProfileDetail{"upsample3d frame interleave"}; });
      if (channels_last(cache.run)) {
        // Channels-last in, channels-last out (the next convs keep their layout): memory [B, T, H, W, 2, C]
        // -> [B, T, 2, H, W, C], one copy as below.
        x = y.permute({0, 2, 3, 4, 1})
                .reshape({B, T, H, W, 2, C})
                .permute({0, 1, 4, 2, 3, 5})
                .reshape({B, 2 * T, H, W, C})
                .permute({0, 4, 1, 2, 3});
      } else {
        x = y.view({B, 2, C, T, H, W}).permute({0, 2, 3, 1, 4, 5}).reshape({B, C, 2 * T, H, W});
      }
    }
  }
  if (mode == Mode::kUpsample2d || mode == Mode::kUpsample3d) {
    if (cache.run)
      if (auto y =
              ext::first_taker(cache.run->points().upsample, x, resample->weight, resample->bias, state, *cache.run))
        return *y;
    at::Tensor up;
    {
      ProfileScope ps("layout");
      up = upsample_nearest_2x(x);
    }
    return conv2d_per_frame(resample, up, {1, 1, 1}, {0, 1, 1}, cache.run);  // [B, C, T, 2H, 2W]
  }

  // ZeroPad2d((0, 1, 0, 1)) then a stride-2 3x3 conv per frame: [B, C, T, H/2, W/2].
  x = conv2d_per_frame(resample, at::constant_pad_nd(x, {0, 1, 0, 1}), {1, 2, 2}, {0, 0, 0});
  if (mode == Mode::kDownsample3d) {
    auto& slot = cache.take();
    if (!slot.frames.defined()) {
      slot.frames = last_frames(x, 1).clone();  // first chunk: no time_conv
    } else {
      at::Tensor keep = last_frames(x, 1).clone();
      x = time_conv->forward(at::cat({slot.frames, x}, 2));  // stride 2 over [cached, x]: T/2 frames
      slot.frames = keep;
    }
  }
  return x;
}

WanResidualDownBlockImpl::WanResidualDownBlockImpl(int64_t in, int64_t out, int64_t num_res_blocks, bool temporal,
                                                   bool down, const at::TensorOptions& opts)
    : in_dim(in), out_dim(out), factor_t(temporal ? 2 : 1), factor_s(down ? 2 : 1) {
  check_divisible("AvgDown3D", in * factor_t * factor_s * factor_s, out);
  auto res = register_module("resnets", List());
  int64_t d = in;
  for (int64_t i = 0; i < num_res_blocks; ++i, d = out)
    resnets.push_back(res->add(std::to_string(i), WanResidualBlock(d, out, opts)));
  if (down) {
    using M = WanResampleImpl::Mode;
    downsampler =
        register_module("downsampler", WanResample(out, temporal ? M::kDownsample3d : M::kDownsample2d, opts));
  }
}

at::Tensor WanResidualDownBlockImpl::forward(const at::Tensor& x, WanCausalCache& cache) const {
  at::Tensor h = x;
  for (const auto& r : resnets) h = r->forward(h, cache);
  if (downsampler) h = downsampler->forward(h, cache);
  return h + avg_down_3d(x, out_dim, factor_t, factor_s);
}

WanUpBlockImpl::WanUpBlockImpl(int64_t in, int64_t out, int64_t num_res_blocks, bool temporal, bool up_flag,
                               bool residual_block, const at::TensorOptions& opts)
    : up(up_flag), residual(residual_block), in_dim(in), out_dim(out), factor_t(temporal ? 2 : 1) {
  if (up && residual) check_divisible("DupUp3D", out * factor_t * 4, in);
  auto res = register_module("resnets", List());
  int64_t d = in;
  for (int64_t i = 0; i <= num_res_blocks; ++i, d = out)
    resnets.push_back(res->add(std::to_string(i), WanResidualBlock(d, out, opts)));
  if (!up) return;
  using M = WanResampleImpl::Mode;
  const M mode = temporal ? M::kUpsample3d : M::kUpsample2d;
  if (residual) {
    upsampler = register_module("upsampler", WanResample(out, mode, opts));
  } else {
    check_divisible("Wan2.1 upsampler", out, 2);
    upsampler = register_module("upsamplers", List())->add("0", WanResample(out, mode, opts, out / 2));
  }
}

at::Tensor WanUpBlockImpl::forward(const at::Tensor& x, WanCausalCache& cache, bool first_chunk) const {
  at::Tensor h = x;
  for (const auto& r : resnets) h = r->forward(h, cache);
  if (!up) return h;
  h = upsampler->forward(h, cache);
  if (!residual) return h;
  // h is the upsampler's own output: a shortcut override may add in place.
  if (cache.run && ext::first_taker(cache.run->points().shortcut, h, x, factor_t, first_chunk, *cache.run)) return h;
  ProfileScope ps("norm_elementwise", [] { return ProfileDetail{"DupUp3D shortcut add"}; });
  return h + dup_up_3d(x, out_dim, factor_t, 2, first_chunk);
}

at::Tensor WanDownLayer::forward(const at::Tensor& x, WanCausalCache& cache) const {
  return resnet ? resnet->forward(x, cache) : downsampler->forward(x, cache);
}

// ---------------------------------------------------------------------------------------------------
// Encoder and decoder

namespace {

// Wan2.1's encoder.down_blocks: per stage, num_res_blocks residual blocks, then a downsampler but after
// the last stage, all in one list (indices run on across stages).
std::vector<WanDownLayer> plain_down_layers(torch::nn::Module& list, const WanVAEConfig& c,
                                            const std::vector<int64_t>& dims, const at::TensorOptions& opts) {
  std::vector<WanDownLayer> layers;
  auto add = [&](WanDownLayer l, const std::shared_ptr<torch::nn::Module>& m) {
    list.register_module(std::to_string(layers.size()), m);
    layers.push_back(std::move(l));
  };
  using M = WanResampleImpl::Mode;
  const size_t n = c.dim_mult.size();
  for (size_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < c.num_res_blocks; ++r) {
      WanDownLayer l;
      l.resnet = WanResidualBlock(r == 0 ? dims[i] : dims[i + 1], dims[i + 1], opts);
      add(l, l.resnet.ptr());
    }
    if (i == n - 1) break;
    WanDownLayer l;
    l.downsampler = WanResample(dims[i + 1], c.temperal_downsample[i] ? M::kDownsample3d : M::kDownsample2d, opts);
    add(l, l.downsampler.ptr());
  }
  return layers;
}

}  // namespace

WanEncoder3dImpl::WanEncoder3dImpl(const WanVAEConfig& c, const at::TensorOptions& opts) {
  std::vector<int64_t> dims{c.base_dim};
  for (auto m : c.dim_mult) dims.push_back(c.base_dim * m);
  conv_in = register_module("conv_in", make_causal(c.in_channels, dims[0], {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, opts));
  auto blocks = register_module("down_blocks", List());
  const size_t n = c.dim_mult.size();
  if (!c.is_residual) down_layers = plain_down_layers(*blocks, c, dims, opts);
  for (size_t i = 0; c.is_residual && i < n; ++i) {
    const bool last = i == n - 1;
    down_blocks.push_back(blocks->add(
        std::to_string(i),
        WanResidualDownBlock(dims[i], dims[i + 1], c.num_res_blocks, !last && c.temperal_downsample[i], !last, opts)));
  }
  mid_block = register_module("mid_block", WanMidBlock(dims.back(), opts));
  norm_out = register_module("norm_out", WanRMSNorm(dims.back(), false, opts));
  conv_out = register_module("conv_out", make_causal(dims.back(), 2 * c.z_dim, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, opts));
}

at::Tensor WanEncoder3dImpl::forward(const at::Tensor& x, WanCausalCache& cache) const {
  at::Tensor h = conv_in->forward_cached(x, cache);
  for (const auto& b : down_blocks) h = b->forward(h, cache);
  for (const auto& l : down_layers) h = l.forward(h, cache);
  h = mid_block->forward(h, cache);
  return conv_out->forward_cached(at::silu(norm_out->forward(h)), cache);
}

WanDecoder3dImpl::WanDecoder3dImpl(const WanVAEConfig& c, const at::TensorOptions& opts) {
  const int64_t d = c.decoder_base_dim;
  std::vector<int64_t> dims{d * c.dim_mult.back()};
  for (auto it = c.dim_mult.rbegin(); it != c.dim_mult.rend(); ++it) dims.push_back(d * *it);
  conv_in = register_module("conv_in", make_causal(c.z_dim, dims[0], {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, opts));
  mid_block = register_module("mid_block", WanMidBlock(dims[0], opts));
  auto blocks = register_module("up_blocks", List());
  const size_t n = c.dim_mult.size();
  for (size_t i = 0; i < n; ++i) {
    const bool up = i != n - 1;
    const bool temporal = up && c.temperal_downsample[c.temperal_downsample.size() - 1 - i];  // reversed
    // Wan2.1's upsamplers halve the channels, so each stage after the first gets half its width in.
    const int64_t in = i > 0 && !c.is_residual ? dims[i] / 2 : dims[i];
    up_blocks.push_back(blocks->add(std::to_string(i),
                                    WanUpBlock(in, dims[i + 1], c.num_res_blocks, temporal, up, c.is_residual, opts)));
  }
  norm_out = register_module("norm_out", WanRMSNorm(dims.back(), false, opts));
  conv_out =
      register_module("conv_out", make_causal(dims.back(), c.out_channels, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, opts));
  conv_out->output_head = true;
}

at::Tensor WanDecoder3dImpl::forward(const at::Tensor& x, WanCausalCache& cache, bool first_chunk,
                                     const std::function<void(const std::string&, const at::Tensor&)>& record) const {
  at::Tensor h = conv_in->forward_cached(x, cache);  // [B, 4d, 1, h, w]
  record("decoder.conv_in", h);
  h = mid_block->forward(h, cache);
  record("decoder.mid_block", h);
  for (size_t i = 0; i < up_blocks.size(); ++i) {
    h = up_blocks[i]->forward(h, cache, first_chunk);  // frames x2 and pixels x2 per temporal/spatial stage
    record("decoder.up_blocks." + std::to_string(i), h);
  }
  if (cache.run) {  // the decode's kernel switches (no intermediates are recorded on this path)
    h = conv_out->forward_cached_norm_silu(h, *norm_out, cache);
    record("decoder.conv_out", h);
    return h;
  }
  h = norm_out->forward(h);
  record("decoder.norm_out", h);
  h = conv_out->forward_cached(at::silu(h), cache);  // [B, out_channels, 1 or 4, H/p, W/p]
  record("decoder.conv_out", h);
  return h;
}

// ---------------------------------------------------------------------------------------------------
// The autoencoder

at::Tensor wan_vae_patchify(const at::Tensor& x, int64_t p) {
  if (p == 1) return x;
  const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  return x.view({B, C, T, H / p, p, W / p, p})
      .permute({0, 1, 6, 4, 2, 3, 5})  // [B, C, pw, ph, T, h, w]
      .reshape({B, C * p * p, T, H / p, W / p});
}

at::Tensor wan_vae_unpatchify(const at::Tensor& x, int64_t p) {
  if (p == 1) return x;
  const int64_t B = x.size(0), C = x.size(1) / (p * p), T = x.size(2), h = x.size(3), w = x.size(4);
  return x.view({B, C, p, p, T, h, w})
      .permute({0, 1, 4, 5, 3, 6, 2})  // [B, C, T, h, ph, w, pw]
      .reshape({B, C, T, h * p, w * p});
}

AutoencoderKLWanImpl::AutoencoderKLWanImpl(const WanVAEConfig& c, const Precision& p) : config_(c), precision_(p) {
  const auto o = p.compute_opts();
  if (c.latents_mean.size() != static_cast<size_t>(c.z_dim) || c.latents_std.size() != static_cast<size_t>(c.z_dim))
    throw Error("vae: latents_mean/latents_std must have z_dim = " + std::to_string(c.z_dim) + " values");
  if (!c.attn_scales.empty() || c.temperal_downsample.size() + 1 != c.dim_mult.size())
    throw Error("vae: unsupported config (use WanVAEConfig::from_json to see which key)");
  encoder = register_module("encoder", WanEncoder3d(c, o));
  quant_conv = register_module("quant_conv", make_causal(2 * c.z_dim, 2 * c.z_dim, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, o));
  post_quant_conv =
      register_module("post_quant_conv", make_causal(c.z_dim, c.z_dim, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, o));
  decoder = register_module("decoder", WanDecoder3d(c, o));
}

void AutoencoderKLWanImpl::decode_chunks(const at::Tensor& z, Intermediates* inter,
                                         const std::function<void(const at::Tensor&)>& sink, const VaeRun* run,
                                         bool clamp) {
  const auto& c = config_;
  if (z.dim() != 5 || z.size(1) != c.z_dim || z.size(2) < 1 || z.size(3) < 1 || z.size(4) < 1)
    throw Error("vae decode: latents must be [B, " + std::to_string(c.z_dim) + ", T, h, w], got " + shape_str(z));
  // No NoGradGuard: the parameters of a loaded model never require grad, so inference builds no graph
  // (callers run under InferenceMode), and training (src/train) needs the graph.
  at::Tensor zc = z.to(precision_.compute_opts());
  if (channels_last(run)) zc = zc.contiguous(at::MemoryFormat::ChannelsLast3d);
  const at::Tensor x = post_quant_conv->forward(zc);  // [B, z, T, h, w]
  std::map<std::string, std::vector<at::Tensor>> parts;
  std::function<void(const std::string&, const at::Tensor&)> record = [&](const std::string& n, const at::Tensor& t) {
    if (inter) parts[n].push_back(t);
  };
  if (inter) (*inter)["post_quant_conv"] = x;
  WanCausalCache cache;
  cache.run = run;
  // The first latent frame alone, then one frame per chunk (the reference) or as the chunks point says: the
  // decoder is causal and carries its context, so a chunk of k frames computes what k chunks do.
  const int64_t frames = x.size(2);
  std::vector<int64_t> chunks;
  if (auto planned = run ? ext::first_taker(run->points().chunks, frames, *run) : std::nullopt) {
    chunks = std::move(*planned);
  } else {
    chunks.assign(static_cast<size_t>(frames), 1);
  }
  // A chunk runner may replay the steady chunks (the others, and every chunk without one, run eagerly).
  std::unique_ptr<ext::VaeChunkRunner> runner;
  if (run)
    for (const auto* make : run->points().chunk_runner)
      if ((runner = (*make)(*run))) break;
  int64_t i = 0;
  for (size_t k = 0; k < chunks.size(); ++k) {
    const int64_t n = chunks[k];
    cache.begin_chunk();
    const bool first = i == 0;
    const at::Tensor in = x.narrow(2, i, n);
    const std::function<at::Tensor(const at::Tensor&)> body = [&](const at::Tensor& t) {
      return decoder->forward(t, cache, first, record);
    };
    const at::Tensor out = runner ? runner->chunk(static_cast<int64_t>(k), in, cache, body) : body(in);
    i += n;
    ProfileScope ps("layout", [] { return ProfileDetail{"unpatchify, clamp, sink"}; });
    const at::Tensor px = wan_vae_unpatchify(out, c.patch_size);  // [B, 3, 1 or 4, H, W]
    // A replayed chunk's output is the runner's: the clamp (or a copy) makes the sink's own.
    sink(clamp ? px.clamp(-1.0, 1.0) : runner ? px.clone() : px);
  }
  if (inter)
    for (auto& [name, list] : parts) (*inter)[name] = at::cat(list, 2);
}

at::Tensor AutoencoderKLWanImpl::decode(const at::Tensor& z, Intermediates* inter, const VaeRun* run) {
  if (run && inter) throw Error("vae decode: intermediates are recorded on the reference path only");
  std::vector<at::Tensor> frames;
  decode_chunks(
      z, inter, [&](const at::Tensor& t) { frames.push_back(t); }, run);
  ProfileScope ps("layout");
  return at::cat(frames, 2);  // [B, 3, 1 + 4(T-1), H, W]
}

at::Tensor AutoencoderKLWanImpl::decode_unclamped(const at::Tensor& z) {
  std::vector<at::Tensor> frames;
  decode_chunks(
      z, nullptr, [&](const at::Tensor& t) { frames.push_back(t); }, nullptr, /*clamp=*/false);
  return at::cat(frames, 2);
}

void AutoencoderKLWanImpl::decode_streaming(const at::Tensor& z, const std::function<void(const at::Tensor&)>& sink) {
  decode_chunks(z, nullptr, sink);
}

std::pair<at::Tensor, at::Tensor> AutoencoderKLWanImpl::encode(const at::Tensor& video) {
  const auto& c = config_;
  const int64_t ft = c.scale_factor_temporal, fs = c.scale_factor_spatial;
  if (video.dim() != 5 || video.size(1) != c.video_channels())
    throw Error("vae encode: video must be [B, " + std::to_string(c.video_channels()) + ", T, H, W], got " +
                shape_str(video));
  const int64_t T = video.size(2), H = video.size(3), W = video.size(4);
  if (T < 1 || (T - 1) % ft != 0)
    throw Error("vae encode: frame count must be 1 + " + std::to_string(ft) + "k, got " + std::to_string(T));
  if (H < fs || W < fs || H % fs || W % fs)
    throw Error("vae encode: height and width must be positive multiples of " + std::to_string(fs) + ", got " +
                std::to_string(H) + "x" + std::to_string(W));
  const at::Tensor x =
      wan_vae_patchify(video.to(precision_.compute_opts()), c.patch_size);  // [B, in_channels, T, H/p, W/p]
  WanCausalCache cache;
  std::vector<at::Tensor> outs;
  for (int64_t start = 0; start < T;) {
    const int64_t n = start == 0 ? 1 : ft;  // frame chunks [0], [1..4], [5..8], ...
    cache.begin_chunk();
    outs.push_back(encoder->forward(x.narrow(2, start, n), cache));
    start += n;
  }
  const at::Tensor enc = quant_conv->forward(at::cat(outs, 2));  // [B, 2z, 1 + k, H/16, W/16]
  return {enc.narrow(1, 0, c.z_dim), enc.narrow(1, c.z_dim, c.z_dim).clamp(-30.0, 20.0)};
}

at::Tensor AutoencoderKLWanImpl::normalize(const at::Tensor& mu) const {
  // As the pipelines do: (mu - mean) * (1 / std), the tables in mu's dtype.
  if (mu.dim() != 5 || mu.size(1) != config_.z_dim)
    throw Error("vae normalize: latents must be [B, " + std::to_string(config_.z_dim) + ", T, h, w], got " +
                shape_str(mu));
  const auto o = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor mean = at::tensor(config_.latents_mean, at::kDouble).to(o).view({1, -1, 1, 1, 1});
  const at::Tensor inv_std = 1.0 / at::tensor(config_.latents_std, at::kDouble).to(o).view({1, -1, 1, 1, 1});
  return (mu - mean.to(mu.options())) * inv_std.to(mu.options());
}

at::Tensor AutoencoderKLWanImpl::denormalize(const at::Tensor& z) const {
  // As the pipelines do: z / (1 / std) + mean, the tables in z's dtype.
  if (z.dim() != 5 || z.size(1) != config_.z_dim)
    throw Error("vae denormalize: latents must be [B, " + std::to_string(config_.z_dim) + ", T, h, w], got " +
                shape_str(z));
  const auto o = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor mean = at::tensor(config_.latents_mean, at::kDouble).to(o).view({1, -1, 1, 1, 1});
  const at::Tensor inv_std = 1.0 / at::tensor(config_.latents_std, at::kDouble).to(o).view({1, -1, 1, 1, 1});
  return z / inv_std.to(z.options()) + mean.to(z.options());
}

// ---------------------------------------------------------------------------------------------------
// Golden verification (declared in verify.h)

void verify_vae(const GoldenPair& p, const VerifyOptions& o, VerifyReport& rep) {
  AutoencoderKLWan vae = load_golden_vae(p.weights_json, p.weights, o.precision.device);
  const auto io = TensorSource::open(p.io);
  const auto dev = o.precision.device;
  at::InferenceMode guard;
  if (io.contains("z")) {
    Intermediates inter;
    const at::Tensor decoded = vae->decode(io.tensor("z").to(dev), &inter);
    if (io.contains("decoded"))
      rep.rows.push_back(compare(p.name, "decoded", decoded, io.tensor("decoded"), o.tolerance));
    for (const auto& name : io.names()) {
      if (name.rfind("inter.", 0) != 0) continue;
      auto it = inter.find(name.substr(6));
      if (it == inter.end()) {
        rep.rows.push_back({p.name, name, std::numeric_limits<double>::infinity(), 0, o.tolerance, false});
        continue;
      }
      rep.rows.push_back(compare(p.name, name, it->second, io.tensor(name), o.tolerance));
    }
  }
  if (io.contains("video")) {
    const at::Tensor video = io.tensor("video").to(dev);
    if (io.contains("encoded_mean") || io.contains("encoded_logvar")) {
      const auto [mean, logvar] = vae->encode(video);
      if (io.contains("encoded_mean"))
        rep.rows.push_back(compare(p.name, "encoded_mean", mean, io.tensor("encoded_mean"), o.tolerance));
      if (io.contains("encoded_logvar"))
        rep.rows.push_back(compare(p.name, "encoded_logvar", logvar, io.tensor("encoded_logvar"), o.tolerance));
    }
    if (io.contains("image_encoded_mean")) {
      const at::Tensor mean = vae->encode(video.narrow(2, 0, 1)).first;
      rep.rows.push_back(compare(p.name, "image_encoded_mean", mean, io.tensor("image_encoded_mean"), o.tolerance));
    }
  }
}

}  // namespace autooptim::runtime
