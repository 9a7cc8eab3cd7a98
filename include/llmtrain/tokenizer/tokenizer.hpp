// Tokenizer: text -> token ids, for llmtrain-prepare.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llmtrain {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text`, without BOS/EOS or other special tokens added.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual int64_t vocab_size() const = 0;
  // Id placed between documents (end-of-text / </s>).
  virtual int32_t eos_id() const = 0;
  // Short name recorded in the data's index, e.g. "byte", "gpt2", "llama3", "qwen3", "llama2".
  virtual std::string name() const = 0;
  // SHA-256 (hex) of the tokenizer file(s), "" for built-in tokenizers.
  virtual std::string file_hash() const = 0;
};

// Builds a tokenizer from a spec:
//   "byte"                       UTF-8 bytes, vocab 256 (EOS = 0, i.e. the NUL byte)
//   "gpt2" "llama3" "qwen3" "llama2"   the pinned npm files under third_party/npm
//                                (tests/tokenizer/fetch-packages.sh; docs/tokenizers.md)
//   "tokenizer_json:<path>"      HF byte-level BPE tokenizer.json (name from the file)
//   "tiktoken:<path>"            js-tiktoken ranks (.cjs/.js)
//   "llama2_js:<path>"           llama-tokenizer-js's llama-tokenizer.js (LLaMA-2)
// encode() is thread-safe.
// Throws DataError naming the spec when it cannot be built.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);

}  // namespace llmtrain
