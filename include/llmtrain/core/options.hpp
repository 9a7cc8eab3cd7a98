// Options: the enumerated choices of a run. Each option has one table of words,
// the spelling users type (config files, --key=value) and see (--help,
// docs/config.md, the run log's config block, messages), as llama.cpp's
// LLM_ARCH_NAMES / llm_arch_from_string. Text becomes an enum once, at the edge
// (Config's parser); nothing below the config layer compares option strings.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "llmtrain/core/error.hpp"

namespace llmtrain {

enum class ComputeDtype { float32, bfloat16, float16 };  // dtype
enum class ParamDtype { float32, bfloat16 };             // param_dtype: parameters and gradients
enum class ReduceDtype { float32, bfloat16 };            // reduce_dtype: gradient collectives
enum class DeviceKind { automatic, cpu, cuda };          // device: auto | cpu | cuda
enum class InitSource { scratch, resume, hf };           // init_from (hf:DIR carries a directory: InitFrom)
enum class StrategyKind { ddp, zero1, fsdp };            // use_zero1 / use_fsdp, as Config::strategy()
enum class Split { train, val };                         // a data directory's splits (train_*.h5, val_*.h5)
enum class NormKind { rmsnorm, layernorm };              // norm
enum class FfnKind { swiglu, gelu };                     // ffn
enum class PosEncoding { rope, learned };                // pos_encoding
// attention_backend. The fallback chain, in order: flash_attn_3 -> flash_attn_2 -> sdpa -> manual.
enum class AttentionBackend { flash_attn_3, flash_attn_2, sdpa, manual };
// activation_checkpointing: which blocks recompute their forward during backward
// (none; full = every block; selective = every activation_checkpointing_every-th block).
enum class ActivationCheckpointing { none, full, selective };

// ---- the tables: one per option --------------------------------------------------
template <typename E> struct OptionWord {
  E value;
  const char* word;
};
// OptionTable<E>::name is the config key (or what messages call the option);
// ::words lists every value in the order --help shows them.
template <typename E> struct OptionTable {};

template <> struct OptionTable<ComputeDtype> {
  static constexpr const char* name = "dtype";
  static constexpr OptionWord<ComputeDtype> words[] = {
      {ComputeDtype::float32, "float32"}, {ComputeDtype::bfloat16, "bfloat16"}, {ComputeDtype::float16, "float16"}};
};
template <> struct OptionTable<ParamDtype> {
  static constexpr const char* name = "param_dtype";
  static constexpr OptionWord<ParamDtype> words[] = {{ParamDtype::float32, "float32"}, {ParamDtype::bfloat16, "bfloat16"}};
};
template <> struct OptionTable<ReduceDtype> {
  static constexpr const char* name = "reduce_dtype";
  static constexpr OptionWord<ReduceDtype> words[] = {{ReduceDtype::float32, "float32"},
                                                      {ReduceDtype::bfloat16, "bfloat16"}};
};
template <> struct OptionTable<DeviceKind> {
  static constexpr const char* name = "device";
  static constexpr OptionWord<DeviceKind> words[] = {
      {DeviceKind::automatic, "auto"}, {DeviceKind::cpu, "cpu"}, {DeviceKind::cuda, "cuda"}};
};
template <> struct OptionTable<InitSource> {
  static constexpr const char* name = "init_from";
  static constexpr OptionWord<InitSource> words[] = {
      {InitSource::scratch, "scratch"}, {InitSource::resume, "resume"}, {InitSource::hf, "hf:<dir>"}};
};
template <> struct OptionTable<StrategyKind> {
  static constexpr const char* name = "strategy";
  static constexpr OptionWord<StrategyKind> words[] = {
      {StrategyKind::ddp, "ddp"}, {StrategyKind::zero1, "zero1"}, {StrategyKind::fsdp, "fsdp"}};
};
template <> struct OptionTable<Split> {
  static constexpr const char* name = "split";
  static constexpr OptionWord<Split> words[] = {{Split::train, "train"}, {Split::val, "val"}};
};
template <> struct OptionTable<NormKind> {
  static constexpr const char* name = "norm";
  static constexpr OptionWord<NormKind> words[] = {{NormKind::rmsnorm, "rmsnorm"}, {NormKind::layernorm, "layernorm"}};
};
template <> struct OptionTable<FfnKind> {
  static constexpr const char* name = "ffn";
  static constexpr OptionWord<FfnKind> words[] = {{FfnKind::swiglu, "swiglu"}, {FfnKind::gelu, "gelu"}};
};
template <> struct OptionTable<PosEncoding> {
  static constexpr const char* name = "pos_encoding";
  static constexpr OptionWord<PosEncoding> words[] = {{PosEncoding::rope, "rope"},
                                                      {PosEncoding::learned, "learned"}};
};
template <> struct OptionTable<AttentionBackend> {
  static constexpr const char* name = "attention_backend";
  static constexpr OptionWord<AttentionBackend> words[] = {{AttentionBackend::flash_attn_3, "flash_attn_3"},
                                                           {AttentionBackend::flash_attn_2, "flash_attn_2"},
                                                           {AttentionBackend::sdpa, "sdpa"},
                                                           {AttentionBackend::manual, "manual"}};
};
template <> struct OptionTable<ActivationCheckpointing> {
  static constexpr const char* name = "activation_checkpointing";
  static constexpr OptionWord<ActivationCheckpointing> words[] = {{ActivationCheckpointing::none, "none"},
                                                                  {ActivationCheckpointing::full, "full"},
                                                                  {ActivationCheckpointing::selective, "selective"}};
};

// ---- enum <-> word, through the option's table ----------------------------------
template <typename E> using IsOption = decltype(OptionTable<E>::words);

// The option's word, e.g. to_string(ComputeDtype::bfloat16) == "bfloat16".
template <typename E, typename = IsOption<E>> const char* to_string(E value) {
  for (const auto& w : OptionTable<E>::words)
    if (w.value == value) return w.word;
  return "?";
}
// Every word of the option, in table order.
template <typename E, typename = IsOption<E>> std::vector<std::string> option_words() {
  std::vector<std::string> out;
  for (const auto& w : OptionTable<E>::words) out.emplace_back(w.word);
  return out;
}
// The value spelled `text`, or nullopt.
template <typename E, typename = IsOption<E>> std::optional<E> option_lookup(const std::string& text) {
  for (const auto& w : OptionTable<E>::words)
    if (text == w.word) return w.value;
  return std::nullopt;
}
// "config key 'dtype': invalid value 'fp8': expected one of float32, bfloat16, float16"
// (the config parser's one-line message).
template <typename E, typename = IsOption<E>> std::string option_error(const std::string& text) {
  std::string allowed;
  for (const auto& w : OptionTable<E>::words) allowed += (allowed.empty() ? "" : ", ") + std::string(w.word);
  return "config key '" + std::string(OptionTable<E>::name) + "': invalid value '" + text +
         "': expected one of " + allowed;
}
// The value spelled `text`; ConfigError naming the key, the value and the words.
template <typename E, typename = IsOption<E>> E option_from_string(const std::string& text) {
  if (const auto v = option_lookup<E>(text)) return *v;
  throw ConfigError(option_error<E>(text));
}

// init_from: scratch, resume, or hf:DIR (a transformers model directory).
struct InitFrom {
  InitSource source = InitSource::scratch;
  std::string hf_dir;  // source == hf: the directory; empty otherwise
  static InitFrom hf(std::string dir) { return {InitSource::hf, std::move(dir)}; }
  bool operator==(const InitFrom& o) const { return source == o.source && hf_dir == o.hf_dir; }
  bool operator!=(const InitFrom& o) const { return !(*this == o); }
};
// "scratch" | "resume" | "hf:DIR", as users write it.
inline std::string to_string(const InitFrom& i) {
  return i.source == InitSource::hf ? "hf:" + i.hf_dir : std::string(to_string(i.source));
}
// ConfigError (the parser's message) for anything else, "hf:" without a directory included.
inline InitFrom init_from_from_string(const std::string& text) {
  if (text.rfind("hf:", 0) == 0 && text.size() > 3) return InitFrom::hf(text.substr(3));
  const auto s = option_lookup<InitSource>(text);
  if (!s || *s == InitSource::hf) throw ConfigError(option_error<InitSource>(text));
  return {*s, ""};
}

}  // namespace llmtrain
