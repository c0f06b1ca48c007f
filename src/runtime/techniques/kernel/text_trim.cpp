// Kernel technique: the text encoder runs over the prompt's own tokens. The pipeline pads every prompt to
// 512 tokens and the reference encodes all of them, though the padding is masked out of every real
// token's attention and its output rows are zeroed afterwards. Encoding only the longest prompt's tokens
// (EOS included) and padding the output with the same zeros gives the same embedding up to the order of
// floating-point sums. On the tiny model on the CPU it saves ~4% of a clip in the gates (0.06 s of 1.6 s
// for the prompt and the negative prompt, 1.04x); on TI2V-5B's umt5-xxl on a GPU a small part of a clip.
// The encoder's trimmed form is encode_prompts(trim) in runtime/umt5.cpp; this file switches the pipeline's
// text-encoding point to it and names the counter of the rows saved.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/text_trim_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(text_trim) {
  Technique t;
  t.name = "text_trim";
  t.family = "kernel";
  t.lossless = true;
  t.summary = "the text encoder runs over the prompt's own tokens, not the 512 padded ones";
  t.flags = {bool_flag("text_trim", field(&TextTrimOptions::on),
                       "encode only the prompt's tokens (the padding is masked and zeroed anyway)")};
  t.switch_flag = "text_trim";
  t.hooks = {"pipeline.encode_text"};
  t.engagement = {{"kernel.text_trim.tokens_saved", "text_trim is on but every prompt was encoded at full length"}};
  t.search = [](const SearchContext&) { return std::vector<SearchPoint>{{"text_trim", {{"text_trim", true}}}}; };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_EXTENSIONS(text_trim) {
  points.text_encoding.add({"text_trim", 10, [](const RuntimeOptions& o) { return o.of<TextTrimOptions>().on; },
                            ext::TextEncoding{true, "kernel.text_trim.tokens_saved"}});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
