// defines: keep_freed_host_memory — tells glibc's malloc to keep freed memory for reuse instead of
//          returning it to the kernel after every training step; release_freed_host_memory.
#pragma once

namespace ddp {

// A training step frees and re-allocates the same activation and gradient tensors (hundreds of
// KB to MBs each). By default glibc hands such blocks back to the kernel, and the next step pays
// page faults and page clearing for them again: measured ~20 % of a CPU CNN step. This keeps
// blocks up to 32 MiB on the heap and trims it only above 1 GiB of free memory. Does nothing
// when the user tunes malloc already (GLIBC_TUNABLES, MALLOC_*_ environment variables).
// Returns whether the settings were applied. configure_process calls it (process.h).
bool keep_freed_host_memory();

// Hands the heap's free memory back to the kernel once (glibc's malloc_trim), for a one-time
// release the policy above would keep: ZeroDataParallel calls it after moving the parameters into
// its flat buckets, when configure_process applied the policy, so their old storage does not stay
// resident. Does nothing elsewhere.
void release_freed_host_memory();

}  // namespace ddp
