"""Layout under snapshots (issue 29): what the Next3 design is known to
cost, as ratios measured in one run (nextfs alone, plus the kernel's
ext4 for seq_write).

On one fresh image (nextfs): the file BIG (seq_size) is written and read
cold ("before"); 4 KiB random overwrites (O_DIRECT, each followed by
nothing; one fsync at the end, timed) without a snapshot, then a
snapshot is taken and the same number again under it; then more, up to
N_SMALL and N_LARGE overwrites under the snapshot, each followed by a
cold read of the live file and of the snapshot's copy.  N scales with
the file: 10k and 100k per GiB.  Then the unlink of a file of the same
size, without a snapshot (written after the take, so no snapshot needs
it) and under one (BIG, which the snapshot holds), each + sync().
Last, seq_write (the suite's method) into a fresh image by nextfs and
by the kernel's ext4 on a loop device.

The live file's content is checked against a model of every overwrite,
the snapshot's against what was written before the take, and the image
with e2fsck -fn after the unmount; the number of extents of the live
file (debugfs) is recorded.
"""

import hashlib
import mmap
import os
import random
import re
import subprocess
import time

from . import io_ops, mounts
from .mounts import BenchError
from .workloads import Session

MIB = 1 << 20
GIB = 1 << 30
BS = 4096

# Targets (issue 29): name -> minimum ratio.
TARGETS = {
    'live_read_after_large': 0.8,
    'randwrite_snap_vs_nosnap': 0.8,
    'snap_read_vs_live_after_large': 0.5,
    'seq_write_vs_kernel': 0.9,
}


def counts(size):
    """N_SMALL, N_LARGE: 10k and 100k overwrites per GiB of file."""
    return max(1, 10000 * size // GIB), max(1, 100000 * size // GIB)


class Model:
    """What a file written by seq_write with SEED holds: that pattern
    where nothing was overwritten, else the last overwrite's block."""

    def __init__(self, size, seed):
        self.size = size
        self.seed = seed
        self.over = {}          # block -> seed of the overwrite

    def block(self, seed, blk):
        b = bytearray(random.Random(seed * 1000003 + blk).randbytes(16))
        return bytes(b) * (BS // 16)


class Overwriter:
    """4 KiB O_DIRECT overwrites of one file at random blocks, timed in
    slices that each end with an fsync."""

    def __init__(self, path, model, seed):
        self.model = model
        self.rnd = random.Random(seed)
        self.seed = seed
        self.done = 0
        self.seconds = 0.0
        self.buf = mmap.mmap(-1, BS)
        self.fd = os.open(path, os.O_WRONLY | os.O_DIRECT)

    def slice(self, count):
        nblocks = self.model.size // BS
        t0 = time.perf_counter()
        for _ in range(count):
            blk = self.rnd.randrange(nblocks)
            s = self.seed * 10000000 + self.done
            self.buf[:] = self.model.block(s, blk)
            os.pwrite(self.fd, self.buf, blk * BS)
            self.model.over[blk] = s
            self.done += 1
        os.fsync(self.fd)
        self.seconds += time.perf_counter() - t0

    def close(self):
        os.close(self.fd)
        self.buf.close()
        return {'count': self.done, 'seconds': self.seconds,
                'iops': self.done / self.seconds if self.seconds else None}


def random_overwrites(path, model, count, seed, slice_ops=500):
    """COUNT overwrites of PATH (see Overwriter)."""
    w = Overwriter(path, model, seed)
    try:
        while w.done < count:
            w.slice(min(slice_ops, count - w.done))
    finally:
        r = w.close()
    return r


def interleaved_overwrites(a, b, count, slice_ops=500):
    """COUNT overwrites of each of two files (Overwriter A and B), in
    alternating slices, so that drift on a shared machine hits both."""
    try:
        while a.done < count:
            n = min(slice_ops, count - a.done)
            a.slice(n)
            b.slice(n)
    finally:
        ra, rb = a.close(), b.close()
    return ra, rb


def check_live(path, model):
    """Whether PATH holds what the model says (every byte)."""
    seed = model.seed
    expect = io_ops._pattern(seed)
    with open(path, 'rb', buffering=0) as f:
        for i in range(model.size // MIB):
            got = bytearray(f.read(MIB))
            io_ops._stamp(expect, seed, i)
            want = bytearray(expect)
            for blk in range(i * (MIB // BS), (i + 1) * (MIB // BS)):
                s = model.over.get(blk)
                if s is not None:
                    o = (blk - i * (MIB // BS)) * BS
                    want[o:o + BS] = model.block(s, blk)
            if got != want:
                return False
    return True


def digest(path):
    h = hashlib.sha256()
    with open(path, 'rb', buffering=0) as f:
        for chunk in iter(lambda: f.read(MIB), b''):
            h.update(chunk)
    return h.hexdigest()


def leaf_extents(image, path):
    """Leaf extents of PATH: debugfs's lines at the deepest level."""
    p = subprocess.run(['debugfs', '-R', 'ex %s' % path, image],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True, timeout=600)
    rows = [m.groups() for m in (re.match(r'\s*(\d+)/\s*(\d+)\s+\d+/', line)
                                 for line in p.stdout.splitlines()) if m]
    if not rows:
        return 0
    depth = max(int(d) for _, d in rows)
    return sum(1 for lvl, _ in rows if int(lvl) == depth)


def _cold_read(s, path):
    s.remount()
    r = s.io('read', path)
    return {'seconds': r['seconds'], 'bytes': r['bytes'],
            'mib_s': r['bytes'] / MIB / r['seconds']}


def _unlink_timed(path):
    t0 = time.perf_counter()
    os.unlink(path)
    os.sync()
    return time.perf_counter() - t0


def _layout_image(tracker, params, workdir, fuse_bin, log, out):
    size = params['seq_size']
    n_small, n_large = counts(size)
    out.update(file_bytes=size, n_small=n_small, n_large=n_large)
    image = os.path.join(workdir, 'layout.img')
    s = Session(tracker, 'nextfs', image, os.path.join(workdir, 'mnt'),
                os.path.join(workdir, 'nextfs-layout.log'), fuse_bin,
                params['timeout'])
    mounts.make_image(params['mkimages'], image, params['image_size'])
    model = Model(size, 1)
    try:
        s.mount()
        big = s.p('big')
        s.io('write', big, size, 1)
        out['read_before'] = _cold_read(s, big)
        log('    live read before          %.1f MiB/s' %
            out['read_before']['mib_s'])
        before_take = digest(big)
        os.mkdir(s.p('.snapshots', 'lay'))
        # The file without a snapshot: written after the take, so that no
        # snapshot needs its blocks; overwritten in slices alternating
        # with BIG's.
        ctrl = s.p('ctrl')
        s.io('write', ctrl, size, 7)
        cmodel = Model(size, 7)
        out['randwrite_snap'], out['randwrite_nosnap'] = \
            interleaved_overwrites(Overwriter(big, model, 3),
                                   Overwriter(ctrl, cmodel, 2), n_small)
        log('    4 KiB overwrites: %.0f IOPS without, %.0f under a '
            'snapshot' % (out['randwrite_nosnap']['iops'],
                          out['randwrite_snap']['iops']))
        out['ctrl_ok'] = check_live(ctrl, cmodel)
        os.unlink(ctrl)
        snapbig = s.p('.snapshots', 'lay', 'big')
        for tag, more in (('small', 0), ('large', n_large - n_small)):
            if more:
                out['randwrite_snap_more'] = random_overwrites(
                    big, model, more, 4)
            out['read_live_' + tag] = _cold_read(s, big)
            out['read_snap_' + tag] = _cold_read(s, snapbig)
            log('    after %6d overwrites: live %.1f MiB/s, snapshot '
                '%.1f MiB/s' % (n_small + more,
                                out['read_live_' + tag]['mib_s'],
                                out['read_snap_' + tag]['mib_s']))
        out['live_ok'] = check_live(big, model)
        out['snap_ok'] = digest(snapbig) == before_take
        if not (out['live_ok'] and out['snap_ok'] and out['ctrl_ok']):
            log('    WRONG DATA: live %s, snapshot %s, other file %s' %
                (out['live_ok'], out['snap_ok'], out['ctrl_ok']))
        # unlink without (a file written after the take: no snapshot
        # needs its blocks) and under the snapshot (BIG, which it holds)
        s.io('write', s.p('fresh'), size, 6)
        out['unlink_nosnap_seconds'] = _unlink_timed(s.p('fresh'))
        s.unmount()
        out['extents_live'] = leaf_extents(image, '/big')
        s.mount()
        out['unlink_snap_seconds'] = _unlink_timed(s.p('big'))
        log('    unlink of the file: %.3f s without, %.3f s under the '
            'snapshot; live file had %d extents' % (
                out['unlink_nosnap_seconds'], out['unlink_snap_seconds'],
                out['extents_live']))
        t0 = time.perf_counter()
        os.rmdir(s.p('.snapshots', 'lay'))
        out['delete_seconds'] = time.perf_counter() - t0
        s.unmount()
        out['fsck_clean'], _ = mounts.fsck(image)
    finally:
        s.abort()
        out['problems'] = s.problems
        if os.path.exists(image):
            os.unlink(image)


def _seq_write(tracker, params, workdir, fuse_bin, system):
    image = os.path.join(workdir, 'layout-sw.img')
    s = Session(tracker, system, image, os.path.join(workdir, 'mnt'),
                os.path.join(workdir, '%s-layout-sw.log' % system),
                fuse_bin, params['timeout'])
    mounts.make_image(params['mkimages'], image, params['image_size'])
    try:
        s.mount()
        r = s.io('write', s.p('big'), params['seq_size'], 1)
        s.unmount()
        return {'mib_s': r['bytes'] / MIB / r['seconds'],
                'seconds': r['seconds']}
    finally:
        s.abort()
        if os.path.exists(image):
            os.unlink(image)


def ratios(out):
    """The issue's ratios from one run's OUT."""
    def q(a, b):
        return a / b if a and b else None
    r = {}
    rb = out.get('read_before', {}).get('mib_s')
    for tag in ('small', 'large'):
        live = out.get('read_live_' + tag, {}).get('mib_s')
        snap = out.get('read_snap_' + tag, {}).get('mib_s')
        r['live_read_after_' + tag] = q(live, rb)
        r['snap_read_after_' + tag] = q(snap, rb)
        r['snap_read_vs_live_after_' + tag] = q(snap, live)
    r['randwrite_snap_vs_nosnap'] = q(
        out.get('randwrite_snap', {}).get('iops'),
        out.get('randwrite_nosnap', {}).get('iops'))
    un, us = out.get('unlink_nosnap_seconds'), out.get('unlink_snap_seconds')
    r['unlink_snap_vs_nosnap_time'] = q(us, un)
    r['seq_write_vs_kernel'] = q(
        out.get('seq_write', {}).get('nextfs', {}).get('mib_s'),
        out.get('seq_write', {}).get('kernel', {}).get('mib_s'))
    return r


def run_layout(tracker, params, workdir, fuse_bin, log, kernel=True):
    out = {}
    try:
        _layout_image(tracker, params, workdir, fuse_bin, log, out)
    except (BenchError, OSError) as e:
        out['error'] = str(e)
        log('    layout: %s' % e)
    sw = out['seq_write'] = {}
    for system in ('nextfs', 'kernel') if kernel else ('nextfs',):
        try:
            sw[system] = _seq_write(tracker, params, workdir, fuse_bin,
                                    system)
        except (BenchError, OSError) as e:
            sw[system] = {'error': str(e)}
    log('    seq_write: nextfs %s, kernel %s MiB/s' % tuple(
        '%.1f' % sw[x]['mib_s'] if 'mib_s' in sw.get(x, {}) else 'n/a'
        for x in ('nextfs', 'kernel')))
    out['ratios'] = ratios(out)
    return out


KEYS = ['live_read_after_small', 'live_read_after_large',
        'snap_read_after_small', 'snap_read_after_large',
        'snap_read_vs_live_after_small', 'snap_read_vs_live_after_large',
        'randwrite_snap_vs_nosnap', 'unlink_snap_vs_nosnap_time',
        'seq_write_vs_kernel']


def summarize(runs):
    """{ratio: median over the repetitions}, with verdicts where the
    issue sets a target."""
    out = {}
    for k in KEYS:
        vals = sorted(v for v in (r.get('ratios', {}).get(k) for r in runs)
                      if v is not None)
        if not vals:
            continue
        out[k] = vals[len(vals) // 2]
        if k in TARGETS:
            out[k + '_target'] = TARGETS[k]
            out[k + '_verdict'] = 'ok' if out[k] >= TARGETS[k] else 'MISS'
    return out


def print_table(runs, out):
    """Median ratios over the repetitions, with the targets."""
    if not runs:
        return
    summ = summarize(runs)
    r0 = runs[0]
    print('\nlayout under a snapshot (issue 29): file %d MiB, %d and %d '
          '4 KiB overwrites' % (r0.get('file_bytes', 0) // MIB,
                                r0.get('n_small', 0), r0.get('n_large', 0)),
          file=out)
    for k in KEYS:
        if k not in summ:
            print('  %-32s n/a' % k, file=out)
            continue
        verdict = ''
        if k in TARGETS:
            verdict = '  (target >= %.2f: %s)' % (TARGETS[k],
                                                 summ[k + '_verdict'])
        print('  %-32s %.2f%s' % (k, summ[k], verdict), file=out)
    ext = [r.get('extents_live') for r in runs if r.get('extents_live')]
    if ext:
        print('  live file extents after the overwrites: %s' %
              ', '.join(map(str, ext)), file=out)
    for r in runs:
        if False in (r.get('live_ok'), r.get('snap_ok'), r.get('ctrl_ok')):
            print('  WRONG DATA (live ok %s, snapshot ok %s)' %
                  (r.get('live_ok'), r.get('snap_ok')), file=out)
        if r.get('fsck_clean') is False:
            print('  e2fsck -fn found errors', file=out)
        if r.get('error'):
            print('  error: %s' % r['error'], file=out)
