"""Snapshot views and the checker against their references (nextfs only).

Two ratios in one run (issue 29 point 5), each the median of REPS:

  find_view_cold/warm   find over MNT/.snapshots/NAME against find over
                        the live tree MNT, cold (a fresh mount after
                        drop_caches) and warm (the same find again).
                        The image holds FILES empty files in 100 x 10
                        directories (mke2fs -d); a snapshot is taken,
                        then half of the files are touched and a file is
                        added to every directory, so that the view reads
                        inode tables and directories through the
                        snapshot's copies.  A ratio > 1: the view is
                        slower.  With each: the daemon's CPU seconds
                        and read calls, view / live (steadier than
                        wall time on a shared machine).
  check_vs_e2fsck       nextfs check IMAGE against e2fsck -fn of a masked
                        copy (HAS_SNAPSHOT cleared) of the same image: a
                        sparse 4 TiB ext4 (lazy_itable_init) with a few
                        thousand files, a 64 MiB file and two snapshots.

Usage (root, FUSE):  python3 bench/nxbench/viewbench.py [--build DIR]
    [--files N] [--reps N] [--workdir DIR] [--json OUT] [--image IMG]
    [--no-views] [--no-check]
"""

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ''):
    sys.path.insert(0, os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    from nxbench import mounts                      # noqa: E402
    from nxbench.mounts import BenchError           # noqa: E402
else:
    from . import mounts
    from .mounts import BenchError

SRCROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

SB_OFFSET = 1024
RO_COMPAT_OFF = 0x64
RO_COMPAT_HAS_SNAPSHOT = 0x0080
RO_COMPAT_METADATA_CSUM = 0x0400
CHECKSUM_OFF = 0x3FC


def _crc32c(data, crc=0xFFFFFFFF):
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc


def masked_copy(image, dest):
    """A sparse copy of IMAGE without HAS_SNAPSHOT, for stock e2fsck."""
    mounts.run(['cp', '--sparse=always', image, dest])
    with open(dest, 'r+b') as f:
        f.seek(SB_OFFSET)
        sb = bytearray(f.read(1024))
        ro = struct.unpack_from('<I', sb, RO_COMPAT_OFF)[0]
        struct.pack_into('<I', sb, RO_COMPAT_OFF,
                         ro & ~RO_COMPAT_HAS_SNAPSHOT)
        if ro & RO_COMPAT_METADATA_CSUM:
            struct.pack_into('<I', sb, CHECKSUM_OFF,
                             _crc32c(bytes(sb[:CHECKSUM_OFF])))
        f.seek(SB_OFFSET)
        f.write(sb)


def make_tree(root, files):
    """FILES empty files in 100 directories of 10 subdirectories."""
    per = max(1, files // 1000)
    for d in range(100):
        for s in range(10):
            p = os.path.join(root, 'd%03d' % d, 's%d' % s)
            os.makedirs(p)
            for i in range(per):
                open(os.path.join(p, 'f%d' % i), 'w').close()


class Bench:
    def __init__(self, args, tracker, log):
        self.build = os.path.abspath(args.build)
        self.fuse = os.path.join(self.build, 'src', 'fuse', 'nextfs-fuse')
        self.cli = os.path.join(self.build, 'src', 'cli', 'nextfs')
        self.tracker = tracker
        self.log = log
        self.args = args
        self.dir = args.workdir

    def nextfs(self, *argv):
        return mounts.run([self.cli] + list(argv), timeout=3600)

    def mount(self, image, mnt):
        return self.tracker.mount('nextfs', image, mnt,
                                  os.path.join(self.dir, 'daemon.log'),
                                  fuse_bin=self.fuse)

    def unmount(self, m):
        self.tracker.unmount(m)

    @staticmethod
    def timed(argv):
        t0 = time.perf_counter()
        mounts.run(argv, timeout=3600)
        return time.perf_counter() - t0

    # ------------------------------------------------------------ views

    def view_image(self):
        img = os.path.join(self.dir, 'views.img')
        src = tempfile.mkdtemp(prefix='tree.', dir=self.dir)
        make_tree(src, self.args.files)
        if os.path.exists(img):
            os.unlink(img)
        size = max(1 << 30, self.args.files * 16384)
        mounts.run(['mke2fs', '-q', '-F', '-t', 'ext4', '-b', '4096',
                    '-i', '8192', '-E',
                    'lazy_itable_init=0,lazy_journal_init=0', '-d', src,
                    img, '%dk' % (size // 1024)])
        shutil.rmtree(src)
        mnt = os.path.join(self.dir, 'mnt')
        m = self.mount(img, mnt)
        try:
            self.nextfs('snapshot', 'take', mnt, 'v1')
            # the view then reads inode tables and directories from the
            # snapshot's copies, not through to the live blocks
            for d in range(100):
                for s in range(10):
                    p = os.path.join(mnt, 'd%03d' % d, 's%d' % s)
                    open(os.path.join(p, 'new'), 'w').close()
                    if d % 2 == 0:
                        for name in os.listdir(p):
                            os.utime(os.path.join(p, name))
        finally:
            self.unmount(m)
        return img, mnt

    def find_once(self, img, mnt, sub):
        """{cold,warm}: (seconds, daemon CPU seconds, daemon read calls)
        of find over MNT/SUB on a fresh mount."""
        m = self.mount(img, mnt)
        out = {}
        try:
            if not mounts.drop_caches():
                raise BenchError('cannot drop caches (not root?)')
            path = os.path.join(mnt, sub) if sub else mnt
            for kind in ('cold', 'warm'):
                cpu0 = mounts.proc_cpu_seconds(m.pid)
                rd0 = mounts.proc_io(m.pid)['syscr']
                sec = self.timed(['find', path])
                out[kind] = (sec, mounts.proc_cpu_seconds(m.pid) - cpu0,
                             mounts.proc_io(m.pid)['syscr'] - rd0)
        finally:
            self.unmount(m)
        return out

    def run_views(self):
        keep = self.args.image
        if keep and os.path.exists(keep):
            img, mnt = keep, os.path.join(self.dir, 'mnt')
        else:
            img, mnt = self.view_image()
            if keep:
                os.rename(img, keep)
                img = keep
        live, view = [], []
        for _ in range(self.args.reps):
            # alternate, so that drift on a shared machine hits both
            live.append(self.find_once(img, mnt, ''))
            view.append(self.find_once(img, mnt, '.snapshots/v1'))
        res = {'files': self.args.files}
        for kind in ('cold', 'warm'):
            for i, what in enumerate(('seconds', 'cpu_seconds', 'reads')):
                lv = statistics.median(x[kind][i] for x in live)
                vv = statistics.median(x[kind][i] for x in view)
                res['find_live_%s_%s' % (kind, what)] = lv
                res['find_view_%s_%s' % (kind, what)] = vv
                res['find_view_%s_%s_ratio' % (kind, what)] = \
                    vv / lv if lv else None
            self.log('  find %-4s live %.3f s, view %.3f s: %.2fx '
                     '(daemon CPU %.2fx, read calls %.2fx)' %
                     (kind, res['find_live_%s_seconds' % kind],
                      res['find_view_%s_seconds' % kind],
                      res['find_view_%s_seconds_ratio' % kind] or 0,
                      res['find_view_%s_cpu_seconds_ratio' % kind] or 0,
                      res['find_view_%s_reads_ratio' % kind] or 0))
        if not keep:
            os.unlink(img)
        return res

    # ------------------------------------------------------------ check

    def check_image(self):
        img = os.path.join(self.dir, 'check4t.img')
        if os.path.exists(img):
            os.unlink(img)
        with open(img, 'wb') as f:
            f.truncate(4 << 40)
        mounts.run(['mke2fs', '-q', '-F', '-t', 'ext4', '-E',
                    'lazy_itable_init=1,lazy_journal_init=1', img])
        mnt = os.path.join(self.dir, 'mnt4t')
        m = self.mount(img, mnt)
        try:
            make_tree(os.path.join(mnt, 'a'), 2000)
            with open(os.path.join(mnt, 'big'), 'wb') as f:
                for _ in range(64):
                    f.write(os.urandom(1 << 20))
            self.nextfs('snapshot', 'take', mnt, 'c1')
            with open(os.path.join(mnt, 'big'), 'r+b') as f:
                f.seek(10 << 20)
                f.write(os.urandom(8 << 20))
            make_tree(os.path.join(mnt, 'b'), 2000)
            self.nextfs('snapshot', 'take', mnt, 'c2')
            shutil.rmtree(os.path.join(mnt, 'a'))
        finally:
            self.unmount(m)
        return img

    def run_check(self):
        img = self.check_image()
        masked = img + '.masked'
        masked_copy(img, masked)
        nx, e2 = [], []
        try:
            for _ in range(self.args.reps):
                p = subprocess.run([self.cli, 'check', img],
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
                if p.returncode != 0:
                    raise BenchError('nextfs check: %s' % p.stdout[-300:])
                nx.append(self.timed([self.cli, 'check', img]))
                e2.append(self.timed(['e2fsck', '-fn', masked]))
        finally:
            os.unlink(masked)
            os.unlink(img)
        n, e = statistics.median(nx), statistics.median(e2)
        self.log('  check 4 TiB: nextfs check %.2f s, e2fsck -fn %.2f s: '
                 '%.2fx' % (n, e, n / e))
        return {'check_seconds': n, 'e2fsck_seconds': e,
                'check_vs_e2fsck_ratio': n / e}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default=os.path.join(SRCROOT, 'build'))
    ap.add_argument('--files', type=int, default=100000)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--workdir', default=None)
    ap.add_argument('--json', default=None, help='write results here')
    ap.add_argument('--image', default=None,
                    help='the find image: made here and kept if missing, '
                    'else reused (to compare two builds on one image)')
    ap.add_argument('--no-check', action='store_true')
    ap.add_argument('--no-views', action='store_true')
    args = ap.parse_args(argv)
    if not mounts.is_root():
        print('viewbench: needs root (drop_caches, FUSE mounts)')
        return 2
    own = args.workdir is None
    if own:
        args.workdir = tempfile.mkdtemp(prefix='viewbench.',
                                        dir='/var/tmp')
    mounts.install_signal_handlers()
    tracker = mounts.Tracker()
    res = {}
    try:
        b = Bench(args, tracker, print)
        if not args.no_views:
            print('find over a snapshot view vs the live tree '
                  '(%d files):' % args.files)
            res['views'] = b.run_views()
        if not args.no_check:
            print('nextfs check vs e2fsck -fn:')
            res['check'] = b.run_check()
    finally:
        tracker.cleanup()
        if own:
            shutil.rmtree(args.workdir, ignore_errors=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
