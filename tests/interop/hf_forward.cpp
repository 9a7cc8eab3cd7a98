// hf_forward: our side of the forward-parity tests (tests/interop/test_hf_interop.py).
//   hf_forward HF_DIR BATCH.safetensors OUT.safetensors [attention_backend]
// Builds the model a transformers directory describes (init_from=hf:HF_DIR, the
// same path as llmtrain), loads its weights, and writes the logits (B, T, V), the
// mean next-token loss of BATCH's "idx" and "targets" (B, T) int64 tensors, and
// the loss's gradient of every parameter under its transformers name
// ("grad:<name>", as to_hf_tensors lays them out).
#include <cstdio>
#include <exception>

#include <torch/torch.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/model/hf.hpp"
#include "llmtrain/model/model_config.hpp"
#include "llmtrain/model/safetensors.hpp"
#include "llmtrain/model/transformer.hpp"
#include "llmtrain/model/hf_init.hpp"

int main(int argc, char** argv) {
  using namespace llmtrain;
  if (argc < 4) {
    std::fprintf(stderr, "usage: hf_forward HF_DIR BATCH.safetensors OUT.safetensors [attention_backend]\n");
    return 2;
  }
  try {
    torch::set_num_threads(1);
    SafetensorsFile batch(argv[2]);
    const auto idx = batch.tensor("idx").to(torch::kInt64), targets = batch.tensor("targets").to(torch::kInt64);
    Config c;
    c.init_from = llmtrain::InitFrom::hf(argv[1]);
    c.block_size = idx.size(1);
    if (argc > 4) c.set("attention_backend", argv[4]);
    apply_hf_config(c, {});
    c.validate();
    const ModelConfig m = ModelConfig::from_config(c, 0);
    Transformer model(m);
    load_hf_checkpoint(*model, argv[1]);
    model->eval();
    torch::Tensor logits;
    {
      torch::NoGradGuard no_grad;
      logits = model->forward(idx);
    }
    auto loss = model->loss(idx, targets);
    loss.backward();
    std::vector<std::pair<std::string, torch::Tensor>> grads, out;
    for (const auto& p : model->named_parameters()) grads.emplace_back(p.key(), p.value().grad());
    out.emplace_back("logits", logits);
    out.emplace_back("loss", loss.detach().reshape({1}));
    for (auto& [name, g] : to_hf_tensors(m, hf_arch_for(m), grads)) out.emplace_back("grad:" + name, g);
    write_safetensors(argv[3], out);
    std::printf("hf_forward: %s, %s, loss %.8f\n", m.arch_string().c_str(), model->attention_kernel_used().c_str(),
                loss.item<double>());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
