// Compressed JSONL (SlimPajama ships .jsonl.zst): streamed through Debian's
// libzstd, zlib and liblzma, cut into lines as it is decompressed. Concatenated
// frames/members (zstd -c a b, cat x.gz y.gz) are read to the end.
#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "data/input_readers.hpp"
#include "llmtrain/core/error.hpp"

namespace llmtrain::data {

InputFormat input_format(const std::string& path) {
  auto ends = [&](std::string_view s) {
    return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0;
  };
  if (ends(".parquet")) return InputFormat::parquet;
  if (ends(".arrow")) return InputFormat::arrow;
  if (ends(".jsonl") || ends(".ndjson")) return InputFormat::jsonl;
  if (ends(".jsonl.zst") || ends(".jsonl.zstd") || ends(".ndjson.zst")) return InputFormat::jsonl_zstd;
  if (ends(".jsonl.gz") || ends(".ndjson.gz")) return InputFormat::jsonl_gzip;
  if (ends(".jsonl.xz") || ends(".ndjson.xz")) return InputFormat::jsonl_xz;
  return InputFormat::text;
}

namespace {

constexpr size_t kChunk = 1 << 20;

const char* codec_name(InputFormat f) {
  return f == InputFormat::jsonl_zstd ? "zstd" : f == InputFormat::jsonl_gzip ? "gzip" : "xz";
}

// Decompressed bytes -> lines with their offsets in the decompressed stream.
class LineSplitter {
 public:
  explicit LineSplitter(const std::function<void(int64_t, std::string_view)>& fn) : fn_(fn) {}
  void feed(const char* p, size_t n) {
    size_t a = 0;
    for (size_t i = 0; i < n; ++i) {
      if (p[i] != '\n') continue;
      emit(p + a, i - a);
      a = i + 1;
    }
    pending_.append(p + a, n - a);
  }
  void finish() {
    if (!pending_.empty()) emit(nullptr, 0);
  }

 private:
  void emit(const char* p, size_t n) {
    std::string_view line;
    if (pending_.empty()) {
      line = std::string_view(p, n);
    } else {
      pending_.append(p ? p : "", n);
      line = pending_;
    }
    fn_(offset_, line);
    offset_ += static_cast<int64_t>(line.size()) + 1;
    pending_.clear();
  }
  const std::function<void(int64_t, std::string_view)>& fn_;
  std::string pending_;
  int64_t offset_ = 0;
};

// Calls decode(in, n, at_eof) for each compressed chunk of the file.
template <typename Fn>
void each_chunk(const std::string& path, Fn&& decode) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(fmt::format("cannot read input '{}': {}", path, std::strerror(errno)));
  std::vector<char> buf(kChunk);
  while (true) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const size_t n = static_cast<size_t>(in.gcount());
    if (in.bad()) throw DataError(fmt::format("reading input '{}' failed: {}", path, std::strerror(errno)));
    decode(buf.data(), n, n < buf.size());
    if (n < buf.size()) return;
  }
}

[[noreturn]] void corrupt(const std::string& path, InputFormat f, const std::string& why) {
  throw DataError(fmt::format("{}: not a readable {}-compressed JSONL file ({})", path, codec_name(f), why));
}

void read_zstd(const std::string& path, LineSplitter& lines) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  std::vector<char> out(ZSTD_DStreamOutSize());
  size_t last = 0;  // 0 once a frame is complete
  bool any = false;
  each_chunk(path, [&](const char* p, size_t n, bool eof) {
    ZSTD_inBuffer in{p, n, 0};
    while (in.pos < in.size) {
      ZSTD_outBuffer o{out.data(), out.size(), 0};
      last = ZSTD_decompressStream(ctx.get(), &o, &in);
      if (ZSTD_isError(last)) corrupt(path, InputFormat::jsonl_zstd, ZSTD_getErrorName(last));
      lines.feed(out.data(), o.pos);
      any = true;
    }
    if (eof && (last != 0 || !any)) corrupt(path, InputFormat::jsonl_zstd, "truncated or empty stream");
  });
}

void read_gzip(const std::string& path, LineSplitter& lines) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) corrupt(path, InputFormat::jsonl_gzip, "inflateInit2 failed");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&z, inflateEnd);
  std::vector<char> out(kChunk);
  int rc = Z_OK;
  each_chunk(path, [&](const char* p, size_t n, bool eof) {
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(p));
    z.avail_in = static_cast<uInt>(n);
    while (z.avail_in > 0) {
      if (rc == Z_STREAM_END) inflateReset(&z);  // more input after a member: the next gzip member
      z.next_out = reinterpret_cast<Bytef*>(out.data());
      z.avail_out = static_cast<uInt>(out.size());
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
        corrupt(path, InputFormat::jsonl_gzip, z.msg ? std::string(z.msg) : fmt::format("zlib error {}", rc));
      lines.feed(out.data(), out.size() - z.avail_out);
      if (rc == Z_BUF_ERROR && z.avail_out != 0) break;
    }
    if (eof && rc != Z_STREAM_END) corrupt(path, InputFormat::jsonl_gzip, "truncated or empty stream");
  });
}

void read_xz(const std::string& path, LineSplitter& lines) {
  lzma_stream s = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&s, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK)
    corrupt(path, InputFormat::jsonl_xz, "lzma_stream_decoder failed");
  std::unique_ptr<lzma_stream, void (*)(lzma_stream*)> guard(&s, lzma_end);
  std::vector<char> out(kChunk);
  each_chunk(path, [&](const char* p, size_t n, bool eof) {
    s.next_in = reinterpret_cast<const uint8_t*>(p);
    s.avail_in = n;
    const lzma_action action = eof ? LZMA_FINISH : LZMA_RUN;
    while (true) {
      s.next_out = reinterpret_cast<uint8_t*>(out.data());
      s.avail_out = out.size();
      const lzma_ret rc = lzma_code(&s, action);
      lines.feed(out.data(), out.size() - s.avail_out);
      if (rc == LZMA_STREAM_END) return;
      if (rc == LZMA_BUF_ERROR) corrupt(path, InputFormat::jsonl_xz, "truncated stream");
      if (rc != LZMA_OK) corrupt(path, InputFormat::jsonl_xz, fmt::format("liblzma error {}", static_cast<int>(rc)));
      if (s.avail_in == 0 && s.avail_out != 0) {
        if (eof) corrupt(path, InputFormat::jsonl_xz, "truncated stream");
        return;
      }
    }
  });
}

}  // namespace

void compressed_read_lines(const std::string& path, InputFormat format,
                           const std::function<void(int64_t, std::string_view)>& fn) {
  LineSplitter lines(fn);
  if (format == InputFormat::jsonl_zstd) read_zstd(path, lines);
  else if (format == InputFormat::jsonl_gzip) read_gzip(path, lines);
  else read_xz(path, lines);
  lines.finish();
}

}  // namespace llmtrain::data
