#pragma once
// Removing a folder and everything in it, without std::filesystem::remove_all. The CUDA libtorch of the
// GPU machine (the pip wheel's libtorch.so) exports its own copy of std::filesystem::remove_all(path,
// error_code&); our binaries, which list libtorch before libstdc++, bind to that copy, and it jumps to
// address 0 (the crash of GateGpu.HonestFullSizeCandidateLeavesNothingUntimed in a TempDir destructor,
// found with the stack scan of tests/crash_backtrace.cpp on 2026-12-04). This walks the tree with POSIX
// nftw and unlinks bottom-up, so no libstdc++ filesystem symbol is involved.
#include <cstdint>
#include <filesystem>
#include <system_error>

namespace autooptim::runtime {

// Removes `path` (a file, a link, or a folder with everything under it; links are not followed).
// Returns the number of entries removed; a missing path is 0 and no error. On failure `ec` says why
// (the first error; the walk stops there).
std::uintmax_t remove_tree(const std::filesystem::path& path, std::error_code& ec);
// The same, throwing std::system_error naming the path.
std::uintmax_t remove_tree(const std::filesystem::path& path);

}  // namespace autooptim::runtime
