// Parquet and Arrow IPC through Apache Arrow's C++ libraries (the pyarrow
// wheel's libarrow and libparquet; cmake/LLMTrainArrow.cmake). Compiled as C++20
// in a target of its own (the name ends in _arrow.cpp): Arrow's headers need it.
//
// A `datasets` cache holds Arrow IPC *stream* files (no footer, batches read in
// order); Feather v2 / IPC *file* format (magic "ARROW1") is read too. Files are
// memory-mapped, so skipping the batches of other ranks copies nothing.
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/ipc/reader.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>

#include <fmt/format.h>

#include "data/input_readers.hpp"
#include "llmtrain/core/error.hpp"

namespace llmtrain::data {
namespace {

const char* format_name(InputFormat f) { return f == InputFormat::parquet ? "Parquet" : "Arrow IPC"; }

// The text column being read, for messages.
thread_local std::string g_field;

// One line: Arrow's and Thrift's messages may span several.
[[noreturn]] void fail(const std::string& path, InputFormat f, std::string why) {
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  for (size_t i = 0; (i = why.find('\n', i)) != std::string::npos;) why.replace(i, 1, "; ");
  throw DataError(fmt::format("{}: not a readable {} file (reading column '{}': {})", path, format_name(f), g_field,
                              why));
}

template <typename T>
T value_or_fail(arrow::Result<T> r, const std::string& path, InputFormat f) {
  if (!r.ok()) fail(path, f, r.status().ToString());
  return std::move(r).ValueUnsafe();
}

std::string column_names(const arrow::Schema& s) {
  std::string names;
  for (const auto& fld : s.fields()) names += (names.empty() ? "" : ", ") + fld->name();
  return names;
}

// The index of the string column `field`, or a DataError naming file and column.
int string_column(const arrow::Schema& s, const std::string& path, const std::string& field) {
  const int i = s.GetFieldIndex(field);
  if (i < 0)
    throw DataError(fmt::format("{}: no column '{}' (columns: {}); choose the text column with --text_field", path,
                                field, column_names(s)));
  const auto id = s.field(i)->type()->id();
  if (id != arrow::Type::STRING && id != arrow::Type::LARGE_STRING && id != arrow::Type::STRING_VIEW)
    throw DataError(fmt::format("{}: column '{}' is {}, not a string column; choose the text column with "
                                "--text_field", path, field, s.field(i)->type()->ToString()));
  return i;
}

template <typename A>
void each_string(const A& a, int64_t first_row, const RowFn& fn) {
  for (int64_t k = 0; k < a.length(); ++k)
    fn(first_row + k, a.IsNull(k) ? std::string_view() : std::string_view(a.GetView(k)), a.IsNull(k));
}

void each_row(const arrow::Array& a, int64_t first_row, const RowFn& fn) {
  switch (a.type_id()) {
    case arrow::Type::STRING: return each_string(static_cast<const arrow::StringArray&>(a), first_row, fn);
    case arrow::Type::LARGE_STRING:
      return each_string(static_cast<const arrow::LargeStringArray&>(a), first_row, fn);
    default: return each_string(static_cast<const arrow::StringViewArray&>(a), first_row, fn);
  }
}

// ---- Parquet: units are row groups ----------------------------------------------

struct ParquetFile {
  std::unique_ptr<parquet::arrow::FileReader> reader;
  int column = -1;
};

ParquetFile open_parquet(const std::string& path, const std::string& field) {
  const auto f = InputFormat::parquet;
  auto file = value_or_fail(arrow::io::MemoryMappedFile::Open(path, arrow::io::FileMode::READ), path, f);
  ParquetFile p;
  try {
    p.reader = value_or_fail(parquet::arrow::OpenFile(file, arrow::default_memory_pool()), path, f);
  } catch (const parquet::ParquetException& e) {
    fail(path, f, e.what());
  }
  std::shared_ptr<arrow::Schema> schema;
  if (auto st = p.reader->GetSchema(&schema); !st.ok()) fail(path, f, st.ToString());
  p.column = string_column(*schema, path, field);
  return p;
}

void parquet_read(const std::string& path, const std::string& field, int64_t first, int64_t end, const RowFn& fn) {
  auto p = open_parquet(path, field);
  const auto* meta = p.reader->parquet_reader()->metadata().get();
  int64_t row = 0;
  for (int64_t g = 0; g < first; ++g) row += meta->RowGroup(static_cast<int>(g))->num_rows();
  for (int64_t g = first; g < end; ++g) {
    std::shared_ptr<arrow::Table> t;
    try {
      t = value_or_fail(p.reader->ReadRowGroup(static_cast<int>(g), {p.column}), path, InputFormat::parquet);
    } catch (const parquet::ParquetException& e) {
      fail(path, InputFormat::parquet, fmt::format("row group {}: {}", g, e.what()));
    }
    for (const auto& chunk : t->column(0)->chunks()) {
      each_row(*chunk, row, fn);
      row += chunk->length();
    }
  }
}

// ---- Arrow IPC: units are record batches -------------------------------------------

bool is_ipc_file_format(arrow::io::MemoryMappedFile& f) {
  auto head = f.ReadAt(0, 6);
  return head.ok() && (*head)->size() == 6 && std::string_view(reinterpret_cast<const char*>((*head)->data()), 6) ==
                                                  "ARROW1";
}

// Calls on_batch(i, text column) for batches [0, end) (end < 0: all), memory-mapped:
// a batch costs only its metadata until its values are read. Returns the count seen.
template <typename Fn>
int64_t ipc_batches(const std::string& path, const std::string& field, int64_t end, Fn&& on_batch) {
  const auto f = InputFormat::arrow;
  auto file = value_or_fail(arrow::io::MemoryMappedFile::Open(path, arrow::io::FileMode::READ), path, f);
  if (is_ipc_file_format(*file)) {
    auto r = value_or_fail(arrow::ipc::RecordBatchFileReader::Open(file), path, f);
    const int col = string_column(*r->schema(), path, field);
    const int64_t n = r->num_record_batches();
    for (int64_t i = 0; i < (end < 0 ? n : std::min(end, n)); ++i)
      on_batch(i, value_or_fail(r->ReadRecordBatch(static_cast<int>(i)), path, f)->column(col));
    return n;
  }
  auto r = value_or_fail(arrow::ipc::RecordBatchStreamReader::Open(file), path, f);
  const int col = string_column(*r->schema(), path, field);
  int64_t i = 0;
  for (; end < 0 || i < end; ++i) {
    std::shared_ptr<arrow::RecordBatch> b;
    if (auto st = r->ReadNext(&b); !st.ok()) fail(path, f, fmt::format("record batch {}: {}", i, st.ToString()));
    if (!b) break;
    on_batch(i, b->column(col));
  }
  return i;
}

}  // namespace

int64_t columnar_unit_count(const std::string& path, InputFormat format, const std::string& field) {
  g_field = field;
  if (format == InputFormat::parquet) return open_parquet(path, field).reader->num_row_groups();
  // A stream has no footer: the batches are walked (metadata only, memory-mapped).
  return ipc_batches(path, field, -1, [](int64_t, const std::shared_ptr<arrow::Array>&) {});
}

void columnar_read_units(const std::string& path, InputFormat format, const std::string& field, int64_t first,
                         int64_t end, const RowFn& fn) {
  if (first >= end) return;
  g_field = field;
  if (format == InputFormat::parquet) return parquet_read(path, field, first, end, fn);
  int64_t row = 0;
  ipc_batches(path, field, end, [&](int64_t i, const std::shared_ptr<arrow::Array>& col) {
    if (i >= first) each_row(*col, row, fn);
    row += col->length();
  });
}

}  // namespace llmtrain::data
