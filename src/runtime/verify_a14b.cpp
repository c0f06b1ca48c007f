// Golden verification of the two-expert pipelines (Wan2.2-T2V-A14B / I2V-A14B at tiny sizes): an
// a14b_pipeline pair whose io json names, per mode, the two experts' weight files and the boundary ratio,
// and the Wan2.1 VAE's weights ("vae"). Per-step latents check that each step ran the expert the
// boundary gives it with that expert's guidance scale.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "runtime/checkpoint.h"
#include "runtime/config_json.h"
#include "runtime/verify.h"
#include "runtime/wan_pipeline.h"

namespace fs = std::filesystem;

namespace autooptim::runtime {
namespace {

// A file named by the io json, in the golden folder: [A-Za-z0-9._-], no leading dot.
fs::path named_file(const std::string& json_path, const nlohmann::json& name, const std::string& what) {
  const std::string n = name.is_string() ? name.get<std::string>() : "";
  if (n.empty() || n[0] == '.' || n.size() > 128 ||
      n.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != std::string::npos)
    throw CheckpointError(json_path + ": '" + what + "' must name a file in the same folder ([A-Za-z0-9._-])");
  return fs::path(json_path).parent_path() / n;
}

WanTransformer3DModel load_expert(const fs::path& stem, const Precision& p) {
  const std::string json = stem.string() + ".json";
  const auto wj = read_json_file(json);
  if (!wj.contains("config")) throw CheckpointError(json + ": no 'config' object");
  WanTransformer3DModel m(with_config_file(json, [&] { return WanTransformerConfig::from_json(wj["config"]); }), p);
  load_strict(*m, TensorSource::open(stem.string() + ".safetensors"));
  return m;
}

AutoencoderKLWan load_vae(const fs::path& stem, const at::Device& device) {
  const std::string json = stem.string() + ".json";
  const auto vj = read_json_file(json);
  if (!vj.contains("config")) throw CheckpointError(json + ": no 'config' object");
  AutoencoderKLWan vae(with_config_file(json, [&] { return WanVAEConfig::from_json(vj["config"]); }),
                       Precision{at::kFloat, device});
  load_strict(*vae, TensorSource::open(stem.string() + ".safetensors"));
  return vae;
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
  WanTransformer3DModel high = load_expert(named_file(p.io_json, m["weights"][0], mode + ".weights"), o.precision);
  WanTransformer3DModel low = load_expert(named_file(p.io_json, m["weights"][1], mode + ".weights"), o.precision);
  AutoencoderKLWan vae = load_vae(named_file(p.io_json, ij.value("vae", nlohmann::json()), "vae"), o.precision.device);
  WanPipeline pipe(high, vae, nullptr, nullptr, sc, o.precision);
  pipe.set_spec(PipelineSpec{false, m["boundary_ratio"].get<double>()}, low);

  const auto io = TensorSource::open(p.io);
  DenoiseInputs in = shared_inputs(io, settings, p.io_json);
  if (mode == "i2v") in.condition = pipe.encode_condition(io.tensor(mode + "_image"), in.latents.size(2) * 4 - 3);
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
