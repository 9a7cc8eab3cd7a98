// hf_tokenizer_files: the tokenizer a data index names, as the files
// transformers' AutoTokenizer.from_pretrained reads (export_hf writes them).
#include <filesystem>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/error.hpp"
#include "llmtrain/tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_util.hpp"

namespace llmtrain {

namespace {

using ojson = nlohmann::ordered_json;

// Raw bytes -> GPT-2's byte-level alphabet (printable code points).
std::string byte_level(std::string_view bytes) {
  std::string s;
  for (unsigned char b : bytes) tok::utf8_append(s, tok::byte_to_unicode()[b]);
  return s;
}

ojson added_token(int64_t id, const std::string& content, bool normalized) {
  return {{"id", id},         {"content", content},       {"single_word", false}, {"lstrip", false},
          {"rstrip", false},  {"normalized", normalized}, {"special", true}};
}

ojson byte_level_step(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

ojson bpe_model(ojson vocab, ojson merges, bool ignore_merges) {
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", ignore_merges},
          {"vocab", std::move(vocab)},
          {"merges", std::move(merges)}};
}

ojson tokenizer_json(ojson added, ojson normalizer, ojson pre, ojson post, ojson decoder, ojson model) {
  return {{"version", "1.0"},           {"truncation", nullptr},     {"padding", nullptr},
          {"added_tokens", std::move(added)}, {"normalizer", std::move(normalizer)},
          {"pre_tokenizer", std::move(pre)}, {"post_processor", std::move(post)}, {"decoder", std::move(decoder)},
          {"model", std::move(model)}};
}

std::string dump(const ojson& j) { return j.dump(1) + "\n"; }

// 256 tokens, id = byte value, no merges: what the "byte" tokenizer does.
HfTokenizerFiles byte_files() {
  ojson vocab = ojson::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level(std::string(1, static_cast<char>(b)))] = b;
  HfTokenizerFiles out;
  out.files.emplace_back("tokenizer.json",
                         dump(tokenizer_json(ojson::array(), nullptr, byte_level_step(false), nullptr,
                                             byte_level_step(false), bpe_model(std::move(vocab), ojson::array(), false))));
  // Id 0 (the NUL byte) separates documents; it is not declared as a special
  // token, so that text is always encoded byte by byte, as llmtrain-prepare does.
  out.files.emplace_back("tokenizer_config.json", dump({{"tokenizer_class", "PreTrainedTokenizerFast"},
                                                        {"clean_up_tokenization_spaces", false}}));
  return out;
}

// GPT-2 from tiktoken ranks: each token's merge is the last step of BPE on its
// own bytes with the merges ranked below it (the original merges.txt).
HfTokenizerFiles gpt2_files(const tok::TiktokenRanks& r) {
  std::unordered_map<std::string, int32_t> rank;
  for (const auto& [bytes, id] : r.tokens) rank.emplace(bytes, id);
  std::vector<std::pair<std::string, int32_t>> by_rank = r.tokens;
  std::sort(by_rank.begin(), by_rank.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  ojson vocab = ojson::object(), merges = ojson::array();
  for (const auto& [bytes, id] : by_rank) {
    vocab[byte_level(bytes)] = id;
    if (bytes.size() < 2) continue;
    std::vector<std::string> parts;
    for (char c : bytes) parts.emplace_back(1, c);
    while (parts.size() > 1) {
      int best = -1;
      int32_t best_rank = id;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        auto it = rank.find(parts[i] + parts[i + 1]);
        if (it != rank.end() && it->second < best_rank) {
          best_rank = it->second;
          best = static_cast<int>(i);
        }
      }
      if (best < 0) break;
      parts[best] += parts[best + 1];
      parts.erase(parts.begin() + best + 1);
    }
    if (parts.size() != 2)
      throw DataError(fmt::format("{}: token {} is not the merge of two lower-ranked tokens; not a BPE vocabulary",
                                  r.what, id));
    merges.push_back(byte_level(parts[0]) + " " + byte_level(parts[1]));
  }
  ojson added = ojson::array();
  std::string eos;
  for (const auto& [content, id] : r.special) {
    vocab[content] = id;
    added.push_back(added_token(id, content, true));
    if (content == "<|endoftext|>") eos = content;
  }
  HfTokenizerFiles out;
  out.files.emplace_back(
      "tokenizer.json",
      dump(tokenizer_json(std::move(added), nullptr, byte_level_step(true),
                          {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}},
                          byte_level_step(true), bpe_model(std::move(vocab), std::move(merges), true))));
  out.files.emplace_back("tokenizer_config.json", dump({{"tokenizer_class", "PreTrainedTokenizerFast"},
                                                        {"bos_token", eos},
                                                        {"eos_token", eos},
                                                        {"unk_token", eos},
                                                        {"add_prefix_space", false},
                                                        {"clean_up_tokenization_spaces", false}}));
  return out;
}

// LLaMA-2: BPE with byte fallback over "▁"-metaspace text, as transformers'
// LLaMA tokenizer.json; BOS <s> is added on encode (llama-tokenizer-js's
// add_bos_token = true), EOS is </s>.
HfTokenizerFiles llama2_files(const tok::Llama2JsVocab& js) {
  const std::string meta = "\xE2\x96\x81";
  ojson vocab = ojson::object(), merges = ojson::array();
  for (size_t id = 0; id < js.pieces.size(); ++id) {
    if (vocab.contains(js.pieces[id]))
      throw DataError(fmt::format("{}: piece '{}' occurs twice; a tokenizer.json vocabulary cannot hold it", js.what,
                                  js.pieces[id]));
    vocab[js.pieces[id]] = id;
  }
  for (const auto& [a, b] : js.merges) merges.push_back(js.pieces[a] + " " + js.pieces[b]);
  auto id_of = [&](const char* piece) -> int64_t {
    if (!vocab.contains(piece)) throw DataError(fmt::format("{}: no '{}' piece", js.what, piece));
    return vocab[piece].get<int64_t>();
  };
  const int64_t unk = id_of("<unk>"), bos = id_of("<s>"), eos = id_of("</s>");
  ojson added = ojson::array({added_token(unk, "<unk>", false), added_token(bos, "<s>", false),
                              added_token(eos, "</s>", false)});
  ojson normalizer = {{"type", "Sequence"},
                      {"normalizers",
                       {{{"type", "Prepend"}, {"prepend", meta}},
                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}}}}};
  ojson post = {{"type", "TemplateProcessing"},
                {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                {"pair",
                 {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}},
                  {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
                {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {bos}}, {"tokens", {"<s>"}}}}}}};
  ojson decoder = {{"type", "Sequence"},
                   {"decoders",
                    {{{"type", "Replace"}, {"pattern", {{"String", meta}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}},
                     {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  ojson model = bpe_model(std::move(vocab), std::move(merges), false);
  model["unk_token"] = "<unk>";
  model["fuse_unk"] = true;
  model["byte_fallback"] = true;
  HfTokenizerFiles out;
  out.files.emplace_back("tokenizer.json", dump(tokenizer_json(std::move(added), std::move(normalizer), nullptr,
                                                               std::move(post), std::move(decoder), std::move(model))));
  out.files.emplace_back("tokenizer_config.json", dump({{"tokenizer_class", "PreTrainedTokenizerFast"},
                                                        {"bos_token", "<s>"},
                                                        {"eos_token", "</s>"},
                                                        {"unk_token", "<unk>"},
                                                        {"add_bos_token", true},
                                                        {"add_eos_token", false},
                                                        {"clean_up_tokenization_spaces", false}}));
  return out;
}

std::string other_file(const std::string& name, const std::string& want, const std::string& have) {
  return fmt::format("the data's tokenizer '{}' was made from a file with SHA-256 {}, but the pinned file has {}",
                     name, want, have);
}

}  // namespace

HfTokenizerFiles hf_tokenizer_files(const std::string& name, const std::string& file_hash) {
  if (name == "byte") return byte_files();
  const std::string path = tok::pinned_file(name, name);
  if (path.empty()) {
    HfTokenizerFiles out;
    out.why_not = fmt::format("llmtrain writes transformers tokenizer files for byte, gpt2, llama3, qwen3 and "
                              "llama2 only; the data's tokenizer is '{}'",
                              name);
    return out;
  }
  if (name == "gpt2") {
    const tok::TiktokenRanks r = tok::read_tiktoken_ranks(path);
    if (r.hash != file_hash) return {{}, other_file(name, file_hash, r.hash)};
    return gpt2_files(r);
  }
  if (name == "llama2") {
    const tok::Llama2JsVocab js = tok::read_llama2_js(path);
    if (js.hash != file_hash) return {{}, other_file(name, file_hash, js.hash)};
    return llama2_files(js);
  }
  // llama3, qwen3: the pinned files as they are.
  const std::string json = tok::read_file(path, "tokenizer.json");
  const std::string hash = tok::sha256_hex(json);
  if (hash != file_hash) return {{}, other_file(name, file_hash, hash)};
  HfTokenizerFiles out;
  out.files.emplace_back("tokenizer.json", json);
  const auto config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  out.files.emplace_back("tokenizer_config.json", tok::read_file(config.string(), "tokenizer_config.json"));
  return out;
}

}  // namespace llmtrain
