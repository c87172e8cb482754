#!/usr/bin/env python3
"""Users of one mount cannot hurt each other (docs/design.md P16,
docs/security.md).

Root mounts with allow_other; the tests act as two unprivileged users
from forked children (nxharness.run_as): A is nobody, B an id of our own
that is a member of the snapshot group G when a test says so.

- Delegation: with -o snapshot_group=G a member takes and deletes
  snapshots (mkdir/rmdir in .snapshots, and the nextfs tool), a
  non-member can do neither, and nobody deletes or replaces one by
  renaming; a snapshot shows its files with the modes they had at the
  take: A cannot read B's 0600 file through it.  A group that does not
  exist fails the mount with one line.
- VOLINFO: for A, "nextfs info MNT" shows no directory hash seed and the
  ioctl hands no byte of it; root still sees it.
- Reserves: a user's overwrite of a +C file held by a snapshot fails
  with ENOSPC for that user once its space is used up, root can still
  write all of its reserve, the snapshot keeps the old data, and the
  volume never goes read-only (the daemon exits 0 at unmount, e2fsck is
  clean).  The same with the copies of directory blocks a user's creates
  cause; the user can still delete what it wrote since the take and then
  goes on.
- A full volume: "nextfs snapshot take" succeeds although syncfs reports
  the earlier ENOSPC of data written through mmap, and says so.

Runs once (ext4): none of it depends on the image flavour.
"""

import errno
import fcntl
import json
import mmap
import os
import struct
import subprocess

import nxharness as nx
import nxsnap

A = (65534, 65534)          # nobody
B = (4242, 4242)            # a user of our own
G = 4300                    # the snapshot group (B's, with GROUPS_B)

FS_NOCOW_FL = 0x00800000
MIB = 1 << 20

# NX_IOC_GET_VOLINFO (include/nextfs/nxioctl.h): _IOR('N', 0xE3, 1032)
VOLINFO_SIZE = 1032
NX_IOC_GET_VOLINFO = (2 << 30) | (VOLINFO_SIZE << 16) | (ord('N') << 8) | 0xE3
HASH_SEED = slice(0xEC, 0xFC)       # s_hash_seed in the superblock


def as_a(fn, *args):
    return nx.run_as(*A, fn, *args)


def as_b(fn, *args, member=False):
    return nx.run_as(*B, fn, *args, groups=(B[1], G) if member else (B[1],))


def tool(*args):
    """Run the nextfs tool in this process: (exit status, stdout, stderr)."""
    p = subprocess.run([nx.tool_path()] + list(args), capture_output=True)
    return (p.returncode, p.stdout.decode(errors='replace'),
            p.stderr.decode(errors='replace'))


def volinfo_seed(path):
    fd = os.open(path, os.O_RDONLY)
    buf = bytearray(VOLINFO_SIZE)
    try:
        fcntl.ioctl(fd, NX_IOC_GET_VOLINFO, buf, True)
    finally:
        os.close(fd)
    return bytes(buf[HASH_SEED])


def write_until_full(path, chunk=MIB):
    """Append to PATH until ENOSPC; the bytes written."""
    done = 0
    with open(path, 'ab', buffering=0) as f:
        data = b'\xa5' * chunk
        try:
            while True:
                done += f.write(data)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
    return done


def make_nocow(path, data):
    """A +C file holding DATA (the flag takes only on an empty file)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    nx.set_inode_flags(path, nx.get_inode_flags(path) | FS_NOCOW_FL)
    with open(path, 'r+b') as f:
        f.write(data)
        os.fsync(f.fileno())
    return nx.get_inode_flags(path) & FS_NOCOW_FL


def overwrite(path, size):
    """Overwrite PATH in place from the start: (bytes done, errno or 0)."""
    done = 0
    with open(path, 'r+b', buffering=0) as f:
        try:
            while done < size:
                done += f.write(b'\x5a' * MIB)
        except OSError as e:
            return done, e.errno
    return done, 0


def make_dirs(top, n):
    os.mkdir(top)
    for i in range(n):
        os.mkdir(os.path.join(top, str(i)))


def create_in_dirs(top, n, mkdirs=False):
    """Create a file in each of N directories below TOP (MKDIRS: make
    the directories instead): (created, errno or 0)."""
    i = 0
    try:
        if mkdirs:
            os.mkdir(top)
        for i in range(n):
            if mkdirs:
                os.mkdir(os.path.join(top, str(i)))
            else:
                os.close(os.open(os.path.join(top, str(i), 'f'),
                                 os.O_WRONLY | os.O_CREAT, 0o644))
    except OSError as e:
        return i, e.errno
    return n, 0


class SecurityTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        self.need_root()
        self.need_fuse_daemon()
        if nx.backend() != 'nextfs':
            self.skipTest('nextfs snapshots')

    def assert_fsck_masked(self, img):
        rc, out = nxsnap.fsck_masked(img)
        self.assertEqual(rc, 0, 'e2fsck -fn (has_snapshot masked):\n' +
                         nx.tail(out, 40))

    def assert_writable(self, m):
        self.assertFalse(os.statvfs(m.path).f_flag & os.ST_RDONLY,
                         'the volume went read-only:\n' + m.log_tail())

    # ------------------------------------------------ shared mount

    def test_users_on_a_shared_mount(self):
        img = self.make_image()
        mnt = os.path.join(self.work, 'refused')
        os.mkdir(mnt)
        p = subprocess.run([nx.daemon_path(), '-f', '-o',
                            'snapshot_group=no-such-group.x', img, mnt],
                           capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(p.stderr.decode().count('\n'), 1, p.stderr)
        self.assertIn(b'no-such-group.x', p.stderr)

        with self.mounted(img, opts=['snapshot_group=%d' % G]) as m:
            snaps = nxsnap.snap_dir(m)
            os.mkdir(m.p('pub'), 0o777)
            os.chmod(m.p('pub'), 0o777)
            os.mkdir(m.p('b'), 0o755)
            os.chown(m.p('b'), *B)
            as_b(nx.write_file, m.p('b', 'secret'), b'only b', 0o600)
            as_b(nx.write_file, m.p('b', 'open'), b'anyone', 0o644)
            st = os.stat(snaps)
            self.assertEqual((st.st_gid, st.st_mode & 0o7777), (G, 0o775))

            # a member takes; the other user may neither take nor delete
            as_b(os.mkdir, os.path.join(snaps, 'm1'), member=True)
            self.assertErrno(errno.EACCES, as_a, os.mkdir,
                             os.path.join(snaps, 'a1'))
            self.assertErrno(errno.EACCES, as_a, os.rmdir,
                             os.path.join(snaps, 'm1'))
            self.assertErrno(errno.EACCES, as_b, os.rmdir,
                             os.path.join(snaps, 'm1'))
            # ... nor make one go away or replace it by renaming
            for who in (as_a, lambda *a: as_b(*a, member=True)):
                for src, dst in ((os.path.join(snaps, 'm1'),
                                  os.path.join(snaps, 'renamed')),
                                 (os.path.join(snaps, 'm1'), m.p('pub', 'x')),
                                 (m.p('pub'), os.path.join(snaps, 'm1')),
                                 (snaps, m.p('pub', 'snaps'))):
                    with self.assertRaises(OSError, msg='%s -> %s' %
                                           (src, dst)):
                        who(os.rename, src, dst)
            self.assertEqual(sorted(os.listdir(snaps)), ['m1'])
            self.assertTrue(os.path.isdir(m.p('pub')))

            # what a snapshot shows to whom: the modes at the take
            old = os.path.join(snaps, 'm1', 'b')
            self.assertErrno(errno.EACCES, as_a, nx.read_file,
                             os.path.join(old, 'secret'))
            self.assertEqual(as_a(nx.read_file, os.path.join(old, 'open')),
                             b'anyone')
            self.assertEqual(as_b(nx.read_file, os.path.join(old, 'secret')),
                             b'only b')
            as_b(os.chmod, m.p('b', 'open'), 0o600)
            self.assertEqual(as_a(nx.read_file, os.path.join(old, 'open')),
                             b'anyone')

            # the tool, as a member and not
            rc, out, err = as_b(tool, 'snapshot', 'take', m.path, 'm2',
                                member=True)
            self.assertEqual(rc, 0, err)
            rc, out, err = as_a(tool, 'snapshot', 'delete', m.path, 'm2')
            self.assertNotEqual(rc, 0)
            self.assertIn('Permission denied', err)
            rc, out, err = as_b(tool, 'snapshot', 'delete', m.path, 'm2',
                                member=True)
            self.assertEqual(rc, 0, err)
            as_b(os.rmdir, os.path.join(snaps, 'm1'), member=True)
            self.assertEqual(os.listdir(snaps), [])

            # the superblock: only what df and the snapshot list need
            seed = volinfo_seed(m.path)
            self.assertNotEqual(seed, bytes(16), 'no hash seed at all?')
            self.assertEqual(as_a(volinfo_seed, m.path), bytes(16))
            rc, out, err = as_a(tool, 'info', m.path)
            self.assertEqual(rc, 0, err)
            self.assertNotIn('hash', out.lower())
            self.assertIn('Block count:', out)
            rc, out, err = as_a(tool, 'info', '--json', m.path)
            self.assertEqual(rc, 0, err)
            vol = json.loads(out)['volume']
            self.assertTrue(vol['restricted'])
            self.assertGreater(vol['free_blocks'], 0)
            rc, out, err = tool('info', m.path)
            self.assertIn('Directory Hash Seed:', out)

    # ------------------------------------------------------ reserves

    def test_nocow_overwrite_is_the_writers(self):
        img = self.make_image()
        with self.mounted(img, check=False) as m:
            os.mkdir(m.p('pub'), 0o777)
            os.chmod(m.p('pub'), 0o777)
            f = m.p('pub', 'nocow')
            size = 28 * MIB
            self.assertTrue(as_a(make_nocow, f, nx.pattern(size, 3)))
            os.mkdir(nxsnap.snap_dir(m, 's'))
            st = os.statvfs(m.path)
            root_only = (st.f_bfree - st.f_bavail) * st.f_frsize
            # every block overwritten is copied into s: more than A has
            done, err = as_a(overwrite, f, size)
            self.assertEqual(err, errno.ENOSPC,
                             'A overwrote %d of %d bytes' % (done, size))
            self.assert_writable(m)
            # root's blocks are still there for root, all of them
            got = write_until_full(m.p('root-file'), 64 * 1024)
            self.assertGreaterEqual(got, root_only - 32 * self.bsize,
                                    'root got %d bytes of its %d' %
                                    (got, root_only))
            os.sync()
            self.assert_writable(m)
            self.assertEqual(nx.read_file(nxsnap.snap_dir(m, 's') +
                                          '/pub/nocow'),
                             nx.pattern(size, 3))
        self.assert_fsck_masked(img)

    def test_copies_of_directories_are_the_writers(self):
        # no root reserve: the COW reserve alone stands between a user
        # and a volume that cannot commit
        img = self.make_image('32M', extra=['-m', '0'])
        n = 800                 # more directory blocks than the reserve
        with self.mounted(img) as m:
            os.mkdir(m.p('pub'), 0o777)
            os.chmod(m.p('pub'), 0o777)
            as_a(make_dirs, m.p('pub', 'd'), n)
            os.mkdir(nxsnap.snap_dir(m, 's'))
            as_a(write_until_full, m.p('pub', 'fill'))
            made, err = as_a(create_in_dirs, m.p('pub', 'd'), n)
            self.assertEqual(err, errno.ENOSPC,
                             'A created %d of %d' % (made, n))
            os.sync()
            self.assert_writable(m)
            # A may still delete what it wrote since the take, which
            # frees its space again
            as_a(os.unlink, m.p('pub', 'fill'))
            self.assertEqual(as_a(create_in_dirs, m.p('pub', 'd'), n),
                             (n, 0))
            os.rmdir(nxsnap.snap_dir(m, 's'))
            nx.write_file(m.p('after'), b'room again')

    # --------------------------------------------------- full volume

    def test_take_on_a_full_volume(self):
        img = self.make_image()
        with self.mounted(img) as m:
            write_until_full(m.p('fill'))
            # and the blocks directories, not data, can get
            made, err = create_in_dirs(m.p('fill-dirs'), 1 << 20,
                                       mkdirs=True)
            self.assertEqual(err, errno.ENOSPC)
            # a page written through mmap that cannot reach the volume:
            # its write-back fails, and syncfs on the volume reports that
            # ENOSPC to the next caller (fsync waits for the write-back,
            # which syncfs on FUSE does not)
            fd = os.open(m.p('mapped'), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, MIB)
                with mmap.mmap(fd, MIB) as mm:
                    mm[:4096] = b'\x77' * 4096
                    self.assertErrno(errno.ENOSPC, os.fsync, fd)
                rc, out, err = tool('snapshot', 'take', m.path, 'full')
            finally:
                os.close(fd)
            self.assertEqual(rc, 0, err)
            self.assertIn('warning: flushing', err)
            self.assertIn('No space left on device', err)
            self.assertEqual(err.count('\n'), 1, err)
            self.assertEqual(os.listdir(nxsnap.snap_dir(m)), ['full'])
            with open(nxsnap.snap_dir(m, 'full') + '/fill', 'rb') as f:
                self.assertEqual(f.read(4096), b'\xa5' * 4096)
            self.assert_writable(m)
            rc, out, err = tool('snapshot', 'delete', m.path, 'full')
            self.assertEqual(rc, 0, err)
            os.unlink(m.p('fill'))
            nx.write_file(m.p('after'), b'room again')


if __name__ == '__main__':
    nx.main()
