// Tokenizer: text -> token ids, for llmtrain-prepare.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
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

// The files transformers' AutoTokenizer.from_pretrained reads (tokenizer.json,
// tokenizer_config.json) for the tokenizer a data index names, by name and file hash:
//   "byte"            a byte-level BPE of 256 tokens and no merges (id = byte)
//   "gpt2"            tokenizer.json built from the pinned tiktoken ranks (GPT-2's
//                     50,000 merges recovered from the ranks; ignore_merges as tiktoken)
//   "llama3" "qwen3"  the pinned tokenizer.json and tokenizer_config.json, byte for byte
//   "llama2"          tokenizer.json built from llama-tokenizer-js's vocabulary and
//                     merges (BPE with byte fallback, "▁" metaspace; BOS added on encode)
// The pinned file must have `file_hash` (the data was made with it). `files` is
// empty and `why_not` says why for any other tokenizer or a different file.
struct HfTokenizerFiles {
  std::vector<std::pair<std::string, std::string>> files;  // file name -> contents
  std::string why_not;
};
HfTokenizerFiles hf_tokenizer_files(const std::string& name, const std::string& file_hash);

}  // namespace llmtrain
