#!/usr/bin/env python3
"""Permission semantics through a nextfs mount, as kernel ext4 has them.

The test process is root; it acts as other users from forked children
(setgroups/setresgid/setresuid, see nxharness.run_as).  The mount has
allow_other so that they can reach it.

Run: test_perms.py --flavour ext2|ext3|ext4|ext4-inline [unittest args]
"""

import errno
import os
import shutil
import stat

import nxharness as nx
from nxharness import read_file, write_file

A, B = 1000, 1001           # two ordinary users (uid = primary gid)
G = 2000                    # a group A belongs to, B does not


def as_a(fn, *args):
    return nx.run_as(A, A, fn, *args, groups=(A, G))


def as_b(fn, *args):
    return nx.run_as(B, B, fn, *args, groups=(B,))


def create(path, mode=0o644):
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))


def append(path, data=b'+'):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def mode_of(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


class PermsTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        self.need_root()

    def assertErrnoAs(self, who, err, fn, *args):
        self.assertErrno(err, who, fn, *args)

    # ------------------------------------------------------ mode bits

    def test_file_mode_bits(self):
        with self.mount_new() as m:
            for name, mode in (('p600', 0o600), ('p644', 0o644),
                               ('p666', 0o666), ('p000', 0o000),
                               ('p044', 0o044)):
                write_file(m.p(name), b'data')
                os.chmod(m.p(name), mode)
            self.assertErrnoAs(as_a, errno.EACCES, read_file, m.p('p600'))
            self.assertEqual(as_a(read_file, m.p('p644')), b'data')
            self.assertErrnoAs(as_a, errno.EACCES, append, m.p('p644'))
            as_a(append, m.p('p666'))
            self.assertEqual(read_file(m.p('p666')), b'data+')
            # root bypasses mode bits (CAP_DAC_OVERRIDE)
            self.assertEqual(read_file(m.p('p000')), b'data')
            append(m.p('p000'))
            # owner class applies even when "other" would allow more
            os.chown(m.p('p044'), A, A)
            self.assertErrnoAs(as_a, errno.EACCES, read_file, m.p('p044'))
            self.assertEqual(as_b(read_file, m.p('p044')), b'data')
            # execute needs an x bit even for root
            write_file(m.p('script'), b'#!/bin/sh\nexit 0\n')
            os.chmod(m.p('script'), 0o644)
            self.assertFalse(os.access(m.p('script'), os.X_OK))
            self.assertFalse(as_a(os.access, m.p('script'), os.R_OK |
                                  os.W_OK))

    def test_group_and_supplementary_groups(self):
        with self.mount_new() as m:
            write_file(m.p('g'), b'group')
            os.chown(m.p('g'), 0, G)
            os.chmod(m.p('g'), 0o640)
            self.assertEqual(as_a(read_file, m.p('g')), b'group')
            self.assertErrnoAs(as_b, errno.EACCES, read_file, m.p('g'))
            self.assertErrnoAs(as_a, errno.EACCES, append, m.p('g'))
            # primary group counts too
            os.chown(m.p('g'), 0, B)
            self.assertEqual(as_b(read_file, m.p('g')), b'group')

    def test_directory_bits(self):
        with self.mount_new() as m:
            d = m.p('d')
            os.mkdir(d)
            write_file(os.path.join(d, 'f'), b'f')
            os.chmod(os.path.join(d, 'f'), 0o666)
            os.chmod(d, 0o755)
            # no write permission on the directory: no create/unlink/rename
            self.assertErrnoAs(as_a, errno.EACCES, create,
                               os.path.join(d, 'new'))
            self.assertErrnoAs(as_a, errno.EACCES, os.unlink,
                               os.path.join(d, 'f'))
            self.assertErrnoAs(as_a, errno.EACCES, os.rename,
                               os.path.join(d, 'f'), os.path.join(d, 'g'))
            self.assertErrnoAs(as_a, errno.EACCES, os.mkdir,
                               os.path.join(d, 'sub'))
            self.assertEqual(as_a(os.listdir, d), ['f'])
            # search (x) without read (r): lookups work, listing does not
            os.chmod(d, 0o711)
            self.assertErrnoAs(as_a, errno.EACCES, os.listdir, d)
            self.assertEqual(as_a(read_file, os.path.join(d, 'f')), b'f')
            # read without search: listing works, lookups do not
            os.chmod(d, 0o744)
            self.assertEqual(as_a(os.listdir, d), ['f'])
            self.assertErrnoAs(as_a, errno.EACCES, os.stat,
                               os.path.join(d, 'f'))
            # writable directory: another user's file can be removed
            os.chmod(d, 0o777)
            os.chmod(os.path.join(d, 'f'), 0o600)
            as_a(create, os.path.join(d, 'bymine'))
            as_a(os.unlink, os.path.join(d, 'f'))
            self.assertEqual(os.listdir(d), ['bymine'])

    def test_sticky_directory(self):
        with self.mount_new() as m:
            t = m.p('tmp')
            os.mkdir(t)
            os.chmod(t, 0o1777)
            a_file = os.path.join(t, 'a_file')
            as_a(write_file, a_file, b'A')
            as_a(os.chmod, a_file, 0o666)
            st = os.stat(a_file)
            self.assertEqual((st.st_uid, st.st_gid), (A, A))
            # B may write A's file (mode 666) but not remove or rename it
            as_b(append, a_file)
            self.assertErrnoAs(as_b, errno.EPERM, os.unlink, a_file)
            self.assertErrnoAs(as_b, errno.EPERM, os.rename, a_file,
                               os.path.join(t, 'stolen'))
            as_b(write_file, os.path.join(t, 'b_file'), b'B', 0o644)
            self.assertErrnoAs(as_b, errno.EPERM, os.rename,
                               os.path.join(t, 'b_file'), a_file)
            # the file's owner and the directory's owner may
            as_a(os.rename, a_file, os.path.join(t, 'a_renamed'))
            os.unlink(os.path.join(t, 'b_file'))        # root owns tmp
            as_a(os.unlink, os.path.join(t, 'a_renamed'))
            self.assertEqual(os.listdir(t), [])

    # ------------------------------------------------------ attributes

    def test_chmod_chown_utime_by_non_owner(self):
        with self.mount_new() as m:
            f = m.p('f')
            write_file(f, b'f')
            os.chmod(f, 0o666)                  # writable by everybody
            self.assertErrnoAs(as_a, errno.EPERM, os.chmod, f, 0o777)
            self.assertErrnoAs(as_a, errno.EPERM, os.chown, f, A, A)
            self.assertErrnoAs(as_a, errno.EPERM, os.chown, f, -1, A)
            # explicit times need ownership; "now" needs write permission
            self.assertErrnoAs(as_a, errno.EPERM, os.utime, f, (1, 1))
            as_a(os.utime, f, None)
            os.chmod(f, 0o644)
            self.assertErrnoAs(as_a, errno.EACCES, os.utime, f, None)
            self.assertEqual(mode_of(f), 0o644)
            self.assertEqual(os.stat(f).st_uid, 0)

    def test_owner_chown_chgrp(self):
        with self.mount_new() as m:
            f = m.p('f')
            write_file(f, b'f')
            os.chown(f, A, A)
            as_a(os.chmod, f, 0o600)
            self.assertEqual(mode_of(f), 0o600)
            as_a(os.utime, f, (5, 6))
            self.assertEqual(os.stat(f).st_mtime, 6)
            # to a group the owner belongs to: yes; any other: no
            as_a(os.chown, f, -1, G)
            self.assertEqual(os.stat(f).st_gid, G)
            self.assertErrnoAs(as_a, errno.EPERM, os.chown, f, -1, B)
            self.assertErrnoAs(as_a, errno.EPERM, os.chown, f, B, -1)
            # setting setgid on a file of a group one is not in drops it
            os.chown(f, A, B)
            as_a(os.chmod, f, 0o2755)
            self.assertEqual(mode_of(f), 0o755)

    def test_setuid_cleared_on_write_truncate_chown(self):
        with self.mount_new() as m:
            def make(name, mode, uid=0, gid=0):
                write_file(m.p(name), b'exe')
                os.chown(m.p(name), uid, gid)
                os.chmod(m.p(name), mode)
                return m.p(name)
            # write by a non-owner clears setuid and (with g+x) setgid
            f = make('other_write', 0o6777)
            as_a(append, f)
            self.assertEqual(mode_of(f), 0o777)
            # also when the writer owns the file
            f = make('owner_write', 0o4755, A, A)
            as_a(append, f)
            self.assertEqual(mode_of(f), 0o755)
            # root keeps them (CAP_FSETID)
            f = make('root_write', 0o6755)
            append(f)
            self.assertEqual(mode_of(f), 0o6755)
            # truncate by a non-owner
            f = make('other_trunc', 0o4777)
            as_a(os.truncate, f, 1)
            self.assertEqual(mode_of(f), 0o777)
            # chown, even by root, clears setuid; setgid only with g+x
            f = make('chown_ux', 0o6755)
            os.chown(f, A, -1)
            self.assertEqual(mode_of(f), 0o755)
            f = make('chown_nogx', 0o2745)
            os.chown(f, A, -1)
            self.assertEqual(mode_of(f), 0o2745)
            # directories keep setgid on chown
            os.mkdir(m.p('dir'))
            os.chmod(m.p('dir'), 0o2775)
            os.chown(m.p('dir'), A, A)
            self.assertEqual(mode_of(m.p('dir')), 0o2775)

    def test_setgid_directory_inheritance(self):
        with self.mount_new() as m:
            d = m.p('shared')
            os.mkdir(d)
            os.chown(d, 0, G)
            os.chmod(d, 0o2777)
            as_a(write_file, os.path.join(d, 'file'), b'x')
            as_a(os.mkdir, os.path.join(d, 'sub'))
            st = os.stat(os.path.join(d, 'file'))
            self.assertEqual((st.st_uid, st.st_gid), (A, G))
            st = os.stat(os.path.join(d, 'sub'))
            self.assertEqual((st.st_uid, st.st_gid), (A, G))
            self.assertTrue(st.st_mode & stat.S_ISGID)
            # without setgid the creator's group is used
            os.mkdir(m.p('plain'))
            os.chmod(m.p('plain'), 0o777)
            as_b(write_file, m.p('plain', 'file'), b'x')
            st = os.stat(m.p('plain', 'file'))
            self.assertEqual((st.st_uid, st.st_gid), (B, B))
            self.assertEqual(mode_of(m.p('plain', 'file')), 0o644)

    def test_creation_mode_and_umask(self):
        with self.mount_new() as m:
            os.chmod(m.path, 0o777)
            nx.run_as(A, A, write_file, m.p('u027'), b'', 0o666,
                      groups=(A,), umask=0o027)
            nx.run_as(A, A, os.mkdir, m.p('d077'), 0o777,
                      groups=(A,), umask=0o077)
            self.assertEqual(mode_of(m.p('u027')), 0o640)
            self.assertEqual(mode_of(m.p('d077')), 0o700)
            st = os.stat(m.p('d077'))
            self.assertEqual((st.st_uid, st.st_gid), (A, A))

    # ------------------------------------------------------ xattrs/ACLs

    def test_xattr_permissions(self):
        with self.mount_new() as m:
            f = m.p('f')
            write_file(f, b'f')
            os.setxattr(f, 'user.mine', b'1')
            os.setxattr(f, 'trusted.secret', b'2')
            os.chmod(f, 0o644)
            self.assertEqual(as_a(os.getxattr, f, 'user.mine'), b'1')
            self.assertErrnoAs(as_a, errno.EACCES, os.setxattr, f,
                               'user.other', b'x')
            self.assertErrnoAs(as_a, errno.EACCES, os.removexattr, f,
                               'user.mine')
            os.chmod(f, 0o666)
            as_a(os.setxattr, f, 'user.other', b'x')
            # trusted.* is for CAP_SYS_ADMIN only, and invisible to others
            self.assertErrnoAs(as_a, errno.EPERM, os.setxattr, f,
                               'trusted.x', b'x')
            self.assertNotIn('trusted.secret', as_a(os.listxattr, f))
            self.assertIn('trusted.secret', os.listxattr(f))

    def test_acl_enforced(self):
        if not shutil.which('setfacl'):
            self.skipTest('setfacl not installed (apt package acl)')
        with self.mount_new() as m:
            f = m.p('f')
            write_file(f, b'acl')
            os.chmod(f, 0o600)
            self.assertErrnoAs(as_a, errno.EACCES, read_file, f)
            nx.run(['setfacl', '-m', 'u:%d:rw' % A, f])
            self.assertEqual(as_a(read_file, f), b'acl')
            as_a(append, f)
            self.assertErrnoAs(as_b, errno.EACCES, read_file, f)
            # the mask limits named entries
            nx.run(['setfacl', '-m', 'm::r', f])
            self.assertErrnoAs(as_a, errno.EACCES, append, f)
            self.assertEqual(as_a(read_file, f), b'acl+')
            # named group entry
            nx.run(['setfacl', '-m', 'g:%d:r,m::rw' % G, f])
            self.assertEqual(nx.run_as(B, B, read_file, f, groups=(B, G)),
                             b'acl+')
            # a default ACL grants access to files created later
            d = m.p('d')
            os.mkdir(d)
            os.chmod(d, 0o700)
            nx.run(['setfacl', '-m', 'u:%d:rwx' % A, '-d', '-m',
                    'u:%d:rwx' % A, d])
            write_file(os.path.join(d, 'later'), b'later', 0o660)
            self.assertEqual(as_a(read_file, os.path.join(d, 'later')),
                             b'later')
            self.assertErrnoAs(as_b, errno.EACCES, os.listdir, d)

    def test_chattr_needs_privilege(self):
        if not shutil.which('chattr'):
            self.skipTest('chattr not installed (e2fsprogs)')
        with self.mount_new() as m:
            f = m.p('f')
            write_file(f, b'f')
            os.chown(f, A, A)
            self.assertErrnoAs(as_a, errno.EPERM, nx.set_inode_flags, f,
                               nx.get_inode_flags(f) | nx.FS_IMMUTABLE_FL)
            self.assertErrnoAs(as_b, errno.EPERM, nx.set_inode_flags, f,
                               nx.get_inode_flags(f) | 0x40)   # noatime
            as_a(nx.set_inode_flags, f, nx.get_inode_flags(f) | 0x40)
            self.assertTrue(nx.get_inode_flags(f) & 0x40)
            self.assertFalse(nx.get_inode_flags(f) & nx.FS_IMMUTABLE_FL)


if __name__ == '__main__':
    nx.main()
