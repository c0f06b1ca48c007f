#include "train/checkpoint_io.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "runtime/models.h"
#include "runtime/safetensors.h"

namespace fs = std::filesystem;

namespace autooptim::train {
namespace {

void write_text(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) throw Error(tmp.string() + ": cannot write");
    f << bytes;
    if (!f) throw Error(tmp.string() + ": write failed");
  }
  fs::rename(tmp, path);
}

void write_tensors(const fs::path& path, const torch::nn::Module& m) {
  fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + ".tmp";
  runtime::write_safetensors(tmp.string(), named_tensors(m), {{"format", "pt"}});
  fs::rename(tmp, path);
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> named_tensors(const torch::nn::Module& m) {
  std::vector<std::pair<std::string, at::Tensor>> v;
  for (const auto& p : m.named_parameters(true))
    v.emplace_back(p.key(), p.value().detach().to(at::kCPU, at::kFloat).contiguous());
  return v;
}

void write_tiny_checkpoint(const std::string& dir_in, const TinyCheckpoint& c) {
  if (!c.transformer || !c.vae || !c.text_encoder) throw Error("write_tiny_checkpoint: a component is missing");
  const fs::path dir(dir_in);
  const nlohmann::json index = {{"_class_name", "WanPipeline"},
                                {"_diffusers_version", "0.35.0"},
                                {"expand_timesteps", true},
                                {"boundary_ratio", nullptr},
                                {"transformer_2", {nullptr, nullptr}},
                                {"scheduler", {"diffusers", "UniPCMultistepScheduler"}},
                                {"text_encoder", {"transformers", "UMT5EncoderModel"}},
                                {"tokenizer", {"transformers", "T5TokenizerFast"}},
                                {"transformer", {"diffusers", "WanTransformer3DModel"}},
                                {"vae", {"diffusers", "AutoencoderKLWan"}}};
  write_tensors(dir / "transformer" / "diffusion_pytorch_model.safetensors", *c.transformer);
  write_text(dir / "transformer" / "config.json", c.transformer_config.to_json().dump(2) + "\n");
  write_tensors(dir / "vae" / "diffusion_pytorch_model.safetensors", *c.vae);
  write_text(dir / "vae" / "config.json", c.vae_config.to_json().dump(2) + "\n");
  write_tensors(dir / "text_encoder" / "model.safetensors", *c.text_encoder);
  write_text(dir / "text_encoder" / "config.json", c.text_config.to_json().dump(2) + "\n");
  write_text(dir / "tokenizer" / "spiece.model", runtime::tiny_tokenizer_model());
  write_text(dir / "scheduler" / "scheduler_config.json", c.scheduler.to_json().dump(2) + "\n");
  write_text(dir / "model_index.json", index.dump(2) + "\n");  // last: the folder is complete when it exists
}

}  // namespace autooptim::train
