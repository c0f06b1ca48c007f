#pragma once
// Architecture pieces several model entries share, written as the diffusers config.json values (one
// definition each, so a tiny variant and its full-size model cannot drift apart by a copied key).
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace autooptim::models {

// The tiny models' transformer: 4 layers of 4 heads x 24 (rope split 8/8/8), 16 latent channels in and out,
// a 64-wide text.
nlohmann::json tiny_transformer();
// The tiny models' 2-layer UMT5 over the embedded 512-piece vocabulary.
nlohmann::json tiny_text_encoder();
// The tiny models' latent statistics (16 channels): smooth, not measured.
std::vector<double> tiny_latents_mean();
std::vector<double> tiny_latents_std();
// The Wan2.1 VAE (is_residual false: plain residual blocks, 8x spatial, 4x temporal, no patchify) at a width.
nlohmann::json wan21_vae(int64_t base_dim, int64_t num_res_blocks, const std::vector<double>& latents_mean,
                         const std::vector<double>& latents_std);

}  // namespace autooptim::models
