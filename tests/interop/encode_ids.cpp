// encode_ids: our token ids for the tokenizer-oracle test (test_hf_interop.py tokenizers).
//   encode_ids SPEC OUT.json INPUT...     INPUT = a file (whole) or lines:FILE (each line)
//       writes [[ids of input 1], ...] (a lines: input gives a list of lists), as encode_js.mjs
//   encode_ids --hf-files SPEC OUT_DIR    writes hf_tokenizer_files(name, hash) of SPEC's tokenizer
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "llmtrain/core/atomic_file.hpp"
#include "llmtrain/tokenizer/tokenizer.hpp"

namespace {
std::string read_text(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

int main(int argc, char** argv) {
  using namespace llmtrain;
  try {
    if (argc >= 4 && std::string(argv[1]) == "--hf-files") {
      auto tok = make_tokenizer(argv[2]);
      const HfTokenizerFiles f = hf_tokenizer_files(tok->name(), tok->file_hash());
      if (f.files.empty()) throw std::runtime_error(f.why_not);
      std::filesystem::create_directories(argv[3]);
      for (const auto& [name, text] : f.files) write_file_atomic(std::filesystem::path(argv[3]) / name, text);
      return 0;
    }
    if (argc < 3) {
      std::fprintf(stderr, "usage: encode_ids SPEC OUT.json INPUT... | encode_ids --hf-files SPEC OUT_DIR\n");
      return 2;
    }
    auto tok = make_tokenizer(argv[1]);
    nlohmann::json out = nlohmann::json::array();
    for (int i = 3; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.rfind("lines:", 0) == 0) {
        const std::string text = read_text(arg.substr(6));
        nlohmann::json lines = nlohmann::json::array();
        for (size_t p = 0;;) {
          const size_t q = text.find('\n', p);
          lines.push_back(tok->encode(text.substr(p, q == std::string::npos ? std::string::npos : q - p)));
          if (q == std::string::npos) break;
          p = q + 1;
        }
        out.push_back(std::move(lines));
      } else {
        out.push_back(tok->encode(read_text(arg)));
      }
    }
    write_file_atomic(argv[2], out.dump());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
