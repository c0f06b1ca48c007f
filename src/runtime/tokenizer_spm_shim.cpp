// The one translation unit that touches SentencePiece, built as its own module (libautooptim_spm.so)
// behind a C interface. Debian's libsentencepiece bundles and exports protobuf-lite 3.14, and libtorch
// loads libprotobuf 3.21: linked into one process they bind each other's symbols and abort at start-up.
// tokenizer.cpp loads this module with RTLD_LOCAL | RTLD_DEEPBIND so SentencePiece binds its own copy.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#define AOSPM_API extern "C" __attribute__((visibility("default")))

namespace {

void set_error(char* err, size_t cap, const std::string& msg) {
  if (!err || cap == 0) return;
  const size_t n = std::min(cap - 1, msg.size());
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

}  // namespace

// A processor for the serialized ModelProto bytes, or nullptr with the reason in err.
AOSPM_API void* aospm_load(const char* bytes, size_t n, char* err, size_t err_cap) {
  try {
    auto* sp = new sentencepiece::SentencePieceProcessor();
    const auto st = sp->LoadFromSerializedProto(std::string(bytes, n));
    if (!st.ok()) {
      set_error(err, err_cap, st.ToString());
      delete sp;
      return nullptr;
    }
    return sp;
  } catch (const std::exception& e) {
    set_error(err, err_cap, e.what());
  } catch (...) {
    set_error(err, err_cap, "unknown error");
  }
  return nullptr;
}

AOSPM_API void aospm_free(void* h) { delete static_cast<sentencepiece::SentencePieceProcessor*>(h); }

// Piece ids of text (no EOS) into out[0..cap); returns how many there are (call again with a larger
// buffer when that exceeds cap), or -1 with the reason in err.
AOSPM_API long aospm_encode(const void* h, const char* text, size_t n, int* out, size_t cap, char* err,
                            size_t err_cap) {
  try {
    std::vector<int> ids;
    const auto st = static_cast<const sentencepiece::SentencePieceProcessor*>(h)->Encode(std::string(text, n), &ids);
    if (!st.ok()) {
      set_error(err, err_cap, st.ToString());
      return -1;
    }
    std::copy_n(ids.begin(), std::min(cap, ids.size()), out);
    return static_cast<long>(ids.size());
  } catch (const std::exception& e) {
    set_error(err, err_cap, e.what());
  } catch (...) {
    set_error(err, err_cap, "unknown error");
  }
  return -1;
}

// what: 0 piece count, 1 eos id, 2 pad id (-1 when the model has none).
AOSPM_API int aospm_info(const void* h, int what) {
  const auto* sp = static_cast<const sentencepiece::SentencePieceProcessor*>(h);
  switch (what) {
    case 0:
      return sp->GetPieceSize();
    case 1:
      return sp->eos_id();
    case 2:
      return sp->pad_id();
    default:
      return -1;
  }
}
