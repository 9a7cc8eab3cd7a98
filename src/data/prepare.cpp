// prepare_data: inputs -> tokens -> HDF5 shards + index.json, in parallel over ranks.
//
// Work split: the inputs, in sorted order, are one virtual byte stream; rank r owns
// the byte range [r*S/P, (r+1)*S/P) and tokenizes every document that STARTS in it.
// A text file starts at its first byte, a JSONL document at the start of its line,
// a compressed JSONL file at its first byte (it is read whole by one rank), and the
// documents of unit i of n of a columnar file (Parquet row group, Arrow record
// batch) at byte i*size/n of the file. Concatenating the ranks' tokens in rank
// order therefore gives the tokens of all documents in input order, for any P; the
// shard writer then cuts that global stream at fixed token offsets, so the files
// do not depend on P.
#include "data/prepare_comm.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/mpi_util.hpp"
#include "data/data_index.hpp"
#include "data/input_readers.hpp"
#include "data/shard_io.hpp"
#include "llmtrain/core/atomic_file.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/hash.hpp"
#include "llmtrain/core/log.hpp"
#include "llmtrain/tokenizer/tokenizer.hpp"
#include "llmtrain/distributed/runtime.hpp"
#include "llmtrain/core/progress.hpp"

namespace llmtrain {

namespace fs = std::filesystem;

namespace data {
namespace {

struct InputFile {
  std::string path;
  int64_t size = 0;
  int64_t start = 0;  // offset in the virtual byte stream of all inputs
  InputFormat format = InputFormat::text;
};

// A Hugging Face `datasets` folder gives only its Arrow files: a save_to_disk
// folder those that state.json lists, in its order; a cache folder (with
// dataset_info.json) its *.arrow files, sorted. Its JSON files are never
// documents. nullopt for any other directory; a `datasets` folder without data
// files is an error (read as plain text it would make documents of its JSON).
std::optional<std::vector<fs::path>> datasets_folder_files(const fs::path& dir) {
  std::vector<fs::path> files;
  if (fs::exists(dir / "state.json")) {
    std::ifstream in(dir / "state.json");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
      for (const auto& f : j.at("_data_files")) files.push_back(dir / f.at("filename").get<std::string>());
    } catch (const nlohmann::json::exception& e) {
      throw DataError(fmt::format("{}: not a `datasets` save_to_disk state file ({})", (dir / "state.json").string(),
                                  e.what()));
    }
    if (files.empty())
      throw DataError(fmt::format("{} lists no data files (\"_data_files\" is empty): a `datasets` save_to_disk "
                                  "folder with no rows to read",
                                  (dir / "state.json").string()));
    for (const auto& f : files)
      if (!fs::is_regular_file(f))
        throw DataError(fmt::format("{} lists '{}', which is missing", (dir / "state.json").string(), f.string()));
    return files;
  }
  if (fs::exists(dir / "dataset_info.json")) {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".arrow") files.push_back(e.path());
    if (files.empty())
      throw DataError(fmt::format("'{}' is a `datasets` folder (it has dataset_info.json) but holds no *.arrow "
                                  "data files",
                                  dir.string()));
    std::sort(files.begin(), files.end());
    return files;
  }
  return std::nullopt;
}

// What a path is, for messages: "a FIFO", "a socket", ...
std::string file_kind(fs::file_type t) {
  switch (t) {
    case fs::file_type::directory: return "a directory";
    case fs::file_type::fifo: return "a FIFO";
    case fs::file_type::socket: return "a socket";
    case fs::file_type::block: return "a block device";
    case fs::file_type::character: return "a character device";
    default: return "not a regular file";
  }
}

// Why `p` cannot be read as an input file; "" when it can. Follows symlinks,
// naming the target of one that dangles or loops; tries an open for reading
// (O_NONBLOCK: a FIFO never blocks the listing).
std::string unreadable_reason(const fs::path& p) {
  std::error_code ec, lec;
  const auto st = fs::status(p, ec);
  if (ec || !fs::exists(st)) {
    const bool missing = !ec || ec.value() == ENOENT;
    if (fs::is_symlink(fs::symlink_status(p, lec)))
      return fmt::format("a symlink to '{}' that cannot be followed ({})", fs::read_symlink(p, lec).string(),
                         missing ? "its target does not exist" : ec.message());
    return missing ? "does not exist" : ec.message();
  }
  if (!fs::is_regular_file(st)) return file_kind(st.type());
  const int fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fmt::format("cannot be opened for reading: {}", std::strerror(errno));
  ::close(fd);
  return "";
}

struct InputList {
  std::vector<InputFile> files;
  std::vector<std::string> skipped;  // "<path>: <why>", files found in input directories that cannot be read
};

// Whether file `p` is taken under --ext: its name ends with one of `exts`
// (compound suffixes too: .jsonl.zst); every file when `exts` is empty.
bool extension_wanted(const fs::path& p, const std::vector<std::string>& exts) {
  if (exts.empty()) return true;
  const std::string name = p.filename().string();
  for (const auto& e : exts)
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) return true;
  return false;
}

// The files of input directory `in` (recursive, sorted; hidden ones and other
// extensions left out; a `datasets` folder inside it gives its data files, in its
// order, at its place). What cannot be read as a file (a dangling or looping
// symlink, a FIFO, a socket, a device, an unreadable file or directory, a symlink
// to a directory, which is not followed, a 0-byte Parquet or Arrow file) is
// skipped and named.
void list_directory(const fs::path& in, const std::vector<std::string>& exts, InputList& out) {
  std::vector<std::pair<fs::path, std::vector<fs::path>>> found;  // (where it sorts, its files)
  const size_t first_skip = out.skipped.size();
  std::error_code ec;
  auto it = fs::recursive_directory_iterator(in, ec);
  if (ec) throw DataError(fmt::format("input directory '{}' cannot be read: {}", in.string(), ec.message()));
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) throw DataError(fmt::format("input directory '{}' cannot be read: {}", in.string(), ec.message()));
    const fs::path& p = it->path();
    bool hidden = false;
    for (const auto& part : p.lexically_relative(in)) hidden = hidden || part.string().rfind('.', 0) == 0;
    std::error_code lec;
    const bool link = fs::is_symlink(it->symlink_status(lec));
    if (!link && it->is_directory(lec)) {
      if (hidden) continue;
      if (::access(p.c_str(), R_OK | X_OK) != 0) {
        out.skipped.push_back(
            fmt::format("{}: a directory that cannot be read: {}", p.string(), std::strerror(errno)));
        it.disable_recursion_pending();
        continue;
      }
      if (auto ds = datasets_folder_files(p)) {  // its data files; its JSON files are not documents
        it.disable_recursion_pending();
        if (extension_wanted("data.arrow", exts)) found.push_back({p, *ds});
      }
      continue;  // recursed into
    }
    if (hidden || !extension_wanted(p, exts)) continue;
    std::string why =
        link && fs::is_directory(p, lec) ? "a symlink to a directory (not followed)" : unreadable_reason(p);
    if (why.empty() && is_columnar(input_format(p.string())) && fs::file_size(p, lec) == 0)
      why = "an empty (0-byte) Parquet/Arrow file, not a table (truncated or not written)";
    if (why.empty())
      found.push_back({p, {p}});
    else
      out.skipped.push_back(fmt::format("{}: {}", p.string(), why));
  }
  std::sort(found.begin(), found.end());
  std::sort(out.skipped.begin() + static_cast<std::ptrdiff_t>(first_skip), out.skipped.end());
  for (const auto& [where, files] : found)
    for (const auto& p : files)
      out.files.push_back({p.string(), 0, 0, where == p ? input_format(p.string()) : InputFormat::arrow});
}

InputList list_inputs(const std::vector<std::string>& inputs, const std::vector<std::string>& exts) {
  InputList list;
  std::vector<std::string> empty_dirs;  // input directories that gave no file
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      if (auto ds = datasets_folder_files(in)) {  // a `datasets` folder: the files it names
        for (const auto& p : *ds) list.files.push_back({p.string(), 0, 0, InputFormat::arrow});
        continue;
      }
      const size_t before = list.files.size();
      list_directory(in, exts, list);
      if (list.files.size() == before) empty_dirs.push_back(in);
      continue;
    }
    // An input named on the command line is never skipped: it is an error.
    const std::string why = unreadable_reason(in);
    if (why == "does not exist") throw DataError(fmt::format("input '{}' does not exist", in));
    if (!why.empty()) throw DataError(fmt::format("input '{}': {}", in, why));
    if (is_columnar(input_format(in)) && fs::file_size(in) == 0)
      throw DataError(fmt::format("input '{}' is empty (0 bytes): not a Parquet/Arrow table (truncated or not "
                                  "written?)",
                                  in));
    list.files.push_back({in, 0, 0, input_format(in)});
  }
  if (list.files.empty() && !empty_dirs.empty()) {
    std::string dirs;
    for (const auto& d : empty_dirs) dirs += (dirs.empty() ? "'" : ", '") + d + "'";
    std::string want;
    for (const auto& e : exts) want += (want.empty() ? "" : ", ") + e;
    throw DataError(exts.empty() ? fmt::format("input directory {} holds no readable files", dirs)
                                 : fmt::format("input directory {} holds no files whose names end in {} (--ext)",
                                               dirs, want));
  }
  // The same file twice (named twice, or named and found in a named directory)
  // would double its documents and put copies of them in both splits.
  std::map<std::string, std::string> seen;  // canonical path -> as given
  for (const auto& f : list.files) {
    std::error_code cec;
    const std::string key = fs::weakly_canonical(f.path, cec).string();
    const auto [at, fresh] = seen.emplace(cec ? f.path : key, f.path);
    if (!fresh)
      throw DataError(fmt::format("input file '{}' is given twice{}: its documents would be read twice (and land "
                                  "in both train and val); name each file once",
                                  f.path, at->second == f.path ? "" : fmt::format(" (also as '{}')", at->second)));
  }
  int64_t start = 0;
  for (auto& f : list.files) {
    f.size = static_cast<int64_t>(fs::file_size(f.path));
    f.start = start;
    start += f.size;
  }
  return list;
}

// Train/val by a hash of where the document starts (file index, byte offset):
// known to whichever rank reads the document, independent of the rank count.
bool goes_to_val(uint64_t seed, size_t file_index, int64_t offset, double val_fraction) {
  if (val_fraction <= 0.0) return false;
  const uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ file_index) ^ static_cast<uint64_t>(offset));
  return static_cast<double>(h >> 11) * 0x1.0p-53 < val_fraction;
}

int64_t line_number(const std::string& path, int64_t offset) {
  std::ifstream in(path, std::ios::binary);
  int64_t line = 1;
  char c;
  for (int64_t i = 0; i < offset && in.get(c); ++i) line += c == '\n';
  return line;
}

}  // namespace

size_t utf8_first_invalid(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  while (i < n) {
    const unsigned b = byte(i);
    if (b < 0x80) { ++i; continue; }
    // Well-formed sequences (Unicode Table 3-7): no overlong forms, no surrogates, <= U+10FFFF.
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b >= 0xE0 && b <= 0xEF) { len = 3; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
    else if (b >= 0xF0 && b <= 0xF4) { len = 4; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
    else return i;
    if (i + len > n) return i;
    if (byte(i + 1) < lo || byte(i + 1) > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string not_text_reason(std::string_view text, bool require_utf8) {
  if (const auto nul = text.find('\0'); nul != std::string_view::npos)
    return fmt::format("binary (a NUL byte at offset {})", nul);
  if (require_utf8)
    if (const auto bad = utf8_first_invalid(text); bad != std::string_view::npos)
      return fmt::format("not UTF-8 text (an ill-formed byte sequence at offset {})", bad);
  return "";
}

namespace {

// Rank-0 progress: documents, tokens, tokens/s and ETA from the share of rank 0's
// byte range done (every rank has about the same number of bytes). Redrawn in
// place on a terminal, a plain line every 10 s otherwise (logs under Slurm).
class Progress {
 public:
  Progress(bool on, int64_t bytes, int world) : on_(on), bytes_(std::max<int64_t>(bytes, 1)), world_(world) {
    // The trainer's rule (mpirun gives ranks a pty even when the output is a file;
    // LLMTRAIN_PROGRESS overrides): redraw in place only on a real terminal.
    const auto mode = ProgressBar::detect_mode();
    on_ = on_ && mode != ProgressBar::Mode::off;
    tty_ = on_ && mode == ProgressBar::Mode::terminal;
    t0_ = last_ = std::chrono::steady_clock::now();
  }
  void update(int64_t docs, int64_t tokens, int64_t bytes_done, bool final = false) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (!final && since < (tty_ ? 0.25 : 10.0)) return;
    last_ = now;
    const double el = std::chrono::duration<double>(now - t0_).count();
    const double frac = std::min(1.0, static_cast<double>(bytes_done) / bytes_);
    const double rate = el > 0 ? tokens / el : 0.0;
    const double eta = frac > 0 ? el * (1 - frac) / frac : 0.0;
    const std::string line = fmt::format(
        "prepare: {:5.1f}% | rank 0: {} docs, {:.2f}M tokens, {:.2f}M tok/s (x{} ranks) | elapsed {:.0f}s ETA {:.0f}s",
        100 * frac, docs, tokens / 1e6, rate / 1e6, world_, el, eta);
    if (tty_) {
      std::fprintf(stdout, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
    } else {
      std::fprintf(stdout, "%s\n", line.c_str());
    }
    std::fflush(stdout);
  }

 private:
  bool on_, tty_ = false;
  int64_t bytes_;
  int world_;
  std::chrono::steady_clock::time_point t0_, last_;
};

template <typename T>
struct SplitTokens {
  std::vector<T> train, val;
  int64_t train_docs = 0, val_docs = 0;
  std::vector<std::string> skipped;  // "<file>[:line]: <reason>", in input order
};

// The byte tokenizer takes any bytes; the text tokenizers need UTF-8 (they would
// turn every ill-formed byte into U+FFFD and train on noise).
bool needs_utf8(const Tokenizer& tok) { return tok.name() != "byte"; }

// Where a document is, for messages: "file", "file:line" or "file: row N".
using Where = std::function<std::string()>;

template <typename T>
void append_document(const Tokenizer& tok, std::string_view text, bool val, SplitTokens<T>& out,
                     const Where& where, const PrepareOptions& opt) {
  // A document that is not text, or that would put the end-of-document id inside
  // itself, is skipped (or refused with --strict): EOS must only ever separate documents.
  auto reject = [&](const std::string& why) {
    if (opt.strict)
      throw DataError(fmt::format("{}: {}; remove it from the inputs (without --strict it is skipped with a "
                                  "warning)", where(), why));
    out.skipped.push_back(fmt::format("{}: {}", where(), why));
  };
  if (std::string why = not_text_reason(text, needs_utf8(tok)); !why.empty()) return reject(why);
  const std::vector<int32_t> ids = tok.encode(text);
  const int64_t vocab = tok.vocab_size();
  const int32_t eos = tok.eos_id();
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab)
      throw DataError(fmt::format("tokenizer '{}' produced id {} (vocabulary {}) for the document at {}",
                                  tok.name(), id, vocab, where()));
    if (id == eos)
      return reject(fmt::format("its text holds the end-of-document token (id {}) of tokenizer '{}'", eos,
                                tok.name()));
  }
  auto& dst = val ? out.val : out.train;
  for (const int32_t id : ids) dst.push_back(static_cast<T>(id));
  dst.push_back(static_cast<T>(eos));  // EOS after every document
  ++(val ? out.val_docs : out.train_docs);
}

// The document of one JSONL line: its --text_field; false for a blank line or an
// empty text, or a line that is not text (skipped, or refused with --strict).
template <typename T>
bool jsonl_text(std::string_view line, const Where& where, const PrepareOptions& opt, SplitTokens<T>& out,
                std::string& text) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find_first_not_of(" \t") == std::string::npos) return false;
  if (std::string why = not_text_reason(line, true); !why.empty()) {
    if (opt.strict)
      throw DataError(fmt::format("{}: {}; remove it from the inputs (without --strict it is skipped with a "
                                  "warning)", where(), why));
    out.skipped.push_back(fmt::format("{}: {}", where(), why));
    return false;
  }
  try {
    const auto j = nlohmann::json::parse(line);
    const auto it = j.is_object() ? j.find(opt.text_field) : j.end();
    if (!j.is_object() || it == j.end() || !it->is_string())
      throw DataError(fmt::format("{}: JSONL line has no string field \"{}\" (--text_field)", where(),
                                  opt.text_field));
    text = it->template get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{}: unreadable JSONL line ({})", where(), e.what()));
  }
  return !text.empty();
}

template <typename T>
void tokenize_text_file(const InputFile& f, size_t fi, const Tokenizer& tok, const PrepareOptions& opt,
                        SplitTokens<T>& out) {
  errno = 0;
  std::ifstream in(f.path, std::ios::binary);
  if (!in) throw DataError(fmt::format("cannot read input '{}': {}", f.path, std::strerror(errno)));
  std::string text(static_cast<size_t>(f.size), '\0');
  in.read(text.data(), f.size);
  if (!in) throw DataError(fmt::format("reading input '{}' failed: {}", f.path, std::strerror(errno)));
  append_document(tok, text, goes_to_val(opt.split_seed, fi, 0, opt.val_fraction), out, [&] { return f.path; },
                  opt);
}

// The lines of a plain JSONL file that start in [a, b) of the file.
template <typename T>
void tokenize_jsonl_range(const InputFile& f, size_t fi, int64_t a, int64_t b, const Tokenizer& tok,
                          const PrepareOptions& opt, SplitTokens<T>& out, const std::function<void(int64_t)>& done) {
  errno = 0;
  std::ifstream in(f.path, std::ios::binary);
  if (!in) throw DataError(fmt::format("cannot read input '{}': {}", f.path, std::strerror(errno)));
  int64_t pos = a;
  if (a > 0) {
    in.seekg(a - 1);
    char c = 0;
    in.get(c);
    if (c != '\n') {
      std::string skip;
      std::getline(in, skip);
      pos = a + static_cast<int64_t>(skip.size()) + 1;
    }
  }
  std::string line, text;
  while (pos < b && std::getline(in, line)) {
    const int64_t line_start = pos;
    pos += static_cast<int64_t>(line.size()) + 1;
    const Where where = [&] { return fmt::format("{}:{}", f.path, line_number(f.path, line_start)); };
    if (!jsonl_text(line, where, opt, out, text)) continue;
    append_document(tok, text, goes_to_val(opt.split_seed, fi, line_start, opt.val_fraction), out, where, opt);
    done(f.start + pos);
  }
}

// A compressed JSONL file, whole (one rank reads it).
template <typename T>
void tokenize_compressed_jsonl(const InputFile& f, size_t fi, const Tokenizer& tok, const PrepareOptions& opt,
                               SplitTokens<T>& out) {
  int64_t line_no = 0;
  std::string text;
  compressed_read_lines(f.path, f.format, [&](int64_t offset, std::string_view line) {
    ++line_no;
    const Where where = [&] { return fmt::format("{}:{}", f.path, line_no); };
    if (!jsonl_text(line, where, opt, out, text)) return;
    append_document(tok, text, goes_to_val(opt.split_seed, fi, offset, opt.val_fraction), out, where, opt);
  });
}

// The units (row groups, record batches) of a columnar file whose documents start
// in [lo, hi) of the byte stream: unit i of n starts at f.start + i*size/n.
template <typename T>
void tokenize_columnar(const InputFile& f, size_t fi, int64_t lo, int64_t hi, const Tokenizer& tok,
                       const PrepareOptions& opt, SplitTokens<T>& out) {
  const int64_t n = columnar_unit_count(f.path, f.format, opt.text_field);
  auto unit_start = [&](int64_t i) { return f.start + (n > 0 ? f.size * i / n : 0); };
  int64_t first = 0, end = 0;
  while (first < n && unit_start(first) < lo) ++first;
  for (end = first; end < n && unit_start(end) < hi;) ++end;
  columnar_read_units(f.path, f.format, opt.text_field, first, end, [&](int64_t row, std::string_view text, bool null) {
    if (null || text.empty()) return;
    append_document(tok, text, goes_to_val(opt.split_seed, fi, row, opt.val_fraction), out,
                    [&] { return fmt::format("{}: row {} (column '{}')", f.path, row, opt.text_field); }, opt);
  });
}

template <typename T>
SplitTokens<T> tokenize_range(const std::vector<InputFile>& files, int64_t lo, int64_t hi, const Tokenizer& tok,
                              const PrepareOptions& opt, Progress& progress) {
  SplitTokens<T> out;
  auto done = [&](int64_t g) {
    progress.update(out.train_docs + out.val_docs, out.train.size() + out.val.size(),
                    std::max<int64_t>(0, std::min(g, hi) - lo));
  };
  for (size_t fi = 0; fi < files.size(); ++fi) {
    const auto& f = files[fi];
    const int64_t fend = f.start + f.size;
    if (f.start >= hi) break;
    if (fend <= lo) continue;
    if (f.format == InputFormat::jsonl) {
      tokenize_jsonl_range(f, fi, std::max(lo, f.start) - f.start, std::min(hi, fend) - f.start, tok, opt, out,
                           done);
    } else if (is_columnar(f.format)) {
      tokenize_columnar(f, fi, lo, hi, tok, opt, out);
    } else {
      if (f.start < lo) continue;  // the document(s) start in another rank's range
      if (is_compressed_jsonl(f.format)) tokenize_compressed_jsonl(f, fi, tok, opt, out);
      else tokenize_text_file(f, fi, tok, opt, out);
    }
    done(fend);
  }
  progress.update(out.train_docs + out.val_docs, out.train.size() + out.val.size(), hi - lo, true);
  return out;
}

// ---- the output directory -----------------------------------------------------
// The new data is written into a temporary directory beside out_dir and swapped in
// only when it is complete and has been read back: a run that fails (bad input,
// full disk, a killed rank) leaves an earlier data directory as it was.

// What llmtrain-prepare puts in a data directory (and its temporary names).
bool is_our_file(const std::string& name) {
  // <shard>-<jobid>-<pid>.lock: Open MPI's sharedfp/lockedfile lock file, left by a
  // process killed while the shard was open (docs/architecture.md, Open MPI components).
  static const std::regex ours(
      R"(index\.json|(train|val)_\d{5}\.h5(\.tmp)?(-\d+-\d+\.lock)?|\.index\.json\.tmp\.\d+)");
  return std::regex_match(name, ours);
}

struct Staging {
  fs::path target;  // out_dir
  fs::path temp;    // <parent>/.<name>.prepare-<pid>: written first, renamed to target at the end
};

// Rank 0, before any input is read: checks out_dir and creates the temporary
// directory, so an unwritable location fails at once, naming the path and the
// OS's reason. An existing data directory is replaced only with --overwrite, and
// a directory that holds anything else never.
Staging begin_output(const PrepareOptions& opt) {
  fs::path target = fs::path(opt.out_dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "data/x/" -> "data/x"
  const std::string name = target.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw DataError(fmt::format("--out_dir '{}' must name a directory to create, not '{}'", opt.out_dir, name));
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw DataError(fmt::format("cannot create '{}' (for --out_dir '{}'): {}", parent.string(), opt.out_dir,
                                      ec.message()));
  const auto st = fs::symlink_status(target, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw DataError(fmt::format("cannot access --out_dir '{}': {}", target.string(), ec.message()));
  if (fs::is_symlink(st))  // renaming the link would not replace what it points to
    throw DataError(fmt::format("--out_dir '{}' is a symbolic link; give the directory itself ('{}')",
                                target.string(), fs::weakly_canonical(target, ec).string()));
  if (fs::exists(st)) {
    if (!fs::is_directory(st))
      throw DataError(fmt::format("--out_dir '{}' exists and is not a directory", target.string()));
    std::string foreign;
    bool empty = true;
    for (const auto& e : fs::directory_iterator(target, ec)) {
      empty = false;
      if (!is_our_file(e.path().filename().string())) {
        foreign = e.path().filename().string();
        break;
      }
    }
    if (ec) throw DataError(fmt::format("cannot list --out_dir '{}': {}", target.string(), ec.message()));
    if (!foreign.empty())
      throw DataError(fmt::format("--out_dir '{}' is not empty and is not a data directory made by llmtrain-prepare "
                                  "(it holds '{}'); refusing to replace it: choose another --out_dir",
                                  target.string(), foreign));
    if (!empty && !opt.overwrite)
      throw DataError(fmt::format("--out_dir '{}' already holds a data directory; llmtrain-prepare replaces it only "
                                  "with --overwrite (and only once the new data is complete and checked)",
                                  target.string()));
  }
  Staging s{target, parent / fmt::format(".{}.prepare-{}", name, static_cast<long>(::getpid()))};
  fs::remove_all(s.temp, ec);  // a leftover of a killed run with the same pid
  if (!fs::create_directory(s.temp, ec) || ec)
    throw DataError(fmt::format("cannot write the output beside --out_dir '{}': creating '{}' failed: {}",
                                target.string(), s.temp.string(), ec ? ec.message() : "it already exists"));
  return s;
}

// Rank 0, after everything is written: reads the new directory back (the index
// and every shard's header against it), then swaps it in with renames on the same
// file system: the old directory aside, the new one in, the old one removed.
void commit_output(const Staging& s) {
  read_data_index(s.temp.string());
  try {
    publish_directory(s.temp, s.target);
  } catch (const Error& e) {
    throw DataError(e.what());  // a DataError reaches every rank (collectively)
  }
}

// Every rank's skipped documents, printed by rank 0 in input (= rank) order with
// their count. Collective.
int64_t report_skipped(MPI_Comm comm, const std::vector<std::string>& mine) {
  int rank = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &world));
  std::string text;
  for (const auto& m : mine) text += m + "\n";
  int len = static_cast<int>(text.size());
  std::vector<int> lens(static_cast<size_t>(world)), offs(static_cast<size_t>(world), 0);
  MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm));
  std::string all;
  if (rank == 0) {
    for (int r = 1; r < world; ++r) offs[r] = offs[r - 1] + lens[r - 1];
    all.resize(static_cast<size_t>(offs.back() + lens.back()));
  }
  MPI_CHECK(MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), offs.data(), MPI_CHAR, 0, comm));
  int64_t n = static_cast<int64_t>(mine.size()), total = 0;
  MPI_CHECK(MPI_Allreduce(&n, &total, 1, MPI_INT64_T, MPI_SUM, comm));
  if (rank == 0 && total > 0) {
    size_t a = 0;
    while (a < all.size()) {
      const size_t b = all.find('\n', a);
      log::warn("skipped {}", all.substr(a, b - a));
      a = b + 1;
    }
    log::warn("skipped {} input document(s) that are not text or hold the end-of-document token (see above); "
              "--strict refuses them instead", total);
  }
  return total;
}

// A DataError on some ranks becomes the same DataError on every rank (the lowest
// failing rank's message), so no rank is left waiting in a collective.
void agree_on_error(MPI_Comm comm, const std::string& local_error, bool failed) {
  int rank = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &world));
  int mine = failed ? rank : world, first = world;
  MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == world) return;
  const std::string msg = mpi::bcast_string(comm, local_error, first);
  throw DataError(first == rank ? msg : fmt::format("{} (reported by rank {})", msg, first));
}

// Runs fn(); a DataError it throws on any rank is thrown on every rank.
template <typename Fn>
auto collectively(MPI_Comm comm, Fn&& fn) -> decltype(fn()) {
  std::string err;
  bool failed = false;
  using R = decltype(fn());
  R value{};
  try {
    value = fn();
  } catch (const DataError& e) {
    err = e.what();
    failed = true;
  }
  agree_on_error(comm, err, failed);
  return value;
}

template <typename T>
PrepareResult write_all(MPI_Comm comm, const PrepareOptions& opt, const std::string& dir, SplitTokens<T>& tokens,
                        const ShardMeta& meta, const std::vector<std::string>& sources, bool nanogpt) {
  int rank = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &world));
  int64_t local[4] = {static_cast<int64_t>(tokens.train.size()), static_cast<int64_t>(tokens.val.size()),
                      tokens.train_docs, tokens.val_docs};
  int64_t offset[4] = {0, 0, 0, 0}, total[4] = {0, 0, 0, 0};
  MPI_CHECK(MPI_Exscan(local, offset, 4, MPI_INT64_T, MPI_SUM, comm));
  if (rank == 0) std::fill(offset, offset + 4, 0);  // MPI_Exscan leaves rank 0's result undefined
  MPI_CHECK(MPI_Allreduce(local, total, 4, MPI_INT64_T, MPI_SUM, comm));
  if (total[0] == 0)
    throw DataError(fmt::format("empty input: no tokens for the train split from {} (no non-empty text documents)",
                                fmt::join(sources, ", ")));
  if (total[1] == 0 && nanogpt)
    throw DataError(fmt::format("nanoGPT import from '{}': val.bin holds no tokens", opt.from_nanogpt));
  if (total[1] == 0 && opt.val_fraction > 0)
    throw DataError(fmt::format("the val split is empty: none of the {} documents of {} fell into val with "
                                "val_fraction={}; use more documents or a larger --val_fraction",
                                total[2], fmt::join(sources, ", "), opt.val_fraction));

  DataIndex index;
  index.info.vocab_size = meta.vocab_size;
  index.info.tokenizer = meta.tokenizer;
  index.info.tokenizer_hash = meta.tokenizer_hash;
  index.info.token_dtype = meta.dtype;
  index.eos_id = meta.eos_id;
  index.train_documents = total[2];
  index.val_documents = total[3];
  const auto train_counts =
      write_split_shards(comm, dir, Split::train, tokens.train, offset[0], total[0], opt.shard_tokens, meta);
  std::vector<T>().swap(tokens.train);
  const auto val_counts =
      write_split_shards(comm, dir, Split::val, tokens.val, offset[1], total[1], opt.shard_tokens, meta);
  for (size_t i = 0; i < train_counts.size(); ++i)
    index.train.push_back({shard_file_name(Split::train, i), train_counts[i]});
  for (size_t i = 0; i < val_counts.size(); ++i) index.val.push_back({shard_file_name(Split::val, i), val_counts[i]});
  // index.json last and by rename: it exists only when every shard is complete.
  if (rank == 0) write_file_atomic(fs::path(dir) / "index.json", data_index_json(index, sources));
  PrepareResult r;
  r.train_tokens = total[0];
  r.val_tokens = total[1];
  r.train_documents = total[2];
  r.val_documents = total[3];
  r.train_shards = static_cast<int64_t>(train_counts.size());
  r.val_shards = static_cast<int64_t>(val_counts.size());
  r.world_size = world;
  return r;
}

// nanoGPT's <split>.bin: raw little-endian uint16; rank r reads its slice.
std::vector<uint16_t> read_bin_slice(const std::string& path, int rank, int world, int64_t vocab,
                                     int64_t* offset_out) {
  if (!fs::is_regular_file(path)) throw DataError(fmt::format("nanoGPT file '{}' is missing", path));
  const int64_t bytes = static_cast<int64_t>(fs::file_size(path));
  if (bytes % 2 != 0)
    throw DataError(fmt::format("nanoGPT file '{}' has {} bytes, not a whole number of uint16 tokens", path, bytes));
  const int64_t n = bytes / 2;
  const int64_t lo = n * rank / world, hi = n * (rank + 1) / world;
  std::vector<uint16_t> v(static_cast<size_t>(hi - lo));
  std::ifstream in(path, std::ios::binary);
  in.seekg(lo * 2);
  in.read(reinterpret_cast<char*>(v.data()), (hi - lo) * 2);
  if (!in) throw DataError(fmt::format("cannot read nanoGPT file '{}'", path));
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] >= vocab)
      throw DataError(fmt::format("nanoGPT file '{}': token {} at index {} is >= vocab_size {} (wrong "
                                  "--vocab_size, or not a uint16 token file)",
                                  path, v[i], lo + static_cast<int64_t>(i), vocab));
  *offset_out = lo;
  return v;
}

}  // namespace

PrepareResult prepare_data_on(const PrepareOptions& opt, MPI_Comm comm) {
  const auto t0 = std::chrono::steady_clock::now();
  int rank = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &world));
  if (opt.out_dir.empty()) throw DataError("prepare: no output directory given (--out_dir)");
  if (opt.shard_tokens <= 0)
    throw DataError(fmt::format("shard_tokens={} must be positive", opt.shard_tokens));
  if (!(opt.val_fraction >= 0.0 && opt.val_fraction < 1.0))
    throw DataError(fmt::format("val_fraction={} must be in [0, 1)", opt.val_fraction));

  // 1. The output location, before any input is read: an unwritable out_dir or
  //    an existing data directory (without --overwrite) fails at once.
  Staging staging;
  collectively(comm, [&] {
    if (rank == 0) staging = begin_output(opt);
    return 0;
  });
  const std::string temp = mpi::bcast_string(comm, staging.temp.string());

  PrepareResult result;
  try {
    // 2. Tokens -> shards and index.json in the temporary directory.
    if (!opt.from_nanogpt.empty()) {
      if (!opt.inputs.empty()) throw DataError("give either text inputs or --from_nanogpt, not both");
      if (opt.vocab_size <= 0 || opt.vocab_size > 65536)
        throw DataError(fmt::format("--from_nanogpt needs --vocab_size in [1, 65536] (the .bin files hold uint16 "
                                    "ids), got {}", opt.vocab_size));
      auto tokens = collectively(comm, [&] {
        SplitTokens<uint16_t> t;
        int64_t train_off = 0, val_off = 0;
        t.train = read_bin_slice((fs::path(opt.from_nanogpt) / "train.bin").string(), rank, world, opt.vocab_size,
                                 &train_off);
        t.val = read_bin_slice((fs::path(opt.from_nanogpt) / "val.bin").string(), rank, world, opt.vocab_size,
                               &val_off);
        return t;
      });
      // Document counts are unknown for a raw token stream (0 in the index); so is EOS.
      ShardMeta meta{opt.vocab_size, -1, opt.tokenizer_name, "", "uint16"};
      result = write_all(comm, opt, temp, tokens, meta, {opt.from_nanogpt}, true);
    } else {
      if (opt.inputs.empty()) throw DataError("prepare: no inputs given (text files, directories or JSONL)");
      const auto tok = make_tokenizer(opt.tokenizer);
      const auto listed = collectively(comm, [&] { return list_inputs(opt.inputs, opt.extensions); });
      const auto& files = listed.files;
      for (const auto& s : listed.skipped) log::warn("skipped input {}", s);  // the same list on every rank
      if (!listed.skipped.empty())
        log::warn("skipped {} input file(s) that cannot be read (see above)", listed.skipped.size());
      int64_t bytes = 0;
      for (const auto& f : files) bytes += f.size;
      const int64_t lo = bytes * rank / world, hi = bytes * (rank + 1) / world;
      Progress progress(opt.progress && rank == 0, hi - lo, world);
      ShardMeta meta{tok->vocab_size(), tok->eos_id(), tok->name(), tok->file_hash(),
                     tok->vocab_size() <= 65536 ? "uint16" : "uint32"};
      auto run = [&](auto tag) {
        using T = decltype(tag);
        auto tokens = collectively(comm, [&] { return tokenize_range<T>(files, lo, hi, *tok, opt, progress); });
        const int64_t skipped = report_skipped(comm, tokens.skipped);
        result = write_all(comm, opt, temp, tokens, meta, opt.inputs, false);
        result.skipped_documents = skipped;
        result.skipped_inputs = static_cast<int64_t>(listed.skipped.size());
      };
      if (meta.dtype == "uint16") run(uint16_t{}); else run(uint32_t{});
    }
    // 3. Read back and checked, then swapped in (rank 0).
    collectively(comm, [&] {
      if (rank == 0) commit_output(staging);
      return 0;
    });
  } catch (...) {
    // A DataError reaches every rank (collectively); an I/O or MPI error may be
    // on this rank alone, and the job then ends (run_main aborts every rank).
    // Either way the partial output goes, and an earlier out_dir stays as it was.
    // Every rank removes the same tree, often at the same moment: remove_all
    // stops at the first entry another rank removed under it (ENOENT), so it is
    // repeated until the tree is gone.
    std::error_code ec;
    for (int attempt = 0; attempt < 100 && fs::exists(temp, ec); ++attempt) fs::remove_all(temp, ec);
    throw;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace data

PrepareResult prepare_data(const PrepareOptions& options, const Runtime& rt) {
  return data::prepare_data_on(options, MPI_COMM_WORLD);
}

}  // namespace llmtrain
