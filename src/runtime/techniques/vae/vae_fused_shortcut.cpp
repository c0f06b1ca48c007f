// Kernel technique (VAE decoder): the up blocks' DupUp3D shortcut (each input channel repeated and
// unfolded into 2x frames and 2x2 pixels) added in place into the upsampler's output by one CUDA pass
// (vae_dup_up_add.cu). Unfused, the shortcut is materialised by an expand copy and a permute copy of the
// output's size and the sum is a third tensor. The sum is rounded once, as at::add rounds it: the output
// is the unfused one (tests/runtime/test_gpu_kernels.cpp checks bit-identity).
#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_fused_shortcut_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_fused_shortcut) {
  Technique t;
  t.name = "vae_fused_shortcut";
  t.family = "kernel";
  t.lossless = true;  // the same bf16 sum, element for element
  t.summary =
      "VAE up blocks: the DupUp3D shortcut added in place in one CUDA pass (vae_dup_up_add.cu), bf16 on the GPU";
  t.flags = {bool_flag("vae_fused_shortcut", field(&VaeFusedShortcutOptions::on),
                       "VAE DupUp3D shortcut + residual add in one CUDA pass")};
  t.switch_flag = "vae_fused_shortcut";
  t.hooks = {"vae.up_block"};
  t.engagement = {{"kernel.vae_fused_shortcut.launches",
                   "vae_fused_shortcut is on but no fused add ran (needs a CUDA build and the VAE in bf16: vae_bf16)"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"vae_fused_shortcut", {{"vae_bf16", true}, {"vae_fused_shortcut", true}}}}
                 : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "runtime/profile.h"
#include "runtime/techniques/kernel/fused_common.h"
#include "runtime/techniques/vae/vae_ops.h"

namespace autooptim::runtime::techniques {

bool vae_dup_up_add_applies(const VaeRun* run, const at::Tensor& h, const at::Tensor& x) {
  return run && run->options && run->options->of<VaeFusedShortcutOptions>().on && fused::gpu_bf16(h) &&
         fused::gpu_bf16(x) && h.dim() == 5 && x.dim() == 5 && h.device() == x.device();
}

void vae_dup_up_add_(const VaeRun& run, at::Tensor& h, const at::Tensor& x, int64_t ft, bool first_chunk) {
  const int64_t C = h.size(1), Ci = x.size(1);
  const int64_t t_shift = first_chunk && ft > 1 ? ft - 1 : 0;
  if (h.size(0) != x.size(0) || h.size(2) + t_shift != x.size(2) * ft || h.size(3) != 2 * x.size(3) ||
      h.size(4) != 2 * x.size(4) || (C * ft * 4) % Ci != 0)
    throw Error("vae_fused_shortcut: the shortcut's input does not match the block's output");
  ProfileScope ps("norm_elementwise");
#ifdef AUTOOPTIM_WITH_CUDA
  cuda::DupUpShape s{};
  s.B = h.size(0);
  s.C = C;
  s.T = h.size(2);
  s.H = h.size(3);
  s.W = h.size(4);
  for (int d = 0; d < 5; ++d) {
    s.hs[d] = h.stride(d);
    s.xs[d] = x.stride(d);
  }
  s.ft = ft;
  s.repeats = C * ft * 4 / Ci;
  s.t_shift = t_shift;
  fused::check(cuda::launch_vae_dup_up_add(h.data_ptr(), x.data_ptr(), s, fused::stream()), "vae_fused_shortcut");
#else
  throw Error("vae_fused_shortcut: this build has no CUDA kernels");
#endif
  run.count("kernel.vae_fused_shortcut.launches");
}

AUTOOPTIM_EXTENSIONS(vae_fused_shortcut) {
  points.vae_shortcut.add({"vae_fused_shortcut", 10,
                           [](const RuntimeOptions& o) { return o.of<VaeFusedShortcutOptions>().on; },
                           [](at::Tensor& h, const at::Tensor& x, int64_t ft, bool first_chunk,
                              const VaeRun& run) -> std::optional<ext::Done> {
                             if (!vae_dup_up_add_applies(&run, h, x)) return std::nullopt;
                             vae_dup_up_add_(run, h, x, ft, first_chunk);
                             return ext::Done{};
                           }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
