"""Timed file I/O primitives.

Run as a script (one operation per process, result as JSON on stdout)
so that the driver can put a timeout on it: an operation stuck on a hung
FUSE daemon is killed instead of hanging the whole benchmark.

  io_ops.py write PATH SIZE SEED [notrunc]   sequential write, 1 MiB I/O
  io_ops.py read PATH                        sequential read, 1 MiB I/O
  io_ops.py readdata PATH                    the same, of what SEEK_DATA
                                             reports only (a sparse copy)
  io_ops.py check PATH SIZE SEED             sampled content check
  io_ops.py creates DIR COUNT SIZE           COUNT files, each fsync'd

The data written is position dependent (each MiB starts with the seed
and its index) so that the check notices blocks at the wrong place or
from the wrong pass, e.g. a snapshot showing the overwritten data.
"""

import json
import os
import struct
import sys
import time

MIB = 1 << 20


def _pattern(seed):
    """A 1 MiB buffer of pseudo-random bytes for pass SEED."""
    import random
    return bytearray(random.Random(seed).randbytes(MIB))


def _stamp(buf, seed, index):
    buf[0:16] = struct.pack('<QQ', seed, index)


def _write_all(fd, mv):
    done = 0
    while done < len(mv):
        done += os.write(fd, mv[done:])


def seq_write(path, size, seed, truncate=True):
    """Write SIZE bytes in 1 MiB writes, then fsync and sync().

    The time includes the fsync of the file and a global sync(), so that
    every system's data has reached the disk, including the host's page
    cache of an image file written by a FUSE daemon or a loop device.
    """
    buf = _pattern(seed)
    mv = memoryview(buf)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else 0)
    fd = os.open(path, flags, 0o644)
    try:
        t0 = time.perf_counter()
        for i in range(size // MIB):
            _stamp(buf, seed, i)
            _write_all(fd, mv)
        t_written = time.perf_counter()
        os.fsync(fd)
    finally:
        os.close(fd)
    os.sync()
    t1 = time.perf_counter()
    return {'seconds': t1 - t0, 'bytes': size // MIB * MIB,
            'write_seconds': t_written - t0}


def seq_read(path):
    """Read the whole file with 1 MiB reads."""
    buf = bytearray(MIB)
    total = 0
    with open(path, 'rb', buffering=0) as f:
        t0 = time.perf_counter()
        while True:
            n = f.readinto(buf)
            if not n:
                break
            total += n
        t1 = time.perf_counter()
    return {'seconds': t1 - t0, 'bytes': total}


def data_read(path):
    """Read what SEEK_DATA/SEEK_HOLE report as data, with 1 MiB reads, as
    cp --sparse and qemu-img do: the bytes of data, not the file size."""
    buf = bytearray(MIB)
    total = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        t0 = time.perf_counter()
        off = 0
        while off < size:
            try:
                start = os.lseek(fd, off, os.SEEK_DATA)
            except OSError:
                break           # ENXIO: no data after OFF
            end = os.lseek(fd, start, os.SEEK_HOLE)
            while start < end:
                n = os.preadv(fd, [memoryview(buf)[:min(MIB, end - start)]],
                              start)
                if not n:
                    break
                total += n
                start += n
            off = end
        t1 = time.perf_counter()
    finally:
        os.close(fd)
    return {'seconds': t1 - t0, 'bytes': total, 'size': size}


def check(path, size, seed):
    """Compare 16 evenly spread MiB (and the last) with what pass SEED
    wrote there."""
    expect = _pattern(seed)
    nmib = size // MIB
    idx = sorted(set([i * nmib // 16 for i in range(16)] + [nmib - 1]))
    bad = []
    with open(path, 'rb', buffering=0) as f:
        if os.fstat(f.fileno()).st_size != nmib * MIB:
            return {'ok': False, 'error': 'size %d, expected %d' %
                    (os.fstat(f.fileno()).st_size, nmib * MIB)}
        for i in idx:
            f.seek(i * MIB)
            got = f.read(MIB)
            _stamp(expect, seed, i)
            if got != bytes(expect):
                bad.append(i)
    return {'ok': not bad, 'checked_mib': idx, 'bad_mib': bad}


def creates(dirpath, count, size):
    """COUNT new files of SIZE bytes, each written and fsync'd."""
    data = os.urandom(size)
    os.makedirs(dirpath, exist_ok=True)
    t0 = time.perf_counter()
    for i in range(count):
        fd = os.open(os.path.join(dirpath, 'f%06d' % i),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, memoryview(data))
            os.fsync(fd)
        finally:
            os.close(fd)
    t1 = time.perf_counter()
    return {'seconds': t1 - t0, 'files': count, 'bytes': count * size}


def main(argv):
    op, args = argv[1], argv[2:]
    if op == 'write':
        res = seq_write(args[0], int(args[1]), int(args[2]),
                        truncate=len(args) < 4 or args[3] != 'notrunc')
    elif op == 'read':
        res = seq_read(args[0])
    elif op == 'readdata':
        res = data_read(args[0])
    elif op == 'check':
        res = check(args[0], int(args[1]), int(args[2]))
    elif op == 'creates':
        res = creates(args[0], int(args[1]), int(args[2]))
    else:
        raise SystemExit('unknown operation %s' % op)
    json.dump(res, sys.stdout)
    sys.stdout.write('\n')


if __name__ == '__main__':
    main(sys.argv)
