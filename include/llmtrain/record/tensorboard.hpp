// TensorBoard event files, written by rank 0 without TensorFlow, protobuf or
// Python: TFRecord framing (length, masked CRC-32C) around Event messages
// encoded by hand. The run log's records reach them through a RunLogFollower.
// User doc: docs/monitoring.md.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "llmtrain/core/crc32c.hpp"  // defines: crc32c (the project's one CRC-32C)
#include "llmtrain/record/run_log.hpp"

namespace llmtrain {

// TFRecord's masked form of CRC-32C (core/crc32c.hpp).
uint32_t masked_crc32c(const void* data, size_t size);

// One events.out.tfevents.<unix seconds>.<hostname> file in `dir` (created if
// missing); its first record is the file_version event TensorBoard expects.
class EventFileWriter {
 public:
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Summary.Value{tag, simple_value} (stored as a float, as TensorBoard does).
  void add_scalar(const std::string& tag, int64_t step, double value);
  // The text plugin's form: a DT_STRING tensor with plugin_data "text" (markdown).
  void add_text(const std::string& tag, int64_t step, const std::string& text);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_event(int64_t step, const std::string& summary_value);
  void write_record(const std::string& data);
  std::string path_;
  std::FILE* file_ = nullptr;
};

// Writes the run log's records as TensorBoard scalars and the config as text
// (the tags: docs/monitoring.md). Errors while writing are reported once and
// the writer stops; the run goes on.
std::unique_ptr<RunLogFollower> make_tensorboard_follower(const std::string& dir);

}  // namespace llmtrain
