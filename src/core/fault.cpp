#include "llmtrain/core/fault.hpp"

#include <array>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "llmtrain/core/error.hpp"

namespace llmtrain::fault {
namespace {

struct Table {
  std::mutex mu;
  std::array<std::optional<Arm>, kNumPoints> arms;
};

int64_t parse_int(const char* var, const std::string& s) {
  try {
    size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError(fmt::format("environment variable {}: '{}' is not an integer", var, s));
}

// "<rank>:<iteration>"
Arm rank_at_iteration(const char* var, const std::string& v) {
  const auto colon = v.find(':');
  if (colon == std::string::npos)
    throw ConfigError(fmt::format("environment variable {}='{}': expected <rank>:<iteration>", var, v));
  Arm a;
  a.rank = static_cast<int>(parse_int(var, v.substr(0, colon)));
  a.iterations.insert(parse_int(var, v.substr(colon + 1)));
  return a;
}

std::optional<Arm> from_environment(Point p) {
  const char* var = env_name(p);
  const char* raw = std::getenv(var);
  if (!raw || !*raw) return std::nullopt;
  const std::string v = raw;
  switch (p) {
    case Point::nan_loss: {
      Arm a;
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ','))
        if (!item.empty()) a.iterations.insert(parse_int(var, item));
      return a;
    }
    case Point::fail_iteration:
    case Point::kill_during_save:
    case Point::disk_full_during_save: return rank_at_iteration(var, v);
    case Point::iteration_sleep:
    case Point::kernel_wrong_output: {
      Arm a;
      a.value = parse_int(var, v);
      return a;
    }
    case Point::slow_loss_reduce: {  // "<rank>:<ms>", every iteration
      const auto colon = v.find(':');
      if (colon == std::string::npos)
        throw ConfigError(fmt::format("environment variable {}='{}': expected <rank>:<milliseconds>", var, v));
      Arm a;
      a.rank = static_cast<int>(parse_int(var, v.substr(0, colon)));
      a.value = parse_int(var, v.substr(colon + 1));
      return a;
    }
  }
  return std::nullopt;
}

Table& table() {
  static Table* t = [] {
    auto* t = new Table;  // never destroyed: points may be asked during static destruction
    for (int i = 0; i < kNumPoints; ++i) t->arms[i] = from_environment(static_cast<Point>(i));
    return t;
  }();
  return *t;
}

}  // namespace

const char* env_name(Point p) {
  switch (p) {
    case Point::nan_loss: return "LLMTRAIN_TEST_NAN_AT";
    case Point::fail_iteration: return "LLMTRAIN_TEST_FAIL_AT";
    case Point::iteration_sleep: return "LLMTRAIN_TEST_ITER_SLEEP_MS";
    case Point::kill_during_save: return "LLMTRAIN_TEST_KILL_DURING_SAVE";
    case Point::disk_full_during_save: return "LLMTRAIN_TEST_DISK_FULL_DURING_SAVE";
    case Point::slow_loss_reduce: return "LLMTRAIN_TEST_SLOW_LOSS_REDUCE";
    case Point::kernel_wrong_output: return "LLMTRAIN_TEST_KERNEL_WRONG";
  }
  return "?";
}

void arm(Point p, Arm a) {
  auto& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.arms[static_cast<int>(p)] = std::move(a);
}

void disarm(Point p) {
  auto& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.arms[static_cast<int>(p)].reset();
}

void disarm_all() {
  auto& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (auto& a : t.arms) a.reset();
}

bool hit(Point p, int rank, int64_t iteration) {
  auto& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  const auto& a = t.arms[static_cast<int>(p)];
  if (!a) return false;
  if (a->rank >= 0 && a->rank != rank) return false;
  return a->iterations.empty() || a->iterations.count(iteration) > 0;
}

int64_t value(Point p) {
  auto& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  const auto& a = t.arms[static_cast<int>(p)];
  return a ? a->value : 0;
}

}  // namespace llmtrain::fault
