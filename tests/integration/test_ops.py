#!/usr/bin/env python3
"""File and directory operations through a nextfs mount.

Run: test_ops.py --flavour ext2|ext3|ext4|ext4-inline [unittest args]
Every test unmounts and checks the image with e2fsck -fn (see nxharness).
"""

import errno
import mmap
import os
import random
import re
import socket
import stat
import subprocess
import threading
import time

import nxharness as nx
from nxharness import pattern, read_file, write_file

MiB = 1 << 20
GiB = 1 << 30
SLACK_NS = 1_000_000_000    # clocks: kernel coarse time vs time.time_ns()
EXT2_INDEX_FL = 0x00001000  # htree-indexed directory


def touch(path, mode=0o644):
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))


def statfs_ffree(path):
    return os.statvfs(path).f_ffree


def resident_bytes(path):
    """How much of PATH the page cache holds (util-linux fincore)."""
    out = subprocess.run(['fincore', '--bytes', '--noheadings',
                          '--output', 'RES', path], check=True,
                         capture_output=True, text=True).stdout
    return int(out.split()[0])


class OpsTest(nx.NxTestCase):

    # ----------------------------------------------------- request counts

    def test_request_counters(self):
        """NX_IOC_GET_OPSTATS counts the requests the daemon served, by
        kind: what the benchmark reports as requests per file."""
        img = self.make_image()
        with self.mounted(img) as m:
            before = nx.opstats(m.path)
            for i in range(5):
                write_file(m.p('c%d' % i), b'x' * 10)
            os.mkdir(m.p('d'))
            after = nx.opstats(m.path)

            def delta(op):
                return after.get(op, 0) - before.get(op, 0)
            self.assertEqual(delta('create'), 5)
            self.assertEqual(delta('mkdir'), 1)
            self.assertEqual(delta('release'), 5)
            self.assertGreaterEqual(delta('write'), 5)
            self.assertEqual(delta('ioctl'), 1)     # the first reading
            self.assertNotIn('rmdir', after)        # never served here

    # ------------------------------------------------------ lookup/getattr

    def test_lookup_getattr(self):
        img = self.make_image()
        with self.mounted(img) as m:
            root0 = os.stat(m.path)
            self.assertTrue(stat.S_ISDIR(root0.st_mode))
            self.assertIn('lost+found', os.listdir(m.path))
            t0 = time.time_ns()
            write_file(m.p('f'), b'hello', 0o666)
            os.mkdir(m.p('d'), 0o777)
            touch(m.p('d', 'x'))
            t1 = time.time_ns()

            st = os.stat(m.p('f'))
            self.assertTrue(stat.S_ISREG(st.st_mode))
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o644)  # umask 022
            self.assertEqual((st.st_nlink, st.st_size), (1, 5))
            self.assertEqual((st.st_uid, st.st_gid),
                             (os.geteuid(), os.getegid()))
            for t in (st.st_mtime_ns, st.st_ctime_ns, st.st_atime_ns):
                self.assertGreaterEqual(t, t0 - SLACK_NS)
                self.assertLessEqual(t, t1 + SLACK_NS)

            sd = os.stat(m.p('d'))
            self.assertTrue(stat.S_ISDIR(sd.st_mode))
            self.assertEqual(stat.S_IMODE(sd.st_mode), 0o755)
            self.assertEqual(sd.st_nlink, 2)
            root1 = os.stat(m.path)
            self.assertEqual(root1.st_nlink, root0.st_nlink + 1)
            self.assertGreaterEqual(root1.st_mtime_ns, t0 - SLACK_NS)
            self.assertGreaterEqual(root1.st_ctime_ns, t0 - SLACK_NS)
            # timestamps carry nanoseconds, not whole seconds
            ns = [s.st_mtime_ns % 10**9 for s in
                  (st, sd, os.stat(m.p('d', 'x')))]
            self.assertTrue(any(ns), ns)

            self.assertErrno(errno.ENOENT, os.stat, m.p('missing'))
            self.assertErrno(errno.ENOENT, os.stat, m.p('d', 'missing'))
            inos = (st.st_ino, sd.st_ino, os.stat(m.p('d', 'x')).st_ino)
            self.assertEqual(len(set(inos)), 3)
        with self.mounted(img) as m:
            # inode numbers are stable across mounts
            self.assertEqual((os.stat(m.p('f')).st_ino,
                              os.stat(m.p('d')).st_ino,
                              os.stat(m.p('d', 'x')).st_ino), inos)
            self.assertEqual(read_file(m.p('f')), b'hello')

    # ------------------------------------------------------ readdir

    def test_readdir_large(self):
        img = self.make_image()
        n = 5000
        files = {'entry-%05d-%s' % (i, 'x' * (i % 40)) for i in range(n)}
        dirs = {'sub%02d' % i for i in range(40)}
        links = {'link%02d' % i for i in range(40)}
        with self.mounted(img) as m:
            big = m.p('big')
            os.mkdir(big)
            for name in sorted(files):
                touch(os.path.join(big, name))
            for name in dirs:
                os.mkdir(os.path.join(big, name))
            for name in links:
                os.symlink('target-' + name, os.path.join(big, name))
            self.assertEqual(set(os.listdir(big)), files | dirs | links)
            self.assertEqual(os.stat(big).st_nlink, 2 + len(dirs))
        with self.mounted(img) as m:
            big = m.p('big')
            kinds = {}
            with os.scandir(big) as it:
                for e in it:
                    kinds[e.name] = ('d' if e.is_dir(follow_symlinks=False)
                                     else 'l' if e.is_symlink() else 'f')
            self.assertEqual(set(kinds), files | dirs | links)
            self.assertEqual({k for k, v in kinds.items() if v == 'd'}, dirs)
            self.assertEqual({k for k, v in kinds.items() if v == 'l'},
                             links)
            for name in random.Random(1).sample(sorted(files), 50):
                self.assertTrue(stat.S_ISREG(
                    os.lstat(os.path.join(big, name)).st_mode))
            # rm -r style: delete each entry right after readdir returned
            # it; POSIX still requires every other entry exactly once.
            seen = []
            with os.scandir(big) as it:
                for e in it:
                    seen.append(e.name)
                    if e.is_dir(follow_symlinks=False):
                        os.rmdir(e.path)
                    else:
                        os.unlink(e.path)
            self.assertEqual(len(seen), len(set(seen)), 'duplicates')
            self.assertEqual(set(seen), files | dirs | links)
            self.assertEqual(os.listdir(big), [])
            os.rmdir(big)

    def test_large_directory_is_indexed(self):
        """Like ext4, a directory that outgrows one block gets an htree
        index (dir_index is on in every flavour), so lookups stay fast."""
        img = self.make_image()
        with self.mounted(img) as m:
            os.mkdir(m.p('big'))
            for i in range(2000):
                touch(m.p('big', 'some-longer-file-name-%05d' % i))
        out = nx.debugfs(img, 'stat /big')
        flags = re.search(r'Flags: 0x([0-9a-f]+)', out)
        self.assertTrue(flags, out)
        self.assertTrue(int(flags.group(1), 16) & EXT2_INDEX_FL,
                        'directory of 2000 entries has no htree index')
        with self.mounted(img) as m:
            self.assertEqual(len(os.listdir(m.p('big'))), 2000)
            self.assertTrue(os.path.exists(
                m.p('big', 'some-longer-file-name-01234')))

    # ------------------------------------------------------ read/write

    def test_create_read_write(self):
        img = self.make_image()
        rng = random.Random(7)
        bs = self.bsize
        with self.mounted(img) as m:
            f = m.p('data')
            fd = os.open(f, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            model = bytearray()
            chunk = pattern(100003, 1)
            while len(model) < 3 * MiB:
                self.assertEqual(os.write(fd, chunk), len(chunk))
                model += chunk
            # unaligned overwrites across block boundaries and a hole
            for off, ln in ((bs - 3, 7), (5 * bs + 1, 3 * bs),
                            (len(model) - 10, 10), (12 * bs - 1, 2),
                            (len(model) + 3 * bs + 5, 100)):
                data = pattern(ln, off)
                self.assertEqual(os.pwrite(fd, data, off), ln)
                if off > len(model):
                    model += bytes(off - len(model))
                model[off:off + ln] = data
                if off + ln > len(model):
                    model = model[:off + ln]
            self.assertEqual(os.fstat(fd).st_size, len(model))
            for _ in range(200):
                off = rng.randrange(len(model))
                ln = rng.randrange(1, 3 * bs)
                self.assertEqual(os.pread(fd, ln, off), model[off:off + ln])
            self.assertEqual(os.pread(fd, 10, len(model) + 100), b'')
            os.close(fd)
            self.assertEqual(read_file(f), model)

            # boundary sizes
            for size in (0, 1, bs - 1, bs, bs + 1, 12 * bs, 12 * bs + 1):
                write_file(m.p('size%d' % size), pattern(size, size))
            # O_APPEND ignores the file offset; O_TRUNC empties
            write_file(m.p('app'), b'abc')
            fd = os.open(m.p('app'), os.O_WRONLY | os.O_APPEND)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, b'def')
            os.close(fd)
            self.assertEqual(read_file(m.p('app')), b'abcdef')
            fd = os.open(m.p('app'), os.O_WRONLY | os.O_TRUNC)
            self.assertEqual(os.fstat(fd).st_size, 0)
            os.close(fd)
            self.assertErrno(errno.EEXIST, os.open, m.p('app'),
                             os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        with self.mounted(img) as m:
            self.assertEqual(read_file(m.p('data')), model)
            self.assertEqual(stat.S_IMODE(os.stat(m.p('data')).st_mode),
                             0o600)
            for size in (0, 1, bs - 1, bs, bs + 1, 12 * bs, 12 * bs + 1):
                self.assertEqual(read_file(m.p('size%d' % size)),
                                 pattern(size, size))
            self.assertEqual(read_file(m.p('app')), b'')

    def test_mmap(self):
        img = self.make_image()
        size = 3 * self.bsize + 100
        expect = bytearray(size)
        with self.mounted(img) as m:
            write_file(m.p('mm'), bytes(size))
            with open(m.p('mm'), 'r+b') as f:
                mm = mmap.mmap(f.fileno(), size)
                for off in (0, self.bsize - 2, 2 * self.bsize + 7,
                            size - 5):
                    data = pattern(5, off)
                    mm[off:off + 5] = data
                    expect[off:off + 5] = data
                mm.flush()
                mm.close()
            self.assertEqual(read_file(m.p('mm')), expect)
            write_file(m.p('ro'), pattern(10000, 3))
            with open(m.p('ro'), 'rb') as f:
                mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
                self.assertEqual(mm[:], pattern(10000, 3))
                mm.close()
        with self.mounted(img) as m:
            self.assertEqual(read_file(m.p('mm')), expect)

    def test_written_data_stays_cached_and_coherent(self):
        """A file's pages stay in the kernel's page cache across close,
        getattr and reopen (rereading a file just written costs no trip
        to the daemon), and every way of changing it still shows in its
        reads: cached and O_DIRECT writes, hole punching, truncate and
        extension; a snapshot taken meanwhile keeps its own content."""
        img = self.make_image()
        size = 4 * MiB
        f = 'cached'
        data = bytearray(pattern(size, 5))
        # (checked after the second mount, once the snapshot is gone)
        with self.mounted(img, check=False) as m:
            write_file(m.p(f), data)
            os.stat(m.p(f))             # the mtime the kernel saw moved
            fd = os.open(m.p(f), os.O_RDWR)
            try:
                self.assertEqual(resident_bytes(m.p(f)), size)
                os.pwrite(fd, b'x' * 5000, 1000)
                data[1000:6000] = b'x' * 5000
                os.mkdir(m.p('.snapshots', 'before'))
                snapped = bytes(data)
                new = pattern(64 * 1024, 6)
                buf = mmap.mmap(-1, len(new))     # page-aligned for O_DIRECT
                buf.write(new)
                dfd = os.open(m.p(f), os.O_WRONLY | os.O_DIRECT)
                try:
                    self.assertEqual(os.pwrite(dfd, buf, MiB), len(new))
                finally:
                    os.close(dfd)
                    buf.close()
                data[MiB:MiB + len(new)] = new
                nx.fallocate(fd, nx.FALLOC_FL_PUNCH_HOLE |
                             nx.FALLOC_FL_KEEP_SIZE, 2 * MiB + 100, 10000)
                data[2 * MiB + 100:2 * MiB + 10100] = bytes(10000)
                os.ftruncate(fd, 3 * MiB + 7)
                os.ftruncate(fd, size)
                data[3 * MiB + 7:] = bytes(size - 3 * MiB - 7)
                self.assertEqual(os.pread(fd, size, 0), bytes(data))
            finally:
                os.close(fd)
            self.assertEqual(read_file(m.p(f)), bytes(data))
            self.assertEqual(read_file(m.p('.snapshots', 'before', f)),
                             snapped)
        with self.mounted(img) as m:
            self.assertEqual(read_file(m.p(f)), bytes(data))
            self.assertEqual(read_file(m.p('.snapshots', 'before', f)),
                             snapped)
            os.rmdir(m.p('.snapshots', 'before'))   # for e2fsck -fn

    # ------------------------------------------------------ truncate

    def test_truncate(self):
        img = self.make_image()
        bs = self.bsize
        with self.mounted(img) as m:
            f = m.p('t')
            model = bytearray(pattern(300000, 5))
            write_file(f, model)
            # shrink and re-extend across the direct/indirect boundaries;
            # re-extended ranges must read as zeros (tail of the last
            # partial block included)
            for size in (200000, 12 * bs + 5, 1000, 2 * bs, 0, 5000,
                         300000, 12 * 1024 + 268 * 1024 + 3, 70000):
                os.truncate(f, size)
                if size < len(model):
                    del model[size:]
                else:
                    model += bytes(size - len(model))
                self.assertEqual(os.stat(f).st_size, size)
                self.assertEqual(read_file(f), model, 'after %d' % size)
                if size == 0:
                    self.assertEqual(os.stat(f).st_blocks, 0)
            # ftruncate on an open descriptor with fresh data in flight
            fd = os.open(f, os.O_RDWR)
            os.pwrite(fd, b'Z' * 5000, 60000)
            model[60000:65000] = b'Z' * 5000
            os.ftruncate(fd, 62000)
            del model[62000:]
            self.assertEqual(os.pread(fd, 70000, 0), model)
            os.ftruncate(fd, 64000)
            model += bytes(2000)
            self.assertEqual(os.pread(fd, 70000, 0), model)
            os.close(fd)
            # extending allocates nothing
            blocks = os.stat(f).st_blocks
            os.truncate(f, 40 * MiB)
            model += bytes(40 * MiB - len(model))
            self.assertLessEqual(os.stat(f).st_blocks, blocks + 8)
        with self.mounted(img) as m:
            self.assertEqual(read_file(m.p('t')), model)
            os.truncate(m.p('t'), 0)
            self.assertEqual(os.stat(m.p('t')).st_blocks, 0)

    # ------------------------------------------------------ directories

    def test_mkdir_rmdir(self):
        img = self.make_image()
        with self.mounted(img) as m:
            root_nlink = os.stat(m.path).st_nlink
            os.makedirs(m.p('a', 'b', 'c'))
            os.mkdir(m.p('a', 'b2'), 0o700)
            self.assertEqual(stat.S_IMODE(os.stat(m.p('a', 'b2')).st_mode),
                             0o700)
            self.assertEqual(os.stat(m.p('a')).st_nlink, 4)
            self.assertEqual(os.stat(m.p('a', 'b')).st_nlink, 3)
            self.assertEqual(os.stat(m.p('a', 'b', 'c')).st_nlink, 2)
            self.assertEqual(os.stat(m.path).st_nlink, root_nlink + 1)
            self.assertEqual(os.stat(m.p('a', 'b', '..')).st_ino,
                             os.stat(m.p('a')).st_ino)
            deep = m.p(*['n%d' % i for i in range(40)])
            os.makedirs(deep)
            touch(os.path.join(deep, 'leaf'))
        with self.mounted(img) as m:
            self.assertEqual(os.stat(m.p('a')).st_nlink, 4)
            self.assertErrno(errno.ENOTEMPTY, os.rmdir, m.p('a'))
            os.rmdir(m.p('a', 'b', 'c'))
            self.assertEqual(os.stat(m.p('a', 'b')).st_nlink, 2)
            os.rmdir(m.p('a', 'b'))
            self.assertErrno(errno.ENOENT, os.stat, m.p('a', 'b'))
            self.assertEqual(os.stat(m.p('a')).st_nlink, 3)
            os.rmdir(m.p('a', 'b2'))
            os.rmdir(m.p('a'))
            self.assertEqual(os.stat(m.path).st_nlink, root_nlink + 1)
            deep = m.p(*['n%d' % i for i in range(40)])
            self.assertTrue(os.path.exists(os.path.join(deep, 'leaf')))
            os.unlink(os.path.join(deep, 'leaf'))
            os.removedirs(deep)
            self.assertFalse(os.path.exists(m.p('n0')))
            self.assertEqual(os.stat(m.path).st_nlink, root_nlink)

    # ------------------------------------------------------ unlink

    def test_unlink_open_file(self):
        img = self.make_image()
        with self.mounted(img) as m:
            ffree0 = statfs_ffree(m.path)
            write_file(m.p('gone'), pattern(50000, 1))
            write_file(m.p('plain'), b'x')
            self.assertEqual(statfs_ffree(m.path), ffree0 - 2)
            os.unlink(m.p('plain'))
            self.assertErrno(errno.ENOENT, os.stat, m.p('plain'))
            fd = os.open(m.p('gone'), os.O_RDWR)
            os.unlink(m.p('gone'))
            self.assertErrno(errno.ENOENT, os.stat, m.p('gone'))
            self.assertNotIn('gone', os.listdir(m.path))
            # still fully usable through the descriptor
            self.assertEqual(os.fstat(fd).st_nlink, 0)
            os.pwrite(fd, b'tail', 50000)
            self.assertEqual(os.pread(fd, 50004, 0),
                             pattern(50000, 1) + b'tail')
            os.close(fd)
            # the inode is released once the last user is gone
            st = nx.wait_statfs(m.path, lambda st: st.f_ffree == ffree0)
            self.assertEqual(st.f_ffree, ffree0)
            # an unlinked-but-open file at unmount must not leak either
            fd2 = os.open(m.p('plain2'), os.O_RDWR | os.O_CREAT, 0o644)
            os.write(fd2, b'abc')
            os.unlink(m.p('plain2'))
            os.close(fd2)

    # ------------------------------------------------------ rename

    def test_rename_files(self):
        img = self.make_image()
        with self.mounted(img) as m:
            os.mkdir(m.p('d1'))
            os.mkdir(m.p('d2'))
            write_file(m.p('d1', 'a'), b'A')
            ino = os.stat(m.p('d1', 'a')).st_ino
            ctime = os.stat(m.p('d1', 'a')).st_ctime_ns
            time.sleep(0.05)
            os.rename(m.p('d1', 'a'), m.p('d1', 'b'))
            self.assertErrno(errno.ENOENT, os.stat, m.p('d1', 'a'))
            st = os.stat(m.p('d1', 'b'))
            self.assertEqual((st.st_ino, read_file(m.p('d1', 'b'))),
                             (ino, b'A'))
            self.assertGreater(st.st_ctime_ns, ctime)
            # across directories
            os.rename(m.p('d1', 'b'), m.p('d2', 'c'))
            self.assertEqual(read_file(m.p('d2', 'c')), b'A')
            # over an existing file: the old target is freed
            write_file(m.p('d2', 'victim'), pattern(40000))
            ffree = statfs_ffree(m.path)
            os.rename(m.p('d2', 'c'), m.p('d2', 'victim'))
            self.assertEqual(read_file(m.p('d2', 'victim')), b'A')
            self.assertEqual(sorted(os.listdir(m.p('d2'))), ['victim'])
            st = nx.wait_statfs(m.path, lambda st: st.f_ffree == ffree + 1)
            self.assertEqual(st.f_ffree, ffree + 1)
            # two names of one inode: rename is a no-op, both stay
            os.link(m.p('d2', 'victim'), m.p('d2', 'twin'))
            os.rename(m.p('d2', 'victim'), m.p('d2', 'twin'))
            self.assertEqual(sorted(os.listdir(m.p('d2'))),
                             ['twin', 'victim'])
            self.assertEqual(os.stat(m.p('d2', 'twin')).st_nlink, 2)
            os.rename(m.p('d2', 'twin'), m.p('d2', 'twin'))
            self.assertEqual(os.stat(m.p('d2', 'twin')).st_nlink, 2)
            # symlinks are renamed, not followed
            os.symlink('victim', m.p('d2', 'sl'))
            os.rename(m.p('d2', 'sl'), m.p('d1', 'sl'))
            self.assertEqual(os.readlink(m.p('d1', 'sl')), 'victim')
        with self.mounted(img) as m:
            self.assertEqual(sorted(os.listdir(m.p('d1'))), ['sl'])
            self.assertEqual(sorted(os.listdir(m.p('d2'))),
                             ['twin', 'victim'])
            self.assertEqual(read_file(m.p('d2', 'twin')), b'A')

    def test_rename_dirs(self):
        img = self.make_image()
        with self.mounted(img) as m:
            os.makedirs(m.p('p1', 'moving', 'inner'))
            os.mkdir(m.p('p2'))
            write_file(m.p('p1', 'moving', 'inner', 'f'), b'F')
            os.rename(m.p('p1', 'moving'), m.p('p2', 'moved'))
            self.assertEqual(os.stat(m.p('p1')).st_nlink, 2)
            self.assertEqual(os.stat(m.p('p2')).st_nlink, 3)
            self.assertEqual(read_file(m.p('p2', 'moved', 'inner', 'f')),
                             b'F')
            # over an empty directory
            os.mkdir(m.p('p1', 'empty'))
            os.rename(m.p('p2', 'moved'), m.p('p1', 'empty'))
            self.assertEqual(os.stat(m.p('p1')).st_nlink, 3)
            self.assertEqual(os.stat(m.p('p2')).st_nlink, 2)
            self.assertEqual(os.listdir(m.p('p2')), [])
            # not over a non-empty one, not into itself
            os.makedirs(m.p('p2', 'full', 'x'))
            self.assertErrno(errno.ENOTEMPTY, os.rename, m.p('p1', 'empty'),
                             m.p('p2', 'full'))
            self.assertErrno(errno.EINVAL, os.rename, m.p('p1'),
                             m.p('p1', 'empty', 'inner', 'p1'))
            write_file(m.p('file'), b'')
            self.assertErrno(errno.ENOTDIR, os.rename, m.p('p1'),
                             m.p('file'))
            self.assertErrno(errno.EISDIR, os.rename, m.p('file'),
                             m.p('p2', 'full'))
        with self.mounted(img) as m:
            self.assertEqual(read_file(m.p('p1', 'empty', 'inner', 'f')),
                             b'F')
            self.assertEqual(os.stat(m.p('p1')).st_nlink, 3)
            self.assertEqual(os.stat(m.p('p2')).st_nlink, 3)
            self.assertEqual(os.stat(m.p('p1', 'empty', '..')).st_ino,
                             os.stat(m.p('p1')).st_ino)

    def test_rename_noreplace_exchange(self):
        img = self.make_image()
        with self.mounted(img) as m:
            write_file(m.p('a'), b'AAA')
            write_file(m.p('b'), b'BB')
            self.assertErrno(errno.EEXIST, nx.renameat2, m.p('a'), m.p('b'),
                             nx.RENAME_NOREPLACE)
            self.assertEqual(read_file(m.p('a')), b'AAA')
            self.assertEqual(read_file(m.p('b')), b'BB')
            nx.renameat2(m.p('a'), m.p('c'), nx.RENAME_NOREPLACE)
            self.assertEqual(read_file(m.p('c')), b'AAA')
            self.assertFalse(os.path.exists(m.p('a')))

            ino_b, ino_c = os.stat(m.p('b')).st_ino, os.stat(m.p('c')).st_ino
            nx.renameat2(m.p('b'), m.p('c'), nx.RENAME_EXCHANGE)
            self.assertEqual(read_file(m.p('b')), b'AAA')
            self.assertEqual(read_file(m.p('c')), b'BB')
            self.assertEqual((os.stat(m.p('b')).st_ino,
                              os.stat(m.p('c')).st_ino), (ino_c, ino_b))
            self.assertErrno(errno.ENOENT, nx.renameat2, m.p('b'),
                             m.p('nothere'), nx.RENAME_EXCHANGE)
            self.assertErrno(errno.EINVAL, nx.renameat2, m.p('b'), m.p('c'),
                             nx.RENAME_EXCHANGE | nx.RENAME_NOREPLACE)
            # a directory and a file in different parents trade places:
            # the parents' link counts and the directory's ".." follow
            os.makedirs(m.p('left', 'dir', 'sub'))
            os.mkdir(m.p('right'))
            write_file(m.p('right', 'file'), b'R')
            nx.renameat2(m.p('left', 'dir'), m.p('right', 'file'),
                         nx.RENAME_EXCHANGE)
            self.assertTrue(os.path.isdir(m.p('right', 'file', 'sub')))
            self.assertEqual(read_file(m.p('left', 'dir')), b'R')
            self.assertEqual(os.stat(m.p('left')).st_nlink, 2)
            self.assertEqual(os.stat(m.p('right')).st_nlink, 3)
        with self.mounted(img) as m:
            self.assertEqual(read_file(m.p('b')), b'AAA')
            self.assertEqual(read_file(m.p('c')), b'BB')
            self.assertEqual(read_file(m.p('left', 'dir')), b'R')
            self.assertEqual(os.stat(m.p('right')).st_nlink, 3)
            self.assertEqual(os.stat(m.p('right', 'file', '..')).st_ino,
                             os.stat(m.p('right')).st_ino)

    # ------------------------------------------------------ links

    def test_link(self):
        img = self.make_image()
        with self.mounted(img) as m:
            write_file(m.p('f'), b'one')
            os.mkdir(m.p('d'))
            os.link(m.p('f'), m.p('g'))
            os.link(m.p('f'), m.p('d', 'h'))
            sf, sg = os.stat(m.p('f')), os.stat(m.p('g'))
            self.assertEqual(sf.st_ino, sg.st_ino)
            self.assertEqual(sf.st_nlink, 3)
            with open(m.p('g'), 'ab') as f:
                f.write(b'two')
            self.assertEqual(read_file(m.p('d', 'h')), b'onetwo')
            os.unlink(m.p('f'))
            self.assertEqual(os.stat(m.p('g')).st_nlink, 2)
            self.assertErrno(errno.EPERM, os.link, m.p('d'), m.p('dlink'))
            self.assertErrno(errno.EEXIST, os.link, m.p('g'), m.p('d', 'h'))
            os.symlink('g', m.p('sym'))
            os.link(m.p('sym'), m.p('sym2'), follow_symlinks=False)
            self.assertEqual(os.lstat(m.p('sym2')).st_nlink, 2)
            self.assertEqual(os.readlink(m.p('sym2')), 'g')
        with self.mounted(img) as m:
            self.assertEqual(os.stat(m.p('g')).st_nlink, 2)
            self.assertEqual(os.stat(m.p('g')).st_ino,
                             os.stat(m.p('d', 'h')).st_ino)
            self.assertEqual(read_file(m.p('d', 'h')), b'onetwo')
            self.assertEqual(os.lstat(m.p('sym')).st_nlink, 2)
            os.unlink(m.p('g'))
            self.assertEqual(os.stat(m.p('d', 'h')).st_nlink, 1)

    def test_symlink(self):
        img = self.make_image()
        bs = self.bsize
        targets = {
            'fast1': 'f',
            'fast59': 'a' * 59,            # largest that fits in i_block
            'slow60': 'b' * 60,
            'slow300': '/' + '/'.join(['dir%03d' % i for i in range(50)]),
            'max': 'c' * min(bs - 1, 4095),
            'rel': '../x/./y',
        }
        with self.mounted(img) as m:
            write_file(m.p('target'), b'T')
            os.mkdir(m.p('tdir'))
            write_file(m.p('tdir', 'in'), b'I')
            for name, t in targets.items():
                os.symlink(t, m.p(name))
            os.symlink(b'\xff\xfe-bytes', os.fsencode(m.p('bytes')))
            os.symlink('target', m.p('tofile'))
            os.symlink('tdir', m.p('todir'))
            self.assertEqual(read_file(m.p('tofile')), b'T')
            self.assertEqual(os.listdir(m.p('todir')), ['in'])
            self.assertFalse(os.path.exists(m.p('fast1')))     # dangling
        with self.mounted(img) as m:
            for name, t in targets.items():
                st = os.lstat(m.p(name))
                self.assertTrue(stat.S_ISLNK(st.st_mode), name)
                self.assertEqual(stat.S_IMODE(st.st_mode), 0o777)
                self.assertEqual(st.st_size, len(t), name)
                self.assertEqual(os.readlink(m.p(name)), t, name)
            self.assertEqual(os.readlink(os.fsencode(m.p('bytes'))),
                             b'\xff\xfe-bytes')
            self.assertEqual(read_file(m.p('todir', 'in')), b'I')
            for name in targets:
                os.unlink(m.p(name))

    # ------------------------------------------------------ special files

    def test_mknod(self):
        self.need_root()
        img = self.make_image()
        devs = {'null': (stat.S_IFCHR, 1, 3), 'blk': (stat.S_IFBLK, 8, 1),
                'big': (stat.S_IFCHR, 300, 70000),
                'max': (stat.S_IFBLK, 0xfff, 0xfffff)}
        with self.mounted(img) as m:
            os.mkfifo(m.p('fifo'), 0o640)
            for name, (kind, ma, mi) in devs.items():
                os.mknod(m.p(name), kind | 0o600, os.makedev(ma, mi))
            os.mknod(m.p('reg'), stat.S_IFREG | 0o640)
            s = socket.socket(socket.AF_UNIX)
            s.bind(m.p('sock'))
            s.close()
        with self.mounted(img) as m:
            st = os.lstat(m.p('fifo'))
            self.assertTrue(stat.S_ISFIFO(st.st_mode))
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o640)
            for name, (kind, ma, mi) in devs.items():
                st = os.lstat(m.p(name))
                self.assertEqual(stat.S_IFMT(st.st_mode), kind, name)
                self.assertEqual((os.major(st.st_rdev),
                                  os.minor(st.st_rdev)), (ma, mi), name)
            st = os.lstat(m.p('reg'))
            self.assertTrue(stat.S_ISREG(st.st_mode))
            self.assertEqual(st.st_size, 0)
            self.assertTrue(stat.S_ISSOCK(os.lstat(m.p('sock')).st_mode))
            self.assertErrno(errno.EEXIST, os.mkfifo, m.p('fifo'))

    # ------------------------------------------------------ fsync

    def test_fsync_survives_daemon_kill(self):
        """fsync/fsyncdir put data on the image: kill -9 right after."""
        self.need_fuse_daemon()
        img = self.make_image()
        data = pattern(200000, 9)
        with self.mounted(img, check=False) as m:
            os.mkdir(m.p('d'))
            fd = os.open(m.p('d', 'f'), os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, data)
            os.fsync(fd)
            os.close(fd)
            fd = os.open(m.p('d', 'g'), os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b'datasync')
            os.fdatasync(fd)
            os.close(fd)
            for d in (m.p('d'), m.path):
                dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                os.fsync(dfd)
                os.close(dfd)
            m.kill()
        self.assertEqual(nx.debugfs_cat(img, '/d/f'), data)
        self.assertEqual(nx.debugfs_cat(img, '/d/g'), b'datasync')

    # ------------------------------------------------------ fallocate

    def _falloc(self, fd, mode, off, ln):
        """fallocate; False if refused with EOPNOTSUPP where ext4 does too
        (everything but punching on indirect-mapped files)."""
        try:
            nx.fallocate(fd, mode, off, ln)
            return True
        except OSError as e:
            punch = nx.FALLOC_FL_PUNCH_HOLE | nx.FALLOC_FL_KEEP_SIZE
            if e.errno == errno.EOPNOTSUPP and not self.extents and \
                    mode != punch:
                return False
            raise

    def test_fallocate(self):
        img = self.make_image()
        bs = self.bsize
        keep = nx.FALLOC_FL_KEEP_SIZE
        punch = nx.FALLOC_FL_PUNCH_HOLE | keep
        zero = nx.FALLOC_FL_ZERO_RANGE
        expect = {}
        with self.mounted(img) as m:
            # plain allocation
            fd = os.open(m.p('alloc'), os.O_RDWR | os.O_CREAT, 0o644)
            if self._falloc(fd, 0, 0, MiB):
                st = os.fstat(fd)
                self.assertEqual(st.st_size, MiB)
                self.assertGreaterEqual(st.st_blocks * 512, MiB)
                self.assertEqual(os.pread(fd, MiB, 0), bytes(MiB))
                os.pwrite(fd, b'xyz', 500000)
                m_alloc = bytearray(MiB)
                m_alloc[500000:500003] = b'xyz'
                expect['alloc'] = bytes(m_alloc)
            os.close(fd)
            # preallocation past EOF, then extension reads zeros
            fd = os.open(m.p('keep'), os.O_RDWR | os.O_CREAT, 0o644)
            os.write(fd, b'abc')
            if self._falloc(fd, keep, 0, MiB):
                st = os.fstat(fd)
                self.assertEqual(st.st_size, 3)
                self.assertGreaterEqual(st.st_blocks * 512, MiB)
                self.assertEqual(os.pread(fd, 100, 0), b'abc')
                os.ftruncate(fd, 100000)
                self.assertEqual(os.pread(fd, 100000, 0),
                                 b'abc' + bytes(100000 - 3))
                os.pwrite(fd, b'end', 600000)
                expect['keep'] = b'abc' + bytes(600000 - 3) + b'end'
            os.close(fd)
            # punching a hole, unaligned at both ends
            data = bytearray(pattern(MiB, 4))
            write_file(m.p('punch'), data)
            fd = os.open(m.p('punch'), os.O_RDWR)
            os.fsync(fd)
            blocks0 = os.fstat(fd).st_blocks
            off, ln = 3 * bs + 100, 10 * bs + 50
            nx.fallocate(fd, punch, off, ln)
            data[off:off + ln] = bytes(ln)
            self.assertEqual(os.fstat(fd).st_size, MiB)
            self.assertEqual(os.pread(fd, MiB, 0), data)
            self.assertLessEqual(os.fstat(fd).st_blocks,
                                 blocks0 - 9 * bs // 512)
            nx.fallocate(fd, punch, MiB + 5, 3 * bs)    # past EOF: no-op
            self.assertEqual(os.fstat(fd).st_size, MiB)
            os.close(fd)
            expect['punch'] = bytes(data)
            # zeroing a range; past EOF it extends the file
            data = bytearray(pattern(512 * 1024, 5))
            write_file(m.p('zero'), data)
            fd = os.open(m.p('zero'), os.O_RDWR)
            if self._falloc(fd, zero, 5000, 70000):
                data[5000:75000] = bytes(70000)
                self.assertEqual(os.pread(fd, len(data) + 10, 0), data)
                self.assertTrue(self._falloc(fd, zero, 500000, 100000))
                data[500000:] = bytes(600000 - 500000)
                self.assertEqual(os.fstat(fd).st_size, 600000)
                self.assertEqual(os.pread(fd, 700000, 0), data)
                expect['zero'] = bytes(data)
            os.close(fd)
        if self.extents:
            self.assertEqual(set(expect), {'alloc', 'keep', 'punch', 'zero'})
        with self.mounted(img) as m:
            for name, content in expect.items():
                self.assertEqual(read_file(m.p(name)), content, name)

    # ------------------------------------------------------ SEEK_DATA/HOLE

    def _check_seeks(self, path, cases):
        fd = os.open(path, os.O_RDONLY)
        try:
            for whence, off, want in cases:
                what = '%s(%d) on %s' % ('SEEK_DATA' if whence ==
                                         os.SEEK_DATA else 'SEEK_HOLE',
                                         off, os.path.basename(path))
                if want is None:
                    self.assertErrno(errno.ENXIO, os.lseek, fd, off, whence)
                else:
                    self.assertEqual(os.lseek(fd, off, whence), want, what)
        finally:
            os.close(fd)

    def test_seek_data_hole(self):
        img = self.make_image()
        D, H = os.SEEK_DATA, os.SEEK_HOLE
        sparse_cases = [
            (D, 0, 0), (H, 0, 4096), (D, 4096, MiB), (D, 5000, MiB),
            (H, MiB, MiB + 4096), (H, MiB + 100, MiB + 4096),
            (D, MiB + 4096, None), (H, MiB + 4096, MiB + 4096),
            (H, 3 * MiB // 2, 3 * MiB // 2), (D, 2 * MiB, None),
            (H, 2 * MiB, None)]
        hole_cases = [(D, 0, None), (H, 0, 0), (H, 1000, 1000)]
        small_cases = [(D, 0, 0), (H, 0, 100), (D, 100, None)]
        empty_cases = [(D, 0, None), (H, 0, None)]
        with self.mounted(img) as m:
            fd = os.open(m.p('sparse'), os.O_WRONLY | os.O_CREAT, 0o644)
            os.pwrite(fd, pattern(4096, 1), 0)
            os.pwrite(fd, pattern(4096, 2), MiB)
            os.ftruncate(fd, 2 * MiB)
            os.fsync(fd)
            os.close(fd)
            write_file(m.p('hole'), b'')
            os.truncate(m.p('hole'), MiB)
            write_file(m.p('small'), pattern(100))
            write_file(m.p('empty'), b'')
            self._check_seeks(m.p('sparse'), sparse_cases)
            self._check_seeks(m.p('hole'), hole_cases)
            self._check_seeks(m.p('small'), small_cases)
            self._check_seeks(m.p('empty'), empty_cases)
        with self.mounted(img) as m:
            self._check_seeks(m.p('sparse'), sparse_cases)
            self._check_seeks(m.p('hole'), hole_cases)
            self._check_seeks(m.p('small'), small_cases)

    # ------------------------------------------------------ big files

    def test_large_sparse_file(self):
        img = self.make_image()
        off = 5 * GiB + 123
        data = pattern(10000, 11)
        edge = pattern(8192, 12)
        with self.mounted(img) as m:
            fd = os.open(m.p('big'), os.O_RDWR | os.O_CREAT, 0o644)
            self.assertEqual(os.pwrite(fd, data, off), len(data))
            self.assertEqual(os.pwrite(fd, edge, 4 * GiB - 4096), len(edge))
            st = os.fstat(fd)
            self.assertEqual(st.st_size, off + len(data))
            self.assertLess(st.st_blocks * 512, MiB)
            self.assertEqual(os.pread(fd, len(data), off), data)
            self.assertEqual(os.pread(fd, 8192, 4 * GiB - 4096), edge)
            self.assertEqual(os.pread(fd, 65536, 3 * GiB), bytes(65536))
            os.close(fd)
            # 16 GiB: triple-indirect territory on 1 KiB blocks
            fd = os.open(m.p('big16'), os.O_RDWR | os.O_CREAT, 0o644)
            os.pwrite(fd, b'sixteen', 16 * GiB - MiB)
            os.close(fd)
        with self.mounted(img) as m:
            fd = os.open(m.p('big'), os.O_RDWR)
            self.assertEqual(os.fstat(fd).st_size, off + len(data))
            self.assertEqual(os.pread(fd, len(data), off), data)
            self.assertEqual(os.pread(fd, 8192, 4 * GiB - 4096), edge)
            os.ftruncate(fd, 4 * GiB + 10)
            self.assertEqual(os.pread(fd, 8192, 4 * GiB - 4096),
                             edge[:4096 + 10])
            os.close(fd)
            with open(m.p('big16'), 'rb') as f:
                f.seek(16 * GiB - MiB)
                self.assertEqual(f.read(), b'sixteen')
            os.unlink(m.p('big16'))

    # ------------------------------------------------------ inline data

    def test_inline_data(self):
        """Small files and directories (inline on ext4-inline) made by
        mke2fs -d: read them, grow them out of the inode, shrink them."""
        src = os.path.join(self.work, 'src')
        os.makedirs(os.path.join(src, 'dir'))
        os.mkdir(os.path.join(src, 'emptydir'))
        content = {'tiny': pattern(20, 1), 'small': pattern(100, 2),
                   'small2': pattern(120, 3), 'empty': b'',
                   'xa': pattern(90, 4), 'dir/a': b'a', 'dir/b': b'bb',
                   'dir/c': pattern(40, 5)}
        for name, data in content.items():
            write_file(os.path.join(src, name), data)
        os.symlink('l' * 80, os.path.join(src, 'link80'))
        img = self.make_image(extra=['-d', src])
        if self.flavour == 'ext4-inline':
            # make sure this test really starts from inline inodes
            for name in ('tiny', 'small', 'dir'):
                out = nx.debugfs(img, 'stat /%s' % name)
                flags = re.search(r'Flags: 0x([0-9a-f]+)', out)
                self.assertTrue(flags and int(flags.group(1), 16) &
                                nx.FS_INLINE_DATA_FL,
                                'mke2fs -d did not inline %s' % name)
        want = dict(content)
        with self.mounted(img) as m:
            for name, data in content.items():
                self.assertEqual(read_file(m.p(name)), data, name)
            self.assertEqual(sorted(os.listdir(m.p('dir'))),
                             ['a', 'b', 'c'])
            self.assertEqual(os.readlink(m.p('link80')), 'l' * 80)
            self.assertEqual(os.listdir(m.p('emptydir')), [])
            with open(m.p('tiny'), 'ab') as f:
                f.write(b'0123456789')
            want['tiny'] += b'0123456789'
            with open(m.p('small'), 'r+b') as f:
                f.seek(40)
                f.write(b'MIDDLE')
            s = bytearray(want['small'])
            s[40:46] = b'MIDDLE'
            want['small'] = bytes(s)
            with open(m.p('small'), 'ab') as f:     # out of the inode
                f.write(pattern(10000, 6))
            want['small'] += pattern(10000, 6)
            os.truncate(m.p('small2'), 10)
            want['small2'] = want['small2'][:10]
            # an xattr competes with inline data for in-inode space
            os.setxattr(m.p('xa'), 'user.note', pattern(50, 7))
            with open(m.p('xa'), 'ab') as f:
                f.write(pattern(60, 8))
            want['xa'] += pattern(60, 8)
            self.assertEqual(os.getxattr(m.p('xa'), 'user.note'),
                             pattern(50, 7))
            # directory: rename and unlink in place, then outgrow the inode
            os.rename(m.p('dir', 'a'), m.p('dir', 'a2'))
            os.unlink(m.p('dir', 'b'))
            want['dir/a2'] = want.pop('dir/a')
            del want['dir/b']
            for i in range(200):
                write_file(m.p('dir', 'n%03d' % i), b'%d' % i)
                want['dir/n%03d' % i] = b'%d' % i
            os.rmdir(m.p('emptydir'))
            write_file(m.p('new'), pattern(30, 9))
            want['new'] = pattern(30, 9)
            os.mkdir(m.p('newdir'))
            write_file(m.p('newdir', 'x'), b'x')
            want['newdir/x'] = b'x'
            for name, data in want.items():
                self.assertEqual(read_file(m.p(name)), data, name)
        with self.mounted(img) as m:
            for name, data in want.items():
                self.assertEqual(read_file(m.p(name)), data, name)
            self.assertEqual(len(os.listdir(m.p('dir'))), 202)
            self.assertEqual(os.getxattr(m.p('xa'), 'user.note'),
                             pattern(50, 7))
            self.assertFalse(os.path.exists(m.p('emptydir')))

    # ------------------------------------------------------ readahead

    def test_read_ahead_kb(self):
        """The mount's kernel readahead window: 4096 KiB by default (a
        stream is then served by several reads at once), -o
        read_ahead_kb=N, 0 keeps the kernel's 128; a bad value is refused
        before anything is mounted.  Setting it needs root."""
        if nx.backend() != 'nextfs':
            self.skipTest('a nextfs-fuse option')
        if os.geteuid() != 0:
            self.skipTest('only root may set a mount\'s readahead')
        img = self.make_image()

        def read_ahead(path, want):
            st = os.stat(path)
            knob = '/sys/class/bdi/%d:%d/read_ahead_kb' % (
                os.major(st.st_dev), os.minor(st.st_dev))
            deadline = time.monotonic() + 5   # set just after mounting
            while True:
                with open(knob) as f:
                    got = int(f.read())
                if got == want or time.monotonic() > deadline:
                    return got

        for opts, want in (((), 4096), (('read_ahead_kb=512',), 512),
                           (('read_ahead_kb=0',), 128)):
            with self.mounted(img, opts=opts) as m:
                self.assertEqual(read_ahead(m.path, want), want, opts)
        mnt = os.path.join(os.path.dirname(img), 'mnt-refused')
        os.mkdir(mnt)
        try:
            for bad in ('65537', 'x', '-1', ''):
                p = subprocess.run([nx.daemon_path(), '-o',
                                    'read_ahead_kb=' + bad, img, mnt],
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True,
                                   timeout=20)
                self.assertEqual(p.returncode, 1, (bad, p.stderr))
                self.assertIn('bad read_ahead_kb', p.stderr)
                self.assertFalse(nx.is_mounted(mnt))
        finally:
            os.rmdir(mnt)

    # ------------------------------------------------------ concurrency

    def test_concurrent_clients(self):
        img = self.make_image()
        nthreads, nfiles = 4, 150
        errors = []

        def worker(root, t):
            try:
                d = os.path.join(root, 'w%d' % t)
                os.mkdir(d)
                for i in range(nfiles):
                    p = os.path.join(d, 'f%d' % i)
                    write_file(p, pattern(2000 + i * 37, t * 1000 + i))
                    if i % 3 == 0:
                        os.rename(p, p + '.r')
                    if i % 5 == 0:
                        os.unlink(p + ('.r' if i % 3 == 0 else ''))
                fd = os.open(os.path.join(root, 'shared'), os.O_WRONLY)
                for k in range(16):
                    off = (k * nthreads + t) * 65536
                    os.pwrite(fd, pattern(65536, 100 + t * 16 + k), off)
                os.close(fd)
            except BaseException as e:     # reported by the main thread
                errors.append('thread %d: %r' % (t, e))

        def expected():
            want = {}
            for t in range(nthreads):
                for i in range(nfiles):
                    if i % 5 == 0:
                        continue
                    name = 'w%d/f%d%s' % (t, i, '.r' if i % 3 == 0 else '')
                    want[name] = pattern(2000 + i * 37, t * 1000 + i)
            return want

        def verify(m):
            for name, data in expected().items():
                self.assertEqual(read_file(m.p(name)), data, name)
            for t in range(nthreads):
                self.assertEqual(len(os.listdir(m.p('w%d' % t))),
                                 nfiles - nfiles // 5)
            shared = read_file(m.p('shared'))
            for t in range(nthreads):
                for k in range(16):
                    off = (k * nthreads + t) * 65536
                    self.assertEqual(shared[off:off + 65536],
                                     pattern(65536, 100 + t * 16 + k))

        with self.mounted(img) as m:
            write_file(m.p('shared'), b'')
            threads = [threading.Thread(target=worker, args=(m.path, t))
                       for t in range(nthreads)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            self.assertEqual(errors, [])
            verify(m)
        with self.mounted(img) as m:
            verify(m)


    def test_requests_served_while_a_read_waits(self):
        """A read waiting for the device does not hold up the next
        requests: the thread that received it hands the waiting for
        /dev/fuse over first (loop.c).  NEXTFS_FAULTS=slow_read makes
        the read wait 2 s once it has reached the daemon (the request
        counters say when); stat, listing and a missing name's lookup
        must all be answered while it is still in flight.  (Not device
        writes: they wait for reads in flight by design, blkio.h; the
        fsync first leaves no commit due meanwhile.)"""
        img = self.make_image()
        done = threading.Event()
        with nx.environment(NEXTFS_FAULTS='slow_read=2000000'), \
                self.mounted(img) as m:
            write_file(m.p('big'), b'r' * MiB)
            fd = os.open(m.p('big'), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            reads = nx.opstats(m.path).get('read', 0)

            def reader():
                buf = mmap.mmap(-1, MiB)    # page-aligned for O_DIRECT
                fd = os.open(m.p('big'), os.O_RDONLY | os.O_DIRECT)
                try:
                    os.preadv(fd, [buf], 0)
                finally:
                    os.close(fd)
                    done.set()
            th = threading.Thread(target=reader)
            th.start()
            try:
                while nx.opstats(m.path).get('read', 0) == reads:
                    self.assertFalse(done.is_set(), 'no read reached us')
                os.stat(m.p('big'))
                self.assertIn('big', os.listdir(m.path))
                self.assertFalse(os.path.exists(m.p('missing')))
                self.assertFalse(done.is_set(),
                                 'metadata requests waited for the read')
            finally:
                th.join()

    def test_reads_never_see_reused_blocks(self):
        """File data is read outside the daemon's lock.  A reader racing
        a hole punch must get the file's bytes or zeros, never those of
        another file that was given the freed blocks meanwhile (device
        writes wait for the reads in flight).  The size never changes, so
        no short read is involved.  NEXTFS_FAULTS=slow_read makes every
        unlocked read sleep first, so that punch, commit and the other
        file's write fall inside the window (without the wait, this
        fails within a few rounds)."""
        img = self.make_image()
        size, rounds = 4 * MiB, 40
        errors, stop = [], threading.Event()
        punch = 0x02 | 0x01    # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE

        def reader(path, seed, bufsize):
            rnd = random.Random(seed)
            buf = mmap.mmap(-1, bufsize)    # page-aligned for O_DIRECT
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
                while not stop.is_set():
                    off = rnd.randrange(0, size // 4096) * 4096
                    n = os.preadv(fd, [buf], off)
                    if n != min(bufsize, size - off):
                        errors.append('offset %d: short read %d' % (off, n))
                    if b'B' in buf[:n]:
                        errors.append('offset %d: bytes of another file'
                                      % off)
                    if errors:
                        break
                os.close(fd)
            except BaseException as e:     # reported by the main thread
                errors.append('reader: %r' % e)

        with nx.environment(NEXTFS_FAULTS='slow_read=20000'), \
                self.mounted(img) as m:
            a, b = m.p('a'), m.p('b')
            write_file(a, b'A' * size)
            readers = [threading.Thread(target=reader, args=(a, k, bs))
                       for k, bs in enumerate((4096, 65536, 262144))]
            for th in readers:
                th.start()
            try:
                fd = os.open(a, os.O_WRONLY)
                for _ in range(rounds):
                    nx.fallocate(fd, punch, 0, size)
                    os.fsync(fd)       # the commit releases the blocks
                    write_file(b, b'B' * size)
                    os.fsync(fd)
                    os.pwrite(fd, b'A' * size, 0)
                    os.unlink(b)
                    if errors:
                        break
                os.close(fd)
            finally:
                stop.set()
                for th in readers:
                    th.join()
            self.assertEqual(errors, [])
            self.assertEqual(read_file(a), b'A' * size)

if __name__ == '__main__':
    nx.main()
