// Golden verification of the whole pipeline (text- and image-to-video from given prompt embeddings):
// pipeline_* pairs use the transformer of <name>_weights and the VAE of the vae_*_weights pair
// named in the weights json ("vae": "vae_tiny_weights ...").
#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint.h"
#include "runtime/error.h"
#include "runtime/verify.h"
#include "runtime/wan_pipeline.h"

namespace fs = std::filesystem;

namespace autooptim::runtime {

void verify_pipeline(const GoldenPair& p, const VerifyOptions& o, VerifyReport& rep) {
  const auto wj = read_json_file(p.weights_json);
  const auto ij = read_json_file(p.io_json);
  if (!wj.contains("config")) throw CheckpointError(p.weights_json + ": no 'config' object");
  const fs::path dir = fs::path(p.weights).parent_path();
  std::string vae_name = "vae_tiny_weights";
  if (wj.contains("vae") && wj["vae"].is_string()) vae_name = wj["vae"].get<std::string>().substr(0, wj["vae"].get<std::string>().find(' '));
  const auto vj = read_json_file((dir / (vae_name + ".json")).string());
  if (!vj.contains("config")) throw CheckpointError((dir / (vae_name + ".json")).string() + ": no 'config' object");

  WanTransformer3DModel transformer(WanTransformerConfig::from_json(wj["config"]), o.precision);
  load_strict(*transformer, TensorSource::open(p.weights));
  AutoencoderKLWan vae(WanVAEConfig::from_json(vj["config"]), Precision{at::kFloat, o.precision.device});
  load_strict(*vae, TensorSource::open((dir / (vae_name + ".safetensors")).string()));

  const auto settings = ij.value("settings", nlohmann::json::object());
  UniPCConfig sc;
  sc.flow_shift = settings.value("flow_shift", 5.0);
  WanPipeline pipe(transformer, vae, nullptr, nullptr, sc, o.precision);

  const auto io = TensorSource::open(p.io);
  DenoiseInputs in;
  in.latents = io.tensor("initial_latents");
  in.prompt_embeds = io.tensor("prompt_embeds");
  in.negative_embeds = io.tensor("negative_prompt_embeds");
  in.steps = settings.value("num_inference_steps", int64_t{50});
  in.guidance = settings.value("guidance_scale", 5.0);

  std::vector<at::Tensor> per_step;
  const at::Tensor t2v = pipe.denoise(in, &per_step);
  rep.rows.push_back(compare(p.name, "t2v_final_latents", t2v, io.tensor("t2v_final_latents"), o.tolerance));
  if (io.contains("t2v_latents_per_step"))
    rep.rows.push_back(compare(p.name, "t2v_latents_per_step", at::stack(per_step), io.tensor("t2v_latents_per_step"), o.tolerance));
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
      rep.rows.push_back(compare(p.name, "i2v_latents_per_step", at::stack(per_step), io.tensor("i2v_latents_per_step"), o.tolerance));
  }
}

}  // namespace autooptim::runtime
