// libFuzzer target: the component config readers (transformer, VAE, UMT5, scheduler) on arbitrary
// file contents, as read_json_file and the golden folder's {"config": ...} files give them. Every input
// is a config or an autooptim::Error (type errors, missing keys, out-of-range values, deep nesting);
// anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/error.h"
#include "base/json_read.h"
#include "runtime/umt5.h"
#include "runtime/unipc_scheduler.h"
#include "runtime/wan_transformer.h"
#include "runtime/wan_vae.h"

namespace {

template <typename F>
void refused_or_read(F&& f) {
  try {
    f();
  } catch (const autooptim::Error&) {
  }
}

void read_all(const nlohmann::json& j) {
  using namespace autooptim::runtime;
  refused_or_read([&] { (void)WanTransformerConfig::from_json(j).dim(); });
  refused_or_read([&] { (void)WanVAEConfig::from_json(j).video_channels(); });
  refused_or_read([&] { (void)UMT5Config::from_json(j).inner_dim(); });
  refused_or_read([&] { (void)UniPCConfig::from_json(j).to_json(); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j;
  try {
    j = autooptim::runtime::parse_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const autooptim::Error&) {
    return 0;
  }
  read_all(j);
  if (j.is_object() && j.contains("config")) read_all(j["config"]);
  return 0;
}
