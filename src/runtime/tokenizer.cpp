#include "runtime/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "base/error.h"

namespace autooptim::runtime {
namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The code point starting at s[i] and its byte length; malformed UTF-8 gives (-1, 1) so the byte is
// carried through untouched.
std::pair<int32_t, size_t> next_code_point(const std::string& s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1};
  size_t n = b0 >= 0xF0 && b0 < 0xF8 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return {-1, 1};
  int32_t cp = b0 & (0x3F >> (n - 1));
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return {-1, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, n};
}

// Python's str.isspace (the set re's \s and str.strip use on str).
bool is_space(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

struct Entity {
  uint32_t cp;
  bool legacy;  // also recognised without the ';' (HTML5's legacy Latin-1 names)
};

const std::map<std::string, Entity>& named_entities() {
  static const std::map<std::string, Entity> table = [] {
    std::map<std::string, Entity> t;
    // U+00A0 .. U+00FF in order: all legacy.
    const char* latin1[] = {
        "nbsp",   "iexcl",  "cent",   "pound",  "curren", "yen",    "brvbar", "sect",   "uml",    "copy",   "ordf",
        "laquo",  "not",    "shy",    "reg",    "macr",   "deg",    "plusmn", "sup2",   "sup3",   "acute",  "micro",
        "para",   "middot", "cedil",  "sup1",   "ordm",   "raquo",  "frac14", "frac12", "frac34", "iquest", "Agrave",
        "Aacute", "Acirc",  "Atilde", "Auml",   "Aring",  "AElig",  "Ccedil", "Egrave", "Eacute", "Ecirc",  "Euml",
        "Igrave", "Iacute", "Icirc",  "Iuml",   "ETH",    "Ntilde", "Ograve", "Oacute", "Ocirc",  "Otilde", "Ouml",
        "times",  "Oslash", "Ugrave", "Uacute", "Ucirc",  "Uuml",   "Yacute", "THORN",  "szlig",  "agrave", "aacute",
        "acirc",  "atilde", "auml",   "aring",  "aelig",  "ccedil", "egrave", "eacute", "ecirc",  "euml",   "igrave",
        "iacute", "icirc",  "iuml",   "eth",    "ntilde", "ograve", "oacute", "ocirc",  "otilde", "ouml",   "divide",
        "oslash", "ugrave", "uacute", "ucirc",  "uuml",   "yacute", "thorn",  "yuml"};
    static_assert(sizeof(latin1) / sizeof(latin1[0]) == 96, "U+00A0..U+00FF");
    for (uint32_t i = 0; i < 96; ++i) t[latin1[i]] = {0xA0 + i, true};
    for (const auto& [n, cp] : std::vector<std::pair<const char*, uint32_t>>{{"amp", '&'},
                                                                             {"AMP", '&'},
                                                                             {"lt", '<'},
                                                                             {"LT", '<'},
                                                                             {"gt", '>'},
                                                                             {"GT", '>'},
                                                                             {"quot", '"'},
                                                                             {"QUOT", '"'},
                                                                             {"COPY", 0xA9},
                                                                             {"REG", 0xAE}})
      t[n] = {cp, true};
    for (const auto& [n, cp] : std::vector<std::pair<const char*, uint32_t>>{
             {"apos", '\''},     {"OElig", 0x152},   {"oelig", 0x153},   {"Scaron", 0x160},  {"scaron", 0x161},
             {"Yuml", 0x178},    {"fnof", 0x192},    {"circ", 0x2C6},    {"tilde", 0x2DC},   {"ensp", 0x2002},
             {"emsp", 0x2003},   {"thinsp", 0x2009}, {"zwnj", 0x200C},   {"zwj", 0x200D},    {"lrm", 0x200E},
             {"rlm", 0x200F},    {"ndash", 0x2013},  {"mdash", 0x2014},  {"lsquo", 0x2018},  {"rsquo", 0x2019},
             {"sbquo", 0x201A},  {"ldquo", 0x201C},  {"rdquo", 0x201D},  {"bdquo", 0x201E},  {"dagger", 0x2020},
             {"Dagger", 0x2021}, {"bull", 0x2022},   {"hellip", 0x2026}, {"permil", 0x2030}, {"prime", 0x2032},
             {"Prime", 0x2033},  {"lsaquo", 0x2039}, {"rsaquo", 0x203A}, {"euro", 0x20AC},   {"trade", 0x2122},
             {"larr", 0x2190},   {"uarr", 0x2191},   {"rarr", 0x2192},   {"darr", 0x2193},   {"harr", 0x2194},
             {"minus", 0x2212},  {"infin", 0x221E},  {"ne", 0x2260},     {"le", 0x2264},     {"ge", 0x2265},
             {"asymp", 0x2248},  {"sum", 0x2211},    {"radic", 0x221A},  {"spades", 0x2660}, {"clubs", 0x2663},
             {"hearts", 0x2665}, {"diams", 0x2666},  {"star", 0x2606},   {"starf", 0x2605},  {"check", 0x2713}})
      t[n] = {cp, false};
    const char* greek_upper[] = {"Alpha", "Beta",   "Gamma",   "Delta", "Epsilon", "Zeta",    "Eta",  "Theta", "Iota",
                                 "Kappa", "Lambda", "Mu",      "Nu",    "Xi",      "Omicron", "Pi",   "Rho",   nullptr,
                                 "Sigma", "Tau",    "Upsilon", "Phi",   "Chi",     "Psi",     "Omega"};
    const char* greek_lower[] = {"alpha", "beta",   "gamma",   "delta", "epsilon", "zeta",    "eta",  "theta", "iota",
                                 "kappa", "lambda", "mu",      "nu",    "xi",      "omicron", "pi",   "rho",   "sigmaf",
                                 "sigma", "tau",    "upsilon", "phi",   "chi",     "psi",     "omega"};
    for (uint32_t i = 0; i < 25; ++i) {
      if (greek_upper[i]) t[greek_upper[i]] = {0x391 + i, false};
      t[greek_lower[i]] = {0x3B1 + i, false};
    }
    return t;
  }();
  return table;
}

// HTML5 numeric character reference rules, as Python's html._replace_charref.
void append_char_ref(std::string& out, uint64_t num) {
  static const std::map<uint64_t, uint32_t> cp1252 = {
      {0x00, 0xFFFD}, {0x0D, 0x0D},   {0x80, 0x20AC}, {0x81, 0x81},   {0x82, 0x201A}, {0x83, 0x0192}, {0x84, 0x201E},
      {0x85, 0x2026}, {0x86, 0x2020}, {0x87, 0x2021}, {0x88, 0x02C6}, {0x89, 0x2030}, {0x8A, 0x0160}, {0x8B, 0x2039},
      {0x8C, 0x0152}, {0x8D, 0x8D},   {0x8E, 0x017D}, {0x8F, 0x8F},   {0x90, 0x90},   {0x91, 0x2018}, {0x92, 0x2019},
      {0x93, 0x201C}, {0x94, 0x201D}, {0x95, 0x2022}, {0x96, 0x2013}, {0x97, 0x2014}, {0x98, 0x02DC}, {0x99, 0x2122},
      {0x9A, 0x0161}, {0x9B, 0x203A}, {0x9C, 0x0153}, {0x9D, 0x9D},   {0x9E, 0x017E}, {0x9F, 0x0178}};
  if (auto it = cp1252.find(num); it != cp1252.end()) return append_utf8(out, it->second);
  if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) return append_utf8(out, 0xFFFD);
  const bool invalid = (num >= 0x1 && num <= 0x8) || (num >= 0xE && num <= 0x1F) || (num >= 0x7F && num <= 0x9F) ||
                       (num >= 0xFDD0 && num <= 0xFDEF) || num == 0xB || (num & 0xFFFE) == 0xFFFE;
  if (!invalid) append_utf8(out, static_cast<uint32_t>(num));
}

bool is_digit(char c, bool hex) {
  return (c >= '0' && c <= '9') || (hex && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')));
}

// The C interface of libautooptim_spm (tokenizer_spm_shim.cpp), resolved once per process.
struct SpmModule {
  void* (*load)(const char*, size_t, char*, size_t) = nullptr;
  void (*free)(void*) = nullptr;
  long (*encode)(const void*, const char*, size_t, int*, size_t, char*, size_t) = nullptr;
  int (*info)(const void*, int) = nullptr;
};

std::string executable_dir() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.parent_path().string();
}

// Looks for the module in $AUTOOPTIM_SPM_MODULE, next to the executable (and one folder up, for the
// test binaries under build/tests), then where the build put it.
const SpmModule& spm_module() {
  static const SpmModule m = [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("AUTOOPTIM_SPM_MODULE")) candidates.push_back(env);
    const std::string exe = executable_dir();
    if (!exe.empty()) {
      candidates.push_back(exe + "/libautooptim_spm.so");
      candidates.push_back(exe + "/../libautooptim_spm.so");
    }
#ifdef AUTOOPTIM_SPM_MODULE
    candidates.push_back(AUTOOPTIM_SPM_MODULE);
#endif
    std::string errors;
    for (const auto& path : candidates) {
      std::error_code ec;
      if (!std::filesystem::exists(path, ec)) continue;
      // DEEPBIND: SentencePiece must bind its bundled protobuf, not libtorch's libprotobuf.
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!h) {
        errors += "\n  " + path + ": " + dlerror();
        continue;
      }
      SpmModule r;
      r.load = reinterpret_cast<decltype(r.load)>(dlsym(h, "aospm_load"));
      r.free = reinterpret_cast<decltype(r.free)>(dlsym(h, "aospm_free"));
      r.encode = reinterpret_cast<decltype(r.encode)>(dlsym(h, "aospm_encode"));
      r.info = reinterpret_cast<decltype(r.info)>(dlsym(h, "aospm_info"));
      if (r.load && r.free && r.encode && r.info) return r;
      errors += "\n  " + path + ": missing the aospm_* functions";
    }
    return SpmModule{};
  }();
  if (!m.load)
    throw Error(
        "tokenizer: cannot load libautooptim_spm.so (the SentencePiece module built with autooptim); "
        "put it next to the executable or name it in AUTOOPTIM_SPM_MODULE");
  return m;
}

}  // namespace

std::string html_unescape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] != '&') {
      out += s[i++];
      continue;
    }
    size_t j = i + 1;
    if (j < s.size() && s[j] == '#') {
      // &#123; or &#x7B; (the ';' is optional); a '#' without digits is no reference.
      const bool hex = j + 1 < s.size() && (s[j + 1] == 'x' || s[j + 1] == 'X');
      size_t k = j + 1 + (hex ? 1 : 0);
      const size_t start = k;
      uint64_t num = 0;
      while (k < s.size() && is_digit(s[k], hex)) {
        const char c = s[k];
        const uint64_t d = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
        num = std::min<uint64_t>(num * (hex ? 16 : 10) + d, 0x7FFFFFFF);  // past U+10FFFF is U+FFFD anyway
        ++k;
      }
      if (k == start) {
        out += s[i++];
        continue;
      }
      if (k < s.size() && s[k] == ';') ++k;
      append_char_ref(out, num);
      i = k;
      continue;
    }
    // A name: up to 32 code points of anything but \t \n \f space < & # ;, then an optional ';'.
    size_t k = j;
    for (int count = 0; k < s.size() && count < 32; ++count) {
      const char c = s[k];
      if (c == '\t' || c == '\n' || c == '\f' || c == ' ' || c == '<' || c == '&' || c == '#' || c == ';') break;
      k += next_code_point(s, k).second;
    }
    if (k == j) {
      out += s[i++];
      continue;
    }
    const std::string name = s.substr(j, k - j);
    const bool semi = k < s.size() && s[k] == ';';
    const auto& table = named_entities();
    if (auto it = table.find(name); it != table.end() && (semi || it->second.legacy)) {
      append_utf8(out, it->second.cp);
      i = k + (semi ? 1 : 0);
      continue;
    }
    // The longest legacy name that prefixes the text ("&ampx" -> "&x"); otherwise '&' stays literal.
    bool done = false;
    for (size_t len = std::min(name.size(), size_t(32)); len >= 2 && !done; --len) {
      if (len == name.size() && !semi) continue;  // the whole name without ';' was tried above
      auto it = table.find(name.substr(0, len));
      if (it != table.end() && it->second.legacy) {
        append_utf8(out, it->second.cp);
        i = j + len;
        done = true;
      }
    }
    if (!done) out += s[i++];
  }
  return out;
}

std::string clean_prompt(const std::string& text) {
  // ftfy.fix_text is skipped (not available in C++); see tokenizer.h.
  const std::string s = html_unescape(html_unescape(text));
  // strip + collapse whitespace runs + strip == split on whitespace runs and join with one space.
  std::string out;
  bool pending_space = false;
  for (size_t i = 0; i < s.size();) {
    const auto [cp, n] = next_code_point(s, i);
    if (cp >= 0 && is_space(cp)) {
      pending_space = !out.empty();
    } else {
      if (pending_space) out += ' ';
      pending_space = false;
      out.append(s, i, n);
    }
    i += n;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------

Tokenizer::Tokenizer(const std::string& bytes, const std::string& label) {
  const SpmModule& spm = spm_module();
  char err[512] = {0};
  void* h = spm.load(bytes.data(), bytes.size(), err, sizeof(err));
  if (!h) throw Error(label + ": not a valid SentencePiece model (" + err + ")");
  sp_ = std::shared_ptr<void>(h, spm.free);
  eos_id_ = spm.info(h, 1);
  if (eos_id_ < 0) throw Error(label + ": the SentencePiece model has no </s> piece (T5 tokenizers need one)");
  const int pad = spm.info(h, 2);
  pad_id_ = pad >= 0 ? pad : 0;
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(path + ": no such tokenizer file (expected a SentencePiece spiece.model)");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in.good() && !in.eof()) throw Error(path + ": cannot read the tokenizer file");
  return Tokenizer(bytes.str(), path);
}

Tokenizer Tokenizer::from_serialized(const std::string& bytes) { return Tokenizer(bytes, "tokenizer"); }

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
  const SpmModule& spm = spm_module();
  char err[512] = {0};
  std::vector<int> ids(text.size() + 16);  // a piece covers at least one byte
  long n = spm.encode(sp_.get(), text.data(), text.size(), ids.data(), ids.size(), err, sizeof(err));
  if (n > static_cast<long>(ids.size())) {
    ids.resize(static_cast<size_t>(n));
    n = spm.encode(sp_.get(), text.data(), text.size(), ids.data(), ids.size(), err, sizeof(err));
  }
  if (n < 0) throw Error(std::string("tokenizer: cannot encode the prompt (") + err + ")");
  std::vector<int64_t> out(ids.begin(), ids.begin() + n);
  out.push_back(eos_id_);
  return out;
}

int64_t Tokenizer::vocab_size() const { return spm_module().info(sp_.get(), 0); }

TokenizedPrompts tokenize_prompts(const Tokenizer& tok, const std::vector<std::string>& prompts, int64_t max_length) {
  if (max_length < 1) throw Error("tokenize_prompts: max_length must be at least 1, got " + std::to_string(max_length));
  const auto B = static_cast<int64_t>(prompts.size());
  TokenizedPrompts r;
  r.input_ids = at::full({B, max_length}, tok.pad_id(), at::kLong);
  r.attention_mask = at::zeros({B, max_length}, at::kLong);
  auto ids_a = r.input_ids.accessor<int64_t, 2>();
  auto mask_a = r.attention_mask.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> ids = tok.encode(clean_prompt(prompts[b]));
    if (static_cast<int64_t>(ids.size()) > max_length) {
      ids.resize(max_length);  // the text's first max_length - 1 pieces, then </s>
      ids.back() = tok.eos_id();
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      ids_a[b][i] = ids[i];
      mask_a[b][i] = 1;
    }
    r.lengths.push_back(static_cast<int64_t>(ids.size()));
  }
  return r;
}

}  // namespace autooptim::runtime
