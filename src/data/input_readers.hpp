// Readers of the input formats that are not plain text: Parquet, Arrow IPC (the
// files of a Hugging Face `datasets` cache), and JSONL compressed with zstd,
// gzip or xz. No Arrow or codec header leaks out of here: the Arrow side is
// compiled as C++20 (Arrow's headers need it) apart from the C++17 library.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace llmtrain::data {

enum class InputFormat { text, jsonl, jsonl_zstd, jsonl_gzip, jsonl_xz, parquet, arrow };

// By the file name: *.parquet, *.arrow, *.jsonl / *.ndjson, *.jsonl.zst|.gz|.xz; else text.
InputFormat input_format(const std::string& path);
inline bool is_columnar(InputFormat f) { return f == InputFormat::parquet || f == InputFormat::arrow; }
inline bool is_compressed_jsonl(InputFormat f) {
  return f == InputFormat::jsonl_zstd || f == InputFormat::jsonl_gzip || f == InputFormat::jsonl_xz;
}

// One row of a columnar file: its index in the file and its text (null: no value).
using RowFn = std::function<void(int64_t row, std::string_view text, bool null)>;

// The units a columnar file is split into across ranks: Parquet row groups,
// Arrow record batches. Checks that the file is readable and that `field` is a
// string column; a DataError names the file and the column otherwise.
int64_t columnar_unit_count(const std::string& path, InputFormat format, const std::string& field);

// The rows of units [first, end) of a columnar file, in order.
void columnar_read_units(const std::string& path, InputFormat format, const std::string& field, int64_t first,
                         int64_t end, const RowFn& fn);

// Every line of a compressed JSONL file, without its '\n', with the offset of its
// first byte in the decompressed stream. A DataError names the file when the
// stream is corrupt or truncated.
void compressed_read_lines(const std::string& path, InputFormat format,
                           const std::function<void(int64_t offset, std::string_view line)>& fn);

}  // namespace llmtrain::data
