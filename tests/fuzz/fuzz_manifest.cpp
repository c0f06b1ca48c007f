// libFuzzer target: the manifest parser on arbitrary file contents. Every input is a manifest or an
// autooptim::Error; an accepted one must survive its own canonical form (parse(to_json(m)) hashes the
// same). Anything else is a finding.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "gates/manifest.h"
#include "base/error.h"

namespace {

const std::string& scratch_path() {
  static const std::string p = "/tmp/autooptim-fuzz-manifest-" + std::to_string(::getpid()) + ".json";
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autooptim::gates;
  const int fd = ::open(scratch_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  if (size && ::write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  ::close(fd);
  try {
    const Manifest m = load_manifest(scratch_path());
    const Manifest again = parse_manifest(to_json(m), "canonical form");
    if (manifest_hash(again) != manifest_hash(m)) std::abort();
    (void)to_runtime_options(m);
    (void)technique_flags_set(m);
    (void)with_flags_off(m);
  } catch (const autooptim::Error&) {
  }
  return 0;
}
