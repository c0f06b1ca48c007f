// Golden verification of the two-expert pipelines (Wan2.2-T2V-A14B / I2V-A14B at tiny sizes): an
// a14b_pipeline pair whose io json names, per mode, the two experts' weight files and the boundary ratio,
// and the Wan2.1 VAE's weights ("vae"). Per-step latents check that each step ran the expert the
// boundary gives it with that expert's guidance scale.
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "runtime/checkpoint.h"
#include "runtime/config_json.h"
#include "runtime/verify.h"
#include "runtime/wan_pipeline.h"

namespace autooptim::runtime {
namespace {

// A file the io json names beside itself (a JSON string; anything else is refused as an invalid name).
std::string named_stem(const std::string& json_path, const nlohmann::json& name, const std::string& what) {
  return golden_sibling(json_path, name.is_string() ? name.get<std::string>() : "", what);
}

// The inputs every mode shares: embeddings, initial noise, steps and both guidance scales.
DenoiseInputs shared_inputs(const TensorSource& io, const nlohmann::json& settings, const std::string& where) {
  const ConfigReader read(settings, where + ": settings");
  DenoiseInputs in;
  in.latents = io.tensor("initial_latents");
  in.prompt_embeds = io.tensor("prompt_embeds");
  in.negative_embeds = io.tensor("negative_prompt_embeds");
  read.read("num_inference_steps", in.steps);
  read.dimension("num_inference_steps", in.steps, 1000);
  read.read("guidance_scale", in.guidance);
  double g2 = in.guidance;
  read.read("guidance_scale_2", g2);
  if (!(in.guidance >= 0 && in.guidance <= 50 && g2 >= 0 && g2 <= 50))
    read.fail("guidance_scale", "and guidance_scale_2 must be in [0, 50]");
  in.guidance_2 = g2;
  return in;
}

// One mode ("t2v" or "i2v"): its two experts, boundary and reference outputs.
void verify_mode(const GoldenPair& p, const VerifyOptions& o, const nlohmann::json& ij, const std::string& mode,
                 VerifyReport& rep) {
  const auto& m = ij.at(mode);
  if (!m.contains("weights") || !m["weights"].is_array() || m["weights"].size() != 2 || !m.contains("boundary_ratio"))
    throw CheckpointError(p.io_json + ": '" + mode + "' needs 'weights' (two experts) and 'boundary_ratio'");
  const auto settings = ij.value("settings", nlohmann::json::object());
  UniPCConfig sc;
  ConfigReader(settings, p.io_json + ": settings").read("flow_shift", sc.flow_shift);
  auto expert = [&](int i) {
    const std::string stem = named_stem(p.io_json, m["weights"][i], mode + ".weights");
    return load_golden_transformer(stem + ".json", stem + ".safetensors", o.precision);
  };
  WanTransformer3DModel high = expert(0), low = expert(1);
  const std::string vae_stem = named_stem(p.io_json, ij.value("vae", nlohmann::json()), "vae");
  AutoencoderKLWan vae = load_golden_vae(vae_stem + ".json", vae_stem + ".safetensors", o.precision.device);
  WanPipeline pipe(high, vae, nullptr, nullptr, sc, o.precision);
  pipe.set_spec(PipelineSpec{false, m["boundary_ratio"].get<double>()}, low);

  const auto io = TensorSource::open(p.io);
  DenoiseInputs in = shared_inputs(io, settings, p.io_json);
  if (mode == "i2v") {  // the clip's frames from its latent frames
    const int64_t frames = (in.latents.size(2) - 1) * vae->config().scale_factor_temporal + 1;
    in.condition = pipe.encode_condition(io.tensor(mode + "_image"), frames);
  }
  std::vector<at::Tensor> per_step;
  const at::Tensor final_latents = pipe.denoise(in, &per_step);
  rep.rows.push_back(
      compare(p.name, mode + "_final_latents", final_latents, io.tensor(mode + "_final_latents"), o.tolerance));
  if (io.contains(mode + "_latents_per_step"))
    rep.rows.push_back(compare(p.name, mode + "_latents_per_step", at::stack(per_step),
                               io.tensor(mode + "_latents_per_step"), o.tolerance));
  if (io.contains(mode + "_video")) {
    const at::Tensor video = pipe.decode(final_latents).permute({0, 2, 1, 3, 4});  // [B, T, 3, H, W]
    rep.rows.push_back(compare(p.name, mode + "_video", video, io.tensor(mode + "_video"), o.tolerance));
  }
}

}  // namespace

void verify_a14b_pipeline(const GoldenPair& p, const VerifyOptions& o, VerifyReport& rep) {
  const auto ij = read_json_file(p.io_json);
  for (const char* mode : {"t2v", "i2v"})
    if (ij.contains(mode)) verify_mode(p, o, ij, mode, rep);
}

}  // namespace autooptim::runtime
