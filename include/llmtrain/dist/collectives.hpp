// Collectives: one interface over NCCL (CUDA builds) and MPI (CPU builds) for
// flat, contiguous tensors. Sums only; callers divide for averages.
#pragma once
#include <memory>
#include <string>

#include <torch/types.h>

namespace llmtrain {

class Runtime;

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual std::string name() const = 0;  // "mpi" | "nccl"
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place, sum over ranks.
  virtual void allreduce_sum(torch::Tensor& t) = 0;
  // In place from `root`.
  virtual void broadcast(torch::Tensor& t, int root) = 0;
  // in: world_size * n elements; out: n elements, the sum of every rank's
  // slice [rank*n, (rank+1)*n).
  virtual void reduce_scatter_sum(const torch::Tensor& in, torch::Tensor& out) = 0;
  // in: n elements; out: world_size * n elements, rank r's input at [r*n, (r+1)*n).
  virtual void all_gather(const torch::Tensor& in, torch::Tensor& out) = 0;
};

// NCCL on a CUDA device (when built with CUDA), MPI otherwise.
std::unique_ptr<Collectives> make_collectives(const Runtime& rt, torch::Device device);

}  // namespace llmtrain
