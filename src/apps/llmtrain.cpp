// llmtrain: train or evaluate a model.
//   parse -> Runtime -> Trainer -> run
// Usage: llmtrain [config.cfg ...] [--key=value ...] [--describe] [--print_config] [--help]
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "llmtrain/core/config.hpp"   // defines: Config, parse_command_line
#include "llmtrain/core/log.hpp"      // defines: log::info (rank 0 only)
#include "llmtrain/distributed/runtime.hpp"  // defines: Runtime, run_main (errors abort every rank)
#include "llmtrain/prediction/calibrate.hpp"  // defines: calibrate_device_profile (--calibrate)
#include "llmtrain/prediction/describe.hpp"   // defines: describe_model, describe_json
#include "llmtrain/model/hf_init.hpp"    // defines: apply_hf_config (init_from=hf:DIR sets the model keys)
#include "llmtrain/record/run_log.hpp"   // defines: library_versions, format_versions
#include "llmtrain/train/trainer.hpp"   // defines: Trainer

int main(int argc, char** argv) {
  return llmtrain::run_main(argc, argv, [&](llmtrain::Runtime& rt) {
    using namespace llmtrain;
    CommandLine cl = parse_command_line(argc, argv);
    if (cl.help) {
      log::info("usage: llmtrain [config.cfg ...] [--key=value ...] [flags]\n\n"
                "Trains a decoder-only transformer on HDF5 token shards, one MPI rank per device:\n"
                "  srun --mpi=pmix llmtrain inputs/full_llama_1.36b.cfg --max_iters=200\n"
                "  mpirun -np 2 llmtrain inputs/quickstart.cfg\n\n"
                "flags:\n"
                "  --help                  this text\n"
                "  --describe              architecture, parameters, FLOPs/token and GPU memory estimates; no training\n"
                "  --describe_world_size=N world size --describe assumes for ZeRO-1/FSDP (default 8)\n"
                "  --describe_device=D     device profile of the predicted step time: a built-in name (h100_sxm,\n"
                "                          h100_pcie, h200, b200, a100_sxm_80gb, rtx_a6000, l40s, cpu_dev) or a file\n"
                "  --describe_ranks_per_node=R  ranks per node the prediction assumes (default min(world size, 8))\n"
                "  --describe_format=json  --describe as one JSON object (every number of the text)\n"
                "  --calibrate             measure this machine's device profile -> out_dir/device_profile.json\n"
                "  --describe_memory_gib=X --describe: the largest micro-batch that fits in X GiB per rank\n"
                "  --print_config          print every key's resolved value and exit\n"
                "  --config_docs           print docs/config.md (every key as a Markdown table)\n"
                "  --version               versions of llmtrain, LibTorch (its CUDA, cuDNN), MPI, HDF5, NCCL\n"
                "{}",
                Config::help_text());
      return 0;
    }
    if (cl.version) {
      log::info("{}", format_versions(library_versions()));
      return 0;
    }
    if (cl.config_docs) {
      if (rt.is_root()) std::cout << Config::markdown_table();
      return 0;
    }
    apply_hf_config(cl.config, cl.command_line_keys);
    const Config& cfg = cl.config;
    cfg.validate();
    if (cl.print_config) {
      for (const auto& k : Config::key_names()) log::info("{} = {}", k, cfg.get(k));
      return 0;
    }
    if (cl.describe) {
      DescribeOptions o;
      o.world_size = cl.describe_world_size;
      o.ranks_per_node = cl.describe_ranks_per_node;
      o.device = cl.describe_device;
      if (cl.describe_memory_gib) o.memory_bytes = *cl.describe_memory_gib * 1024.0 * 1024.0 * 1024.0;
      if (cl.describe_format == "json")
        log::info("{}", describe_json(cfg, o).dump());  // one line: one JSON object
      else
        log::info("{}", describe_model(cfg, o));
      return 0;
    }
    if (cl.calibrate) {
      DeviceProfile measured;
      const std::string path = calibrate_device_profile(cfg, rt, &measured);
      log::info("{}\ndevice profile written to {}", device_profile_json(measured).dump(2), path);
      return 0;
    }
    cfg.refuse_unbuilt();
    Trainer trainer(cfg, rt);
    const TrainResult r = trainer.run();
    log::info("{}", format_run_end(r, cfg));
    // Stopped by a signal after its checkpoint: jobs/common.sh requeues on this code.
    return r.stop_signal != 0 ? kRequeueExitCode : 0;
  });
}
