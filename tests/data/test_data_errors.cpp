// Every bad-input case of the data pipeline ends in a DataError that names the
// file (and line) and says what was expected.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "data_test_util.hpp"
#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/data/loader.hpp"
#include "llmtrain/tokenizer/tokenizer.hpp"
#include "test_util.hpp"

using llmtrain::Split;

namespace fs = std::filesystem;
using namespace llmtrain;
using namespace llmtrain::testing;

namespace {

// Runs fn, expects a DataError (or ConfigError) whose message holds every needle.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << "'" << n << "' not in: " << m;
  }
}

// A good small directory (made once), copied per test so each can break its copy.
fs::path good_copy(const std::string& name) {
  static const fs::path good = [] {
    const auto d = fresh_dir("errors_good");
    PrepareOptions o;
    o.inputs = write_corpus(d, 12);
    o.out_dir = (d / "out").string();
    o.val_fraction = 0.25;
    o.shard_tokens = 6000;
    prepare_world(o);
    return d / "out";
  }();
  const auto dst = fresh_dir(name) / "data";
  if (runtime().rank() == 0) fs::copy(good, dst, fs::copy_options::recursive);
  MPI_Barrier(MPI_COMM_WORLD);
  return dst;
}

Config config_for(const fs::path& dir) {
  Config c;
  c.data_dir = dir.string();
  c.batch_size = 2;
  c.block_size = 32;
  return c;
}

// Rank 0 changes the files once every rank is done with them (a rank still
// reading the previous version would see a half-written file), then all go on.
void rank0(const std::function<void()>& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (runtime().rank() == 0) fn();
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

TEST(DataErrors, MissingDirectory) {
  expect_error([] { read_data_info("/nonexistent/llmtrain-data"); },
               {"/nonexistent/llmtrain-data", "does not exist", "llmtrain-prepare"});
}

TEST(DataErrors, MissingIndex) {
  const auto d = good_copy("err_noindex");
  rank0([&] { fs::remove(d / "index.json"); });
  expect_error([&] { read_data_info(d.string()); }, {"no index.json", d.string()});
}

TEST(DataErrors, MissingShard) {
  const auto d = good_copy("err_noshard");
  rank0([&] { fs::remove(d / "train_00001.h5"); });
  expect_error([&] { read_data_info(d.string()); }, {"train_00001.h5", "missing"});
}

TEST(DataErrors, TruncatedShard) {
  const auto d = good_copy("err_truncated");
  rank0([&] { fs::resize_file(d / "val_00000.h5", 100); });
  expect_error([&] { read_data_info(d.string()); }, {"val_00000.h5", "not a readable HDF5 file"});
}

TEST(DataErrors, WrongDtype) {
  const auto d = good_copy("err_dtype");
  rank0([&] {
    const auto t = read_shard_tokens((d / "train_00000.h5").string());
    write_raw_shard((d / "train_00000.h5").string(), H5T_STD_I32LE, t, "byte", 256, "train");
  });
  expect_error([&] { read_data_info(d.string()); }, {"train_00000.h5", "int32", "expected uint16 or uint32"});
  rank0([&] {
    const auto t = read_shard_tokens((d / "val_00000.h5").string());
    write_raw_shard((d / "train_00000.h5").string(), H5T_IEEE_F32LE, t, "byte", 256, "train");
  });
  expect_error([&] { read_data_info(d.string()); }, {"train_00000.h5", "float32"});
}

TEST(DataErrors, MixedTokenizers) {
  const auto d = good_copy("err_mixed");
  rank0([&] {
    const auto t = read_shard_tokens((d / "train_00001.h5").string());
    write_raw_shard((d / "train_00001.h5").string(), H5T_STD_U16LE, t, "gpt2", 256, "train");
  });
  expect_error([&] { read_data_info(d.string()); }, {"mixed tokenizers", "train_00001.h5", "'gpt2'", "'byte'"});
}

TEST(DataErrors, BlockSizeLargerThanData) {
  const auto d = good_copy("err_block");
  Config c = config_for(d);
  c.block_size = 6000;  // shards hold at most 6000 tokens; a window needs 6001
  expect_error([&] { TokenLoader l(llmtrain::LoaderOptions::from_config(c), runtime(), Split::train, torch::kCPU); },
               {"block_size=6000", "split 'train'", "6001"});
}

TEST(DataErrors, EmptySplit) {
  const auto dir = fresh_dir("err_emptysplit");
  PrepareOptions o;
  o.inputs = write_corpus(dir, 5);
  o.out_dir = (dir / "out").string();
  o.val_fraction = 0.0;
  prepare_world(o);
  expect_error([&] { TokenLoader l(llmtrain::LoaderOptions::from_config(config_for(o.out_dir)), runtime(), Split::val, torch::kCPU); },
               {"split 'val'", "is empty"});
}

TEST(DataErrors, TokenIdAtLeastVocabAtLoadTime) {
  const auto d = good_copy("err_vocab_load");
  rank0([&] {
    auto t = read_shard_tokens((d / "train_00000.h5").string());
    std::fill(t.begin(), t.end(), 300u);  // uint16 holds it, the byte vocabulary does not
    write_raw_shard((d / "train_00000.h5").string(), H5T_STD_U16LE, t, "byte", 256, "train");
  });
  Config c = config_for(d);
  c.batch_size = 16;
  expect_error(
      [&] {
        TokenLoader l(llmtrain::LoaderOptions::from_config(c), 0, 1, Split::train, torch::kCPU);
        for (int i = 0; i < 20; ++i) l.next();
      },
      {"train_00000.h5", "token id 300", "256"});
}

TEST(DataErrors, UnreadableJsonlLineNamesFileAndLine) {
  const auto dir = fresh_dir("err_jsonl");
  rank0([&] {
    std::ofstream f(dir / "a.jsonl");
    f << "{\"text\": \"fine\"}\n{\"text\": \"also fine\"}\n\n{\"text\": \"broken\n{\"text\": \"after\"}\n";
  });
  PrepareOptions o;
  o.inputs = {(dir / "a.jsonl").string()};
  o.out_dir = (dir / "out").string();
  expect_error([&] { prepare_world(o); }, {"a.jsonl:4", "unreadable JSONL line"});
  rank0([&] { std::ofstream(dir / "b.jsonl") << "{\"text\": \"ok\"}\n{\"txt\": \"no text\"}\n"; });
  o.inputs = {(dir / "b.jsonl").string()};
  expect_error([&] { prepare_world(o); }, {"b.jsonl:2", "\"text\""});
}

TEST(DataErrors, EmptyAndMissingInput) {
  const auto dir = fresh_dir("err_emptyinput");
  rank0([&] {
    fs::create_directories(dir / "empty");
    std::ofstream(dir / "empty" / "nothing.txt");
  });
  PrepareOptions o;
  o.inputs = {(dir / "empty").string()};
  o.out_dir = (dir / "out").string();
  expect_error([&] { prepare_world(o); }, {"empty input"});
  o.inputs = {(dir / "nope.txt").string()};
  expect_error([&] { prepare_world(o); }, {"nope.txt", "does not exist"});
  o.inputs = {};
  o.from_nanogpt = (dir / "empty").string();
  o.vocab_size = 256;
  expect_error([&] { prepare_world(o); }, {"train.bin", "missing"});
}

TEST(DataErrors, UnknownTokenizerSpec) {
  expect_error([] { make_tokenizer("wordpiece:/x.json"); }, {"wordpiece", "unknown tokenizer kind"});
  expect_error([] { make_tokenizer("byte:/x"); }, {"byte:/x"});
  const auto t = make_tokenizer("byte");
  EXPECT_EQ(t->encode("h\xc3\xa9"), (std::vector<int32_t>{'h', 0xc3, 0xa9}));
  EXPECT_EQ(t->vocab_size(), 256);
}

TEST(DataErrors, ConfigVocabSmallerThanData) {
  const auto d = good_copy("err_cfgvocab");
  Config c = config_for(d);
  c.vocab_size = 100;
  expect_error([&] { TokenLoader l(llmtrain::LoaderOptions::from_config(c), runtime(), Split::train, torch::kCPU); }, {"vocab_size=100", "256"});
}
