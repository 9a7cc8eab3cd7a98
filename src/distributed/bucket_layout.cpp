#include "llmtrain/distributed/bucket_layout.hpp"

#include <cstddef>

namespace llmtrain {

BucketLayout plan_bucket_layout(const std::vector<BucketParam>& params, double bucket_bytes, int64_t pad_to) {
  BucketLayout layout;
  auto& buckets = layout.buckets;
  // Reverse forward order: the first buckets complete first in backward.
  for (std::size_t k = params.size(); k-- > 0;) {
    const auto& p = params[k];
    if (!p.trainable) continue;
    const bool new_bucket = buckets.empty() || buckets.back().dtype != p.dtype ||
                            static_cast<double>(buckets.back().numel * p.element_size) >= bucket_bytes;
    if (new_bucket) {
      buckets.emplace_back();
      buckets.back().dtype = p.dtype;
      buckets.back().element_size = p.element_size;
    }
    auto& b = buckets.back();
    layout.slots.push_back({static_cast<int>(k), static_cast<int>(buckets.size() - 1), b.numel, p.numel});
    b.numel += p.numel;
    b.slots.push_back(static_cast<int>(layout.slots.size() - 1));
  }
  for (auto& b : buckets) b.numel = (b.numel + pad_to - 1) / pad_to * pad_to;
  return layout;
}

}  // namespace llmtrain
