#pragma once
// The prompt side of the text encoder: diffusers' Wan prompt cleaning and the umt5 SentencePiece
// tokenizer with T5's conventions (</s> = 1 appended, no BOS, <pad> = 0). SentencePiece itself is
// reached through the libautooptim_spm module (see tokenizer_spm_shim.cpp for why it is not linked).
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace autooptim::runtime {

class Tokenizer {
 public:
  // A spiece.model file (the checkpoint's tokenizer/ folder holds one). Error when missing or unreadable.
  static Tokenizer load(const std::string& spiece_model_path);
  // The bytes of a serialized ModelProto. Error when they do not parse.
  static Tokenizer from_serialized(const std::string& model_proto_bytes);

  // Token ids of text with </s> appended; text is taken as is (clean it with clean_prompt first).
  std::vector<int64_t> encode(const std::string& text) const;
  int64_t vocab_size() const;
  int64_t pad_id() const { return pad_id_; }
  int64_t eos_id() const { return eos_id_; }

 private:
  Tokenizer(const std::string& model_proto_bytes, const std::string& label);
  std::shared_ptr<void> sp_;  // the module's processor; shared: encoding is const and thread-safe
  int64_t pad_id_ = 0, eos_id_ = 1;
};

// diffusers' prompt_clean: ftfy.fix_text (if installed), html.unescape twice, strip, collapse runs of
// whitespace to one space, strip. ftfy is not available in C++ and is skipped: prompts with mojibake
// are not repaired (the reference without ftfy installed behaves the same). Whitespace is Python's
// str.isspace set (Unicode spaces included, e.g. the U+00A0 that &nbsp; unescapes to).
std::string clean_prompt(const std::string& text);

// Python's html.unescape for the entities prompts carry: numeric references (decimal and hex, with
// the HTML5 replacements for invalid code points and the Windows-1252 range) and a table of common
// named entities; unknown names are left as they are.
std::string html_unescape(const std::string& text);

struct TokenizedPrompts {
  at::Tensor input_ids;          // [B, max_length] int64, pad id after each prompt
  at::Tensor attention_mask;     // [B, max_length] int64, 1 on real tokens (EOS included)
  std::vector<int64_t> lengths;  // real tokens per prompt, EOS included, <= max_length
};

// Cleans and encodes each prompt, then pads to max_length. Truncation follows transformers'
// T5TokenizerFast(truncation=True, max_length): the text's pieces are cut to max_length - 1 and </s>
// is appended, so a truncated prompt still ends with EOS and the model sees exactly max_length tokens.
TokenizedPrompts tokenize_prompts(const Tokenizer& tok, const std::vector<std::string>& prompts,
                                  int64_t max_length = 512);

}  // namespace autooptim::runtime
