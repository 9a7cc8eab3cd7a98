// LLaMA-2's SentencePiece-style BPE, read from llama-tokenizer-js's
// llama-tokenizer.js (vocabulary and merges are embedded there as base64).
//
// encode(text) = llama-tokenizer-js encode(text, add_bos_token=false,
// add_preceding_space=true):
//   - "" -> []; otherwise " " is prepended and every " " becomes "▁" (metaspace);
//   - each code point is its own token if the vocabulary has it, else its UTF-8
//     bytes as <0xNN> tokens (byte fallback);
//   - ranked merges over the whole text (no pre-tokenizer), lowest merge rank
//     first, leftmost first on ties.
#include <array>
#include <atomic>
#include <queue>
#include <unordered_map>

#include <fmt/format.h>

#include "tokenizer/tokenizer_util.hpp"
#include "llmtrain/core/error.hpp"

namespace llmtrain::tok {
namespace {


class SentencePieceBpe final : public Tokenizer {
 public:
  SentencePieceBpe(const std::string& path, const std::string& name);
  std::vector<int32_t> encode(std::string_view text) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.size()); }
  int32_t eos_id() const override { return eos_; }
  std::string name() const override { return name_; }
  std::string file_hash() const override { return hash_; }

 private:
  std::string name_, hash_;
  std::vector<std::string> vocab_;                    // id -> piece
  std::unordered_map<std::string, int32_t> by_piece_;  // piece -> id (the last id wins, as in the JS Map)
  std::unordered_map<char32_t, int32_t> by_char_;      // single code point pieces
  std::array<int32_t, 256> byte_id_{};                 // <0xNN>
  BpeMerges merges_;
  int32_t eos_ = -1;
  // True when every piece is a run of "▁" followed by no further "▁": then no
  // merge can join a non-"▁" symbol to a following "▁", the text splits into
  // independent "▁▁word" segments, and each segment's ids can be cached.
  bool split_words_ = false;
  uint64_t serial_;

  void bpe(std::string_view meta_text, std::vector<int32_t>& out) const;
};

std::atomic<uint64_t> g_sp_serial{0};

std::string js_string_constant(const std::string& src, const std::string& name, const std::string& what) {
  const std::string key = "const " + name + " = \"";
  size_t p = src.find(key);
  if (p == std::string::npos) throw DataError(fmt::format("{}: '{}' not found", what, name));
  p += key.size();
  size_t e = src.find('"', p);
  if (e == std::string::npos) throw DataError(fmt::format("{}: '{}' is not terminated", what, name));
  return src.substr(p, e - p);
}

}  // namespace

Llama2JsVocab read_llama2_js(const std::string& path) {
  Llama2JsVocab out;
  out.what = fmt::format("llama-tokenizer.js '{}'", path);
  const std::string& what = out.what;
  const std::string src = read_file(path, what.c_str());
  out.hash = sha256_hex(src);
  // Vocabulary: "\n"-separated UTF-8 pieces, row = id (TextDecoder, so ill-formed
  // UTF-8 would become U+FFFD: utf8_repair does the same).
  const std::string vocab_text =
      utf8_repair(base64_decode(js_string_constant(src, "llama_vocab_base64", what), what.c_str()));
  for (size_t p = 0;;) {
    size_t q = vocab_text.find('\n', p);
    out.pieces.push_back(vocab_text.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  // Merges: little-endian uint16 token ids, two per merge.
  const std::string bin = base64_decode(js_string_constant(src, "llama_merges_binary", what), what.c_str());
  const size_t n_ids = bin.size() / 2;
  auto id_at = [&](size_t k) {
    return static_cast<int32_t>(static_cast<unsigned char>(bin[2 * k]) |
                                static_cast<unsigned char>(bin[2 * k + 1]) << 8);
  };
  for (size_t k = 0; k + 1 < n_ids; k += 2) {
    int32_t a = id_at(k), b = id_at(k + 1);
    if (a >= static_cast<int32_t>(out.pieces.size()) || b >= static_cast<int32_t>(out.pieces.size()))
      throw DataError(fmt::format("{}: merge {} refers to id {} / {} outside the vocabulary", what, k / 2, a, b));
    out.merges.emplace_back(a, b);
  }
  return out;
}

namespace {

SentencePieceBpe::SentencePieceBpe(const std::string& path, const std::string& name)
    : name_(name), serial_(++g_sp_serial) {
  Llama2JsVocab js = read_llama2_js(path);
  const std::string& what = js.what;
  hash_ = js.hash;
  vocab_ = std::move(js.pieces);
  for (size_t id = 0; id < vocab_.size(); ++id) {
    by_piece_[vocab_[id]] = static_cast<int32_t>(id);
    if (vocab_[id].find(' ') != std::string::npos)
      throw DataError(fmt::format("{}: piece {} contains a space; merge keys would be ambiguous", what, id));
  }
  split_words_ = true;
  for (const auto& piece : vocab_) {
    size_t i = 0;
    while (piece.compare(i, 3, "\xE2\x96\x81") == 0) i += 3;
    if (piece.find("\xE2\x96\x81", i) != std::string::npos) split_words_ = false;
  }
  for (const auto& [piece, id] : by_piece_) {
    size_t i = 0;
    if (piece.empty()) continue;
    char32_t c = utf8_next(piece, i);
    if (i == piece.size()) by_char_[c] = id;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = by_piece_.find(fmt::format("<0x{:02X}>", b));
    if (it == by_piece_.end()) throw DataError(fmt::format("{}: no byte-fallback piece <0x{:02X}>", what, b));
    byte_id_[b] = it->second;
  }
  if (vocab_.size() <= 29871 || vocab_[29871] != "\xE2\x96\x81")
    throw DataError(fmt::format("{}: piece 29871 is not '\xE2\x96\x81'; not LLaMA-2's vocabulary", what));
  auto eos = by_piece_.find("</s>");
  if (eos == by_piece_.end()) throw DataError(fmt::format("{}: no </s> piece", what));
  eos_ = eos->second;

  // Merge k has priority 2k+1 (the JS uses the index into the id array) and
  // later duplicates win.
  merges_.reserve(js.merges.size() * 2);
  for (size_t k = 0; k < js.merges.size(); ++k) {
    const auto [a, b] = js.merges[k];
    // The JS keys merges by piece strings: use the canonical id of each string.
    auto merged = by_piece_.find(vocab_[a] + vocab_[b]);
    if (merged == by_piece_.end())
      throw DataError(fmt::format("{}: merge {} ('{}' '{}') produces a piece not in the vocabulary", what, k,
                                  vocab_[a], vocab_[b]));
    merges_[pair_key(by_piece_[vocab_[a]], by_piece_[vocab_[b]])] = {static_cast<int32_t>(2 * k + 1), merged->second};
  }
}

// Merges over one run of metaspace text ("▁" for spaces), appended to `out`.
void SentencePieceBpe::bpe(std::string_view text, std::vector<int32_t>& out) const {
  // Initial symbols: one per code point, or its UTF-8 bytes as <0xNN> pieces.
  std::vector<int32_t> id;
  id.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t start = i;
    auto it = by_char_.find(utf8_next(text, i));
    if (it != by_char_.end()) {
      id.push_back(it->second);
    } else {
      for (size_t k = start; k < i; ++k) id.push_back(byte_id_[static_cast<unsigned char>(text[k])]);
    }
  }
  bpe_merge(std::move(id), merges_, out);
}

std::vector<int32_t> SentencePieceBpe::encode(std::string_view raw) const {
  if (raw.empty()) return {};
  const std::string text = utf8_repair(raw);
  static const std::string kMeta = "\xE2\x96\x81";
  std::string meta = kMeta;  // the preceding space
  meta.reserve(text.size() * 2);
  for (char c : text) {
    if (c == ' ') meta += kMeta;
    else meta.push_back(c);
  }
  std::vector<int32_t> out;
  out.reserve(meta.size() / 3 + 1);
  if (!split_words_) {
    bpe(meta, out);
    return out;
  }
  thread_local std::unordered_map<uint64_t, std::unordered_map<std::string, std::vector<int32_t>>> caches;
  // Caches of destroyed tokenizers cannot be reached from here: bound their number.
  if (caches.size() >= 8 && caches.count(serial_) == 0) caches.clear();
  auto& cache = caches[serial_];
  if (cache.size() > (1u << 18)) cache.clear();
  // Segments start at a "▁" that follows something else.
  size_t seg = 0;
  auto flush = [&](size_t end) {
    std::string key = meta.substr(seg, end - seg);
    auto it = cache.find(key);
    if (it == cache.end()) {
      std::vector<int32_t> ids;
      bpe(key, ids);
      it = cache.emplace(std::move(key), std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
    seg = end;
  };
  bool prev_meta = true;
  for (size_t i = 0; i < meta.size();) {
    bool is_meta = meta.compare(i, 3, kMeta) == 0;
    if (is_meta && !prev_meta) flush(i);
    prev_meta = is_meta;
    i += is_meta ? 3 : 1;
  }
  flush(meta.size());
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> make_sp_tokenizer(const std::string& spec, const std::string& kind, const std::string& arg) {
  if (kind == "llama2_js") {
    if (arg.empty()) throw DataError(fmt::format("tokenizer spec '{}': expected llama2_js:<path to llama-tokenizer.js>", spec));
    return std::make_unique<SentencePieceBpe>(arg, "llama2");
  }
  if (kind == "llama2" && arg.empty()) return std::make_unique<SentencePieceBpe>(pinned_file(spec, kind), "llama2");
  return nullptr;
}

}  // namespace llmtrain::tok
