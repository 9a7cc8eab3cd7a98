// CRC32C: the SSE4.2 instruction where the CPU has it (chosen at run time), a
// table otherwise; the combination is zlib's crc32_combine (multiplication by
// x^(8 len) mod P from a table of x^(2^k)) with the Castagnoli polynomial.
#include "llmtrain/core/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace llmtrain {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // Castagnoli, reflected

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t crc_table(const uint8_t* p, size_t n, uint32_t c) {
  static const std::array<uint32_t, 256> table = make_table();
  while (n--) c = table[(c ^ *p++) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc_sse42(const uint8_t* p, size_t n, uint32_t c) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
  }
  c = static_cast<uint32_t>(c64);
  for (; n; --n) c = _mm_crc32_u8(c, *p++);
  return c;
}
bool hardware() {
  static const bool has = (__builtin_cpu_init(), __builtin_cpu_supports("sse4.2"));
  return has;
}
#else
bool hardware() { return false; }
#endif

// a(x) b(x) mod P(x), reflected (zlib 1.2.12's multmodp).
uint32_t multmodp(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(2^k) mod P for k = 0..31.
std::array<uint32_t, 32> make_x2n() {
  std::array<uint32_t, 32> t{};
  uint32_t p = 1u << 30;  // x^1
  t[0] = p;
  for (int n = 1; n < 32; ++n) t[n] = p = multmodp(p, p);
  return t;
}

// x^(n 2^k) mod P: the operator that appends n << k zero bits.
uint32_t x2nmodp(uint64_t n, unsigned k) {
  static const std::array<uint32_t, 32> x2n = make_x2n();
  uint32_t p = 1u << 31;  // x^0
  for (; n; n >>= 1, ++k)
    if (n & 1) p = multmodp(x2n[k & 31], p);
  return p;
}

}  // namespace

bool crc32c_hardware() { return hardware(); }

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (hardware()) return ~crc_sse42(p, n, c);
#endif
  return ~crc_table(p, n, c);
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return multmodp(x2nmodp(len_b, 3), crc_a) ^ crc_b;  // crc_a shifted past len_b bytes, plus crc_b
}

}  // namespace llmtrain
