#!/usr/bin/env python3
"""Error returns through a nextfs mount, as kernel ext4 gives them:
ENAMETOOLONG, ENOTEMPTY, EISDIR, ENOTDIR, EEXIST, ENOENT, EINVAL, EFBIG,
EROFS (-o ro) and ENOSPC (blocks and inodes, with the data written
before the error intact after a remount).

Run: test_errors.py --flavour ext2|ext3|ext4|ext4-inline [unittest args]
"""

import errno
import hashlib
import os
import socket
import stat

import nxharness as nx
from nxharness import pattern, read_file, write_file

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

# First offsets beyond the largest file each flavour can hold (indirect
# maps: 1 KiB blocks ~16 GiB; 4 KiB blocks without huge_file ~2 TiB;
# extents with 4 KiB blocks 16 TiB).
TOO_BIG = {'ext2': 17 * GiB, 'ext3': 3 * TiB, 'ext4': 17 * TiB,
           'ext4-inline': 17 * TiB}


def create(path, mode=0o644):
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))


class ErrorsTest(nx.NxTestCase):

    def test_name_length(self):
        img = self.make_image()
        n255, n256 = 'n' * 255, 'm' * 256
        with self.mounted(img) as m:
            write_file(m.p('src'), b's')
            create(m.p(n255))
            self.assertEqual(read_file(m.p(n255)), b'')
            os.unlink(m.p(n255))
            os.mkdir(m.p(n255))
            os.rmdir(m.p(n255))
            os.symlink('src', m.p(n255))
            self.assertEqual(os.readlink(m.p(n255)), 'src')
            os.unlink(m.p(n255))
            os.link(m.p('src'), m.p(n255))
            os.rename(m.p(n255), m.p('d' * 255))
            self.assertIn('d' * 255, os.listdir(m.path))
            for fn, args in ((create, (m.p(n256),)),
                             (os.mkdir, (m.p(n256),)),
                             (os.symlink, ('src', m.p(n256))),
                             (os.link, (m.p('src'), m.p(n256))),
                             (os.rename, (m.p('src'), m.p(n256))),
                             (os.mkfifo, (m.p(n256),)),
                             (os.stat, (m.p(n256),)),
                             (os.unlink, (m.p(n256),)),
                             (os.rmdir, (m.p(n256),))):
                self.assertErrno(errno.ENAMETOOLONG, fn, *args)
            # a symlink target must fit in one block
            os.symlink('t' * (min(self.bsize, 4096) - 1), m.p('longest'))
            self.assertErrno(errno.ENAMETOOLONG, os.symlink,
                             't' * self.bsize, m.p('toolong'))
            self.assertEqual(sorted(os.listdir(m.path)),
                             sorted(['lost+found', 'src', 'd' * 255,
                                     'longest']))

    def test_enotempty_eisdir_enotdir(self):
        img = self.make_image()
        with self.mounted(img) as m:
            os.makedirs(m.p('full', 'sub'))
            os.mkdir(m.p('empty'))
            write_file(m.p('file'), b'f')
            self.assertErrno(errno.ENOTEMPTY, os.rmdir, m.p('full'))
            self.assertErrno(errno.ENOTEMPTY, os.rename, m.p('empty'),
                             m.p('full'))
            self.assertErrno(errno.EISDIR, os.open, m.p('empty'),
                             os.O_WRONLY)
            self.assertErrno(errno.EISDIR, os.open, m.p('empty'), os.O_RDWR)
            self.assertErrno(errno.EISDIR, os.unlink, m.p('empty'))
            self.assertErrno(errno.EISDIR, os.rename, m.p('file'),
                             m.p('empty'))
            self.assertErrno(errno.ENOTDIR, os.mkdir, m.p('file', 'x'))
            self.assertErrno(errno.ENOTDIR, os.rmdir, m.p('file'))
            self.assertErrno(errno.ENOTDIR, os.rename, m.p('empty'),
                             m.p('file'))
            self.assertErrno(errno.ENOTDIR, os.stat, m.p('file', 'x'))
            self.assertErrno(errno.ENOTDIR, create, m.p('file', 'x'))
            self.assertErrno(errno.ENOTDIR, os.listdir, m.p('file'))
            self.assertErrno(errno.EINVAL, os.readlink, m.p('file'))
            self.assertErrno(errno.EINVAL, os.rename, m.p('full'),
                             m.p('full', 'sub', 'inside'))
            self.assertTrue(os.path.isdir(m.p('full', 'sub')))
            self.assertEqual(read_file(m.p('file')), b'f')

    def test_eexist_enoent(self):
        self.need_root()
        img = self.make_image()
        with self.mounted(img) as m:
            os.mkdir(m.p('dir'))
            write_file(m.p('file'), b'f')
            os.symlink('dangling', m.p('sym'))
            for target in ('dir', 'file', 'sym'):
                t = m.p(target)
                self.assertErrno(errno.EEXIST, os.mkdir, t)
                self.assertErrno(errno.EEXIST, create, t)
                self.assertErrno(errno.EEXIST, os.symlink, 'x', t)
                self.assertErrno(errno.EEXIST, os.link, m.p('file'), t)
                self.assertErrno(errno.EEXIST, os.mkfifo, t)
                self.assertErrno(errno.EEXIST, os.mknod, t,
                                 stat.S_IFCHR | 0o600, os.makedev(1, 3))
                self.assertErrno(errno.EEXIST, nx.renameat2, m.p('file'), t,
                                 nx.RENAME_NOREPLACE)
            s = socket.socket(socket.AF_UNIX)
            try:
                self.assertErrno(errno.EADDRINUSE, s.bind, m.p('file'))
            finally:
                s.close()
            missing = m.p('missing')
            for fn, args in ((os.stat, (missing,)),
                             (os.lstat, (missing,)),
                             (os.unlink, (missing,)),
                             (os.rmdir, (missing,)),
                             (os.rename, (missing, m.p('x'))),
                             (os.open, (missing, os.O_RDONLY)),
                             (create, (m.p('missing', 'x'),)),
                             (os.mkdir, (m.p('missing', 'x'),)),
                             (os.link, (missing, m.p('x'))),
                             (os.readlink, (missing,)),
                             (os.chmod, (missing, 0o600)),
                             (os.truncate, (missing, 0)),
                             (os.getxattr, (missing, 'user.x')),
                             (os.open, (m.p('sym'), os.O_RDONLY)),
                             (nx.renameat2, (m.p('file'), missing,
                                             nx.RENAME_EXCHANGE))):
                self.assertErrno(errno.ENOENT, fn, *args)
            self.assertEqual(sorted(os.listdir(m.path)),
                             ['dir', 'file', 'lost+found', 'sym'])

    def test_efbig(self):
        img = self.make_image()
        limit = TOO_BIG[self.flavour]
        with self.mounted(img) as m:
            fd = os.open(m.p('f'), os.O_RDWR | os.O_CREAT, 0o644)
            self.assertErrno(errno.EFBIG, os.pwrite, fd, b'x', limit)
            self.assertErrno(errno.EFBIG, os.ftruncate, fd, limit)
            self.assertErrno(errno.EFBIG, os.truncate, m.p('f'), limit)
            self.assertEqual(os.fstat(fd).st_size, 0)
            os.close(fd)

    def test_erofs_and_image_untouched(self):
        src = os.path.join(self.work, 'src')
        os.makedirs(os.path.join(src, 'dir'))
        write_file(os.path.join(src, 'file'), b'read only')
        img = self.make_image(extra=['-d', src])
        before = nx.sha256_file(img)
        with self.mounted(img, opts=['ro']) as m:
            self.assertEqual(read_file(m.p('file')), b'read only')
            self.assertEqual(os.listdir(m.p('dir')), [])
            self.assertTrue(os.statvfs(m.path).f_flag & os.ST_RDONLY)
            f = m.p('file')
            for fn, args in ((os.open, (f, os.O_WRONLY)),
                             (os.open, (f, os.O_RDWR | os.O_TRUNC)),
                             (create, (m.p('new'),)),
                             (os.mkdir, (m.p('newdir'),)),
                             (os.rmdir, (m.p('dir'),)),
                             (os.unlink, (f,)),
                             (os.rename, (f, m.p('moved'))),
                             (os.link, (f, m.p('hard'))),
                             (os.symlink, ('file', m.p('sym'))),
                             (os.mkfifo, (m.p('fifo'),)),
                             (os.chmod, (f, 0o600)),
                             (os.chown, (f, 1, 1)),
                             (os.utime, (f, (1, 1))),
                             (os.truncate, (f, 0)),
                             (os.setxattr, (f, 'user.x', b'1')),
                             (os.removexattr, (f, 'user.x'))):
                self.assertErrno(errno.EROFS, fn, *args)
        self.assertEqual(nx.sha256_file(img), before,
                         'a read-only mount modified the image')

    def test_enospc_blocks(self):
        img = self.make_image('16M')
        chunk = 256 * KiB
        done = {}
        with self.mounted(img) as m:
            free0 = os.statvfs(m.path).f_bfree * self.bsize
            failed = None
            for i in range(1000):
                name, data = 'f%03d' % i, pattern(chunk, i)
                try:
                    fd = os.open(m.p(name), os.O_WRONLY | os.O_CREAT, 0o644)
                    try:
                        view = memoryview(data)
                        while view:
                            view = view[os.write(fd, view):]
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                except OSError as e:
                    self.assertEqual(e.errno, errno.ENOSPC,
                                     'writing %s: %s' % (name, e))
                    failed = name
                    break
                done[name] = hashlib.sha256(data).hexdigest()
            else:
                self.fail('wrote 250 MiB to a 16 MiB image')
            written = len(done) * chunk
            self.assertGreater(written, 0.8 * free0 - chunk,
                               'ENOSPC long before the image was full')
            self.assertErrno(errno.ENOSPC, write_file, m.p('more'),
                             pattern(chunk, 9999))
            # overwriting allocated blocks needs no space
            first = sorted(done)[0]
            with open(m.p(first), 'r+b') as f:
                f.write(b'Z' * 4096)
                f.flush()
                os.fsync(f.fileno())
            done[first] = hashlib.sha256(
                b'Z' * 4096 + pattern(chunk, 0)[4096:]).hexdigest()
            for name in (failed, 'more'):
                if os.path.exists(m.p(name)):
                    os.unlink(m.p(name))
            # freeing space makes writes work again
            victim = sorted(done)[-1]
            bfree = os.statvfs(m.path).f_bfree
            os.unlink(m.p(victim))
            del done[victim]
            nx.wait_statfs(m.path, lambda st: st.f_bfree * self.bsize >=
                           bfree * self.bsize + chunk)
            write_file(m.p('after'), pattern(chunk // 2, 7))
            done['after'] = hashlib.sha256(pattern(chunk // 2, 7)).hexdigest()
        with self.mounted(img) as m:
            names = set(os.listdir(m.path)) - {'lost+found'}
            self.assertEqual(names, set(done))
            for name, digest in done.items():
                self.assertEqual(nx.sha256_file(m.p(name)), digest, name)

    def test_enospc_inodes(self):
        img = self.make_image('16M', extra=['-N', '64'])
        with self.mounted(img) as m:
            ffree = os.statvfs(m.path).f_ffree
            self.assertLess(ffree, 200)
            made = []
            for i in range(ffree + 10):
                try:
                    create(m.p('i%03d' % i))
                except OSError as e:
                    self.assertEqual(e.errno, errno.ENOSPC)
                    break
                made.append('i%03d' % i)
            self.assertEqual(len(made), ffree)
            self.assertEqual(os.statvfs(m.path).f_ffree, 0)
            self.assertErrno(errno.ENOSPC, os.mkdir, m.p('d'))
            self.assertErrno(errno.ENOSPC, os.symlink, 'x', m.p('s'))
            self.assertErrno(errno.ENOSPC, os.mkfifo, m.p('p'))
            os.link(m.p(made[0]), m.p('hardlink'))   # needs no inode
            os.unlink(m.p(made.pop()))
            nx.wait_statfs(m.path, lambda st: st.f_ffree > 0)
            os.mkdir(m.p('d'))
        with self.mounted(img) as m:
            self.assertEqual(set(os.listdir(m.path)),
                             set(made) | {'lost+found', 'hardlink', 'd'})


if __name__ == '__main__':
    nx.main()
