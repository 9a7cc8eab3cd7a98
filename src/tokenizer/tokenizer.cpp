// make_tokenizer: the tokenizer factory, and the built-in "byte" tokenizer.
#include "llmtrain/tokenizer/tokenizer.hpp"

#include <fmt/format.h>

#include "tokenizer/tokenizer_util.hpp"
#include "llmtrain/core/error.hpp"

namespace llmtrain {

namespace {

// UTF-8 bytes as ids 0..255. EOS is 0 (NUL), which never occurs in text files
// worth training on, so the vocabulary stays 256 and ids fit in uint16.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  int64_t vocab_size() const override { return 256; }
  int32_t eos_id() const override { return 0; }
  std::string name() const override { return "byte"; }
  std::string file_hash() const override { return ""; }
};

}  // namespace

// Spec grammar: "<kind>" for built-ins, "<kind>:<path>" for file-based kinds.
// Tokenizer kinds that read files are added here by their implementation files
// (tokenizer_bpe*.cpp / tokenizer_sp*.cpp), one `if` per kind.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "byte") {
    if (!arg.empty())
      throw DataError(fmt::format("tokenizer spec '{}': the built-in 'byte' tokenizer takes no file", spec));
    return std::make_unique<ByteTokenizer>();
  }
  if (auto t = tok::make_bpe_tokenizer(spec, kind, arg)) return t;
  if (auto t = tok::make_sp_tokenizer(spec, kind, arg)) return t;
  throw DataError(fmt::format("tokenizer spec '{}': unknown tokenizer kind '{}' (known: byte, gpt2, llama3, qwen3, "
                              "llama2, tokenizer_json:<path>, tiktoken:<path>, llama2_js:<path>)",
                              spec, kind));
}

}  // namespace llmtrain
