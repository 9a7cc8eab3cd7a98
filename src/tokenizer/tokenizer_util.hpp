// Private helpers shared by the file-based tokenizers (tokenizer_bpe.cpp,
// tokenizer_sp.cpp): reading files, SHA-256, base64, UTF-8 repair, NFC, a
// JavaScript-compatible PCRE2 pre-tokenizer and the spec -> tokenizer hook.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "llmtrain/tokenizer/tokenizer.hpp"

namespace llmtrain::tok {

// Whole file as bytes; DataError naming `what` and the path when unreadable.
std::string read_file(const std::string& path, const char* what);

// SHA-256 of `data` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);

// Standard base64 (with or without '=' padding); DataError naming `what` on a bad digit.
std::string base64_decode(std::string_view in, const char* what);

// `s` itself when it is valid UTF-8, else a copy with every ill-formed sequence
// replaced by U+FFFD the way the WHATWG decoder (node's readFileSync 'utf8',
// TextDecoder) does it, so our pre-tokens see the same text as the JS oracles.
std::string utf8_repair(std::string_view s);

// Unicode NFC (ICU), as JavaScript's String.prototype.normalize("NFC").
std::string nfc(std::string_view s);

// JavaScript's String.prototype.trimStart/trimEnd whitespace (\s of ECMAScript).
bool js_is_space(char32_t c);
std::string_view js_trim_start(std::string_view s);
std::string_view js_trim_end(std::string_view s);

// Decodes the code point at s[i] (valid UTF-8 assumed) and advances i.
char32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, char32_t c);

// A regex with JavaScript ("gu" flags) semantics on top of PCRE2 (UTF + UCP, JIT):
// \s \S \d \w are rewritten to ECMAScript's definitions, and "(?i:'s|'t|...)"
// to the ASCII-only form transformers.js uses.
class JsRegex {
 public:
  explicit JsRegex(const std::string& js_pattern);
  ~JsRegex();
  JsRegex(const JsRegex&) = delete;
  JsRegex& operator=(const JsRegex&) = delete;
  // Appends to `out` the pieces of `text`: every match, and with keep_gaps every
  // non-empty gap between matches too (transformers.js regexSplit, Split behavior
  // "Isolated"); without it only the matches (String.matchAll, as js-tiktoken).
  void split(std::string_view text, bool keep_gaps, std::vector<std::string_view>& out) const;
  const std::string& pattern() const { return js_pattern_; }

 private:
  std::string js_pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// The bytes-to-unicode table of GPT-2's byte-level BPE, and its inverse
// (-1 for code points that are not in the table).
const std::vector<char32_t>& byte_to_unicode();
int unicode_to_byte(char32_t c);

// Where the built-in tokenizers' files are looked for, in order (the npm
// packages tests/tokenizer/fetch-packages.sh fetches): $LLMTRAIN_NPM_DIR,
// $LLMTRAIN_SOURCE_DIR/third_party/npm, the build's source tree's
// third_party/npm, the installed data directory (<prefix>/share/llmtrain/npm),
// as llmtrain-plan finds inputs/. Never the working directory.
std::vector<std::string> npm_dirs();

// The pinned file of a built-in tokenizer kind in the first of npm_dirs() that
// holds it: "gpt2" the js-tiktoken ranks, "llama3"/"qwen3" their
// tokenizer.json, "llama2" llama-tokenizer.js; "" for any other kind.
// DataError naming `spec`, the file and every folder looked in when none does.
std::string pinned_file(const std::string& spec, const std::string& kind);

// js-tiktoken's ranks file, parsed (tokenizer_bpe.cpp).
struct TiktokenRanks {
  std::string what, hash;                                   // "tiktoken ranks '<path>'", SHA-256 of the file
  std::vector<std::pair<std::string, int32_t>> tokens;      // raw bytes, rank (= id)
  std::vector<std::pair<std::string, int32_t>> special;     // special token, id
  std::string pat_str;
  int64_t explicit_n_vocab = -1;
};
TiktokenRanks read_tiktoken_ranks(const std::string& path);

// llama-tokenizer.js's vocabulary and merges, decoded (tokenizer_sp.cpp).
struct Llama2JsVocab {
  std::string what, hash;
  std::vector<std::string> pieces;                // id -> piece (UTF-8, "▁" for spaces)
  std::vector<std::pair<int32_t, int32_t>> merges;  // in priority order
};
Llama2JsVocab read_llama2_js(const std::string& path);

// Hooks called by make_tokenizer(); nullptr when `kind` is not theirs.
std::unique_ptr<Tokenizer> make_bpe_tokenizer(const std::string& spec, const std::string& kind,
                                              const std::string& arg);
std::unique_ptr<Tokenizer> make_sp_tokenizer(const std::string& spec, const std::string& kind,
                                             const std::string& arg);

// BPE merges of both tokenizer families: (left id, right id) -> (rank, merged id).
struct BpeMerge {
  int32_t rank, id;
};
using BpeMerges = std::unordered_map<uint64_t, BpeMerge>;
inline uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

// Ranked merging of the symbols `id` (consumed) over a linked list, with a min-heap
// of candidate pairs keyed (rank, position): the lowest rank merges first, ties go
// to the leftmost pair (transformers.js, tiktoken and llama-tokenizer-js agree).
// Stale heap entries are skipped when popped. Appends the final ids to `out`.
void bpe_merge(std::vector<int32_t> id, const BpeMerges& merges, std::vector<int32_t>& out);

}  // namespace llmtrain::tok
