#!/usr/bin/env python3
"""Unprivileged use: the user "nobody" mounts an image it owns (through
the setuid fusermount3), works in it, and unmounts it again.  An image
made by root (its root directory root's): the mount warns that nobody
cannot create files there, and with -o fakeroot nobody works in it as
its root.

Needs /dev/fuse to be usable by nobody (mode 0666, as on a standard
Debian system; .ci/run arranges it) - skipped otherwise.

Run: test_unpriv.py --flavour ext2|ext3|ext4|ext4-inline [unittest args]
"""

import errno
import os
import re
import stat

import nxharness as nx
from nxharness import NOBODY_UID as UID, NOGROUP_GID as GID
from nxharness import pattern, read_file, write_file


def as_nobody(fn, *args):
    return nx.run_as(UID, GID, fn, *args, groups=())


def open_dev_fuse():
    os.close(os.open('/dev/fuse', os.O_RDWR))


def work_in_mount(root):
    """Runs as nobody inside the mount; returns what it saw."""
    seen = {}
    os.mkdir(os.path.join(root, 'dir'))
    write_file(os.path.join(root, 'dir', 'file'), pattern(100000, 1))
    os.rename(os.path.join(root, 'dir', 'file'),
              os.path.join(root, 'dir', 'renamed'))
    os.symlink('dir/renamed', os.path.join(root, 'sym'))
    os.link(os.path.join(root, 'dir', 'renamed'), os.path.join(root, 'hard'))
    os.setxattr(os.path.join(root, 'hard'), 'user.who', b'nobody')
    os.chmod(os.path.join(root, 'hard'), 0o4750)
    write_file(os.path.join(root, 'small'), b'tiny')
    os.unlink(os.path.join(root, 'small'))
    st = os.stat(os.path.join(root, 'hard'))
    seen['owner'] = (st.st_uid, st.st_gid)
    seen['mode'] = stat.S_IMODE(st.st_mode)
    seen['nlink'] = st.st_nlink
    seen['data_ok'] = read_file(os.path.join(root, 'sym')) == \
        pattern(100000, 1)
    seen['xattr'] = os.getxattr(os.path.join(root, 'hard'), 'user.who')
    errors = {}
    for what, fn, args in (
            ('chown', os.chown, (os.path.join(root, 'hard'), 0, 0)),
            ('mknod', os.mknod, (os.path.join(root, 'null'),
                                 stat.S_IFCHR | 0o666, os.makedev(1, 3))),
            ('trusted', os.setxattr, (os.path.join(root, 'hard'),
                                      'trusted.x', b'1'))):
        try:
            fn(*args)
            errors[what] = 0
        except OSError as e:
            errors[what] = e.errno
    seen['errors'] = errors
    return seen


def read_back(root):
    return (sorted(os.listdir(root)),
            read_file(os.path.join(root, 'dir', 'renamed')) ==
            pattern(100000, 1),
            os.getxattr(os.path.join(root, 'hard'), 'user.who'))


class UnprivilegedTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        self.need_root()          # to become nobody and to set things up
        self.need_fuse_daemon()
        fm = os.stat(nx.FUSERMOUNT)
        if not fm.st_mode & stat.S_ISUID or fm.st_uid != 0:
            self.skipTest('%s is not setuid root' % nx.FUSERMOUNT)
        try:
            as_nobody(open_dev_fuse)
        except OSError as e:
            self.skipTest('/dev/fuse is not usable by nobody (%s); '
                          'chmod 0666 /dev/fuse to run this test' % e)

    def test_mount_work_unmount_as_nobody(self):
        img, udir = self.make_user_image(UID, GID)
        os.chmod(img, 0o600)
        with self.mounted(img, user=(UID, GID), workdir=udir) as m:
            with open('/proc/%d/status' % m.proc.pid) as f:
                uids = [line.split()[1:] for line in f
                        if line.startswith('Uid:')][0]
            self.assertEqual(set(uids), {str(UID)}, 'daemon is not nobody')
            seen = as_nobody(work_in_mount, m.path)
            self.assertEqual(seen['owner'], (UID, GID))
            self.assertEqual(seen['mode'], 0o4750)
            self.assertEqual(seen['nlink'], 2)
            self.assertTrue(seen['data_ok'])
            self.assertEqual(seen['xattr'], b'nobody')
            self.assertEqual(seen['errors'], {'chown': errno.EPERM,
                                              'mknod': errno.EPERM,
                                              'trusted': errno.EPERM})
        st = os.stat(img)
        self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode)), (UID, 0o600))
        with self.mounted(img, user=(UID, GID), workdir=udir) as m:
            names, data_ok, xattr = as_nobody(read_back, m.path)
            self.assertEqual(names, ['dir', 'hard', 'lost+found', 'sym'])
            self.assertTrue(data_ok)
            self.assertEqual(xattr, b'nobody')

    # -- an image whose root directory belongs to root (made by root)

    def root_made_image(self):
        """An image made by root (so "/" is root's) that nobody may use,
        with a file of nobody's and one of uid 1234 in it."""
        udir = os.path.join(self.work, 'nobody')
        os.mkdir(udir, 0o755)
        os.chown(udir, UID, GID)
        img = self.make_image(name='nobody/root.img')
        with self.mounted(img) as m:
            write_file(m.p('nobodys'), b'n')
            os.chown(m.p('nobodys'), UID, GID)
            write_file(m.p('others'), b'o')
            os.chown(m.p('others'), 1234, 1234)
        os.chown(img, UID, GID)
        return img, udir

    def recorded_owner(self, img, path):
        out = nx.debugfs(img, 'stat "%s"' % path)
        m = re.search(r'User:\s*(\d+)\s+Group:\s*(\d+)', out)
        return (int(m.group(1)), int(m.group(2)))

    def test_root_owned_image_says_why(self):
        img, udir = self.root_made_image()
        with self.mounted(img, user=(UID, GID), workdir=udir) as m:
            self.assertErrno(errno.EACCES, as_nobody, write_file,
                             m.p('new'), b'x')
            log = m.log_text()
        self.assertRegex(log, r'nextfs-fuse: warning: the root directory '
                         r'of .* belongs to uid 0 gid 0 .*-o fakeroot')

    def test_fakeroot_works_in_a_root_owned_image(self):
        img, udir = self.root_made_image()
        before = nx.sha256_file(img)
        with self.mounted(img, user=(UID, GID), workdir=udir,
                          opts=['fakeroot']) as m:
            self.assertNotIn('warning', m.log_text())
            seen = as_nobody(fakeroot_session, m.path)
        # what the user saw: root's files as theirs, theirs as root's
        self.assertEqual(seen['/'], (UID, GID))
        self.assertEqual(seen['lost+found'], (UID, GID))
        self.assertEqual(seen['nobodys'], (0, 0))
        self.assertEqual(seen['others'], (1234, 1234))
        self.assertEqual(seen['new'], (UID, GID))
        self.assertEqual(seen['chown to root'], errno.EPERM)
        self.assertEqual(seen['snapshot'], b'v1')
        self.assertNotEqual(nx.sha256_file(img), before)
        # what the volume records: the user's work as root's, the rest
        # unchanged
        self.assertEqual(self.recorded_owner(img, '/'), (0, 0))
        self.assertEqual(self.recorded_owner(img, '/dir/new'), (0, 0))
        self.assertEqual(self.recorded_owner(img, '/dir'), (0, 0))
        self.assertEqual(self.recorded_owner(img, '/nobodys'), (UID, GID))
        self.assertEqual(self.recorded_owner(img, '/others'), (1234, 1234))
        # and a second mount shows the same
        with self.mounted(img, user=(UID, GID), workdir=udir,
                          opts=['fakeroot']) as m:
            again = as_nobody(owners, m.path, ['dir/new', 'nobodys'])
        self.assertEqual(again, {'dir/new': (UID, GID),
                                 'nobodys': (0, 0)})


def owners(root, names):
    out = {}
    for n in names:
        st = os.lstat(os.path.join(root, n))
        out[n] = (st.st_uid, st.st_gid)
    return out


def fakeroot_session(root):
    """Runs as nobody in a "-o fakeroot" mount of a root-made image."""
    os.mkdir(os.path.join(root, 'dir'))
    write_file(os.path.join(root, 'dir', 'new'), b'v1')
    os.chmod(os.path.join(root, 'dir', 'new'), 0o640)
    os.chown(os.path.join(root, 'dir', 'new'), UID, GID)   # to "me"
    seen = owners(root, ['.', 'lost+found', 'nobodys', 'others', 'dir/new'])
    seen['/'] = seen.pop('.')
    seen['new'] = seen.pop('dir/new')
    try:
        os.chown(os.path.join(root, 'dir', 'new'), 0, 0)
        seen['chown to root'] = 0
    except OSError as e:
        seen['chown to root'] = e.errno
    # the user may take snapshots (.snapshots is owned like "/")
    os.mkdir(os.path.join(root, '.snapshots', 's1'))
    write_file(os.path.join(root, 'dir', 'new'), b'v2')
    seen['snapshot'] = read_file(os.path.join(root, '.snapshots', 's1',
                                              'dir', 'new'))
    os.rmdir(os.path.join(root, '.snapshots', 's1'))
    return seen


if __name__ == '__main__':
    nx.main()
