// eval_full=True: the loss over a whole split, deterministically (docs/interop.md).
#pragma once
#include <cstdint>
#include <string>

#include <torch/types.h>

#include "llmtrain/core/options.hpp"  // defines: Split

namespace llmtrain {

class Collectives;
class TransformerImpl;

struct FullEvalResult {
  double loss = 0;       // mean cross-entropy over every predicted token
  int64_t tokens = 0;    // predicted tokens = windows x block_size
  int64_t windows = 0;
};

// The split's token stream (its shards in file-name order, concatenated),
// windows k = 0, 1, ...: x = tokens[kT, kT + T), y = tokens[kT + 1, kT + T + 1),
// every window that fits. Windows go in batches of `batch_size` (batch j =
// windows [jB, jB + B)) to ranks round-robin; each window's loss sum is
// computed in one batch whatever the rank count, collected by one allreduce of
// a per-window array (a sum with zeros, exact), and added up in window order in
// double: every rank count computes the same batches and adds the same numbers
// in the same order. Collective over `comm`; under FSDP (forward hooks installed)
// every rank runs the same number of forwards.
FullEvalResult evaluate_full(TransformerImpl& model, const std::string& data_dir, Split split,
                             int64_t block_size, int64_t batch_size, torch::Device device, torch::ScalarType dtype,
                             Collectives& comm);

}  // namespace llmtrain
