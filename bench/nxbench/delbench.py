"""Snapshot delete costs (nextfs only; issue 30).

A delete that hands SIZE over to an older snapshot, on a fresh sparse
image per size: a file F of SIZE is fallocate'd (its blocks are in use,
nothing is written to the host), snapshot P is taken, then S; F is
unlinked (its blocks move into S, which P needs them from) and the
volume synced; then "rmdir .snapshots/S":

  rmdir_seconds         the rmdir: the name is gone and free when it
                        returns, whatever S holds
  handover_seconds      from the rmdir until the daemon reports no
                        pending delete (NX_IOC_SNAP_PENDING, what "nextfs
                        info" shows), polled every 5 ms
  handover_s_per_gib    handover_seconds / SIZE in GiB (target <= 0.2)

at 1, 4 and 10 GiB (--quick: 1 and 4).  At 4 GiB a second process-like
thread writes 4 KiB and fsyncs, in a loop, to another file while the
hand-over runs, and the same number of times on the idle volume after:

  write_fsync_idle_ms       median, p99 and max of the idle samples
  write_fsync_handover_ms   the same during the hand-over
  write_fsync_ratio_max     max during / median idle (the target is on
                            the max itself: under 50 ms, about one slice
                            of the daemon's hand-over and a commit)

P's content is checked after each hand-over (F's inode is gone from the
live tree, but P still has F with SIZE bytes).
"""

import errno
import fcntl
import os
import struct
import threading
import time

from . import mounts
from .mounts import BenchError

GIB = 1 << 30
# _IOR('N', 0xEE, struct nx_ioc_pending): u32 snapshots, u32 blocksize,
# u64 blocks (include/nextfs/nxioctl.h)
NX_IOC_SNAP_PENDING = (2 << 30) | (16 << 16) | (ord('N') << 8) | 0xEE


def pending(mnt):
    """(deleted snapshots not done, blocks they hold) of the mount; a
    daemon without the ioctl (an older build: its rmdir did all of the
    hand-over) has nothing pending."""
    fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        buf = fcntl.ioctl(fd, NX_IOC_SNAP_PENDING, bytes(16))
    except OSError as e:
        if e.errno != errno.ENOTTY:
            raise
        return 0, 0
    finally:
        os.close(fd)
    snaps, _, blocks = struct.unpack('=IIQ', buf)
    return snaps, blocks


class _Prober(threading.Thread):
    """4 KiB pwrite + fsync of PATH in a loop until stopped or COUNT
    samples; the latency of each, in ms."""

    def __init__(self, path, count=None):
        super().__init__(daemon=True)
        self.path = path
        self.count = count
        self.samples = []
        self.halt = threading.Event()
        self.error = None

    def run(self):
        buf = os.urandom(4096)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                i = 0
                while not self.halt.is_set() and \
                        (self.count is None or i < self.count):
                    t0 = time.perf_counter()
                    os.pwrite(fd, buf, (i % 256) * 4096)
                    os.fsync(fd)
                    self.samples.append((time.perf_counter() - t0) * 1000)
                    i += 1
            finally:
                os.close(fd)
        except OSError as e:
            self.error = str(e)


def _stats(ms):
    if not ms:
        return None
    s = sorted(ms)
    return {'n': len(s), 'median': s[len(s) // 2],
            'p99': s[min(len(s) - 1, int(len(s) * 0.99))], 'max': s[-1]}


def _allocate(mnt, gib, frag):
    """F of GIB, fallocate'd: whole (a few large extents), or with FRAG
    in 64 KiB pieces that alternate with a file G's (an extent each:
    like a file overwritten at random under hourly snapshots)."""
    f = os.path.join(mnt, 'F')
    fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o644)
    gd = os.open(os.path.join(mnt, 'G'), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if not frag:
            os.posix_fallocate(fd, 0, gib * GIB)
            return
        piece = 64 << 10
        for off in range(0, gib * GIB, piece):
            os.posix_fallocate(fd, off, piece)
            os.posix_fallocate(gd, off, piece)
    finally:
        os.close(fd)
        os.close(gd)


def _one_size(tracker, params, workdir, fuse_bin, gib, probe, log,
              frag=False):
    img = os.path.join(workdir, 'del%d.img' % gib)
    mnt = os.path.join(workdir, 'del%d.mnt' % gib)
    # room for F and what the snapshots keep of the rest
    mounts.make_image(params['mkimages'], img,
                      ((2 if frag else 1) * gib + 1) * GIB, lazy=True)
    m = tracker.mount('nextfs', img, mnt, img + '.log', fuse_bin,
                      timeout=params['timeout'])
    out = {'gib': gib, 'fragmented': frag}
    try:
        f = os.path.join(m.mnt, 'F')
        _allocate(m.mnt, gib, frag)
        os.mkdir(os.path.join(m.mnt, '.snapshots', 'P'))
        os.mkdir(os.path.join(m.mnt, '.snapshots', 'S'))
        os.unlink(f)
        # commit now (an fsync: the unlink's moves go into S's map), so
        # that the rmdir below is timed alone, not behind that commit
        fd = os.open(os.path.join(m.mnt, 'sync'), os.O_WRONLY | os.O_CREAT,
                     0o644)
        try:
            os.write(fd, b'x')
            os.fsync(fd)
        finally:
            os.close(fd)
        time.sleep(1.5)             # and past the commit timer's tick
        prober = None
        if probe:
            prober = _Prober(os.path.join(m.mnt, 'probe'))
        t0 = time.perf_counter()
        if prober:
            prober.start()
        os.rmdir(os.path.join(m.mnt, '.snapshots', 'S'))
        out['rmdir_seconds'] = time.perf_counter() - t0
        if os.path.exists(os.path.join(m.mnt, '.snapshots', 'S')):
            raise BenchError('S still listed after its rmdir')
        while pending(m.mnt)[0]:
            time.sleep(0.005)
        out['handover_seconds'] = time.perf_counter() - t0
        out['handover_s_per_gib'] = out['handover_seconds'] / gib
        if prober:
            prober.halt.set()
            prober.join()
            busy = list(prober.samples)
            idle = _Prober(prober.path, count=max(len(busy), 20))
            idle.start()
            idle.join()
            if prober.error or idle.error:
                raise BenchError('write+fsync: %s' %
                                 (prober.error or idle.error))
            out['write_fsync_handover_ms'] = _stats(busy)
            out['write_fsync_idle_ms'] = _stats(idle.samples)
            if busy and idle.samples:
                out['write_fsync_ratio_max'] = \
                    max(busy) / _stats(idle.samples)['median']
        st = os.stat(os.path.join(m.mnt, '.snapshots', 'P', 'F'))
        if st.st_size != gib * GIB:
            raise BenchError('P/F has %d bytes, not %d' %
                             (st.st_size, gib * GIB))
        log('  %d GiB%s: rmdir %.3f s, hand-over %.2f s (%.3f s/GiB)' % (
            gib, ' in 64 KiB extents' if frag else '',
            out['rmdir_seconds'], out['handover_seconds'],
            out['handover_s_per_gib']))
    finally:
        tracker.unmount(m)
        os.unlink(img)
    return out


def run_delete(tracker, params, workdir, fuse_bin, log):
    """The hand-over costs: {'sizes': [per size], ...}, or {'error'}."""
    sizes = params.get('delete_gib', (1, 4, 10))
    res = {'sizes': []}
    try:
        for gib in sizes:
            res['sizes'].append(_one_size(tracker, params, workdir,
                                          fuse_bin, gib, gib == 4, log))
        # the same, F in 64 KiB extents (one change of each map per run)
        res['sizes'].append(_one_size(tracker, params, workdir, fuse_bin,
                                      1, False, log, frag=True))
    except (BenchError, OSError) as e:
        res['error'] = str(e)
    return res


# Issue 30: hand-over seconds per GiB, and what a concurrent write+fsync
# may wait (about one slice of the daemon's reclaim thread).
HANDOVER_S_PER_GIB_MAX = 0.2
WRITE_FSYNC_DURING_MAX_MS = 50


def _median(v):
    v = sorted(x for x in v if x is not None)
    return v[len(v) // 2] if v else None


def print_table(res, out, fmt):
    """The delete lines of the report (FMT: the report's number format):
    medians over the repetitions."""
    runs = [r for r in res.get('delete') or [] if not r.get('error')]
    for r in res.get('delete') or []:
        if r.get('error'):
            out.write('\nsnapshot delete: not measured: %s\n' % r['error'])
    if not runs:
        return
    out.write('\nsnapshot delete that hands a file of SIZE over to an older '
              'snapshot (target <= %g s/GiB)\n' % HANDOVER_S_PER_GIB_MAX)
    kinds = sorted({(s.get('fragmented', False), s['gib'])
                    for r in runs for s in r['sizes']})
    for frag, gib in kinds:
        rows = [s for r in runs for s in r['sizes'] if s['gib'] == gib and
                s.get('fragmented', False) == frag]
        per = _median([s.get('handover_s_per_gib') for s in rows])
        out.write('  %3d GiB%s: rmdir %s s, hand-over %s s = %s s/GiB  '
                  '%s\n' % (
            gib, ' in 64 KiB extents' if frag else '',
            fmt(_median([s.get('rmdir_seconds') for s in rows])),
            fmt(_median([s.get('handover_seconds') for s in rows])),
            fmt(per), 'PASS' if per is not None and
            per <= HANDOVER_S_PER_GIB_MAX else 'MISS'))
        lat = [s for s in rows if s.get('write_fsync_handover_ms')]
        if lat:
            busy = _median([s['write_fsync_handover_ms']['max']
                            for s in lat])
            out.write('    4 KiB write+fsync meanwhile: median %s ms, max '
                      '%s ms; idle: median %s ms, max %s ms; max/idle '
                      'median %s  %s (max <= %d ms)\n' % (
                          fmt(_median([s['write_fsync_handover_ms']
                                       ['median'] for s in lat])),
                          fmt(busy),
                          fmt(_median([s['write_fsync_idle_ms']['median']
                                       for s in lat])),
                          fmt(_median([s['write_fsync_idle_ms']['max']
                                       for s in lat])),
                          fmt(_median([s.get('write_fsync_ratio_max')
                                       for s in lat])),
                          'PASS' if busy is not None and
                          busy <= WRITE_FSYNC_DURING_MAX_MS else 'MISS',
                          WRITE_FSYNC_DURING_MAX_MS))
