// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected; the checksum of iSCSI,
// ext4 and SSE4.2's crc32 instruction): the checksum of checkpoint files
// (runtime/checkpoint.h). Table-driven, byte at a time: checkpoints are read
// once per resume, so portability beats speed here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace planner {

// The CRC-32C of `bytes` bytes at `data`, continuing from `crc` (0 to start):
// Crc32c(b, Crc32c(a)) == Crc32c(a + b).
uint32_t Crc32c(const void* data, size_t bytes, uint32_t crc = 0);
inline uint32_t Crc32c(std::string_view text, uint32_t crc = 0) { return Crc32c(text.data(), text.size(), crc); }

}  // namespace planner
