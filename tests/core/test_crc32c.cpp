// CRC32C against the published check values (RFC 3720 B.4, the "123456789"
// check), and the combination that lets ranks checksum slices of one tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "llmtrain/core/crc32c.hpp"

using llmtrain::crc32c;
using llmtrain::crc32c_combine;

TEST(Crc32c, PublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::vector<uint8_t> b(32, 0);
  EXPECT_EQ(crc32c(b.data(), b.size()), 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of zeros
  std::fill(b.begin(), b.end(), 0xFF);
  EXPECT_EQ(crc32c(b.data(), b.size()), 0x62A8AB43u);  // 32 bytes of ones
  std::iota(b.begin(), b.end(), 0);
  EXPECT_EQ(crc32c(b.data(), b.size()), 0x46DD794Eu);  // 0, 1, ..., 31
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, ContinuesAndCombinesAnySplit) {
  std::mt19937 gen(7);
  std::vector<uint8_t> data(100003);
  for (auto& x : data) x = static_cast<uint8_t>(gen());
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}, size_t{50001}, data.size()}) {
    const uint32_t a = crc32c(data.data(), cut), b = crc32c(data.data() + cut, data.size() - cut);
    EXPECT_EQ(crc32c(data.data() + cut, data.size() - cut, a), whole) << cut;
    EXPECT_EQ(crc32c_combine(a, b, data.size() - cut), whole) << cut;
  }
  data[500] ^= 1;  // one flipped bit changes it
  EXPECT_NE(crc32c(data.data(), data.size()), whole);
}
