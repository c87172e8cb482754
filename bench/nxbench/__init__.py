"""nxbench - the nextfs benchmark suite (driven by bench/run.py).

Modules:
  mounts     images, the systems under test (nextfs-fuse, fuse2fs, kernel
             ext4 on a loop device, the FUSE floor: libfuse's
             passthrough_ll over such a kernel ext4), mounting, cleanup
  io_ops     the timed file I/O primitives; also runnable as a script so
             that a hung file system can be killed by a timeout
  workloads  the workload suite run on every system
  snapbench  the snapshot costs (nextfs only)
  report     medians, ratios, targets, tables, comparing two runs
"""
