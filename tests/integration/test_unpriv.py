#!/usr/bin/env python3
"""Unprivileged use: the user "nobody" mounts an image it owns (through
the setuid fusermount3), works in it, and unmounts it again.

Needs /dev/fuse to be usable by nobody (mode 0666, as on a standard
Debian system; .ci/run arranges it) - skipped otherwise.

Run: test_unpriv.py --flavour ext2|ext3|ext4|ext4-inline [unittest args]
"""

import errno
import os
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
        udir = os.path.join(self.work, 'nobody')
        os.mkdir(udir, 0o755)
        os.chown(udir, UID, GID)
        img = self.make_image(name='nobody/fs.img',
                              extra=['-E', 'root_owner=%d:%d' % (UID, GID)])
        os.chown(img, UID, GID)
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


if __name__ == '__main__':
    nx.main()
