// The layout of the gradient buckets, as pure arithmetic on the
// parameters' sizes. GradBuckets builds its buffers from it, and the
// performance model (prediction/cost_model) reads the same layout without
// allocating anything: one description of the buckets, not two (a public
// header for that reason: prediction/ sits above distributed/ and sees only
// its public headers).
//
// Parameters are taken in reverse order (backward produces the last layers'
// gradients first), cut into buckets of about `bucket_bytes` (a bucket closes
// once it holds at least that many bytes), split where the dtype changes, and
// each bucket is padded to a multiple of `pad_to` (the world size for a
// reduce-scatter, 1 for an allreduce).
#pragma once
#include <cstdint>
#include <vector>

namespace llmtrain {

struct BucketParam {
  int64_t numel = 0;
  int element_size = 4;  // bytes per element
  int dtype = 0;         // any key that differs between dtypes (a torch::ScalarType as int)
  bool trainable = true; // false: requires_grad() is off, the parameter gets no slot
};

struct BucketLayout {
  struct Slot {
    int param = 0;       // index into the input
    int bucket = 0;
    int64_t offset = 0;  // elements into the bucket
    int64_t numel = 0;
  };
  struct Bucket {
    int dtype = 0;
    int element_size = 4;
    int64_t numel = 0;       // padded to a multiple of pad_to
    std::vector<int> slots;  // indices into slots, in the order they were added
    double bytes() const { return static_cast<double>(numel) * element_size; }
  };
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
};

BucketLayout plan_bucket_layout(const std::vector<BucketParam>& params, double bucket_bytes, int64_t pad_to);

}  // namespace llmtrain
