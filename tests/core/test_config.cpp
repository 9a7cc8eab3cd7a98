#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "test_util.hpp"

using llmtrain::CommandLine;
using llmtrain::Config;
using llmtrain::ConfigError;

namespace {
CommandLine parse(std::vector<std::string> args) {
  args.insert(args.begin(), "llmtrain");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return llmtrain::parse_command_line(static_cast<int>(argv.size()), argv.data());
}
std::string write_cfg(const std::string& name, const std::string& text) {
  auto p = llmtrain::testing::scratch_dir("config") / name;
  std::ofstream(p) << text;
  return p.string();
}
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace

TEST(Config, DefaultsComeFromTheDeclaration) {
  Config c;
  EXPECT_EQ(c.batch_size, 12);
  EXPECT_EQ(c.get("batch_size"), "12");
  EXPECT_EQ(c.get("use_zero1"), "False");
  EXPECT_EQ(c.attention_backend, llmtrain::AttentionBackend::sdpa);
}

TEST(Config, EverySeedKeyIsDeclared) {
  for (const char* k : {"batch_size", "gradient_accumulation_steps", "block_size", "max_iters", "eval_interval",
                        "eval_iters", "log_interval", "gradient_log_interval", "learning_rate", "min_lr",
                        "weight_decay", "beta1", "beta2", "grad_clip", "warmup_iters", "lr_decay_iters", "dtype",
                        "compile", "attention_backend", "use_zero1", "use_fsdp", "use_cuda_graphs",
                        "use_dataloader", "dataloader_num_workers", "dataloader_prefetch_factor",
                        "always_save_checkpoint", "init_from", "eval_only", "out_dir", "seed", "data_dir",
                        "n_layer", "n_head", "n_embd", "vocab_size"})
    EXPECT_TRUE(Config::has_key(k)) << k;
}

TEST(Config, BooleansAcceptPythonAndCSpellings) {
  Config c;
  for (const char* t : {"True", "true", "1"}) {
    c.compile = false;
    c.set("compile", t);
    EXPECT_TRUE(c.compile) << t;
  }
  for (const char* f : {"False", "false", "0"}) {
    c.compile = true;
    c.set("compile", f);
    EXPECT_FALSE(c.compile) << f;
  }
  EXPECT_NE(error_of([&] { c.set("compile", "yes"); }).find("True, False, true, false, 1 or 0"), std::string::npos);
}

TEST(Config, FileThenOverridesInOrder) {
  const auto f = write_cfg("a.cfg",
                           "# a preset\n"
                           "batch_size = 4   # per rank\n"
                           "\n"
                           "learning_rate=3e-4\n"
                           "out_dir = 'out-test'\n"
                           "attention_backend = \"manual\"\n");
  auto cl = parse({f, "--batch_size=8", "--compile=True", "--max_iters", "200"});
  EXPECT_EQ(cl.config_files.size(), 1u);
  EXPECT_EQ(cl.config.batch_size, 8);
  EXPECT_DOUBLE_EQ(cl.config.learning_rate, 3e-4);
  EXPECT_EQ(cl.config.out_dir, "out-test");
  EXPECT_EQ(cl.config.attention_backend, llmtrain::AttentionBackend::manual);
  EXPECT_TRUE(cl.config.compile);
  EXPECT_EQ(cl.config.max_iters, 200);
  // A key given again later wins (jobs append EXTRA_ARGS after their own flags).
  auto again = parse({f, "--dtype=float32", "--max_iters=5", "--dtype=bfloat16", "--max_iters", "7"});
  EXPECT_EQ(again.config.dtype, llmtrain::ComputeDtype::bfloat16);
  EXPECT_EQ(again.config.max_iters, 7);
}

TEST(Config, UnknownKeyNamesTheClosest) {
  const std::string e = error_of([] { parse({"--batch_szie=3"}); });
  EXPECT_NE(e.find("'batch_szie'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'batch_size'"), std::string::npos) << e;

  const auto f = write_cfg("typo.cfg", "max_iter = 10\n");
  const std::string e2 = error_of([&] { parse({f}); });
  EXPECT_NE(e2.find("typo.cfg:1"), std::string::npos) << e2;
  EXPECT_NE(e2.find("did you mean 'max_iters'"), std::string::npos) << e2;
}

TEST(Config, BadValuesNameKeyValueAndWhatIsAllowed) {
  const std::string e1 = error_of([] { parse({"--batch_size=abc"}); });
  EXPECT_NE(e1.find("'batch_size'"), std::string::npos) << e1;
  EXPECT_NE(e1.find("'abc'"), std::string::npos) << e1;
  EXPECT_NE(e1.find("integer"), std::string::npos) << e1;

  const std::string e2 = error_of([] { parse({"--batch_size=0"}); });
  EXPECT_NE(e2.find("> 0"), std::string::npos) << e2;

  const std::string e3 = error_of([] { parse({"--attention_backend=flash"}); });
  EXPECT_NE(e3.find("flash_attn_3, flash_attn_2, sdpa, manual"), std::string::npos) << e3;

  const std::string e4 = error_of([] { parse({"--learning_rate=fast"}); });
  EXPECT_NE(e4.find("'learning_rate'"), std::string::npos) << e4;

  const auto f = write_cfg("bad.cfg", "batch_size = 4\nthis line has no equals\n");
  const std::string e5 = error_of([&] { parse({f}); });
  EXPECT_NE(e5.find("bad.cfg:2"), std::string::npos) << e5;

  const std::string e6 = error_of([] { parse({"/nonexistent/x.cfg"}); });
  EXPECT_NE(e6.find("/nonexistent/x.cfg"), std::string::npos) << e6;

  const std::string e7 = error_of([] { parse({"--beta2=1.5"}); });
  EXPECT_NE(e7.find("[0, 1)"), std::string::npos) << e7;
}

// Choice keys are enums (core/options.hpp): text becomes the enum in the parser,
// and the words come back for get(), the run log's config block and messages.
TEST(Config, ChoiceKeysAreEnumsShownByTheirWords) {
  using llmtrain::ComputeDtype;
  using llmtrain::DeviceKind;
  using llmtrain::InitSource;
  using llmtrain::StrategyKind;
  Config c;
  EXPECT_EQ(c.dtype, ComputeDtype::float32);
  EXPECT_EQ(c.device, DeviceKind::automatic);
  EXPECT_EQ(c.get("device"), "auto");
  EXPECT_EQ(c.init_from.source, InitSource::scratch);
  c.set("dtype", "'bfloat16'");
  EXPECT_EQ(c.dtype, ComputeDtype::bfloat16);
  EXPECT_EQ(c.get("dtype"), "bfloat16");
  EXPECT_EQ(c.to_json()["dtype"], "bfloat16");
  c.set("init_from", "hf:/models/llama");
  EXPECT_EQ(c.init_from.source, InitSource::hf);
  EXPECT_EQ(c.init_from.hf_dir, "/models/llama");
  EXPECT_EQ(c.get("init_from"), "hf:/models/llama");
  EXPECT_EQ(c.to_json()["init_from"], "hf:/models/llama");
  c.set("init_from", "resume");
  EXPECT_EQ(c.init_from, llmtrain::InitFrom{InitSource::resume});
  for (const char* bad : {"hf:", "Resume", "hf"}) {
    const std::string e = error_of([&] { c.set("init_from", bad); });
    EXPECT_NE(e.find("config key 'init_from': invalid value '" + std::string(bad) +
                     "': expected one of scratch, resume, hf:<dir>"),
              std::string::npos)
        << e;
  }
  EXPECT_NE(error_of([&] { c.set("device", "gpu"); }).find("'gpu'"), std::string::npos);
  // use_zero1 / use_fsdp select one strategy; both together are refused.
  Config s;
  EXPECT_EQ(s.strategy(), StrategyKind::ddp);
  s.use_zero1 = true;
  EXPECT_EQ(s.strategy(), StrategyKind::zero1);
  s.use_fsdp = true;
  EXPECT_NE(error_of([&] { s.validate(); }).find("exclusive"), std::string::npos);
  s.use_zero1 = false;
  EXPECT_EQ(s.strategy(), StrategyKind::fsdp);
  EXPECT_STREQ(llmtrain::to_string(s.strategy()), "fsdp");
  EXPECT_STREQ(llmtrain::to_string(llmtrain::Split::val), "val");
}

TEST(Config, CrossKeyValidation) {
  Config c;
  c.min_lr = 1.0;
  EXPECT_NE(error_of([&] { c.validate(); }).find("min_lr"), std::string::npos);
  Config g;
  g.n_head = 12;
  g.n_kv_head = 5;
  EXPECT_NE(error_of([&] { g.validate(); }).find("n_kv_head"), std::string::npos);
}

TEST(Config, UnbuiltFeaturesAreRefusedNotIgnored) {
  Config c;
  EXPECT_NO_THROW(c.refuse_unbuilt());
  c.use_cuda_graphs = true;  // built (issue 47): no longer refused as unbuilt
  EXPECT_NO_THROW(c.refuse_unbuilt());
  EXPECT_NO_THROW(c.validate());
}

// use_cuda_graphs=True with what a captured step cannot hold: one line naming
// the key and the reason.
TEST(Config, CudaGraphsRefuseWhatCannotBeCaptured) {
  auto refused = [](auto set, const char* reason) {
    Config c;
    c.use_cuda_graphs = true;
    set(c);
    const std::string e = error_of([&] { c.validate(); });
    EXPECT_NE(e.find("use_cuda_graphs"), std::string::npos) << e;
    EXPECT_NE(e.find(reason), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    c.use_cuda_graphs = false;
    EXPECT_NO_THROW(c.validate()) << reason;
  };
  refused([](Config& c) { c.dtype = llmtrain::ComputeDtype::float16; }, "dtype=float16");
  refused([](Config& c) { c.document_masking = true; }, "document_masking=True");
  refused([](Config& c) { c.use_fsdp = true; }, "use_fsdp=True");
  refused([](Config& c) { c.use_zero1 = true; }, "use_zero1=True");
}

TEST(Config, JsonHasEveryKeyWithItsType) {
  Config c;
  const auto j = c.to_json();
  EXPECT_EQ(j.size(), Config::key_names().size());
  EXPECT_TRUE(j["batch_size"].is_number_integer());
  EXPECT_TRUE(j["learning_rate"].is_number_float());
  EXPECT_TRUE(j["compile"].is_boolean());
  EXPECT_TRUE(j["dtype"].is_string());
}

TEST(Config, HelpListsEveryKey) {
  const std::string h = Config::help_text();
  for (const auto& k : Config::key_names()) EXPECT_NE(h.find("--" + k + "="), std::string::npos) << k;
  EXPECT_NE(h.find("[rmsnorm|layernorm]"), std::string::npos);
}

TEST(Config, ClosestMatch) {
  EXPECT_EQ(llmtrain::closest_match("lerning_rate", Config::key_names()), "learning_rate");
  EXPECT_EQ(llmtrain::closest_match("zzzzzzzzzzzzzzzzzzzzzz", Config::key_names()), "");
}

TEST(Config, DocsTableIsUpToDate) {
  std::ifstream in(llmtrain::testing::source_dir() + "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md missing: regenerate with `llmtrain --config_docs > docs/config.md`";
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, Config::markdown_table())
      << "docs/config.md is stale: regenerate with `build/bin/llmtrain --config_docs > docs/config.md`";
}

// Issue 19, part 5: a directory given as the config file was read as an empty
// config (the run then failed on something unrelated).
TEST(Config, ADirectoryIsNotAConfigFile) {
  const auto dir = llmtrain::testing::scratch_dir("config") / "a_directory.cfg";
  std::filesystem::create_directories(dir);
  const std::string m = error_of([&] { Config().load_file(dir.string()); });
  EXPECT_NE(m.find(dir.string()), std::string::npos) << m;
  EXPECT_NE(m.find("is a directory"), std::string::npos) << m;
  const std::string cl = error_of([&] { parse({dir.string()}); });
  EXPECT_NE(cl.find("is a directory"), std::string::npos) << cl;
}

// Issue 19, part 5: a key set twice in one file silently took the last value.
TEST(Config, AKeySetTwiceInOneFileNamesBothLines) {
  const auto p = write_cfg("dup.cfg", "# model\nbatch_size = 8\nn_layer = 2\n\nbatch_size = 16  # again\n");
  const std::string m = error_of([&] { Config().load_file(p); });
  EXPECT_NE(m.find("'batch_size'"), std::string::npos) << m;
  EXPECT_NE(m.find(p + ":5"), std::string::npos) << m;
  EXPECT_NE(m.find(p + ":2"), std::string::npos) << m;
  // Across files (and on the command line) the later value still wins.
  const auto a = write_cfg("a.cfg", "batch_size = 8\n");
  const auto b = write_cfg("b.cfg", "batch_size = 16\n");
  EXPECT_EQ(parse({a, b}).config.batch_size, 16);
  EXPECT_EQ(parse({a, "--batch_size=4"}).config.batch_size, 4);
}

TEST(Config, AnUnreadableConfigFileNamesTheOsError) {
  const std::string m = error_of([] { Config().load_file("/nonexistent/llmtrain.cfg"); });
  EXPECT_NE(m.find("/nonexistent/llmtrain.cfg"), std::string::npos) << m;
  EXPECT_NE(m.find("No such file or directory"), std::string::npos) << m;
}

// Issue 49: what a new user tripped on.
TEST(Config, AUtf8ByteOrderMarkIsNotPartOfTheFirstKey) {
  const auto path = write_cfg("bom.cfg", "\xEF\xBB\xBFmax_iters = 7\nbatch_size = 3\n");
  const CommandLine cl = parse({path});
  EXPECT_EQ(cl.config.max_iters, 7);
  EXPECT_EQ(cl.config.batch_size, 3);
}

TEST(Config, AnEmptyValueAfterTheEqualSignClearsAStringKey) {
  const auto path = write_cfg("mix.cfg", "data_mix = 0.5 data/a 0.5 data/b\n");
  EXPECT_EQ(parse({path}).config.data_mix, "0.5 data/a 0.5 data/b");
  const CommandLine cl = parse({path, "--data_mix="});
  EXPECT_EQ(cl.config.data_mix, "");
  // A number key given nothing is refused naming the key, not Boost's syntax.
  const std::string e = error_of([&] { parse({"--max_iters="}); });
  EXPECT_NE(e.find("max_iters"), std::string::npos) << e;
  EXPECT_EQ(e.find("equal sign"), std::string::npos) << e;
}

TEST(Config, DescribeFlagsWithoutDescribeAreRefused) {
  for (const char* flag : {"--describe_format=json", "--describe_memory_gib=80", "--describe_world_size=4",
                           "--describe_ranks_per_node=2", "--describe_device=h200"}) {
    const std::string e = error_of([&] { parse({flag}); });
    const std::string name = std::string(flag).substr(2, std::string(flag).find('=') - 2);
    EXPECT_NE(e.find("--" + name + " is an option of --describe"), std::string::npos) << flag << ": " << e;
    EXPECT_NO_THROW(parse({"--describe", flag})) << flag;
  }
}

TEST(Config, EvalFullWithADataMixIsRefused) {
  Config c;
  c.data_mix = "1 data/a 1 data/b";
  c.eval_full = true;
  const std::string e = error_of([&] { c.validate(); });
  EXPECT_NE(e.find("'eval_full'"), std::string::npos) << e;
  EXPECT_NE(e.find("'data_mix'"), std::string::npos) << e;
  c.eval_full = false;
  EXPECT_NO_THROW(c.validate());
}

TEST(Config, SelectiveCheckpointingPastTheLastLayerIsRefused) {
  Config c;
  c.n_layer = 4;
  c.activation_checkpointing = llmtrain::ActivationCheckpointing::selective;
  c.activation_checkpointing_every = 4;  // block 3 is recomputed
  EXPECT_NO_THROW(c.validate());
  c.activation_checkpointing_every = 5;  // none would be
  const std::string e = error_of([&] { c.validate(); });
  EXPECT_NE(e.find("'activation_checkpointing_every' (5) exceeds n_layer (4)"), std::string::npos) << e;
  c.activation_checkpointing = llmtrain::ActivationCheckpointing::none;  // not used: not judged
  EXPECT_NO_THROW(c.validate());
}
