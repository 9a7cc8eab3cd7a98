// TensorBoard event files by hand: the record framing and the few protobuf
// messages TensorBoard reads (tensorflow/core/util/event.proto, summary.proto,
// tensor.proto), encoded field by field in the protobuf wire format.
#include "llmtrain/record/tensorboard.hpp"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "llmtrain/core/error.hpp"
#include "llmtrain/core/log.hpp"

namespace fs = std::filesystem;

namespace llmtrain {
namespace {

// ---- protobuf wire format ---------------------------------------------------
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (field << 3) | type); }
template <typename T>
void put_raw(std::string& out, T v) {  // little-endian fixed width (x86, ARM: the host order)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kBytes);
  put_varint(out, bytes.size());
  out += bytes;
}

// Field numbers of the messages written.
namespace event_field { constexpr uint32_t wall_time = 1, step = 2, file_version = 3, summary = 5; }
namespace summary_field { constexpr uint32_t value = 1; }
namespace value_field { constexpr uint32_t tag = 1, simple_value = 2, tensor = 8, metadata = 9; }
namespace metadata_field { constexpr uint32_t plugin_data = 1; }
namespace plugin_field { constexpr uint32_t plugin_name = 1; }
namespace tensor_field { constexpr uint32_t dtype = 1, tensor_shape = 2, string_val = 8; }
constexpr uint64_t kDtString = 7;  // tensorflow.DataType.DT_STRING

std::string event_header(int64_t step) {
  const double wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string e;
  put_key(e, event_field::wall_time, kFixed64);
  put_raw(e, wall);
  put_key(e, event_field::step, kVarint);
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

std::string hostname() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("tensorboard_dir '{}': cannot create it: {}", dir, ec.message()));
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
  path_ = (fs::path(dir) / fmt::format("events.out.tfevents.{}.{}", secs, hostname())).string();
  for (int k = 2; fs::exists(path_); ++k)  // two runs in one second: TensorBoard reads any name with "tfevents"
    path_ = (fs::path(dir) / fmt::format("events.out.tfevents.{}.{}.{}", secs, hostname(), k)).string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw Error(fmt::format("tensorboard_dir '{}': cannot write '{}': {}", dir, path_, std::strerror(errno)));
  std::string e = event_header(0);
  put_bytes(e, event_field::file_version, "brain.Event:2");
  write_record(e);
  flush();
}

EventFileWriter::~EventFileWriter() {
  if (file_) std::fclose(file_);
}

void EventFileWriter::add_scalar(const std::string& tag, int64_t step, double value) {
  std::string v;
  put_bytes(v, value_field::tag, tag);
  put_key(v, value_field::simple_value, kFixed32);
  put_raw(v, static_cast<float>(value));
  write_event(step, v);
}

void EventFileWriter::add_text(const std::string& tag, int64_t step, const std::string& text) {
  std::string plugin, metadata, tensor, v;
  put_bytes(plugin, plugin_field::plugin_name, "text");
  put_bytes(metadata, metadata_field::plugin_data, plugin);
  put_key(tensor, tensor_field::dtype, kVarint);
  put_varint(tensor, kDtString);
  put_bytes(tensor, tensor_field::tensor_shape, "");  // a scalar: no dims
  put_bytes(tensor, tensor_field::string_val, text);
  put_bytes(v, value_field::tag, tag);
  put_bytes(v, value_field::tensor, tensor);
  put_bytes(v, value_field::metadata, metadata);
  write_event(step, v);
}

void EventFileWriter::write_event(int64_t step, const std::string& summary_value) {
  std::string summary;
  put_bytes(summary, summary_field::value, summary_value);
  std::string e = event_header(step);
  put_bytes(e, event_field::summary, summary);
  write_record(e);
}

// TFRecord: uint64 length, uint32 masked CRC of the length, data, uint32 masked CRC of the data.
void EventFileWriter::write_record(const std::string& data) {
  std::string r;
  const uint64_t n = data.size();
  put_raw(r, n);
  put_raw(r, masked_crc32c(r.data(), sizeof(n)));
  r += data;
  put_raw(r, masked_crc32c(data.data(), data.size()));
  if (std::fwrite(r.data(), 1, r.size(), file_) != r.size())
    throw Error(fmt::format("tensorboard: cannot write '{}': {}", path_, std::strerror(errno)));
}

void EventFileWriter::flush() {
  if (std::fflush(file_) != 0)
    throw Error(fmt::format("tensorboard: cannot write '{}': {}", path_, std::strerror(errno)));
}

namespace {

// Run-log key -> TensorBoard tag. Adding a scalar is one line here. A number
// is one scalar; an array of numbers (one per rank) is one scalar per rank,
// tag/rank_<r>. Keys absent from a record are skipped.
struct ScalarTag {
  const char* key;
  const char* tag;
};
constexpr ScalarTag kIterationTags[] = {
    {"loss", "loss/train"},
    {"lr", "optim/lr"},
    {"grad_norm", "optim/grad_norm"},
    {"loss_scale", "optim/loss_scale"},
    {"tokens_per_sec", "perf/tokens_per_sec"},
    {"tokens_per_sec_per_device", "perf/tokens_per_sec_per_device"},
    {"mfu", "perf/mfu_percent"},
    {"achieved_tflops", "perf/achieved_tflops"},
    {"dt_ms", "step_time/total_ms"},
    {"data_ms", "step_time/data_ms"},
    {"forward_backward_ms", "step_time/forward_backward_ms"},
    {"communication_ms", "step_time/communication_ms"},
    {"optimizer_ms", "step_time/optimizer_ms"},
    {"other_ms", "step_time/other_ms"},
    {"memory_allocated_gb", "memory/allocated_gb"},
    {"memory_peak_gb", "memory/peak_gb"},
    {"memory_reserved_gb", "memory/reserved_gb"},
    {"allocated_peak_bytes", "memory/allocated_peak_bytes"},  // what LibTorch allocated at most (rank 0)
};
constexpr ScalarTag kEvalTags[] = {
    {"train_loss", "loss/eval_train"},
    {"val_loss", "loss/val"},
};

class TensorBoardFollower : public RunLogFollower {
  double predicted_ms_ = -1;  // startup_info.prediction.step_time_s in ms (none: -1)

 public:
  explicit TensorBoardFollower(const std::string& dir) : writer_(dir) {}

  void on_startup(const nlohmann::json& info) override {
    guard([&] {
      if (info.contains("config")) writer_.add_text("config", 0, as_markdown_code(info["config"].dump(2)));
      // The performance model's step time (docs/performance-model.md), beside each measured one.
      if (const auto p = info.find("prediction"); p != info.end() && p->is_object() && p->contains("step_time_s") &&
                                                   (*p)["step_time_s"].is_number())
        predicted_ms_ = (*p)["step_time_s"].get<double>() * 1e3;
      writer_.add_text("startup_info", 0, as_markdown_code(info.dump(2)));
      writer_.flush();
    });
  }
  void on_iteration(const nlohmann::json& record) override {
    guard([&] {
      write_scalars(kIterationTags, record);
      if (predicted_ms_ > 0) writer_.add_scalar("step_time/predicted_ms", record.value("iter", last_step_), predicted_ms_);
    });
  }
  void on_eval(const nlohmann::json& result) override {
    guard([&] {
      write_scalars(kEvalTags, result);
      writer_.flush();
    });
  }
  void on_summary(const nlohmann::json& summary) override {
    guard([&] {
      writer_.add_text("summary", last_step_, as_markdown_code(summary.dump(2)));
      writer_.flush();
    });
  }
  void flush() override {
    guard([&] { writer_.flush(); });
  }

 private:
  template <size_t N>
  void write_scalars(const ScalarTag (&tags)[N], const nlohmann::json& record) {
    const int64_t step = record.value("iter", last_step_);
    last_step_ = step;
    for (const auto& t : tags) {
      const auto it = record.find(t.key);
      if (it == record.end()) continue;
      if (it->is_number()) writer_.add_scalar(t.tag, step, it->template get<double>());
      if (!it->is_array()) continue;
      for (size_t r = 0; r < it->size(); ++r)
        if ((*it)[r].is_number()) writer_.add_scalar(fmt::format("{}/rank_{}", t.tag, r), step, (*it)[r].template get<double>());
    }
  }
  // Indented four spaces: a code block in the text plugin's markdown.
  static std::string as_markdown_code(const std::string& text) {
    std::string out = "    ";
    for (char c : text) {
      out.push_back(c);
      if (c == '\n') out += "    ";
    }
    return out;
  }
  template <typename F>
  void guard(F&& f) {
    if (failed_) return;
    try {
      f();
    } catch (const std::exception& e) {
      failed_ = true;
      log::warn("{}; no more TensorBoard events are written", e.what());
    }
  }

  EventFileWriter writer_;
  int64_t last_step_ = 0;
  bool failed_ = false;
};

}  // namespace

std::unique_ptr<RunLogFollower> make_tensorboard_follower(const std::string& dir) {
  return std::make_unique<TensorBoardFollower>(dir);
}

}  // namespace llmtrain
