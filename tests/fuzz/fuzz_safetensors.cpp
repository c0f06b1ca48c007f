// libFuzzer target: the safetensors reader on arbitrary bytes. Every input either opens, with every
// tensor readable and sized as its header says, or is refused with a CheckpointError; anything else
// (a crash, a read outside the file, another exception type, a hang) is a finding.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "runtime/safetensors.h"

namespace {

const std::string& scratch_path() {
  static const std::string p = "/tmp/autooptim-fuzz-safetensors-" + std::to_string(::getpid());
  return p;
}

void write_file(const uint8_t* data, size_t size) {
  const int fd = ::open(scratch_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n <= 0) std::abort();
    data += n;
    size -= static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autooptim::runtime;
  write_file(data, size);
  try {
    const auto f = SafetensorsFile::open(scratch_path());
    for (const auto& name : f->names()) {
      const TensorInfo& i = f->info(name);
      const at::Tensor t = f->tensor(name);
      if (static_cast<uint64_t>(t.numel()) * element_size(i.dtype) != i.end - i.begin) std::abort();
      if (t.numel() > 0 && t.scalar_type() == at::kByte) (void)t.sum().item<int64_t>();  // touch the bytes
    }
  } catch (const autooptim::CheckpointError&) {
  }
  return 0;
}
