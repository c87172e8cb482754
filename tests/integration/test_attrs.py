#!/usr/bin/env python3
"""Attributes through a nextfs mount: modes, owners, nanosecond times,
statfs, extended attributes, POSIX ACLs and inode flags (chattr).

Run: test_attrs.py --flavour ext2|ext3|ext4|ext4-inline [unittest args]
"""

import errno
import os
import re
import shutil
import stat
import subprocess
import time

import nxharness as nx
from nxharness import pattern, read_file, write_file

MiB = 1 << 20
SLACK_NS = 1_000_000_000
# Limits of ext4 timestamps in 256-byte inodes (32 bits + 2 epoch bits);
# at the limits the kernel drops the nanoseconds.
EXT4_TIME_MAX = 2**34 - 2**31 - 1
EXT4_TIME_MIN = -2**31


def getfacl(path, default=False):
    """ACL entries as a list of 'tag:qualifier:perms' (numeric ids)."""
    argv = ['getfacl', '-cnE'] + (['-d'] if default else []) + [path]
    out = nx.run(argv).stdout
    return [line for line in out.splitlines() if line and
            not line.startswith('#')]


def lsattr(path):
    out = nx.run(['lsattr', '-d', path]).stdout
    return out.split()[0]


class AttrsTest(nx.NxTestCase):

    # ------------------------------------------------------ chmod/chown

    def test_chmod_chown(self):
        self.need_root()
        img = self.make_image()
        owners = {'f1': (1234, 5678), 'f2': (100000, 200000),
                  'f3': (4294967294, 4294967294), 'd': (1000, 1000)}
        modes = {'m7777': 0o7777, 'm4755': 0o4755, 'm2755': 0o2755,
                 'm1777': 0o1777, 'm0000': 0, 'm0640': 0o640}
        with self.mounted(img) as m:
            for name in owners:
                if name == 'd':
                    os.mkdir(m.p(name))
                else:
                    write_file(m.p(name), name.encode())
            for name, ids in owners.items():
                os.chown(m.p(name), *ids)
                st = os.stat(m.p(name))
                self.assertEqual((st.st_uid, st.st_gid), ids, name)
            os.chown(m.p('f1'), -1, 42)                 # -1: unchanged
            owners['f1'] = (1234, 42)
            self.assertEqual(os.stat(m.p('f1')).st_uid, 1234)
            os.symlink('f1', m.p('sym'))
            os.chown(m.p('sym'), 7, 8, follow_symlinks=False)
            self.assertEqual((os.lstat(m.p('sym')).st_uid,
                              os.stat(m.p('sym')).st_uid), (7, 1234))
            for name, mode in modes.items():
                write_file(m.p(name), b'')
                before = os.stat(m.p(name)).st_ctime_ns
                time.sleep(0.03)        # > 1 tick of a coarse clock
                os.chmod(m.p(name), mode)
                st = os.stat(m.p(name))
                self.assertEqual(stat.S_IMODE(st.st_mode), mode, name)
                self.assertGreater(st.st_ctime_ns, before, name)
            os.mkdir(m.p('sdir'))
            os.chmod(m.p('sdir'), 0o3775)
        with self.mounted(img) as m:
            for name, ids in owners.items():
                st = os.stat(m.p(name))
                self.assertEqual((st.st_uid, st.st_gid), ids, name)
            self.assertEqual(os.lstat(m.p('sym')).st_uid, 7)
            for name, mode in modes.items():
                self.assertEqual(stat.S_IMODE(os.stat(m.p(name)).st_mode),
                                 mode, name)
            self.assertEqual(stat.S_IMODE(os.stat(m.p('sdir')).st_mode),
                             0o3775)

    # ------------------------------------------------------ timestamps

    TIMES = [
        (1_600_000_000_123_456_789, 1_700_000_000_987_654_321),
        (1, 999_999_999),
        (-999_999_877, -5_000_000_007),                  # before 1970
        (8_589_934_592 * 10**9 + 999_999_999,            # 2242
         EXT4_TIME_MAX * 10**9),                         # 2446: ext4 max
        (EXT4_TIME_MIN * 10**9, 0),                      # 1901: ext4 min
    ]
    # Out of range: ext4 (through the VFS) clamps to its limits.
    CLAMPED = [((2**36 * 10**9, -2**40 * 10**9),
                (EXT4_TIME_MAX * 10**9, EXT4_TIME_MIN * 10**9))]

    def test_utimens_nanoseconds(self):
        img = self.make_image()
        with self.mounted(img) as m:
            os.mkdir(m.p('dir'))
            for i, (a, mt) in enumerate(self.TIMES):
                f = m.p('f%d' % i)
                write_file(f, b'x')
                t0 = time.time_ns()
                os.utime(f, ns=(a, mt))
                st = os.stat(f)
                self.assertEqual((st.st_atime_ns, st.st_mtime_ns), (a, mt))
                self.assertGreaterEqual(st.st_ctime_ns, t0 - SLACK_NS)
                os.symlink('f%d' % i, m.p('l%d' % i))
                os.utime(m.p('l%d' % i), ns=(mt, a), follow_symlinks=False)
                st = os.lstat(m.p('l%d' % i))
                self.assertEqual((st.st_atime_ns, st.st_mtime_ns), (mt, a))
            os.utime(m.p('dir'), ns=self.TIMES[0])
            for i, (set_to, want) in enumerate(self.CLAMPED):
                f = m.p('c%d' % i)
                write_file(f, b'c')
                os.utime(f, ns=set_to)
                st = os.stat(f)
                self.assertEqual((st.st_atime_ns, st.st_mtime_ns), want)
        with self.mounted(img) as m:
            for i, (set_to, want) in enumerate(self.CLAMPED):
                st = os.stat(m.p('c%d' % i))
                self.assertEqual((st.st_atime_ns, st.st_mtime_ns), want)
            for i, (a, mt) in enumerate(self.TIMES):
                st = os.stat(m.p('f%d' % i))
                self.assertEqual((st.st_atime_ns, st.st_mtime_ns), (a, mt),
                                 'file %d' % i)
                st = os.lstat(m.p('l%d' % i))
                self.assertEqual((st.st_atime_ns, st.st_mtime_ns), (mt, a),
                                 'symlink %d' % i)
            st = os.stat(m.p('dir'))
            self.assertEqual((st.st_atime_ns, st.st_mtime_ns), self.TIMES[0])

    def test_utime_now_omit_and_implicit_updates(self):
        img = self.make_image()
        with self.mounted(img) as m:
            f = m.p('f')
            write_file(f, b'x')
            os.utime(f, ns=(1_000_000_001, 2_000_000_002))
            nx.utimensat(f, nx.UTIME_OMIT, (3, 3))
            st = os.stat(f)
            self.assertEqual((st.st_atime_ns, st.st_mtime_ns),
                             (1_000_000_001, 3_000_000_003))
            t0 = time.time_ns()
            nx.utimensat(f, nx.UTIME_NOW, nx.UTIME_OMIT)
            st = os.stat(f)
            self.assertGreaterEqual(st.st_atime_ns, t0 - SLACK_NS)
            self.assertEqual(st.st_mtime_ns, 3_000_000_003)
            # writing moves mtime and ctime to now
            os.utime(f, ns=(10**9, 10**9))
            t0 = time.time_ns()
            with open(f, 'ab') as fh:
                fh.write(b'more')
            st = os.stat(f)
            self.assertGreaterEqual(st.st_mtime_ns, t0 - SLACK_NS)
            self.assertGreaterEqual(st.st_ctime_ns, t0 - SLACK_NS)
            # truncate too
            os.utime(f, ns=(10**9, 10**9))
            t0 = time.time_ns()
            os.truncate(f, 1)
            self.assertGreaterEqual(os.stat(f).st_mtime_ns, t0 - SLACK_NS)
            # a directory's mtime follows its entries
            os.mkdir(m.p('d'))
            for op in (lambda: write_file(m.p('d', 'n'), b''),
                       lambda: os.rename(m.p('d', 'n'), m.p('d', 'n2')),
                       lambda: os.unlink(m.p('d', 'n2'))):
                os.utime(m.p('d'), ns=(10**9, 10**9))
                t0 = time.time_ns()
                op()
                st = os.stat(m.p('d'))
                self.assertGreaterEqual(st.st_mtime_ns, t0 - SLACK_NS)
                self.assertGreaterEqual(st.st_ctime_ns, t0 - SLACK_NS)

    # ------------------------------------------------------ statfs

    def _reserved_blocks(self, img):
        out = nx.run(['dumpe2fs', '-h', img], stderr=subprocess.DEVNULL).stdout
        return int(re.search(r'Reserved block count:\s+(\d+)', out).group(1))

    def test_statfs(self):
        img = self.make_image('64M')
        bs = self.bsize
        total = 64 * MiB // bs
        reserved = self._reserved_blocks(img)
        with self.mounted(img) as m:
            s0 = os.statvfs(m.path)
            self.assertEqual((s0.f_bsize, s0.f_frsize), (bs, bs))
            self.assertEqual(s0.f_namemax, 255)
            self.assertEqual(s0.f_files, 16384)
            self.assertLessEqual(s0.f_blocks, total)
            self.assertGreater(s0.f_blocks, total // 2)
            self.assertLess(s0.f_bfree, s0.f_blocks)
            self.assertGreater(s0.f_bfree, s0.f_blocks // 2)
            self.assertGreaterEqual(s0.f_bfree - s0.f_bavail, reserved)
            self.assertLess(s0.f_ffree, s0.f_files)
            self.assertEqual(s0.f_ffree, s0.f_favail)
            df0 = int(nx.run(['df', '-B1', '--output=used', m.path])
                      .stdout.split()[-1])

            write_file(m.p('four'), pattern(4 * MiB))
            fd = os.open(m.p('four'), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            s1 = os.statvfs(m.path)
            used = s0.f_bfree - s1.f_bfree
            self.assertGreaterEqual(used, 4 * MiB // bs)
            self.assertLess(used, 4 * MiB // bs + 64)
            self.assertEqual(s0.f_bfree - s0.f_bavail,
                             s1.f_bfree - s1.f_bavail)
            self.assertEqual(s1.f_ffree, s0.f_ffree - 1)
            df1 = int(nx.run(['df', '-B1', '--output=used', m.path])
                      .stdout.split()[-1])
            self.assertGreaterEqual(df1 - df0, 4 * MiB)

            os.unlink(m.p('four'))
            deadline = time.monotonic() + 10
            while True:
                os.sync()
                s2 = os.statvfs(m.path)
                if s2.f_bfree >= s0.f_bfree - 2 and \
                        s2.f_ffree == s0.f_ffree:
                    break
                if time.monotonic() > deadline:
                    self.fail('space not returned after unlink: bfree %d '
                              '(was %d), ffree %d (was %d)' %
                              (s2.f_bfree, s0.f_bfree, s2.f_ffree,
                               s0.f_ffree))
                time.sleep(0.1)

    # ------------------------------------------------------ xattrs

    def test_xattr_namespaces_and_flags(self):
        self.need_root()
        img = self.make_image()
        with self.mounted(img) as m:
            f = m.p('f')
            write_file(f, b'data')
            os.mkdir(m.p('d'))
            os.symlink('f', m.p('sym'))
            self.assertEqual(os.listxattr(f), [])
            for ns in ('user', 'trusted', 'security'):
                name = ns + '.test'
                os.setxattr(f, name, b'v1')
                self.assertEqual(os.getxattr(f, name), b'v1')
                self.assertErrno(errno.EEXIST, os.setxattr, f, name, b'x',
                                 os.XATTR_CREATE)
                os.setxattr(f, name, b'value2', os.XATTR_REPLACE)
                self.assertEqual(os.getxattr(f, name), b'value2')
                self.assertErrno(errno.ENODATA, os.setxattr, f,
                                 name + '.missing', b'x', os.XATTR_REPLACE)
                os.setxattr(f, name + '.new', b'n', os.XATTR_CREATE)
                os.removexattr(f, name + '.new')
                self.assertErrno(errno.ENODATA, os.getxattr, f,
                                 name + '.new')
                self.assertErrno(errno.ENODATA, os.removexattr, f,
                                 name + '.new')
            os.setxattr(f, 'user.empty', b'')
            os.setxattr(f, 'user.binary', b'\0\1\2\0\xff')
            longname = 'user.' + 'n' * 250                # 255 bytes
            os.setxattr(f, longname, b'L')
            self.assertErrno(errno.ERANGE, os.setxattr, f, longname + 'x',
                             b'L')
            os.setxattr(m.p('d'), 'user.dir', b'D')
            os.setxattr(m.p('sym'), 'trusted.link', b'S',
                        follow_symlinks=False)
            self.assertErrno(errno.EPERM, os.setxattr, m.p('sym'),
                             'user.link', b'S', follow_symlinks=False)
            self.assertEqual(read_file(f), b'data')
            want = {'user.test': b'value2', 'trusted.test': b'value2',
                    'security.test': b'value2', 'user.empty': b'',
                    'user.binary': b'\0\1\2\0\xff', longname: b'L'}
            self.assertEqual(set(os.listxattr(f)), set(want))
        with self.mounted(img) as m:
            f = m.p('f')
            self.assertEqual(set(os.listxattr(f)), set(want))
            for k, v in want.items():
                self.assertEqual(os.getxattr(f, k), v, k)
            self.assertEqual(os.getxattr(m.p('d'), 'user.dir'), b'D')
            self.assertEqual(os.getxattr(m.p('sym'), 'trusted.link',
                                         follow_symlinks=False), b'S')
            self.assertErrno(errno.ENODATA, os.getxattr, m.p('sym'),
                             'trusted.link')      # follows to f
            self.assertEqual(read_file(f), b'data')

    def test_xattr_large_and_many(self):
        img = self.make_image()
        bs = self.bsize
        many = 10 if bs == 1024 else 40
        with self.mounted(img) as m:
            f = m.p('f')
            write_file(f, b'')
            big = pattern(bs // 2, 1)
            os.setxattr(f, 'user.big', big)                 # needs a block
            self.assertEqual(os.getxattr(f, 'user.big'), big)
            os.setxattr(f, 'user.big', b'small')            # back in inode
            self.assertEqual(os.getxattr(f, 'user.big'), b'small')
            os.setxattr(f, 'user.big', big)
            self.assertEqual(os.getxattr(f, 'user.big'), big)
            os.removexattr(f, 'user.big')

            g = m.p('g')
            write_file(g, b'g')
            want = {}
            for i in range(many):
                want['user.a%02d' % i] = pattern(20, i)
                os.setxattr(g, 'user.a%02d' % i, want['user.a%02d' % i])
            self.assertEqual(set(os.listxattr(g)), set(want))
            for i in range(0, many, 2):
                os.removexattr(g, 'user.a%02d' % i)
                del want['user.a%02d' % i]
            self.assertEqual(set(os.listxattr(g)), set(want))

            # a value that cannot fit in one block
            self.assertErrno(errno.ENOSPC, os.setxattr, f, 'user.huge',
                             pattern(bs + 100, 2))
            self.assertEqual(os.listxattr(f), [])
            # fill the inode and its block until ENOSPC
            h = m.p('h')
            write_file(h, b'h')
            stored = {}
            for i in range(1000):
                name, value = 'user.fill%03d' % i, pattern(100, 1000 + i)
                try:
                    os.setxattr(h, name, value)
                except OSError as e:
                    self.assertEqual(e.errno, errno.ENOSPC, name)
                    break
                stored[name] = value
            else:
                self.fail('1000 xattrs of 100 bytes fit in one inode')
            self.assertGreaterEqual(len(stored), (bs - 100) // 130)
            for k, v in stored.items():
                self.assertEqual(os.getxattr(h, k), v)
        with self.mounted(img) as m:
            for k, v in want.items():
                self.assertEqual(os.getxattr(m.p('g'), k), v, k)
            self.assertEqual(set(os.listxattr(m.p('h'))), set(stored))
            for k, v in stored.items():
                self.assertEqual(os.getxattr(m.p('h'), k), v)

    def test_xattr_identical_sets_stay_independent(self):
        """ext4 shares identical xattr blocks between inodes; a change to
        one inode's attributes must never show up in another's."""
        img = self.make_image()
        value = pattern(self.bsize // 2, 3)
        with self.mounted(img) as m:
            for n in ('a', 'b', 'c', 'd'):
                write_file(m.p(n), n.encode())
                os.setxattr(m.p(n), 'user.same', value)
                os.setxattr(m.p(n), 'user.tag', b'common')
            os.setxattr(m.p('b'), 'user.tag', b'changed')
            os.removexattr(m.p('c'), 'user.same')
            os.unlink(m.p('d'))
            self.assertEqual(os.getxattr(m.p('a'), 'user.tag'), b'common')
            self.assertEqual(os.getxattr(m.p('a'), 'user.same'), value)
        with self.mounted(img) as m:
            self.assertEqual(os.getxattr(m.p('a'), 'user.tag'), b'common')
            self.assertEqual(os.getxattr(m.p('a'), 'user.same'), value)
            self.assertEqual(os.getxattr(m.p('b'), 'user.tag'), b'changed')
            self.assertEqual(os.getxattr(m.p('b'), 'user.same'), value)
            self.assertEqual(os.listxattr(m.p('c')), ['user.tag'])
            os.unlink(m.p('a'))
            self.assertEqual(os.getxattr(m.p('b'), 'user.same'), value)

    # ------------------------------------------------------ POSIX ACLs

    def test_posix_acl_storage_and_inheritance(self):
        self.need_root()
        if not shutil.which('setfacl') or not shutil.which('getfacl'):
            self.skipTest('setfacl/getfacl not installed (apt package acl)')
        img = self.make_image()
        with self.mounted(img) as m:
            f = m.p('f')
            write_file(f, b'acl', 0o640)
            os.chmod(f, 0o640)
            nx.run(['setfacl', '-m', 'u:1000:rw,g:2000:r', f])
            acl = getfacl(f)
            for e in ('user::rw-', 'user:1000:rw-', 'group::r--',
                      'group:2000:r--', 'mask::rw-', 'other::---'):
                self.assertIn(e, acl)
            self.assertEqual(stat.S_IMODE(os.stat(f).st_mode), 0o660)
            self.assertIn('system.posix_acl_access', os.listxattr(f))
            # chmod rewrites the mask entry, not the named entries
            os.chmod(f, 0o600)
            acl = getfacl(f)
            self.assertIn('mask::---', acl)
            self.assertIn('user:1000:rw-', acl)

            d = m.p('d')
            os.mkdir(d)
            nx.run(['setfacl', '-d', '-m', 'u:1000:rwx', d])
            dacl = getfacl(d, default=True)
            self.assertIn('user:1000:rwx', dacl)
            # umask 022 is ignored in favour of the default ACL
            fd = os.open(os.path.join(d, 'new'), os.O_CREAT | os.O_WRONLY,
                         0o666)
            os.close(fd)
            new = getfacl(os.path.join(d, 'new'))
            for e in ('user::rw-', 'user:1000:rwx', 'group::r-x',
                      'mask::rw-', 'other::r--'):
                self.assertIn(e, new)
            self.assertEqual(
                stat.S_IMODE(os.stat(os.path.join(d, 'new')).st_mode), 0o664)
            os.mkdir(os.path.join(d, 'sub'))
            self.assertEqual(getfacl(os.path.join(d, 'sub'), default=True),
                             dacl)
            write_file(m.p('plain'), b'')
            nx.run(['setfacl', '-m', 'u:5:r', m.p('plain')])
            nx.run(['setfacl', '-b', m.p('plain')])
            self.assertNotIn('system.posix_acl_access',
                             os.listxattr(m.p('plain')))
            saved = (getfacl(f), getfacl(d, True),
                     getfacl(os.path.join(d, 'new')))
        with self.mounted(img) as m:
            self.assertEqual((getfacl(m.p('f')), getfacl(m.p('d'), True),
                              getfacl(m.p('d', 'new'))), saved)

    # ------------------------------------------------------ inode flags

    def test_chattr_immutable_append(self):
        self.need_root()
        if not shutil.which('chattr') or not shutil.which('lsattr'):
            self.skipTest('chattr/lsattr not installed (e2fsprogs)')
        img = self.make_image()
        with self.mounted(img) as m:
            f, a, d = m.p('imm'), m.p('app'), m.p('immdir')
            write_file(f, b'frozen')
            write_file(a, b'log:')
            os.mkdir(d)
            write_file(os.path.join(d, 'inside'), b'')
            nx.run(['chattr', '+i', f])
            nx.run(['chattr', '+a', a])
            nx.run(['chattr', '+i', d])
            self.assertIn('i', lsattr(f))
            self.assertIn('a', lsattr(a))
            self.assertTrue(nx.get_inode_flags(f) & nx.FS_IMMUTABLE_FL)

            self.assertEqual(read_file(f), b'frozen')
            for fn, args in ((os.open, (f, os.O_WRONLY)),
                             (os.open, (f, os.O_RDWR | os.O_APPEND)),
                             (os.truncate, (f, 0)),
                             (os.unlink, (f,)),
                             (os.rename, (f, m.p('moved'))),
                             (os.link, (f, m.p('hard'))),
                             (os.chmod, (f, 0o600)),
                             (os.chown, (f, 5, 5)),
                             (os.utime, (f, (1, 1))),
                             (os.setxattr, (f, 'user.x', b'1')),
                             (os.open, (os.path.join(d, 'new'),
                                        os.O_CREAT | os.O_WRONLY)),
                             (os.unlink, (os.path.join(d, 'inside'),)),
                             (os.mkdir, (os.path.join(d, 'sub'),))):
                self.assertErrno(errno.EPERM, fn, *args)

            self.assertErrno(errno.EPERM, os.open, a, os.O_WRONLY)
            self.assertErrno(errno.EPERM, os.truncate, a, 0)
            self.assertErrno(errno.EPERM, os.unlink, a)
            fd = os.open(a, os.O_WRONLY | os.O_APPEND)
            os.write(fd, b'entry')
            os.close(fd)
            self.assertEqual(read_file(a), b'log:entry')

            # plain flags round-trip; new files get extents where ext4
            # would use them
            write_file(m.p('big'), pattern(100000))
            nx.run(['chattr', '+dA', m.p('big')])
            self.assertTrue({'d', 'A'} <= set(lsattr(m.p('big'))))
            has_e = bool(nx.get_inode_flags(m.p('big')) & nx.FS_EXTENT_FL)
            self.assertEqual(has_e, self.extents)
        with self.mounted(img) as m:
            self.assertIn('i', lsattr(m.p('imm')))
            self.assertIn('a', lsattr(m.p('app')))
            self.assertErrno(errno.EPERM, os.unlink, m.p('imm'))
            nx.run(['chattr', '-i', m.p('imm')])
            nx.run(['chattr', '-a', m.p('app')])
            nx.run(['chattr', '-i', m.p('immdir')])
            os.unlink(m.p('imm'))
            os.truncate(m.p('app'), 0)
            os.unlink(m.p('immdir', 'inside'))
            self.assertTrue({'d', 'A'} <= set(lsattr(m.p('big'))))


if __name__ == '__main__':
    nx.main()
