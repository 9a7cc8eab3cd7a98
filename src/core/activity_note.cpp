#include "llmtrain/core/activity_note.hpp"

#include <chrono>
#include <map>
#include <mutex>

namespace llmtrain {

namespace {
using Clock = std::chrono::steady_clock;
struct Open {
  std::string what;
  Clock::time_point since;
};
std::mutex g_m;
uint64_t g_next = 0;
std::map<uint64_t, Open> g_open;  // by id: oldest first
}  // namespace

ActivityNote::ActivityNote(std::string what) {
  std::lock_guard<std::mutex> lock(g_m);
  id_ = g_next++;
  g_open.emplace(id_, Open{std::move(what), Clock::now()});
}

ActivityNote::~ActivityNote() {
  std::lock_guard<std::mutex> lock(g_m);
  g_open.erase(id_);
}

ActivityNotes activity_notes() {
  ActivityNotes out;
  std::lock_guard<std::mutex> lock(g_m);
  if (g_open.empty()) return out;
  out.oldest_s = std::chrono::duration<double>(Clock::now() - g_open.begin()->second.since).count();
  for (const auto& [id, o] : g_open) {
    if (!out.text.empty()) out.text += "; ";
    out.text += o.what;
  }
  return out;
}

}  // namespace llmtrain
