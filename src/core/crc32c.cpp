// CRC32C: the SSE4.2 instruction where the CPU has it (chosen at run time), a
// table otherwise; the combination is zlib's crc32_combine (GF(2) matrices)
// with the Castagnoli polynomial.
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

// GF(2) 32x32 matrix times vector, and squared (zlib's crc32_combine).
uint32_t gf2_times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec; vec >>= 1, ++mat)
    if (vec & 1) sum ^= *mat;
  return sum;
}
void gf2_square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = gf2_times(mat, mat[n]);
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
  if (len_b == 0) return crc_a;
  uint32_t even[32], odd[32];
  odd[0] = kPoly;  // the operator for one zero bit
  for (int n = 1, row = 1; n < 32; ++n, row <<= 1) odd[n] = static_cast<uint32_t>(row);
  gf2_square(even, odd);  // two zero bits
  gf2_square(odd, even);  // four
  do {  // apply len_b zero bytes to crc_a
    gf2_square(even, odd);
    if (len_b & 1) crc_a = gf2_times(even, crc_a);
    len_b >>= 1;
    if (!len_b) break;
    gf2_square(odd, even);
    if (len_b & 1) crc_a = gf2_times(odd, crc_a);
    len_b >>= 1;
  } while (len_b);
  return crc_a ^ crc_b;
}

}  // namespace llmtrain
