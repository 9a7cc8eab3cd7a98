// The snapshot of an asynchronous save (Checkpointer::save_async): every call a
// part made on its CheckpointWriter, in order, with the tensors copied to host
// memory of their own; the writer thread replays it into the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace llmtrain {

struct CheckpointOps {
  enum class Kind { attr_i64, attr_f64, attr_str, tensor, rank_row };
  struct Op {
    Kind kind = Kind::attr_i64;
    std::string group, name;
    int64_t i64 = 0;
    double f64 = 0;
    std::string str;
    std::vector<int64_t> shape;
    int64_t offset = 0;
    torch::Tensor data;         // tensor: this rank's float32 part on the host (undefined: writes nothing)
    std::vector<uint8_t> row;   // rank_row
  };
  std::vector<Op> ops;
  Op& add(Kind kind, const std::string& group, const std::string& name) {
    Op& op = ops.emplace_back();
    op.kind = kind;
    op.group = group;
    op.name = name;
    return op;
  }
  // Host buffers of the previous snapshot, reused in order when the sizes match
  // (pinned memory is slow to allocate; the write of that snapshot is over).
  std::vector<torch::Tensor> spare;
  size_t next_spare = 0;
  bool any_cuda = false;

  torch::Tensor host_copy(const torch::Tensor& part) {
    const int64_t n = part.numel();
    torch::Tensor buf;
    if (next_spare < spare.size() && spare[next_spare].numel() == n &&
        spare[next_spare].is_pinned() == part.is_cuda())
      buf = spare[next_spare];
    else
      buf = torch::empty({n}, torch::TensorOptions().dtype(torch::kFloat).pinned_memory(part.is_cuda()));
    ++next_spare;
    // Device -> pinned host memory is asynchronous on CUDA: the snapshot waits
    // for the stream once, after the last copy (Checkpointer::save_async).
    buf.copy_(part.detach().reshape({n}), /*non_blocking=*/part.is_cuda());
    any_cuda = any_cuda || part.is_cuda();
    return buf;
  }
  // Ready for the next snapshot: the tensors become spares.
  void recycle() {
    spare.clear();
    for (auto& op : ops)
      if (op.data.defined()) spare.push_back(std::move(op.data));
    ops.clear();
    next_spare = 0;
    any_cuda = false;
  }
};

}  // namespace llmtrain
