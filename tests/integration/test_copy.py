#!/usr/bin/env python3
"""Whole-tree round trips.

- cp -a a tree (part of /usr/share/doc plus a constructed tree with hard
  links, symlinks, xattrs, ACLs, sparse files, special files, odd modes,
  owners and nanosecond times) into the mount and back out: everything
  must be identical, before and after a remount.
- Compatibility with the kernel: an image written by the kernel's ext4
  driver (shared xattr blocks, unwritten extents, htree directories)
  looks the same through nextfs; after nextfs changed it, it looks the
  same to the kernel.  Needs loop devices; skipped otherwise.

Run: test_copy.py --flavour ext2|ext3|ext4|ext4-inline [unittest args]
"""

import os
import shutil
import stat
import subprocess

import nxharness as nx
from nxharness import pattern, write_file

MiB = 1 << 20
DOC_BYTES = 6 * MiB


def copy_doc_subset(dst, limit=DOC_BYTES):
    """Copy whole package directories of /usr/share/doc until LIMIT."""
    os.mkdir(dst)
    total = 0
    root = '/usr/share/doc'
    if not os.path.isdir(root):
        return 0
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        size = 0
        for dirpath, _, files in os.walk(path):
            for f in files:
                try:
                    size += os.lstat(os.path.join(dirpath, f)).st_size
                except OSError:
                    pass
        nx.run(['cp', '-a', path, dst])
        total += size
        if total >= limit:
            break
    return total


def build_tree(root, with_devices=True):
    """A tree exercising every kind of metadata cp -a preserves."""
    j = lambda *p: os.path.join(root, *p)
    for d in ('modes', 'owners', 'links/sub', 'syms', 'xattr', 'sparse',
              'special', 'many', 'acl'):
        os.makedirs(j(d))
    deep = j(*['deep%02d' % i for i in range(20)])
    os.makedirs(deep)
    write_file(os.path.join(deep, 'leaf'), b'deep leaf')
    write_file(j('n' * 255), b'long name')
    write_file(j('big'), pattern(3 * MiB + 17, 1))
    write_file(j('empty'), b'')
    for i in range(300):
        write_file(j('many', 'f%03d' % i), pattern(i * 7, i))

    for name, mode in (('f600', 0o600), ('f755', 0o755), ('f4755', 0o4755),
                       ('f2711', 0o2711), ('f444', 0o444)):
        write_file(j('modes', name), name.encode())
        os.chmod(j('modes', name), mode)
    for name, mode in (('d700', 0o700), ('d1777', 0o1777),
                       ('d2755', 0o2755)):
        os.mkdir(j('modes', name))
        os.chmod(j('modes', name), mode)

    for name, ids in (('u1000', (1000, 1000)), ('u12345', (12345, 54321)),
                      ('u100000', (100000, 100000))):
        write_file(j('owners', name), name.encode())
        os.chown(j('owners', name), *ids)
    os.mkdir(j('owners', 'dir1000'))
    os.chown(j('owners', 'dir1000'), 1000, 1000)

    write_file(j('links', 'a'), pattern(5000, 2))
    os.link(j('links', 'a'), j('links', 'sub', 'b'))
    os.link(j('links', 'a'), j('links', 'c'))
    write_file(j('links', 'x'), b'pair')
    os.link(j('links', 'x'), j('links', 'sub', 'y'))

    os.symlink('../big', j('syms', 'short'))
    os.symlink('/' + '/'.join('component%02d' % i for i in range(25)),
               j('syms', 'long'))
    os.symlink('does/not/exist', j('syms', 'dangling'))
    os.symlink('../links', j('syms', 'todir'))
    os.symlink('/etc/hostname', j('syms', 'absolute'))

    write_file(j('xattr', 'f'), b'xattrs')
    os.setxattr(j('xattr', 'f'), 'user.small', b's')
    os.setxattr(j('xattr', 'f'), 'user.medium', pattern(300, 3))
    os.setxattr(j('xattr', 'f'), 'trusted.t', b'trusted value')
    os.setxattr(j('xattr'), 'user.ondir', b'dir')
    os.symlink('f', j('xattr', 'link'))
    os.setxattr(j('xattr', 'link'), 'trusted.onlink', b'l',
                follow_symlinks=False)

    if shutil.which('setfacl'):
        write_file(j('acl', 'f'), b'acl')
        nx.run(['setfacl', '-m', 'u:1000:rw,g:2000:r', j('acl', 'f')])
        nx.run(['setfacl', '-d', '-m', 'u:1000:rwx', j('acl')])

    fd = os.open(j('sparse', 's1'), os.O_WRONLY | os.O_CREAT, 0o644)
    os.pwrite(fd, pattern(8192, 4), 0)
    os.pwrite(fd, pattern(8192, 5), 5 * MiB)
    os.pwrite(fd, b'end', 10 * MiB - 3)
    os.close(fd)
    fd = os.open(j('sparse', 's2'), os.O_WRONLY | os.O_CREAT, 0o644)
    os.pwrite(fd, b'!', 64 * MiB - 1)
    os.close(fd)
    write_file(j('sparse', 'holeonly'), b'')
    os.truncate(j('sparse', 'holeonly'), MiB)

    os.mkfifo(j('special', 'fifo'), 0o620)
    if with_devices:
        os.mknod(j('special', 'null'), stat.S_IFCHR | 0o666,
                 os.makedev(1, 3))
        os.mknod(j('special', 'blk'), stat.S_IFBLK | 0o600,
                 os.makedev(259, 70000))

    # nanosecond times, children before parents (cp -a sets them last too)
    k = 0
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in sorted(filenames) + sorted(dirnames):
            p = os.path.join(dirpath, name)
            k += 1
            t = (1_000_000_000 + k * 86_400) * 10**9 + k * 1_234_567
            if k % 17 == 0:
                t = -(k * 10**9) - 13          # before 1970
            os.utime(p, ns=(t, t), follow_symlinks=False)
    os.utime(root, ns=(10**18, 10**18 + 1))


class CopyTest(nx.NxTestCase):

    def _source(self):
        src = os.path.join(self.work, 'src')
        os.mkdir(src)
        self.doc_bytes = copy_doc_subset(os.path.join(src, 'doc'))
        build_tree(os.path.join(src, 'made'), os.geteuid() == 0)
        return src

    def test_cp_a_roundtrip(self):
        self.need_root()
        src = self._source()
        want = nx.tree_state(src)
        img = self.make_image('128M')
        with self.mounted(img) as m:
            nx.run(['cp', '-a', src, m.p('copy')])
            self.assertTreesEqual(want, nx.tree_state(m.p('copy')),
                                  'copied in')
            st = os.stat(m.p('copy', 'made', 'sparse', 's2'))
            self.assertLess(st.st_blocks * 512, MiB, 'sparse file filled')
        with self.mounted(img) as m:
            self.assertTreesEqual(want, nx.tree_state(m.p('copy')),
                                  'after remount')
            out = os.path.join(self.work, 'out')
            nx.run(['cp', '-a', m.p('copy'), out])
        self.assertTreesEqual(want, nx.tree_state(out), 'copied back out')

    # ------------------------------------------------------ kernel compat

    def _kernel_mount(self, img, mnt):
        p = nx.run(['mount', '-t', 'ext4', '-o', 'loop', img, mnt],
                   check=False)
        if p.returncode != 0:
            self.skipTest('cannot loop-mount with the kernel ext4 driver: '
                          + p.stdout.strip())

    def _kernel_umount(self, mnt):
        nx.run(['umount', mnt])

    def _kernel_populate(self, root):
        build_tree(os.path.join(root, 'made'))
        # identical xattr sets: ext4 shares one block among these inodes
        big = pattern(self.bsize // 2, 9)
        os.mkdir(os.path.join(root, 'shared'))
        for i in range(6):
            f = os.path.join(root, 'shared', 's%d' % i)
            write_file(f, b'%d' % i)
            os.setxattr(f, 'user.big', big)
        # unwritten extents inside and beyond EOF (extent flavours)
        fd = os.open(os.path.join(root, 'prealloc'), os.O_RDWR | os.O_CREAT,
                     0o644)
        os.write(fd, b'head')
        try:
            nx.fallocate(fd, 0, 0, 2 * MiB)
            nx.fallocate(fd, nx.FALLOC_FL_KEEP_SIZE, 2 * MiB, MiB)
        except OSError:
            pass                        # indirect-mapped: not supported
        os.pwrite(fd, b'middle', MiB)
        os.close(fd)
        # an htree directory with holes from deletions
        big_dir = os.path.join(root, 'htree')
        os.mkdir(big_dir)
        for i in range(3000):
            write_file(os.path.join(big_dir, 'entry%04d' % i), b'')
        for i in range(0, 3000, 3):
            os.unlink(os.path.join(big_dir, 'entry%04d' % i))

    def _nextfs_modify(self, root):
        for i in (1, 3):
            os.setxattr(os.path.join(root, 'shared', 's%d' % i), 'user.big',
                        b'changed')
        os.unlink(os.path.join(root, 'shared', 's4'))
        with open(os.path.join(root, 'prealloc'), 'r+b') as f:
            f.seek(MiB + 4096)
            f.write(b'into unwritten space')
            f.seek(0, os.SEEK_END)
            f.write(b'append past the preallocated end')
        for i in range(1, 3000, 3):
            os.rename(os.path.join(root, 'htree', 'entry%04d' % i),
                      os.path.join(root, 'htree', 'moved%04d' % i))
        for i in range(3000, 3500):
            write_file(os.path.join(root, 'htree', 'entry%04d' % i), b'n')
        shutil.rmtree(os.path.join(root, 'made', 'many'))
        os.truncate(os.path.join(root, 'made', 'big'), 12345)
        os.chmod(os.path.join(root, 'made', 'modes', 'f600'), 0o640)

    def test_kernel_written_image(self):
        self.need_root()
        img = self.make_image('128M')
        kmnt = os.path.join(self.work, 'kernel')
        os.mkdir(kmnt)
        self._kernel_mount(img, kmnt)
        try:
            self._kernel_populate(kmnt)
            os.sync()
            kernel_view = nx.tree_state(kmnt, nlink=True)
        finally:
            self._kernel_umount(kmnt)
        rc, out = nx.fsck(img)
        self.assertEqual(rc, 0, 'kernel left an unclean image:\n' + out)
        with self.mounted(img) as m:
            self.assertTreesEqual(kernel_view,
                                  nx.tree_state(m.path, nlink=True),
                                  'kernel-written image through nextfs')
            self._nextfs_modify(m.path)
            nextfs_view = nx.tree_state(m.path, nlink=True)
        self._kernel_mount(img, kmnt)
        try:
            self.assertTreesEqual(nextfs_view,
                                  nx.tree_state(kmnt, nlink=True),
                                  'nextfs-modified image through the kernel')
        finally:
            self._kernel_umount(kmnt)


if __name__ == '__main__':
    nx.main()
