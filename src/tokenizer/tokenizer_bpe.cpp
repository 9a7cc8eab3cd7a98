// Byte-level BPE (GPT-2, LLaMA-3, Qwen3): from a Hugging Face tokenizer.json or
// from tiktoken-format ranks (js-tiktoken's dist/ranks/*.cjs).
//
// encode(text) follows transformers.js / js-tiktoken step by step, because those
// are the implementations our ids are checked against (tests/tokenizer):
//   1. split out added/special tokens (longest match, left to right)
//   2. per remaining section: normalizer (NFC for Qwen3), pre-tokenizer regex split
//   3. per pre-token ("word", raw UTF-8 bytes): the whole word if it is a token and
//      the model says ignore_merges (LLaMA-3, tiktoken), else ranked pair merges
//      starting from single bytes, lowest rank first, leftmost first on ties.
// The byte-level alphabet (bytes -> printable code points) is only undone when the
// file is read: internally tokens are raw byte strings.
#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <queue>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_util.hpp"
#include "llmtrain/core/error.hpp"

namespace llmtrain::tok {
namespace {

// transformers.js ByteLevelPreTokenizer's built-in pattern (use_regex = true).
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct AddedToken {
  std::string content;
  int32_t id;
  bool lstrip, rstrip;
};

// One pre-tokenizer stage: an optional " " prefix (ByteLevel add_prefix_space)
// then an optional regex split.
struct PreStage {
  bool add_prefix_space = false;
  std::unique_ptr<JsRegex> regex;
  bool keep_gaps = true;  // Split "Isolated" keeps text between matches; tiktoken drops it
};

std::atomic<uint64_t> g_serial{0};

class ByteLevelBpe final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t eos_id() const override { return eos_; }
  std::string name() const override { return name_; }
  std::string file_hash() const override { return hash_; }

  // Loaders fill these.
  std::string name_, hash_, what_;
  int64_t vocab_size_ = 0;
  int32_t eos_ = -1;
  bool nfc_ = false;
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int32_t> vocab_;  // raw bytes -> id
  std::array<int32_t, 256> byte_id_{};
  BpeMerges merges_;
  std::vector<PreStage> stages_;
  std::vector<AddedToken> added_;
  std::array<std::vector<int>, 256> added_by_first_;  // indices into added_, longest first
  uint64_t serial_ = ++g_serial;

  void index_added();
  void check_bytes();

 private:
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
};


void ByteLevelBpe::index_added() {
  for (auto& v : added_by_first_) v.clear();
  for (size_t i = 0; i < added_.size(); ++i) {
    if (added_[i].content.empty()) continue;
    added_by_first_[static_cast<unsigned char>(added_[i].content[0])].push_back(static_cast<int>(i));
  }
  for (auto& v : added_by_first_)
    std::stable_sort(v.begin(), v.end(),
                     [&](int a, int b) { return added_[a].content.size() > added_[b].content.size(); });
}

void ByteLevelBpe::check_bytes() {
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(std::string(1, static_cast<char>(b)));
    if (it == vocab_.end())
      throw DataError(fmt::format("{}: byte 0x{:02X} has no token; not a byte-level BPE vocabulary", what_, b));
    byte_id_[b] = it->second;
  }
}

// A pre-token word's bytes -> symbols -> ranked merges (bpe_merge).
void ByteLevelBpe::bpe(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<int32_t> id(word.size());
  for (size_t i = 0; i < word.size(); ++i) id[i] = byte_id_[static_cast<unsigned char>(word[i])];
  bpe_merge(std::move(id), merges_, out);
}

// Per-thread word cache: encode() is const and may run on many threads at once.
struct WordCache {
  std::unordered_map<std::string, std::vector<int32_t>> map;
};
constexpr size_t kWordCacheMax = 1 << 18;

void ByteLevelBpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
    return;
  }
  thread_local std::unordered_map<uint64_t, WordCache> caches;
  // Caches of destroyed tokenizers cannot be reached from here: bound their number.
  if (caches.size() >= 8 && caches.count(serial_) == 0) caches.clear();
  auto& cache = caches[serial_].map;
  std::string key(word);
  auto it = cache.find(key);
  if (it != cache.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<int32_t> ids;
  auto v = ignore_merges_ ? vocab_.find(key) : vocab_.end();
  if (v != vocab_.end()) ids.push_back(v->second);
  else bpe(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cache.size() >= kWordCacheMax) cache.clear();
  cache.emplace(std::move(key), std::move(ids));
}

std::vector<int32_t> ByteLevelBpe::encode(std::string_view raw) const {
  const std::string text = utf8_repair(raw);
  std::string_view t = text;
  // 1. Sections: (text, -1) or (added token content, id).
  std::vector<std::pair<std::string_view, int32_t>> sections;
  size_t start = 0, i = 0;
  while (i < t.size()) {
    const auto& cands = added_by_first_[static_cast<unsigned char>(t[i])];
    int hit = -1;
    for (int k : cands) {
      const auto& c = added_[k].content;
      if (t.compare(i, c.size(), c) == 0) { hit = k; break; }
    }
    if (hit < 0) { ++i; continue; }
    if (i > start) sections.emplace_back(t.substr(start, i - start), -1);
    sections.emplace_back(t.substr(i, added_[hit].content.size()), hit);
    i += added_[hit].content.size();
    start = i;
  }
  if (start < t.size()) sections.emplace_back(t.substr(start), -1);
  for (size_t s = 0; s < sections.size(); ++s) {
    if (sections[s].second < 0) continue;
    const auto& a = added_[sections[s].second];
    if (a.lstrip && s > 0 && sections[s - 1].second < 0) sections[s - 1].first = js_trim_end(sections[s - 1].first);
    if (a.rstrip && s + 1 < sections.size() && sections[s + 1].second < 0)
      sections[s + 1].first = js_trim_start(sections[s + 1].first);
  }

  std::vector<int32_t> out;
  out.reserve(t.size() / 3);
  std::vector<std::string_view> pieces, next_pieces;
  std::deque<std::string> owned;  // prefixed pieces (add_prefix_space); stable addresses
  for (const auto& [sec, added] : sections) {
    if (added >= 0) { out.push_back(added_[added].id); continue; }
    if (sec.empty()) continue;
    std::string normalized;
    std::string_view body = sec;
    if (nfc_) {
      normalized = nfc(sec);
      body = normalized;
      if (body.empty()) continue;
    }
    // 2. Pre-tokenizer stages, each applied to every piece of the previous one.
    pieces.assign(1, body);
    owned.clear();
    for (const auto& st : stages_) {
      next_pieces.clear();
      for (std::string_view p : pieces) {
        if (st.add_prefix_space && (p.empty() || p[0] != ' ')) {
          owned.push_back(" " + std::string(p));
          p = owned.back();
        }
        if (st.regex) {
          st.regex->split(p, st.keep_gaps, next_pieces);
        } else {
          next_pieces.push_back(p);
        }
      }
      pieces.swap(next_pieces);
    }
    // 3. Words.
    for (std::string_view w : pieces)
      if (!w.empty()) encode_word(w, out);
  }
  return out;
}

// ---- loaders ------------------------------------------------------------------

std::string bytes_from_byte_level(const std::string& s, bool& ok) {
  std::string out;
  ok = true;
  for (size_t i = 0; i < s.size();) {
    int b = unicode_to_byte(utf8_next(s, i));
    if (b < 0) { ok = false; return out; }
    out.push_back(static_cast<char>(b));
  }
  return out;
}

int32_t find_token(const ByteLevelBpe& t, const std::string& content) {
  for (const auto& a : t.added_)
    if (a.content == content) return a.id;
  auto it = t.vocab_.find(content);
  return it == t.vocab_.end() ? -1 : it->second;
}

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path, const std::string& name) {
  auto tok = std::make_unique<ByteLevelBpe>();
  tok->what_ = fmt::format("tokenizer.json '{}'", path);
  const char* what = tok->what_.c_str();
  const std::string data = read_file(path, what);
  tok->hash_ = sha256_hex(data);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data);
  } catch (const std::exception& e) {
    throw DataError(fmt::format("{}: not valid JSON: {}", what, e.what()));
  }
  try {
    const auto& m = j.at("model");
    if (m.value("type", std::string("BPE")) != "BPE")
      throw DataError(fmt::format("{}: model.type is '{}', expected 'BPE'", what, m.value("type", std::string())));
    auto str_or_empty = [&](const char* k) { return m.contains(k) && m[k].is_string() ? m[k].get<std::string>() : ""; };
    if (!str_or_empty("continuing_subword_prefix").empty() || !str_or_empty("end_of_word_suffix").empty())
      throw DataError(fmt::format("{}: continuing_subword_prefix/end_of_word_suffix are not supported", what));
    if (m.value("byte_fallback", false))
      throw DataError(fmt::format("{}: byte_fallback BPE is not byte-level; not supported here", what));
    tok->ignore_merges_ = m.value("ignore_merges", false);

    int64_t max_id = -1;
    for (auto it = m.at("vocab").begin(); it != m.at("vocab").end(); ++it) {
      int32_t id = it.value().get<int32_t>();
      max_id = std::max<int64_t>(max_id, id);
      bool ok;
      std::string bytes = bytes_from_byte_level(it.key(), ok);
      if (ok) tok->vocab_[bytes] = id;
    }
    tok->check_bytes();
    const auto& merges = m.at("merges");
    tok->merges_.reserve(merges.size() * 2);
    for (size_t r = 0; r < merges.size(); ++r) {
      std::string a, b;
      if (merges[r].is_array()) {
        a = merges[r].at(0).get<std::string>();
        b = merges[r].at(1).get<std::string>();
      } else {
        const std::string s = merges[r].get<std::string>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos) throw DataError(fmt::format("{}: merge {} '{}' has no space", what, r, s));
        a = s.substr(0, sp);
        size_t sp2 = s.find(' ', sp + 1);
        b = s.substr(sp + 1, sp2 == std::string::npos ? std::string::npos : sp2 - sp - 1);
      }
      bool ok_a, ok_b;
      std::string ba = bytes_from_byte_level(a, ok_a), bb = bytes_from_byte_level(b, ok_b);
      auto ia = tok->vocab_.find(ba), ib = tok->vocab_.find(bb), ic = tok->vocab_.find(ba + bb);
      if (!ok_a || !ok_b || ia == tok->vocab_.end() || ib == tok->vocab_.end() || ic == tok->vocab_.end())
        throw DataError(fmt::format("{}: merge {} ('{}' '{}') refers to a token missing from the vocabulary", what,
                                    r, a, b));
      // Later duplicates win, as in transformers.js (a Map built in order).
      tok->merges_[pair_key(ia->second, ib->second)] = {static_cast<int32_t>(r), ic->second};
    }

    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
      for (const auto& a : j["added_tokens"]) {
        AddedToken t{a.at("content").get<std::string>(), a.at("id").get<int32_t>(), a.value("lstrip", false),
                     a.value("rstrip", false)};
        max_id = std::max<int64_t>(max_id, t.id);
        tok->added_.push_back(std::move(t));
      }
    }
    tok->index_added();
    tok->vocab_size_ = max_id + 1;

    // Normalizer: none or NFC (what the supported files use).
    const auto& norm = j.contains("normalizer") ? j["normalizer"] : nlohmann::json();
    if (!norm.is_null()) {
      std::vector<nlohmann::json> list;
      if (norm.at("type") == "Sequence") for (const auto& n : norm.at("normalizers")) list.push_back(n);
      else list.push_back(norm);
      for (const auto& n : list) {
        if (n.at("type") == "NFC") tok->nfc_ = true;
        else throw DataError(fmt::format("{}: normalizer '{}' is not supported (supported: NFC)", what,
                                         n.at("type").get<std::string>()));
      }
    }
    // Pre-tokenizer: Split(Regex, Isolated) stages and a final ByteLevel.
    const auto& pre = j.at("pre_tokenizer");
    std::vector<nlohmann::json> list;
    if (pre.at("type") == "Sequence") for (const auto& p : pre.at("pretokenizers")) list.push_back(p);
    else list.push_back(pre);
    bool byte_level = false;
    for (const auto& p : list) {
      const std::string type = p.at("type").get<std::string>();
      if (byte_level) throw DataError(fmt::format("{}: pre-tokenizer '{}' after ByteLevel is not supported", what, type));
      PreStage st;
      if (type == "Split") {
        if (!p.at("pattern").contains("Regex"))
          throw DataError(fmt::format("{}: Split pre-tokenizer without a Regex pattern is not supported", what));
        if (p.value("invert", false) || p.value("behavior", std::string()) != "Isolated")
          throw DataError(fmt::format("{}: only Split with behavior 'Isolated' and invert=false is supported", what));
        st.regex = std::make_unique<JsRegex>(p["pattern"]["Regex"].get<std::string>());
      } else if (type == "ByteLevel") {
        byte_level = true;
        st.add_prefix_space = p.value("add_prefix_space", false);
        if (p.value("use_regex", true)) {
          st.regex = std::make_unique<JsRegex>(kGpt2Pattern);
          st.keep_gaps = false;
        }
      } else {
        throw DataError(fmt::format("{}: pre-tokenizer '{}' is not supported (supported: Split, ByteLevel)", what, type));
      }
      tok->stages_.push_back(std::move(st));
    }
    if (!byte_level) throw DataError(fmt::format("{}: no ByteLevel pre-tokenizer; not a byte-level BPE", what));
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{}: unexpected structure: {}", what, e.what()));
  }

  // Name and document separator from the file's own special tokens.
  auto has = [&](const char* s) { return find_token(*tok, s) >= 0; };
  if (!name.empty()) tok->name_ = name;
  else if (has("<|begin_of_text|>") && has("<|end_of_text|>")) tok->name_ = "llama3";
  else if (has("<|im_start|>")) tok->name_ = has("<think>") ? "qwen3" : "qwen2";
  else if (has("<|endoftext|>") && tok->vocab_size_ == 50257) tok->name_ = "gpt2";
  else tok->name_ = "bpe";
  for (const char* eos : {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>"}) {
    if ((tok->eos_ = find_token(*tok, eos)) >= 0) break;
  }
  if (tok->eos_ < 0)
    throw DataError(fmt::format("{}: no end-of-text token (<|end_of_text|>, <|endoftext|>, </s> or <eos>)", what));
  return tok;
}

}  // namespace

// js-tiktoken ranks: `module.exports = {"pat_str": ..., "special_tokens": {...},
// "bpe_ranks": "<ignored> <offset> <b64> <b64> ...\n..."}` (or `export default`).
TiktokenRanks read_tiktoken_ranks(const std::string& path) {
  TiktokenRanks out;
  out.what = fmt::format("tiktoken ranks '{}'", path);
  const char* what = out.what.c_str();
  const std::string data = read_file(path, what);
  out.hash = sha256_hex(data);
  size_t open = data.find('{'), close = data.rfind('}');
  if (open == std::string::npos || close == std::string::npos || close < open)
    throw DataError(fmt::format("{}: no JSON object found (expected js-tiktoken's ranks format)", what));
  try {
    nlohmann::json j = nlohmann::json::parse(data.substr(open, close - open + 1));
    const std::string ranks = j.at("bpe_ranks").get<std::string>();
    size_t line_start = 0;
    while (line_start < ranks.size()) {
      size_t line_end = ranks.find('\n', line_start);
      if (line_end == std::string::npos) line_end = ranks.size();
      std::string_view line(ranks.data() + line_start, line_end - line_start);
      line_start = line_end + 1;
      if (line.empty()) continue;
      std::vector<std::string_view> f;
      for (size_t p = 0; p <= line.size();) {
        size_t q = line.find(' ', p);
        if (q == std::string_view::npos) q = line.size();
        f.push_back(line.substr(p, q - p));
        p = q + 1;
      }
      if (f.size() < 2) throw DataError(fmt::format("{}: bpe_ranks line without an offset", what));
      int32_t offset = std::stoi(std::string(f[1]));
      for (size_t k = 2; k < f.size(); ++k)
        out.tokens.emplace_back(base64_decode(f[k], what), offset + static_cast<int32_t>(k - 2));
    }
    for (auto it = j.at("special_tokens").begin(); it != j.at("special_tokens").end(); ++it)
      out.special.emplace_back(it.key(), it.value().get<int32_t>());
    out.pat_str = j.at("pat_str").get<std::string>();
    if (j.contains("explicit_n_vocab")) out.explicit_n_vocab = j["explicit_n_vocab"].get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{}: unexpected structure: {}", what, e.what()));
  } catch (const std::logic_error& e) {  // stoi
    throw DataError(fmt::format("{}: bad rank offset: {}", what, e.what()));
  }
  return out;
}

namespace {

std::unique_ptr<Tokenizer> load_tiktoken(const std::string& path, const std::string& name) {
  TiktokenRanks ranks = read_tiktoken_ranks(path);
  auto tok = std::make_unique<ByteLevelBpe>();
  tok->what_ = ranks.what;
  const char* what = tok->what_.c_str();
  tok->hash_ = ranks.hash;
  int64_t max_id = -1;
  for (auto& [bytes, r] : ranks.tokens) {
    tok->vocab_[bytes] = r;
    max_id = std::max<int64_t>(max_id, r);
  }
  tok->check_bytes();
  // tiktoken merges any adjacent pair whose concatenation is a token, at that
  // token's rank: every split of every token is a candidate pair.
  tok->merges_.reserve(ranks.tokens.size() * 8);
  for (const auto& [bytes, r] : ranks.tokens) {
    if (tok->vocab_[bytes] != r) continue;  // shadowed duplicate
    for (size_t k = 1; k < bytes.size(); ++k) {
      auto a = tok->vocab_.find(bytes.substr(0, k)), b = tok->vocab_.find(bytes.substr(k));
      if (a != tok->vocab_.end() && b != tok->vocab_.end()) tok->merges_[pair_key(a->second, b->second)] = {r, r};
    }
  }
  tok->ignore_merges_ = true;  // js-tiktoken: a piece that is a token is taken whole
  for (const auto& [content, id] : ranks.special) {
    max_id = std::max<int64_t>(max_id, id);
    tok->added_.push_back({content, id, false, false});
  }
  tok->index_added();
  tok->vocab_size_ = max_id + 1;
  if (ranks.explicit_n_vocab >= 0 && ranks.explicit_n_vocab != tok->vocab_size_)
    throw DataError(fmt::format("{}: {} ids but explicit_n_vocab is {}", what, tok->vocab_size_,
                                ranks.explicit_n_vocab));
  PreStage st;
  st.regex = std::make_unique<JsRegex>(ranks.pat_str);
  st.keep_gaps = false;
  tok->stages_.push_back(std::move(st));
  tok->name_ = !name.empty() ? name : tok->vocab_size_ == 50257 ? "gpt2" : "tiktoken";
  if ((tok->eos_ = find_token(*tok, "<|endoftext|>")) < 0)
    throw DataError(fmt::format("{}: no <|endoftext|> special token", what));
  return tok;
}

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const std::string& spec, const std::string& kind, const std::string& arg) {
  if (kind == "tokenizer_json") {
    if (arg.empty()) throw DataError(fmt::format("tokenizer spec '{}': expected tokenizer_json:<path>", spec));
    return load_tokenizer_json(arg, "");
  }
  if (kind == "tiktoken") {
    if (arg.empty()) throw DataError(fmt::format("tokenizer spec '{}': expected tiktoken:<path to ranks .cjs/.js>", spec));
    return load_tiktoken(arg, "");
  }
  if (!arg.empty()) return nullptr;
  if (kind == "gpt2") return load_tiktoken(pinned_file(spec, kind), "gpt2");
  if (kind == "llama3" || kind == "qwen3") return load_tokenizer_json(pinned_file(spec, kind), kind);
  return nullptr;
}

}  // namespace llmtrain::tok
