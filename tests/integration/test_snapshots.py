#!/usr/bin/env python3
"""Snapshots through a nextfs mount: the oracle test and kernel interop.

Run: test_snapshots.py --flavour ext2|ext3|ext4|ext4-inline

The oracle: a seeded random workload runs on a mounted volume; at several
points a snapshot is taken (mkdir .snapshots/NAME) and a manifest of the
live tree is recorded (type, mode, owner, size, mtime, xattrs, link
targets, sha256 of content, hard-link groups).  The tree keeps changing
(overwrite, append, truncate, punch, delete, rename, chattr +C files, new
large files).  Every snapshot must equal its manifest at the end, after a
remount, and after deleting other snapshots in random order.  While
snapshots exist the image must pass e2fsck -fn with HAS_SNAPSHOT masked;
once the last is gone, plain e2fsck -fn and the flag is cleared.
"""

import errno
import mmap
import os
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time

import nxharness as nx
import nxsnap
from nxsnap import SKIP, snap_manifest, without_root_mtime

FS_NOCOW_FL = 0x00800000


def live_manifest(m):
    return nx.tree_state(m.path, skip_top=SKIP)


class Workload:
    """Seeded random changes to a mounted tree."""

    def __init__(self, root, seed, bsize):
        self.root = root
        self.rng = random.Random(seed)
        self.bsize = bsize
        self.n = 0

    def files(self):
        out = []
        for dp, dns, fns in os.walk(self.root):
            if dp == self.root:
                dns[:] = [d for d in dns if d not in SKIP]
            for f in fns:
                p = os.path.join(dp, f)
                if os.path.isfile(p) and not os.path.islink(p):
                    out.append(p)
        return sorted(out)

    def dirs(self):
        out = [self.root]
        for dp, dns, _ in os.walk(self.root):
            if dp == self.root:
                dns[:] = [d for d in dns if d not in SKIP]
            out.extend(os.path.join(dp, d) for d in dns)
        return sorted(out)

    def new_name(self):
        self.n += 1
        return os.path.join(self.rng.choice(self.dirs()), 'f%04d' % self.n)

    def data(self, n):
        return self.rng.randbytes(n)

    def op_create(self):
        size = self.rng.choice([0, 10, 3000, 5000, 70000, 300000])
        nx.write_file(self.new_name(), self.data(size))

    def op_large(self):
        path = self.new_name()
        with open(path, 'wb') as f:
            for _ in range(4):
                f.write(self.data(1 << 20))

    def op_nocow(self):
        path = self.new_name()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.close(fd)
        nx.set_inode_flags(path, nx.get_inode_flags(path) | FS_NOCOW_FL)
        nx.write_file(path, self.data(self.rng.choice([5000, 200000])))

    def pick(self):
        f = self.files()
        return self.rng.choice(f) if f else None

    def op_overwrite(self):
        p = self.pick()
        if not p:
            return
        size = os.path.getsize(p)
        off = self.rng.randrange(0, size + 1)
        with open(p, 'r+b') as f:
            f.seek(off)
            f.write(self.data(self.rng.choice([1, 100, 4096, 20000])))

    def op_append(self):
        p = self.pick()
        if p:
            with open(p, 'ab') as f:
                f.write(self.data(self.rng.choice([1, 5000, 50000])))

    def op_truncate(self):
        p = self.pick()
        if p:
            size = os.path.getsize(p)
            os.truncate(p, self.rng.choice([0, size // 2, size + 10000]))

    def op_punch(self):
        p = self.pick()
        if not p or os.path.getsize(p) < 3 * self.bsize:
            return
        size = os.path.getsize(p)
        fd = os.open(p, os.O_RDWR)
        try:
            nx.fallocate(fd, nx.FALLOC_FL_PUNCH_HOLE | nx.FALLOC_FL_KEEP_SIZE,
                         self.rng.randrange(0, size // 2), size // 3)
        except OSError as e:
            if e.errno != errno.EOPNOTSUPP:
                raise
        finally:
            os.close(fd)

    def op_delete(self):
        p = self.pick()
        if p:
            os.unlink(p)

    def op_rename(self):
        p = self.pick()
        if p:
            os.rename(p, self.new_name())

    def op_mkdir(self):
        self.n += 1
        os.mkdir(os.path.join(self.rng.choice(self.dirs()), 'd%04d' % self.n))

    def op_link(self):
        p = self.pick()
        if p:
            os.link(p, self.new_name())

    def op_symlink(self):
        target = 'x' * self.rng.choice([5, 100, 300])
        os.symlink(target, self.new_name())

    def op_xattr(self):
        p = self.pick()
        if not p:
            return
        try:
            os.setxattr(p, 'user.k%d' % self.rng.randrange(3),
                        self.data(self.rng.choice([4, 100, 700])))
        except OSError as e:
            # all of a file's xattrs share one block (1 KiB on ext2):
            # like ext4, a value that does not fit is ENOSPC
            if e.errno != errno.ENOSPC:
                raise

    def op_chmod(self):
        p = self.pick()
        if p:
            os.chmod(p, self.rng.choice([0o600, 0o644, 0o755]))

    OPS = [('create', 6), ('overwrite', 8), ('append', 3), ('truncate', 3),
           ('punch', 2), ('delete', 3), ('rename', 2), ('mkdir', 1),
           ('link', 1), ('symlink', 1), ('xattr', 2), ('chmod', 1),
           ('large', 0.3), ('nocow', 0.7)]

    def run(self, count):
        names = [o for o, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        for _ in range(count):
            getattr(self, 'op_' + self.rng.choices(names, weights)[0])()


class SnapshotTest(nx.NxTestCase):

    def assert_fsck_masked(self, img):
        rc, out = nxsnap.fsck_masked(img)
        self.assertEqual(rc, 0, 'e2fsck -fn (HAS_SNAPSHOT masked):\n' +
                         nx.tail(out, 40))
        # and the project's own snapshot-aware checker
        tool = os.environ.get('NEXTFS')
        if tool:
            p = subprocess.run([tool, 'check', img], capture_output=True,
                               text=True)
            self.assertEqual(p.returncode, 0, 'nextfs check:\n' +
                             nx.tail(p.stdout + p.stderr, 40))

    def assert_snapshots(self, m, manifests, what):
        taken = []
        for name, man in manifests.items():
            self.assertTreesEqual(without_root_mtime(man),
                                  snap_manifest(m, name),
                                  'snapshot %s, %s' % (name, what))
            taken.append(os.stat(nxsnap.snap_dir(m, name)).st_mtime_ns)
        # take times: in order of taking, oldest first in the listing
        self.assertEqual(taken, sorted(taken))
        listed = [n for n in os.listdir(nxsnap.snap_dir(m)) if n in manifests]
        self.assertEqual(listed, list(manifests))

    def test_oracle(self):
        seed = self.seed()
        img = self.make_image('256M')
        manifests = {}
        with self.mounted(img, check=False) as m:
            w = Workload(m.path, seed, self.bsize)
            w.run(40)
            for i in range(3):
                name = 'snap%d' % i
                manifests[name] = live_manifest(m)
                os.mkdir(nxsnap.snap_dir(m, name))
                w.run(120)
            self.assertEqual(sorted(os.listdir(nxsnap.snap_dir(m))),
                             sorted(manifests))
            self.assert_snapshots(m, manifests, 'after the workload')
            # browsing is read-only
            any_snap = nxsnap.snap_dir(m, 'snap0')
            self.assertErrno(errno.EROFS, nx.write_file,
                             os.path.join(any_snap, 'new'), b'x')
            self.assertErrno(errno.EROFS, os.mkdir,
                             os.path.join(any_snap, 'newdir'))
            final = live_manifest(m)
        self.assertTrue(nxsnap.has_snapshot_flag(img))
        self.assert_fsck_masked(img)

        order = list(manifests)
        random.Random(seed).shuffle(order)
        with self.mounted(img, check=False) as m:
            self.assertTreesEqual(final, live_manifest(m), 'live, remounted')
            self.assert_snapshots(m, manifests, 'after remount')
            for name in order[:-1]:
                os.rmdir(nxsnap.snap_dir(m, name))
                del manifests[name]
                self.assert_snapshots(m, manifests, 'after deleting ' + name)
        self.assert_fsck_masked(img)
        with self.mounted(img) as m:        # plain e2fsck afterwards
            self.assert_snapshots(m, manifests, 'last one, remounted')
            os.rmdir(nxsnap.snap_dir(m, order[-1]))
            self.assertEqual(os.listdir(nxsnap.snap_dir(m)), [])
            self.assertTreesEqual(final, live_manifest(m), 'live at the end')
        self.assertFalse(nxsnap.has_snapshot_flag(img))

    def test_names_and_listing(self):
        img = self.make_image()
        with self.mounted(img) as m:
            sd = nxsnap.snap_dir(m)
            self.assertTrue(os.path.isdir(sd))
            self.assertErrno(errno.EEXIST, os.mkdir, sd)
            os.mkdir(os.path.join(sd, 'b-first'))
            os.mkdir(os.path.join(sd, 'a-second'))
            self.assertErrno(errno.EEXIST, os.mkdir,
                             os.path.join(sd, 'a-second'))
            self.assertErrno(errno.ENAMETOOLONG, os.mkdir,
                             os.path.join(sd, 'n' * 256))
            # oldest first in readdir, take time as mtime
            self.assertEqual(os.listdir(sd), ['b-first', 'a-second'])
            t1 = os.stat(os.path.join(sd, 'b-first')).st_mtime_ns
            t2 = os.stat(os.path.join(sd, 'a-second')).st_mtime_ns
            self.assertLessEqual(t1, t2)
            # a snapshot's root held the real /.snapshots at its take
            # (the snapshot files of that time): not part of its tree,
            # neither listed nor reachable by name
            inner = os.path.join(sd, 'a-second')
            self.assertNotIn('.snapshots', os.listdir(inner))
            self.assertErrno(errno.ENOENT, os.stat,
                             os.path.join(inner, '.snapshots'))
            self.assertErrno(errno.ENOENT, os.stat,
                             os.path.join(inner, '.snapshots', 'b-first'))
            # .snapshots itself cannot go away
            self.assertRaises(OSError, os.rmdir, sd)
            self.assertRaises(OSError, os.rename, sd, m.p('elsewhere'))
            self.assertErrno(errno.ENOENT, os.rmdir, os.path.join(sd, 'nope'))
            os.rmdir(os.path.join(sd, 'b-first'))
            os.rmdir(os.path.join(sd, 'a-second'))
            self.assertEqual(os.listdir(sd), [])

    def copied_blocks(self, img, name):
        """Data blocks the snapshot holds as copies (logical != physical).

        Moved blocks keep their place (logical == physical); map blocks
        ((IND), (DIND), extent tree) are not data.
        """
        out = nx.debugfs(img, 'blocks /.snapshots/%s' % name)
        stat = nx.debugfs(img, 'stat /.snapshots/%s' % name)
        copied = 0
        for m in re.finditer(r'\((\d+)(?:-(\d+))?\):(\d+)(?:-(\d+))?', stat):
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            plo = int(m.group(3))
            if lo != plo:
                copied += hi - lo + 1
        self.assertTrue(out.split(), 'debugfs cannot read the snapshot')
        return copied

    def test_write_amplification(self):
        """Overwriting 64 MiB under a snapshot copies < 1% of it."""
        img = self.make_image('300M')
        size = 64 << 20
        chunk = nx.pattern(1 << 20, 3)

        def overwrite(m):
            with open(m.p('big'), 'r+b') as f:
                for _ in range(size // len(chunk)):
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())

        def written(m):
            with open('/proc/%d/io' % m.proc.pid) as f:
                for line in f:
                    if line.startswith('wchar:'):
                        return int(line.split()[1])
            raise AssertionError('no wchar')

        with self.mounted(img, check=False) as m:
            with open(m.p('big'), 'wb') as f:
                f.write(nx.pattern(size, 1))
                os.fsync(f.fileno())
            os.mkdir(nxsnap.snap_dir(m, 's'))
            w0 = written(m)
            overwrite(m)                    # every block moves to s
            w1 = written(m)
            overwrite(m)                    # nothing left to preserve
            w2 = written(m)
            with_snap, baseline = w1 - w0, w2 - w1
            print('bytes written: %d under snapshot, %d without' %
                  (with_snap, baseline))
            # Everything written besides the data itself: the copies, and
            # the block maps of the file and of the snapshot.  Indirect
            # maps with 1 KiB blocks need one pointer block per 256 blocks
            # in each, so allow 2% there.
            slack = size // 100 if self.bsize >= 4096 else size // 50
            self.assertLessEqual(with_snap - baseline, slack)
        copied = self.copied_blocks(img, 's') * self.bsize
        print('copied into the snapshot: %d bytes' % copied)
        self.assertLessEqual(copied, size // 100)
        self.assertFalse(nxsnap.has_snapshot_flag(img) is False)
        with self.mounted(img) as m:
            os.rmdir(nxsnap.snap_dir(m, 's'))

    def layout(self, img, path):
        """[(logical, physical, length)] of PATH, from debugfs."""
        out = nx.debugfs(img, 'ex %s' % path)
        runs = []
        for line in out.splitlines():
            m = re.match(r'\s*\d+/\s*\d+\s+\d+/\s*\d+\s+(\d+)\s+-\s+(\d+)\s+'
                         r'(\d+)\s+-\s+(\d+)\s+(\d+)', line)
            if m:
                runs.append((int(m.group(1)), int(m.group(3)),
                             int(m.group(5))))
        return runs

    def test_move_data_copy_nocow(self):
        """P6: data is moved, +C files are copied and stay in place."""
        if not self.extents:
            self.skipTest('needs extent-mapped files to read layouts')
        img = self.make_image()
        size = 1 << 20
        with self.mounted(img, check=False) as m:
            nx.write_file(m.p('plain'), nx.pattern(size, 1))
            fd = os.open(m.p('nocow'), os.O_WRONLY | os.O_CREAT, 0o644)
            os.close(fd)
            nx.set_inode_flags(m.p('nocow'),
                               nx.get_inode_flags(m.p('nocow')) | FS_NOCOW_FL)
            nx.write_file(m.p('nocow'), nx.pattern(size, 2))
        before = {f: self.layout(img, '/' + f) for f in ('plain', 'nocow')}
        with self.mounted(img, check=False) as m:
            os.mkdir(nxsnap.snap_dir(m, 's'))
            for f, seed in (('plain', 3), ('nocow', 4)):
                with open(m.p(f), 'r+b') as fh:
                    fh.write(nx.pattern(size, seed))
            self.assertEqual(nx.read_file(nxsnap.snap_dir(m, 's') +
                                          '/plain'), nx.pattern(size, 1))
            self.assertEqual(nx.read_file(nxsnap.snap_dir(m, 's') +
                                          '/nocow'), nx.pattern(size, 2))
        after = {f: self.layout(img, '/' + f) for f in ('plain', 'nocow')}
        self.assertEqual(len(before['nocow']), 1, before)
        self.assertEqual(after['nocow'], before['nocow'],
                         '+C file moved: %r -> %r' % (before, after))
        moved = set(range(before['plain'][0][1],
                          before['plain'][0][1] + before['plain'][0][2]))
        now = set()
        for _, p0, n in after['plain']:
            now |= set(range(p0, p0 + n))
        self.assertFalse(moved & now, 'overwritten data stayed in place')
        # the old blocks are the snapshot's now, at their own index
        snap = self.layout(img, '/.snapshots/s')
        held = set()
        for l0, p0, n in snap:
            if l0 == p0:
                held |= set(range(p0, p0 + n))
        self.assertTrue(moved <= held, 'moved blocks not mapped N -> N')
        self.assert_fsck_masked(img)

    def test_full_disk(self):
        """P9: at ENOSPC a snapshot loses nothing and nothing breaks."""
        img = self.make_image('48M')
        with self.mounted(img, check=False) as m:
            nx.write_file(m.p('keep'), nx.pattern(8 << 20, 5))
            os.mkdir(m.p('dir'))
            for i in range(50):
                nx.write_file(m.p('dir', 'f%d' % i), nx.pattern(3000, i))
            man = live_manifest(m)
            os.mkdir(nxsnap.snap_dir(m, 'full'))
            # overwrite everything (moves all of it into the snapshot),
            # then fill the volume until it refuses
            nx.write_file(m.p('keep'), nx.pattern(8 << 20, 6))
            hit = False
            try:
                for i in range(10000):
                    nx.write_file(m.p('fill%d' % i), nx.pattern(1 << 20, i))
            except OSError as e:
                self.assertEqual(e.errno, errno.ENOSPC, e)
                hit = True
            self.assertTrue(hit, 'the volume never filled up')
            # metadata changes still work or fail cleanly; the snapshot
            # is intact
            for i in range(50):
                try:
                    os.unlink(m.p('dir', 'f%d' % i))
                except OSError as e:
                    self.assertEqual(e.errno, errno.ENOSPC, e)
            self.assert_snapshots(m, {'full': man}, 'at ENOSPC')
            for name in os.listdir(m.path):
                if name.startswith('fill'):
                    os.unlink(m.p(name))
        self.assert_fsck_masked(img)
        with self.mounted(img, check=False) as m:
            self.assert_snapshots(m, {'full': man}, 'remounted after ENOSPC')
        self.assert_fsck_masked(img)

    def test_kernel_interop(self):
        self.need_root()
        if not shutil.which('mount') or not os.path.exists('/dev/loop-control'):
            self.skipTest('loop mounts are impossible here')
        img = self.make_image()
        with self.mounted(img, check=False) as m:
            nx.write_file(m.p('hello'), b'hello world\n')
            os.mkdir(nxsnap.snap_dir(m, 'k'))
            nx.write_file(m.p('hello'), b'changed\n')
            live = live_manifest(m)
        mnt = tempfile.mkdtemp(dir=self.work)
        rw = subprocess.run(['mount', '-o', 'loop,rw', img, mnt],
                            capture_output=True, text=True)
        if rw.returncode == 0:
            subprocess.run(['umount', mnt])
            self.fail('the kernel mounted a volume with snapshots read-write')
        ro = subprocess.run(['mount', '-o', 'loop,ro', img, mnt],
                            capture_output=True, text=True)
        if ro.returncode != 0 and 'loop' in ro.stderr.lower():
            self.skipTest('loop mounts are impossible here: ' + ro.stderr)
        self.assertEqual(ro.returncode, 0, ro.stderr)
        try:
            kern = nx.tree_state(mnt, skip_top=SKIP)
            # the kernel also counts the real /.snapshots directory
            kern['.']['nlink'] -= 1
            self.assertTreesEqual(live, kern,
                                  'kernel read-only mount vs. live tree')
        finally:
            subprocess.run(['umount', mnt], check=True)
        self.assert_fsck_masked(img)


    def test_snapshot_reads_race_delete(self):
        """Reads through .snapshots run outside the daemon's lock too.  A
        reader racing the snapshot's delete, a commit and another file
        taking the freed blocks gets the snapshot's bytes or an error,
        never the other file's (NEXTFS_FAULTS=slow_read widens the
        window between resolving and reading)."""
        if nx.backend() != 'nextfs':
            self.skipTest('nextfs snapshots')
        img = self.make_image()
        size, rounds = 2 << 20, 6
        errors, stop = [], threading.Event()

        def reader(path, seed):
            rnd = random.Random(seed)
            buf = mmap.mmap(-1, 65536)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            except OSError:
                return                  # deleted before we got there
            try:
                while not stop.is_set():
                    off = rnd.randrange(0, size // 65536) * 65536
                    try:
                        n = os.preadv(fd, [buf], off)
                    except OSError:
                        return          # the snapshot is gone: fine
                    if b'B' in buf[:n] or buf[:n].strip(b'A'):
                        errors.append('offset %d: bytes that were never '
                                      'in the snapshot' % off)
                        return
            finally:
                os.close(fd)

        with nx.environment(NEXTFS_FAULTS='slow_read=20000'), \
                self.mounted(img) as m:
            live = m.p('a')
            for r in range(rounds):
                nx.write_file(live, b'A' * size)
                os.mkdir(nxsnap.snap_dir(m, 's'))
                nx.write_file(live, b'C' * size)    # old blocks move to s
                snapfile = os.path.join(nxsnap.snap_dir(m, 's'), 'a')
                readers = [threading.Thread(target=reader,
                                            args=(snapfile, r * 4 + k))
                           for k in range(3)]
                for th in readers:
                    th.start()
                try:
                    time.sleep(0.05)
                    os.rmdir(nxsnap.snap_dir(m, 's'))
                    os.sync()               # commit: s's blocks are free
                    nx.write_file(m.p('b'), b'B' * (3 * size))
                    os.sync()
                finally:
                    stop.set()
                    for th in readers:
                        th.join()
                    stop.clear()
                os.unlink(m.p('b'))
                self.assertEqual(errors, [])


if __name__ == '__main__':
    nx.main()
