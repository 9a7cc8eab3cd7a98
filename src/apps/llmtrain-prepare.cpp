// llmtrain-prepare: text / JSONL (+ zstd, gzip, xz) / Parquet / Arrow / nanoGPT .bin -> HDF5 token shards + index.json.
// An MPI program: `mpirun -np N llmtrain-prepare ...` tokenizes on N ranks; the
// output is byte-identical for any N (docs/data-format.md).
#include <algorithm>
#include <iostream>

#include <boost/program_options.hpp>
#include <mpi.h>
#include <fmt/format.h>

#include "llmtrain/core/error.hpp"
#include "llmtrain/core/log.hpp"
#include "llmtrain/data/prepare.hpp"
#include "llmtrain/distributed/runtime.hpp"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  return llmtrain::run_main(argc, argv, [&](llmtrain::Runtime& rt) {
    llmtrain::PrepareOptions o;
    bool no_progress = false;
    std::string exts, verify;
    po::options_description flags(
        "usage: llmtrain-prepare [options] --out_dir DIR INPUT...\n"
        "       llmtrain-prepare [options] --out_dir DIR --from_nanogpt DIR --vocab_size N\n"
        "       llmtrain-prepare --verify DIR\n"
        "INPUT: UTF-8 text files (one document each); JSONL files (*.jsonl, *.ndjson; one document\n"
        "per line, its --text_field), also compressed (*.jsonl.zst, *.jsonl.gz, *.jsonl.xz);\n"
        "Parquet files (*.parquet; row groups split across ranks); Arrow IPC files (*.arrow, a\n"
        "Hugging Face `datasets` cache); directories of them (recursive; a `datasets` save_to_disk\n"
        "or cache folder gives its .arrow files).\n"
        "Writes DIR/train_00000.h5 ..., DIR/val_00000.h5 ... and DIR/index.json.\n\noptions");
    flags.add_options()
        ("help,h", "print this help")
        ("out_dir,o", po::value(&o.out_dir),
         "output directory (created; written beside it under a temporary name and renamed into place when "
         "complete and checked)")
        ("overwrite", po::bool_switch(&o.overwrite),
         "replace an existing data directory at --out_dir (only once the new data is complete and checked)")
        ("strict", po::bool_switch(&o.strict),
         "refuse input documents that are not text (NUL bytes; ill-formed UTF-8 for the text tokenizers) or "
         "hold the end-of-document token, instead of skipping them with a warning")
        ("ext", po::value(&exts),
         "take only files with these extensions from input directories, comma-separated (e.g. --ext .txt,.md); "
         "default: all")
        ("text_field", po::value(&o.text_field)->default_value(o.text_field),
         "the JSONL field, or the Parquet / Arrow string column, that holds each document's text")
        ("tokenizer", po::value(&o.tokenizer)->default_value(o.tokenizer), "tokenizer spec: byte | <kind>:<file>")
        ("val_fraction", po::value(&o.val_fraction)->default_value(o.val_fraction),
         "share of documents for the val split (chosen by a hash of each document's position)")
        ("split_seed", po::value(&o.split_seed)->default_value(o.split_seed), "seed of the train/val document hash")
        ("shard_tokens", po::value(&o.shard_tokens)->default_value(o.shard_tokens), "tokens per shard file")
        ("from_nanogpt", po::value(&o.from_nanogpt), "import DIR/train.bin and DIR/val.bin (raw uint16) as-is")
        ("vocab_size", po::value(&o.vocab_size)->default_value(0), "vocabulary size of --from_nanogpt data (required; checked)")
        ("tokenizer_name", po::value(&o.tokenizer_name)->default_value(o.tokenizer_name),
         "tokenizer name recorded for --from_nanogpt data (e.g. gpt2)")
        ("no_progress", po::bool_switch(&no_progress), "no progress line")
        ("verify", po::value(&verify),
         "check the data directory DIR instead of preparing: every shard read whole against its checksums (each "
         "chunk's and the shard's); exit 1 when one is bad");
    po::options_description hidden;
    hidden.add_options()("input", po::value(&o.inputs));
    po::options_description all;
    all.add(flags).add(hidden);
    po::positional_options_description pos;
    pos.add("input", -1);
    po::variables_map vm;
    try {
      po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
      po::notify(vm);
    } catch (const po::error& e) {
      throw llmtrain::ConfigError(fmt::format("llmtrain-prepare: {} (see --help)", e.what()));
    }
    if (vm.count("help")) {
      if (rt.is_root()) std::cout << flags << "\n";
      return 0;
    }
    if (!verify.empty()) {
      // One rank reads; the others wait for its verdict.
      int bad = rt.is_root() ? llmtrain::verify_data_dir(verify, std::cout) : 0;
      MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
      return bad ? 1 : 0;
    }
    o.progress = !no_progress;
    for (size_t a = 0; a < exts.size();) {
      const size_t b = std::min(exts.find(',', a), exts.size());
      if (b > a) o.extensions.push_back(exts.substr(a, b - a));
      a = b + 1;
    }
    const auto r = llmtrain::prepare_data(o, rt);
    llmtrain::log::info(
        "prepared {}: train {} tokens ({} documents, {} shards), val {} tokens ({} documents, {} shards) in "
        "{:.1f} s on {} ranks ({:.2f}M tokens/s per rank){}{}",
        o.out_dir, r.train_tokens, r.train_documents, r.train_shards, r.val_tokens, r.val_documents, r.val_shards,
        r.seconds, r.world_size, (r.train_tokens + r.val_tokens) / std::max(r.seconds, 1e-9) / r.world_size / 1e6,
        r.skipped_documents ? fmt::format("; {} document(s) skipped (warnings above)", r.skipped_documents) : "",
        r.skipped_inputs ? fmt::format("; {} input file(s) skipped (warnings above)", r.skipped_inputs) : "");
    return 0;
  });
}
