#include "llmtrain/record/device_memory.hpp"

#include <atomic>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include <c10/core/CPUAllocator.h>
#include <fmt/format.h>

#include "llmtrain/prediction/memory_model.hpp"
#include "record/device_memory_impl.hpp"

namespace llmtrain {

namespace {

// Wraps the default CPU allocator and counts the bytes of every live
// allocation. Each allocation's size and the inner deleter are kept by its
// context (the inner allocator's context, usually the data pointer itself, so
// raw_allocate keeps working); the deleter looks them up, counts the bytes
// back and calls the inner deleter. Thread-safe: the loader's threads and
// LibTorch's intra-op pool allocate too.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr d = inner_->allocate(n);
    if (d.get_context() == nullptr) return d;  // zero bytes: nothing to count
    void* data = d.get();
    c10::DeleterFnPtr inner_deleter = d.get_deleter();
    void* ctx = d.release_context();
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_[ctx] = {n, inner_deleter};
    }
    add(static_cast<int64_t>(n));
    return {data, ctx, &CountingCpuAllocator::free_counted, d.device()};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CountingCpuAllocator::free_counted; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  AllocatedBytes bytes() const { return {current_.load(), peak_.load()}; }
  void reset_peak() { peak_.store(current_.load()); }

 private:
  struct Live {
    size_t bytes;
    c10::DeleterFnPtr deleter;
  };
  static void free_counted(void* ctx);
  void add(int64_t n) {
    const int64_t now = current_.fetch_add(n) + n;
    int64_t p = peak_.load();
    while (now > p && !peak_.compare_exchange_weak(p, now)) {
    }
  }

  c10::Allocator* inner_;
  std::mutex mu_;
  std::unordered_map<void*, Live> live_;
  std::atomic<int64_t> current_{0}, peak_{0};
};

CountingCpuAllocator* g_counting = nullptr;  // installed once, never freed (tensors may outlive main)

void CountingCpuAllocator::free_counted(void* ctx) {
  Live l{0, nullptr};
  {
    std::lock_guard<std::mutex> lock(g_counting->mu_);
    auto it = g_counting->live_.find(ctx);
    l = it->second;
    g_counting->live_.erase(it);
  }
  g_counting->current_.fetch_sub(static_cast<int64_t>(l.bytes));
  if (l.deleter) l.deleter(ctx);
}

// kB value of a "Name:   1234 kB" line of /proc/meminfo, or -1.
int64_t meminfo_kb(const std::string& key) {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.compare(0, key.size() + 1, key + ":") != 0) continue;
    std::istringstream is(line.substr(key.size() + 1));
    int64_t v = -1;
    is >> v;
    return v;
  }
  return -1;
}

}  // namespace

void count_cpu_allocations() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_counting = new CountingCpuAllocator(c10::GetDefaultCPUAllocator());
    // Above the default priority (0) so a later SetCPUAllocator of priority 0
    // cannot silently replace it.
    c10::SetCPUAllocator(g_counting, /*priority=*/1);
  });
}

std::optional<AllocatedBytes> allocated_bytes(const torch::Device& device) {
#ifdef LLMTRAIN_WITH_CUDA
  if (device.is_cuda()) return detail::cuda_allocated_bytes(device.index());
#endif
  if (device.is_cpu() && g_counting) return g_counting->bytes();
  return std::nullopt;
}

void reset_allocated_peak(const torch::Device& device) {
#ifdef LLMTRAIN_WITH_CUDA
  if (device.is_cuda()) detail::cuda_reset_allocated_peak(device.index());
#endif
  if (device.is_cpu() && g_counting) g_counting->reset_peak();
}

int64_t mem_available_bytes() {
  const int64_t kb = meminfo_kb("MemAvailable");
  return kb < 0 ? -1 : kb * 1024;
}

AvailableMemory available_memory(const torch::Device& device, int ranks_on_node, const std::string& hostname) {
#ifdef LLMTRAIN_WITH_CUDA
  if (device.is_cuda())
  {
    const int64_t free_b = detail::cuda_free_bytes(device.index());
    return {static_cast<int64_t>(gpu_tensor_bytes(static_cast<double>(free_b))),
            fmt::format("{:.2f} GiB free on GPU {} (cudaMemGetInfo) / {} for the caching allocator's reserve",
                        gib(static_cast<double>(free_b)), device.index(), kCudaAllocatorReserve)};
  }
#endif
  const int64_t avail = mem_available_bytes();
  if (avail < 0) return {-1, "/proc/meminfo unreadable"};
  const int n = ranks_on_node > 0 ? ranks_on_node : 1;
  return {avail / n, fmt::format("MemAvailable {:.1f} GiB on {} / {} rank(s)", gib(avail), hostname, n)};
}

}  // namespace llmtrain
