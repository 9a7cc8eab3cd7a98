// Config: the key registry built from config_keys.def, parsers and help.
#include "llmtrain/core/config.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/error.hpp"

namespace llmtrain {
namespace {

// ---- value checks ------------------------------------------------------------
// A check returns an empty string when the value is allowed, else what is allowed.
struct Check {
  std::function<std::string(double)> number;           // for int/double keys
  std::vector<std::string> choices;                    // for choice keys (shown in --help)
};
Check any() { return {}; }
Check positive() {
  return {[](double v) { return v > 0 ? "" : std::string("a number > 0"); }, {}};
}
Check non_negative() {
  return {[](double v) { return v >= 0 ? "" : std::string("a number >= 0"); }, {}};
}
Check unit_interval() {
  return {[](double v) { return (v >= 0 && v < 1) ? "" : std::string("a number in [0, 1)"); }, {}};
}
// An option enum of core/options.hpp: the choices are its table's words (make_key).
Check choice() { return {}; }

// ---- text <-> value ----------------------------------------------------------
std::string strip(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}
// Config files written for the Python system quote strings: 'x' or "x".
std::string unquote(const std::string& s) {
  if (s.size() >= 2 && (s.front() == '\'' || s.front() == '"') && s.back() == s.front())
    return s.substr(1, s.size() - 2);
  return s;
}

// Choice keys (option enums, InitFrom) show as "choice".
template <typename T> const char* type_name() { return "choice"; }
template <> const char* type_name<int64_t>() { return "integer"; }
template <> const char* type_name<double>() { return "number"; }
template <> const char* type_name<bool>() { return "boolean"; }
template <> const char* type_name<std::string>() { return "string"; }

[[noreturn]] void bad_value(const std::string& key, const std::string& value, const std::string& allowed) {
  throw ConfigError(fmt::format("config key '{}': invalid value '{}': expected {}", key, value, allowed));
}

bool parse_value(const std::string& key, const std::string& text, int64_t& out) {
  std::string t = text;
  t.erase(std::remove(t.begin(), t.end(), '_'), t.end());  // 1_000_000 as in Python
  try {
    size_t pos = 0;
    const long long v = std::stoll(t, &pos, 10);
    if (pos == t.size()) { out = v; return true; }
    // 2e5 style integers
    const double d = std::stod(t, &pos);
    if (pos == t.size() && std::floor(d) == d && std::fabs(d) < 9e18) { out = static_cast<int64_t>(d); return true; }
  } catch (const std::exception&) {}
  bad_value(key, text, "an integer");
}
bool parse_value(const std::string& key, const std::string& text, double& out) {
  try {
    size_t pos = 0;
    const double v = std::stod(text, &pos);
    if (pos == text.size() && std::isfinite(v)) { out = v; return true; }
  } catch (const std::exception&) {}
  bad_value(key, text, "a finite number");
}
bool parse_value(const std::string& key, const std::string& text, bool& out) {
  if (text == "True" || text == "true" || text == "1") { out = true; return true; }
  if (text == "False" || text == "false" || text == "0") { out = false; return true; }
  bad_value(key, text, "a boolean: True, False, true, false, 1 or 0");
}
bool parse_value(const std::string&, const std::string& text, std::string& out) {
  out = text;
  return true;
}
// Choice keys: the text becomes the option's enum here, once (core/options.hpp).
template <typename E, typename = IsOption<E>>
bool parse_value(const std::string&, const std::string& text, E& out) {
  out = option_from_string<E>(text);
  return true;
}
bool parse_value(const std::string&, const std::string& text, InitFrom& out) {
  out = init_from_from_string(text);
  return true;
}

std::string to_text(int64_t v) { return std::to_string(v); }
std::string to_text(double v) { return fmt::format("{}", v); }
std::string to_text(bool v) { return v ? "True" : "False"; }
std::string to_text(const std::string& v) { return v; }
template <typename E, typename = IsOption<E>> std::string to_text(E v) { return to_string(v); }
std::string to_text(const InitFrom& v) { return to_string(v); }

// The run log's config block: numbers and booleans as JSON values, choices as their words.
template <typename T> nlohmann::json to_json_value(const T& v) {
  if constexpr (std::is_arithmetic_v<T> || std::is_same_v<T, std::string>) return nlohmann::json(v);
  else return nlohmann::json(to_text(v));
}

template <typename T> std::vector<std::string> choices_of() {
  if constexpr (std::is_same_v<T, InitFrom>) return option_words<InitSource>();
  else if constexpr (std::is_enum_v<T>) return option_words<T>();
  else return {};
}

double as_number(int64_t v) { return static_cast<double>(v); }
double as_number(double v) { return v; }

// ---- the registry ------------------------------------------------------------
struct Key {
  std::string section, name, type, help;
  std::string default_text;
  Check check;
  std::function<void(Config&, const std::string&)> set;   // parse + check
  std::function<std::string(const Config&)> get;
  std::function<nlohmann::json(const Config&)> json;
};

const Config& defaults() {
  static const Config c;
  return c;
}

template <typename T>
Key make_key(const char* section, const char* name, T Config::*field, Check check, const char* help) {
  Key k;
  check.choices = choices_of<T>();
  k.section = section;
  k.name = name;
  k.type = check.choices.empty() ? type_name<T>() : "choice";
  k.help = help;
  k.default_text = to_text(defaults().*field);
  k.check = check;
  const std::string key = name;
  k.set = [key, field, check](Config& c, const std::string& raw) {
    const std::string text = unquote(strip(raw));
    T v{};
    parse_value(key, text, v);  // a choice key's bad value is refused here, naming key, value and words
    if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) {
      if (check.number) {
        const std::string allowed = check.number(as_number(v));
        if (!allowed.empty()) bad_value(key, text, allowed);
      }
    }
    c.*field = v;
  };
  k.get = [field](const Config& c) { return to_text(c.*field); };
  k.json = [field](const Config& c) { return to_json_value(c.*field); };
  return k;
}

const std::vector<Key>& registry() {
  static const std::vector<Key> keys = [] {
    std::vector<Key> k;
#define LLMTRAIN_KEY(section, type, name, def, check, help) \
  k.push_back(make_key<type>(#section, #name, &Config::name, check, help));
#include "llmtrain/core/config_keys.def"
#undef LLMTRAIN_KEY
    return k;
  }();
  return keys;
}

const Key* find_key(const std::string& name) {
  for (const auto& k : registry())
    if (k.name == name) return &k;
  return nullptr;
}

[[noreturn]] void unknown_key(const std::string& name, const std::string& where) {
  const std::string near = closest_match(name, Config::key_names());
  throw ConfigError(fmt::format("unknown config key '{}'{}{}", name, where,
                                near.empty() ? std::string(" (see llmtrain --help)")
                                             : fmt::format("; did you mean '{}'?", near)));
}

std::string help_line(const Key& k) {
  std::string h = k.help;
  if (!k.check.choices.empty()) h += fmt::format(" [{}]", fmt::join(k.check.choices, "|"));
  return h;
}

}  // namespace

// ---- Config ------------------------------------------------------------------
void Config::set(const std::string& key, const std::string& value) {
  const Key* k = find_key(key);
  if (!k) unknown_key(key, "");
  k->set(*this, value);
}

std::string Config::get(const std::string& key) const {
  const Key* k = find_key(key);
  if (!k) unknown_key(key, "");
  return k->get(*this);
}

void Config::load_file(const std::string& path) {
  // A directory opens as an empty stream on Linux: say so instead of reading no keys.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(fmt::format("config file '{}' is a directory; give a file of 'key = value' lines", path));
  errno = 0;
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("cannot open config file '{}': {}", path, std::strerror(errno)));
  std::string line;
  int lineno = 0;
  std::map<std::string, int> seen;  // key -> line that set it in this file
  while (std::getline(in, line)) {
    ++lineno;
    // A UTF-8 byte order mark (Windows editors write one) is not part of the first key.
    if (lineno == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    // '#' starts a comment unless it is inside quotes.
    bool quoted = false;
    char q = 0;
    for (size_t i = 0; i < line.size(); ++i) {
      const char ch = line[i];
      if (quoted) { if (ch == q) quoted = false; }
      else if (ch == '\'' || ch == '"') { quoted = true; q = ch; }
      else if (ch == '#') { line.resize(i); break; }
    }
    line = strip(line);
    if (line.empty()) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos)
      throw ConfigError(fmt::format("{}:{}: expected 'key = value', got '{}'", path, lineno, line));
    const std::string key = strip(line.substr(0, eq));
    const Key* k = find_key(key);
    if (!k) unknown_key(key, fmt::format(" at {}:{}", path, lineno));
    // Within one file a second value is a mistake (which one was meant?); across
    // files and on the command line the later one wins, as documented.
    if (const auto [it, fresh] = seen.emplace(key, lineno); !fresh)
      throw ConfigError(fmt::format("{}:{}: config key '{}' is set twice in this file (first at {}:{}); keep one",
                                    path, lineno, key, path, it->second));
    try {
      k->set(*this, line.substr(eq + 1));
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}:{}: {}", path, lineno, e.what()));
    }
  }
  if (in.bad()) throw ConfigError(fmt::format("reading config file '{}' failed: {}", path, std::strerror(errno)));
}

void Config::validate() const {
  auto fail = [](const std::string& m) { throw ConfigError(m); };
  if (min_lr > learning_rate)
    fail(fmt::format("config key 'min_lr' ({}) must not exceed 'learning_rate' ({})", min_lr, learning_rate));
  if (decay_lr && warmup_iters > lr_decay_iters)
    fail(fmt::format("config key 'warmup_iters' ({}) must not exceed 'lr_decay_iters' ({})", warmup_iters, lr_decay_iters));
  const int64_t kv = n_kv_head == 0 ? n_head : n_kv_head;
  if (n_head % kv != 0)
    fail(fmt::format("config key 'n_kv_head' ({}) must divide 'n_head' ({})", kv, n_head));
  if (head_dim == 0 && n_embd % n_head != 0)
    fail(fmt::format("config key 'n_embd' ({}) must be divisible by 'n_head' ({}) unless 'head_dim' is set",
                     n_embd, n_head));
  const int64_t hd = head_dim == 0 ? n_embd / n_head : head_dim;
  if (pos_encoding == PosEncoding::rope && hd % 2 != 0)
    fail(fmt::format("RoPE needs an even head dimension, got head_dim {}", hd));
  if (use_zero1 && use_fsdp)
    fail("config keys 'use_zero1' and 'use_fsdp' are exclusive: FSDP already shards the optimizer state");
  if (param_dtype == ParamDtype::bfloat16 && dtype != ComputeDtype::bfloat16)
    fail(fmt::format("config key 'param_dtype' = bfloat16 computes with bf16 parameters: it needs dtype=bfloat16, "
                     "got dtype={}", to_string(dtype)));
  if (eval_full && !data_mix.empty())
    fail("config key 'eval_full' = True evaluates the whole val split of one data directory, but 'data_mix' is set "
         "(a blend of several; data_dir is not read): set eval_full=False, or evaluate one directory with "
         "data_dir=DIR and data_mix unset");
  if (activation_checkpointing == ActivationCheckpointing::selective && activation_checkpointing_every > n_layer)
    fail(fmt::format("config key 'activation_checkpointing_every' ({}) exceeds n_layer ({}): "
                     "activation_checkpointing=selective would recompute no block; use a value from 1 to {}, or "
                     "activation_checkpointing=none",
                     activation_checkpointing_every, n_layer, n_layer));
  // use_cuda_graphs=True captures the whole step once and replays it: what
  // reads a value on the host inside the step, or changes shape or control
  // flow from step to step, cannot be in it (train/graph_step.hpp). The device
  // (CUDA) is checked when it is known (check_graph_step_device).
  if (use_cuda_graphs) {
    const char* why = nullptr;
    if (dtype == ComputeDtype::float16)
      why = "dtype=float16: its loss scaler reads the gradient norm on the host every step; use dtype=bfloat16";
    else if (document_masking)
      why = "document_masking=True: the documents' lengths change from batch to batch and are read on the host "
            "(cu_seqlens, max_seqlen); set document_masking=False";
    else if (use_fsdp)
      why = "use_fsdp=True: FSDP's parameter gathers are not capturable yet (one rank and DDP are); set "
            "use_fsdp=False";
    else if (use_zero1)
      why = "use_zero1=True: ZeRO-1's parameter all-gathers are not capturable yet (one rank and DDP are); set "
            "use_zero1=False";
    if (why) fail(fmt::format("config key 'use_cuda_graphs' = True cannot be used with {}", why));
  }
  if (eval_only && init_from.source == InitSource::scratch)
    fail("config key 'eval_only' = True evaluates saved weights: set init_from=resume (the newest checkpoint in "
         "out_dir/checkpoints) or init_from=hf:DIR, not 'scratch'");
}

void Config::refuse_unbuilt() const {
  // Each entry leaves this list in the change that builds the feature.
  // Empty now (use_cuda_graphs=True left it with issue 47); the next feature
  // announced before it is built goes here: {asked, "key=value", why}.
  struct Unbuilt { bool asked; const char* what; const char* where; };
  const std::vector<Unbuilt> unbuilt = {};
  for (const auto& u : unbuilt)
    if (u.asked)
      throw NotBuiltError(fmt::format("{} was requested, but this build cannot do it: {}. "
                                      "Remove the key or set it to its default.", u.what, u.where));
}

nlohmann::json Config::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& k : registry()) j[k.name] = k.json(*this);
  return j;
}

std::vector<std::string> Config::key_names() {
  std::vector<std::string> n;
  for (const auto& k : registry()) n.push_back(k.name);
  return n;
}

bool Config::has_key(const std::string& key) { return find_key(key) != nullptr; }

std::string Config::help_text() {
  std::string out;
  std::string section;
  for (const auto& k : registry()) {
    if (k.section != section) {
      section = k.section;
      out += fmt::format("\n{} keys:\n", section);
    }
    out += fmt::format("  --{:<30} {} (default: {})\n", k.name + "=<" + k.type + ">", help_line(k),
                       k.default_text.empty() ? "\"\"" : k.default_text);
  }
  return out;
}

std::string Config::markdown_table() {
  std::string out =
      "# Configuration keys\n\n"
      "Generated by `llmtrain --config_docs` from `include/llmtrain/core/config_keys.def`\n"
      "(a test fails when this file and the declarations differ). Set keys in a config\n"
      "file (`key = value`, `#` comments; the first positional argument) or on the\n"
      "command line (`--key=value`, applied after the files). Booleans take\n"
      "True/False/true/false/1/0.\n\n"
      "| key | section | type | default | meaning |\n|---|---|---|---|---|\n";
  for (const auto& k : registry())
    out += fmt::format("| `{}` | {} | {} | `{}` | {} |\n", k.name, k.section, k.type, k.default_text,
                       help_line(k));
  return out;
}

// ---- command line ------------------------------------------------------------
CommandLine parse_command_line(int argc, const char* const* argv) {
  namespace po = boost::program_options;
  CommandLine cl;
  po::options_description flags("flags");
  flags.add_options()
      ("help,h", "print this help and exit")
      ("describe", "print architecture, parameters, FLOPs/token and memory estimates, then exit")
      ("describe_world_size", po::value<int64_t>(), "world size assumed by --describe (default 8)")
      ("describe_format", po::value<std::string>(), "--describe's output: text (default) or json (one object)")
      ("describe_device", po::value<std::string>(), "--describe's device profile: a built-in name (h100_sxm ...) or a file")
      ("describe_ranks_per_node", po::value<int64_t>(), "ranks per node --describe assumes (default: min(world size, 8))")
      ("calibrate", "measure this machine's device profile (out_dir/device_profile.json), then exit")
      ("describe_memory_gib", po::value<double>(), "--describe: memory per rank (GiB) to find the largest micro-batch for")
      ("print_config", "print the resolved configuration and exit")
      ("config_docs", "print docs/config.md (every key as a Markdown table) and exit")
      ("version", "print the versions of llmtrain, LibTorch (with its CUDA and cuDNN), MPI, HDF5, NCCL and exit")
      ("config", po::value<std::vector<std::string>>(), "config file(s), applied in order");
  po::options_description keys("keys");
  for (const auto& k : registry())
    // A vector: a key may be given more than once; the last one wins (below),
    // so job templates can append EXTRA_ARGS that override their own flags.
    keys.add_options()(k.name.c_str(), po::value<std::vector<std::string>>(), k.help.c_str());
  po::options_description all;
  all.add(flags).add(keys);
  po::positional_options_description pos;
  pos.add("config", -1);

  // `--key=` (nothing after '='): the key set to the empty string, e.g. --data_mix= to
  // clear a config file's blend. Boost refuses an empty adjacent value, so such an
  // argument reaches it with a marker that stands for "" (below).
  static const std::string kEmptyValue = "\x01llmtrain-empty-value\x01";
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=' && find_key(a.substr(2, a.size() - 3)))
      args[i] = a + kEmptyValue;
  }
  std::vector<const char*> arg_ptrs;
  for (const auto& a : args) arg_ptrs.push_back(a.c_str());

  po::parsed_options parsed(&all);
  try {
    parsed = po::command_line_parser(static_cast<int>(arg_ptrs.size()), arg_ptrs.data())
                 .options(all)
                 .positional(pos)
                 .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
                 .run();
  } catch (const po::unknown_option& e) {
    std::string name = e.get_option_name();
    while (!name.empty() && name.front() == '-') name.erase(0, 1);
    name = name.substr(0, name.find('='));
    unknown_key(name, " on the command line");
  } catch (const po::error& e) {
    throw ConfigError(fmt::format("command line: {}", e.what()));
  }
  po::variables_map vm;
  po::store(parsed, vm);

  cl.help = vm.count("help") > 0;
  cl.describe = vm.count("describe") > 0;
  cl.print_config = vm.count("print_config") > 0;
  cl.config_docs = vm.count("config_docs") > 0;
  cl.version = vm.count("version") > 0;
  if (vm.count("describe_world_size")) cl.describe_world_size = vm["describe_world_size"].as<int64_t>();
  if (vm.count("describe_format")) {
    cl.describe_format = vm["describe_format"].as<std::string>();
    if (cl.describe_format != "text" && cl.describe_format != "json")
      throw ConfigError(fmt::format("--describe_format='{}': expected text or json", cl.describe_format));
  }
  if (vm.count("describe_device")) cl.describe_device = vm["describe_device"].as<std::string>();
  if (vm.count("describe_ranks_per_node")) {
    cl.describe_ranks_per_node = vm["describe_ranks_per_node"].as<int64_t>();
    if (cl.describe_ranks_per_node < 1)
      throw ConfigError(fmt::format("--describe_ranks_per_node={}: expected a positive number of ranks",
                                    cl.describe_ranks_per_node));
  }
  cl.calibrate = vm.count("calibrate") > 0;
  if (vm.count("describe_memory_gib")) {
    cl.describe_memory_gib = vm["describe_memory_gib"].as<double>();
    if (!(*cl.describe_memory_gib > 0))
      throw ConfigError(fmt::format("--describe_memory_gib={}: expected a positive number of GiB", *cl.describe_memory_gib));
  }
  // The --describe_* flags shape --describe's answer; without --describe llmtrain
  // would train, ignoring them, so they are refused.
  if (!cl.describe)
    for (const char* f : {"describe_world_size", "describe_format", "describe_device", "describe_ranks_per_node",
                          "describe_memory_gib"})
      if (vm.count(f))
        throw ConfigError(fmt::format("--{} is an option of --describe, which is not given: add --describe (without "
                                      "it llmtrain trains and the flag would be ignored)",
                                      f));
  if (vm.count("config")) cl.config_files = vm["config"].as<std::vector<std::string>>();
  for (const auto& f : cl.config_files) cl.config.load_file(f);
  // Overrides in command-line order, after all files.
  for (const auto& opt : parsed.options) {
    if (opt.position_key >= 0 || !find_key(opt.string_key)) continue;
    if (opt.value.empty())
      throw ConfigError(fmt::format("config key '{}' on the command line needs a value: --{}=<value>",
                                    opt.string_key, opt.string_key));
    cl.config.set(opt.string_key, opt.value.back() == kEmptyValue ? std::string() : opt.value.back());
    cl.command_line_keys.push_back(opt.string_key);
  }
  return cl;
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  auto dist = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    const size_t d = dist(word, c);
    if (d < best_d) { best_d = d; best = c; }
  }
  // Close enough to be a typo: at most a third of the word's length (min 2) edits.
  return best_d <= std::max<size_t>(2, word.size() / 3) ? best : std::string();
}

}  // namespace llmtrain
