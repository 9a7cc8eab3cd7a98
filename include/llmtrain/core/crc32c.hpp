// CRC32C (Castagnoli), the checksum of checkpoint tensors and token shards.
// Chosen over xxHash because the CPU computes it (SSE4.2 `crc32`, ARMv8 CRC)
// faster than a disk delivers the bytes, because it is the checksum storage
// systems already use for data at rest (ext4/btrfs metadata, iSCSI, RocksDB,
// Kafka), and because CRCs combine: crc32c_combine(crc(A), crc(B), |B|) =
// crc(A B), so ranks that each write or read a slice of one tensor agree on
// the whole tensor's checksum without anyone reading it twice. xxHash has no
// such combination.
#pragma once
#include <cstddef>
#include <cstdint>

namespace llmtrain {

// The standard CRC32C of `n` bytes continuing `crc` (0 for a new one):
// crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// crc32c(A B) from crc32c(A), crc32c(B) and the length of B in bytes.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// Whether crc32c runs on the CPU's instruction (for the benchmark's table).
bool crc32c_hardware();

}  // namespace llmtrain
