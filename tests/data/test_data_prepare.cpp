// llmtrain-prepare's library side: HDF5 round trip, 1-rank vs N-rank byte
// identity, nanoGPT import, what a failed rerun leaves, binary documents.
#include <gtest/gtest.h>
#include <mpi.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "data/prepare_comm.hpp"
#include "data_test_util.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/data/loader.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace llmtrain;
using namespace llmtrain::testing;

namespace {

// Documents of the corpus in input order, read independently of prepare: sorted
// text files (one document each), then the JSONL lines' "text".
std::vector<std::string> corpus_documents(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir / "docs")) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> docs;
  for (const auto& f : files) docs.push_back(read_file(f));
  std::ifstream in(dir / "docs.jsonl");
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) docs.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
  return docs;
}

std::vector<uint32_t> split_tokens(const fs::path& out, const std::string& split) {
  const auto j = nlohmann::json::parse(read_file(out / "index.json"));
  std::vector<uint32_t> all;
  for (const auto& s : j["splits"][split]["shards"]) {
    const auto t = read_shard_tokens((out / s["file"].get<std::string>()).string());
    EXPECT_EQ(static_cast<int64_t>(t.size()), s["tokens"].get<int64_t>());
    all.insert(all.end(), t.begin(), t.end());
  }
  return all;
}

// Byte tokenizer: a document is its bytes followed by EOS = 0.
std::vector<std::string> split_at_eos(const std::vector<uint32_t>& toks) {
  std::vector<std::string> docs;
  std::string cur;
  for (uint32_t t : toks) {
    if (t == 0) {
      docs.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(t));
    }
  }
  EXPECT_TRUE(cur.empty()) << "token stream does not end with EOS";
  return docs;
}

}  // namespace

TEST(DataPrepare, RoundTripAllTrain) {
  const auto dir = fresh_dir("prepare_roundtrip");
  PrepareOptions o;
  o.inputs = write_corpus(dir, 30);
  o.out_dir = (dir / "out").string();
  o.val_fraction = 0.0;
  o.shard_tokens = 10000;
  const auto r = prepare_world(o);
  const auto docs = corpus_documents(dir);
  int64_t expect_tokens = 0;
  for (const auto& d : docs) expect_tokens += static_cast<int64_t>(d.size()) + 1;
  EXPECT_EQ(r.train_tokens, expect_tokens);
  EXPECT_EQ(r.train_documents, static_cast<int64_t>(docs.size()));
  EXPECT_EQ(r.val_tokens, 0);
  EXPECT_EQ(r.train_shards, (expect_tokens + 9999) / 10000);

  const DataInfo info = read_data_info(o.out_dir);
  EXPECT_EQ(info.vocab_size, 256);
  EXPECT_EQ(info.tokenizer, "byte");
  EXPECT_EQ(info.token_dtype, "uint16");
  EXPECT_EQ(info.train_tokens, expect_tokens);
  EXPECT_EQ(info.train_shards, r.train_shards);
  EXPECT_TRUE(split_at_eos(split_tokens(o.out_dir, "train")) == docs);
  // Open MPI's OMPIO briefly creates "<file>.locktest.<n>", and its
  // sharedfp/lockedfile "<file>-<jobid>-<pid>.lock", next to files other ranks
  // are still opening or reading back (removed at their close; the programs
  // turn sharedfp/sm off, docs/architecture.md); those are not ours.
  for (const auto& e : fs::directory_iterator(o.out_dir))
    if (e.path().string().find(".locktest") == std::string::npos && e.path().extension() != ".lock")
      EXPECT_EQ(e.path().extension(), e.path().filename() == "index.json" ? ".json" : ".h5") << e.path();
}

TEST(DataPrepare, ValSplitIsADocumentPartition) {
  const auto dir = fresh_dir("prepare_split");
  PrepareOptions o;
  o.inputs = write_corpus(dir, 40);
  o.out_dir = (dir / "out").string();
  o.val_fraction = 0.25;
  o.shard_tokens = 7000;
  const auto r = prepare_world(o);
  const auto docs = corpus_documents(dir);
  const auto train = split_at_eos(split_tokens(o.out_dir, "train"));
  const auto val = split_at_eos(split_tokens(o.out_dir, "val"));
  EXPECT_EQ(r.train_documents, static_cast<int64_t>(train.size()));
  EXPECT_EQ(r.val_documents, static_cast<int64_t>(val.size()));
  ASSERT_EQ(train.size() + val.size(), docs.size());
  EXPECT_GT(val.size(), docs.size() / 10);
  EXPECT_LT(val.size(), docs.size() / 2);
  // Each split keeps input order: the documents are an interleaving of the two.
  size_t ti = 0, vi = 0;
  for (const auto& d : docs) {
    if (ti < train.size() && train[ti] == d) {
      ++ti;
    } else {
      ASSERT_LT(vi, val.size());
      ASSERT_EQ(val[vi], d);
      ++vi;
    }
  }
}

TEST(DataPrepare, OutputIsByteIdenticalForOneAndAllRanks) {
  auto& rt = runtime();
  const auto dir = fresh_dir("prepare_identical");
  PrepareOptions o;
  o.inputs = write_corpus(dir, 50);
  o.val_fraction = 0.2;
  o.shard_tokens = 12345;  // shard boundaries fall inside documents and rank ranges
  o.progress = false;
  o.out_dir = (dir / "world").string();
  data::prepare_data_on(o, MPI_COMM_WORLD);
  MPI_Comm self_comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rt.rank() == 0 ? 0 : MPI_UNDEFINED, 0, &self_comm);
  if (rt.rank() == 0) {
    o.out_dir = (dir / "one").string();
    data::prepare_data_on(o, self_comm);
    MPI_Comm_free(&self_comm);
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir / "one"))
      if (e.path().string().find(".locktest") == std::string::npos) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_GT(names.size(), 5u);
    for (const auto& n : names) {
      ASSERT_TRUE(fs::exists(dir / "world" / n)) << n;
      EXPECT_TRUE(read_file(dir / "one" / n) == read_file(dir / "world" / n))
          << n << " differs between 1 rank and " << rt.world_size() << " ranks";
    }
    size_t world_files = 0;
    for (const auto& e : fs::directory_iterator(dir / "world"))
      world_files += e.path().string().find(".locktest") == std::string::npos;
    EXPECT_EQ(world_files, names.size());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(DataPrepare, NanogptImportRoundTrip) {
  const auto dir = fresh_dir("prepare_nanogpt");
  std::vector<uint16_t> train(30011), val(4999);
  for (size_t i = 0; i < train.size(); ++i) train[i] = static_cast<uint16_t>((i * 7919) % 50257);
  for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<uint16_t>((i * 104729) % 50257);
  if (runtime().rank() == 0) {
    fs::create_directories(dir / "bin");
    std::ofstream(dir / "bin" / "train.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(train.data()), train.size() * 2);
    std::ofstream(dir / "bin" / "val.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(val.data()), val.size() * 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  PrepareOptions o;
  o.from_nanogpt = (dir / "bin").string();
  o.vocab_size = 50257;
  o.tokenizer_name = "gpt2";
  o.shard_tokens = 8192;
  o.out_dir = (dir / "out").string();
  const auto r = prepare_world(o);
  EXPECT_EQ(r.train_tokens, 30011);
  EXPECT_EQ(r.val_tokens, 4999);
  const auto info = read_data_info(o.out_dir);
  EXPECT_EQ(info.tokenizer, "gpt2");
  EXPECT_EQ(info.vocab_size, 50257);
  EXPECT_EQ(info.train_shards, 4);
  const auto t = split_tokens(o.out_dir, "train"), v = split_tokens(o.out_dir, "val");
  EXPECT_TRUE(std::equal(t.begin(), t.end(), train.begin(), train.end()));
  EXPECT_TRUE(std::equal(v.begin(), v.end(), val.begin(), val.end()));

  // Too small a vocabulary: caught at prepare time, naming the file.
  o.vocab_size = 1000;
  o.out_dir = (dir / "bad").string();
  try {
    prepare_world(o);
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("train.bin"), std::string::npos) << m;
    EXPECT_NE(m.find(">= vocab_size 1000"), std::string::npos) << m;
  }
}

// Issue 19, part 2: a rerun into an existing data directory deleted the good
// data before it knew the new data was good. Now the new output is written
// beside it and swapped in only when complete and checked.
TEST(DataPrepare, AFailedRerunLeavesTheOldDataAsItWas) {
  const auto dir = fresh_dir("prepare_rerun");
  PrepareOptions o;
  o.inputs = write_corpus(dir, 10);
  o.out_dir = (dir / "out").string();
  o.shard_tokens = 5000;
  prepare_world(o);
  const std::string index = read_file(dir / "out" / "index.json");
  const auto train = split_tokens(o.out_dir, "train");
  // Without --overwrite an existing data directory is refused, before any work.
  try {
    prepare_world(o);
    ADD_FAILURE() << "an existing data directory was replaced without overwrite";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("--overwrite"), std::string::npos) << e.what();
  }
  // With it, a rerun that fails half-way (a bad JSONL line at the end) changes nothing.
  if (runtime().rank() == 0) std::ofstream(dir / "docs.jsonl", std::ios::app) << "{\"text\": 12}\n";
  MPI_Barrier(MPI_COMM_WORLD);
  o.overwrite = true;
  EXPECT_THROW(prepare_world(o), DataError);
  EXPECT_EQ(read_file(dir / "out" / "index.json"), index);
  EXPECT_NO_THROW(read_data_info(o.out_dir));
  EXPECT_TRUE(split_tokens(o.out_dir, "train") == train);
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0 removes the partial output after the error reached every rank
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".out."), std::string::npos) << "left behind: " << e.path();
  // Every rank has listed before rank 0 starts the next run's staging directory.
  MPI_Barrier(MPI_COMM_WORLD);
  // A good rerun replaces it.
  o.inputs.pop_back();  // without the broken JSONL
  const auto r = prepare_world(o);
  EXPECT_NE(read_file(dir / "out" / "index.json"), index);
  EXPECT_EQ(read_data_info(o.out_dir).train_tokens, r.train_tokens);
  MPI_Barrier(MPI_COMM_WORLD);
}

// Issue 19, part 4: binary input was tokenized, its NUL bytes becoming the
// byte tokenizer's EOS id 0. No document may contribute an EOS id.
TEST(DataPrepare, BinaryDocumentsAreSkippedAndNeverGiveEos) {
  const auto dir = fresh_dir("prepare_binary");
  if (runtime().rank() == 0) {
    fs::create_directories(dir / "in");
    std::ofstream(dir / "in" / "a.txt") << "plain text";
    std::ofstream(dir / "in" / "b.bin", std::ios::binary) << std::string("AB\0CD", 5);
    std::ofstream(dir / "in" / "c.txt") << "more text, long enough";
    std::ofstream(dir / "in.jsonl") << "{\"text\": \"x\\u0000y\"}\n{\"text\": \"fine\"}\n";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  PrepareOptions o;
  o.inputs = {(dir / "in").string(), (dir / "in.jsonl").string()};
  o.out_dir = (dir / "out").string();
  o.val_fraction = 0.0;
  const auto r = prepare_world(o);
  EXPECT_EQ(r.skipped_documents, 2);
  EXPECT_EQ(r.train_documents, 3);
  const auto docs = split_at_eos(split_tokens(o.out_dir, "train"));  // EOS only between documents
  EXPECT_EQ(docs, (std::vector<std::string>{"plain text", "more text, long enough", "fine"}));
  o.strict = true;
  o.out_dir = (dir / "strict").string();
  try {
    prepare_world(o);
    ADD_FAILURE() << "strict accepted a binary file";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("b.bin: binary (a NUL byte at offset 2)"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "strict"));
}

// Issue 30, point 6: what prepare cannot read in an input directory it skips by
// name and counts; it never drops a file silently. The tests run as root, who
// can read any regular file: the unreadable inputs here are ones no one can read
// as a file (a FIFO, a dangling symlink, a symlink loop), plus a mode-000 file
// when not root.
TEST(DataPrepare, UnreadableInputsAreSkippedByNameAndCounted) {
  const auto dir = fresh_dir("prepare_unreadable");
  const auto in = dir / "in";
  int expected_skips = 4;
  if (runtime().rank() == 0) {
    fs::create_directories(in / "sub");
    fs::create_directories(dir / "elsewhere");
    std::ofstream(in / "a.txt") << "first document";
    std::ofstream(in / "sub" / "b.txt") << "second document";
    fs::create_symlink(dir / "missing.txt", in / "dangling.txt");
    fs::create_symlink(in / "loop2.txt", in / "loop1.txt");
    fs::create_symlink(in / "loop1.txt", in / "loop2.txt");
    ASSERT_EQ(::mkfifo((in / "pipe.txt").c_str(), 0644), 0);
  }
  if (::geteuid() != 0) {
    if (runtime().rank() == 0) {
      std::ofstream(in / "secret.txt") << "no one may read this";
      fs::permissions(in / "secret.txt", fs::perms::none);
    }
    ++expected_skips;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  PrepareOptions o;
  o.inputs = {in.string()};
  o.out_dir = (dir / "out").string();
  o.val_fraction = 0.0;
  ::testing::internal::CaptureStdout();
  PrepareResult r;
  try {
    r = prepare_world(o);
  } catch (...) {
    ::testing::internal::GetCapturedStdout();
    throw;
  }
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(r.skipped_inputs, expected_skips);
  EXPECT_EQ(r.train_documents, 2);
  EXPECT_EQ(split_at_eos(split_tokens(o.out_dir, "train")),
            (std::vector<std::string>{"first document", "second document"}));
  if (runtime().rank() == 0) {
    for (const std::string want :
         {(in / "dangling.txt").string() + ": a symlink to '" + (dir / "missing.txt").string() +
              "' that cannot be followed (its target does not exist)",
          (in / "loop1.txt").string() + ": a symlink to", (in / "loop2.txt").string() + ": a symlink to",
          (in / "pipe.txt").string() + ": a FIFO",
          fmt::format("skipped {} input file(s) that cannot be read", expected_skips)})
      EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  }
  // Named on the command line, such an input is an error, not a skip.
  o.inputs = {(in / "pipe.txt").string()};
  o.out_dir = (dir / "out2").string();
  try {
    prepare_world(o);
    ADD_FAILURE() << "a FIFO named as an input was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("input '" + (in / "pipe.txt").string() + "': a FIFO"), std::string::npos)
        << e.what();
  }
}

TEST(DataPrepare, TextChecks) {
  using data::not_text_reason;
  using data::utf8_first_invalid;
  EXPECT_EQ(not_text_reason("caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80", true), "");
  EXPECT_NE(not_text_reason(std::string("a\0b", 3), false).find("NUL byte at offset 1"), std::string::npos);
  EXPECT_EQ(not_text_reason("na\xefve", false), "");  // Latin-1: bytes are fine for the byte tokenizer
  EXPECT_NE(not_text_reason("na\xefve", true).find("offset 2"), std::string::npos);
  EXPECT_EQ(utf8_first_invalid("ok"), std::string_view::npos);
  EXPECT_EQ(utf8_first_invalid("\xc0\xaf"), 0u);               // overlong '/'
  EXPECT_EQ(utf8_first_invalid("x\xed\xa0\x80"), 1u);          // a surrogate
  EXPECT_EQ(utf8_first_invalid("xy\xf4\x90\x80\x80"), 2u);    // above U+10FFFF
  EXPECT_EQ(utf8_first_invalid("\xe2\x82"), 0u);                // truncated
  EXPECT_EQ(utf8_first_invalid("\xf0\x90\x80\x80"), std::string_view::npos);  // U+10000
}
