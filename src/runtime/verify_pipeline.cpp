// Golden verification of the whole pipeline (text- and image-to-video from given prompt embeddings):
// pipeline_* pairs use the transformer of <name>_weights and the VAE of the vae_*_weights pair
// named in the weights json ("vae": "vae_tiny_weights ...").
#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint.h"
#include "runtime/config_json.h"
#include "base/error.h"
#include "runtime/verify.h"
#include "runtime/wan_pipeline.h"

namespace fs = std::filesystem;

namespace autooptim::runtime {

void verify_pipeline(const GoldenPair& p, const VerifyOptions& o, VerifyReport& rep) {
  const auto wj = read_json_file(p.weights_json);
  const auto ij = read_json_file(p.io_json);
  std::string vae_name = "vae_tiny_weights";
  if (wj.contains("vae") && wj["vae"].is_string())
    vae_name = wj["vae"].get<std::string>().substr(0, wj["vae"].get<std::string>().find(' '));
  const std::string vae_stem = golden_sibling(p.weights_json, vae_name, "vae");
  WanTransformer3DModel transformer = load_golden_transformer(p.weights_json, p.weights, o.precision);
  AutoencoderKLWan vae = load_golden_vae(vae_stem + ".json", vae_stem + ".safetensors", o.precision.device);

  const auto settings = ij.value("settings", nlohmann::json::object());
  if (!settings.is_object()) throw CheckpointError(p.io_json + ": 'settings' must be an object");
  const ConfigReader read_settings(settings, p.io_json + ": settings");
  UniPCConfig sc;
  read_settings.read("flow_shift", sc.flow_shift);
  read_settings.positive_finite("flow_shift", sc.flow_shift);
  WanPipeline pipe(transformer, vae, nullptr, nullptr, sc, o.precision);

  const auto io = TensorSource::open(p.io);
  DenoiseInputs in;
  in.latents = io.tensor("initial_latents");
  in.prompt_embeds = io.tensor("prompt_embeds");
  in.negative_embeds = io.tensor("negative_prompt_embeds");
  in.steps = 50;
  in.guidance = 5.0;
  read_settings.read("num_inference_steps", in.steps);
  read_settings.dimension("num_inference_steps", in.steps, 1000);
  read_settings.read("guidance_scale", in.guidance);
  if (!(in.guidance >= 0 && in.guidance <= 50)) read_settings.fail("guidance_scale", "must be in [0, 50]");

  std::vector<at::Tensor> per_step;
  const at::Tensor t2v = pipe.denoise(in, &per_step);
  rep.rows.push_back(compare(p.name, "t2v_final_latents", t2v, io.tensor("t2v_final_latents"), o.tolerance));
  if (io.contains("t2v_latents_per_step"))
    rep.rows.push_back(
        compare(p.name, "t2v_latents_per_step", at::stack(per_step), io.tensor("t2v_latents_per_step"), o.tolerance));
  if (io.contains("t2v_video")) {
    // Decode the reference's own final latents too, so a decode error is not hidden by the loop's.
    const at::Tensor video = pipe.decode(t2v).permute({0, 2, 1, 3, 4});  // [B, T, 3, H, W]
    rep.rows.push_back(compare(p.name, "t2v_video", video, io.tensor("t2v_video"), o.tolerance));
  }
  if (io.contains("i2v_image")) {
    in.condition = pipe.encode_image(io.tensor("i2v_image"));
    per_step.clear();
    const at::Tensor i2v = pipe.denoise(in, &per_step);
    rep.rows.push_back(compare(p.name, "i2v_final_latents", i2v, io.tensor("i2v_final_latents"), o.tolerance));
    if (io.contains("i2v_latents_per_step"))
      rep.rows.push_back(
          compare(p.name, "i2v_latents_per_step", at::stack(per_step), io.tensor("i2v_latents_per_step"), o.tolerance));
  }
}

}  // namespace autooptim::runtime
