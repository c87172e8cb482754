#!/usr/bin/env python3
"""Root's commands on paths another user controls (issue 24, 1, 2, 7).

A root mount with allow_other where "nobody" owns a directory; root runs
the nextfs tool on paths through it.  Nothing the user does to the paths
may make root write (or read) outside the mount:
- versions --restore while the user swaps a directory of the path for a
  symbolic link to a root-only directory (RENAME_EXCHANGE from an
  inotify watch that fires when root opens its copy in the directory):
  no file appears in the root-only directory;
- a directory that was a symbolic link when a snapshot was taken is not
  followed out of the snapshot: restore refuses, the host file is not
  copied, versions does not show it;
- --to DEST through the user's symbolic link fails; snapshot take/delete
  on a user's directory with a planted .snapshots link fail; export to a
  planted dangling link creates nothing.
- nextfs-fuse mounts on the directory its MOUNTPOINT led to when it
  was resolved: through the user's link it refuses, and a swap of a
  directory of the path for a link to a root-only directory after that
  (when root opens the image) does not move the mount there;
- an image named through the user's link to root's image is refused by
  every offline command and by nextfs-fuse, and left byte-identical;
  root's own link names the same volume as the image's real path.
Root's versions has the daemon compare the files (by their block
maps, reading nothing through the mount); nobody may not ask it, reads
through the mount instead and lists the same versions.
And nextfs diff lists trees 2000 directories deep (paths far longer than
PATH_MAX) completely, with full names, on the mount and offline alike;
an error (a file it cannot read, an output it cannot write) is a
non-zero exit, never a silent guess.

Runs once (no flavour): ext4 images, as root.
"""

import ctypes
import errno
import fcntl
import os
import select
import signal
import struct
import subprocess
import time

import nxharness as nx
import nxsnap
from nxharness import NOBODY_UID as UID, NOGROUP_GID as GID
from nxharness import read_file, write_file

IN_OPEN = 0x20
IN_CLOEXEC = 0o2000000
DEPTH = 2000
# nxioctl.h: _IOWR('N', 0xF0, struct nx_ioc_delta_start)
NX_IOC_DELTA_START = (3 << 30) | (32 << 16) | (ord('N') << 8) | 0xF0
# _IOWR('N', 0xEC, struct nx_ioc_same_data)
NX_IOC_SAME_DATA = (3 << 30) | (32 << 16) | (ord('N') << 8) | 0xEC
# _IOWR('N', 0xEA, struct nx_ioc_send_start): 4760 bytes
SEND_START = struct.Struct('IIIIQ128s4096s512s')
NX_IOC_SEND_START = ((3 << 30) | (SEND_START.size << 16) | (ord('N') << 8) |
                     0xEA)


def tool(*args, user=None, stdout=subprocess.PIPE):
    """(status, stdout bytes, stderr text) of the nextfs tool."""
    argv = [nx.tool_path()] + list(args)
    if user:
        argv = nx.as_user_argv(*user) + argv
    p = subprocess.run(argv, stdout=stdout, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL)
    err = p.stderr.decode(errors='replace')
    rep = nx.sanitizer_report(err)
    if rep:
        raise AssertionError('sanitizer report:\n%s' % rep)
    return p.returncode, p.stdout, err


def ok(*args, **kw):
    rc, out, err = tool(*args, **kw)
    if rc != 0:
        raise AssertionError('nextfs %r: exit %d\n%s' % (args, rc, err))
    return out


def snap(m, name):
    os.mkdir(m.p('.snapshots', name))


class Swapper:
    """As nobody: when root opens WATCHED/NAME (NAME ending in '*': a name
    that starts so), exchange WATCHED (or SWAP) with the symbolic link
    LINK (RENAME_EXCHANGE), so that the path root resolved names the link
    from then on."""

    def __init__(self, watched, name, link, swap=None):
        r, w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            code = 1
            try:
                os.close(r)
                os.setgroups([])
                os.setresgid(GID, GID, GID)
                os.setresuid(UID, UID, UID)
                code = self.watch(w, watched, name, link,
                                  swap or watched)
            finally:
                os._exit(code)
        os.close(w)
        self.ready = os.read(r, 1) == b'r'
        self.pipe = r

    @staticmethod
    def watch(w, watched, name, link, swap):
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(IN_CLOEXEC)
        if fd < 0 or libc.inotify_add_watch(
                fd, os.fsencode(watched), IN_OPEN) < 0:
            return 1
        os.write(w, b'r')
        while True:
            buf = os.read(fd, 4096)
            off = 0
            while off < len(buf):
                _, mask, _, n = struct.unpack_from('iIII', buf, off)
                ev = buf[off + 16:off + 16 + n].rstrip(b'\0')
                off += 16 + n
                want = os.fsencode(name)
                if mask & IN_OPEN and (ev == want or want.endswith(b'*')
                                       and ev.startswith(want[:-1])):
                    nx.renameat2(swap, link, nx.RENAME_EXCHANGE)
                    os.write(w, b's')
                    return 0

    def swapped(self, timeout=10):
        """Whether the swap happened; the watcher is gone afterwards."""
        done = select.select([self.pipe], [], [], timeout)[0]
        res = os.read(self.pipe, 1) if done else b''
        if not res:
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.pipe)
        return res == b's'


class PathSafetyTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        self.need_root()
        self.need_fuse_daemon()
        # what root can reach and nobody cannot: the target of the links
        self.rootonly = os.path.join(self.work, 'rootonly')
        os.mkdir(self.rootonly, 0o700)
        write_file(os.path.join(self.rootonly, 'secret'), b'root only\n',
                   0o600)

    def assertUntouched(self):
        self.assertEqual(sorted(os.listdir(self.rootonly)), ['secret'],
                         'root wrote outside the mount')
        self.assertEqual(read_file(os.path.join(self.rootonly, 'secret')),
                         b'root only\n')

    def as_nobody(self, fn, *args):
        return nx.run_as(UID, GID, fn, *args)

    def snapmount(self, img):
        return self.mounted(img, check=False)

    def fsck(self, img):
        rc, out = nxsnap.fsck_masked(img)
        self.assertEqual(rc, 0, out)

    def mounts_here(self):
        top = os.path.realpath(self.work) + '/'
        return {p for p in nx.mounted_paths() if p.startswith(top)}

    def serve(self, img, mnt, faults=None, opts=()):
        """nextfs-fuse -f [-o OPTS] IMG MNT as root: the mount it made
        (below the work directory) and '', or None and its stderr when
        it exits without mounting.  Unmounted and reaped at cleanup."""
        before = self.mounts_here()
        env = dict(os.environ)
        if faults:
            env['NEXTFS_FAULTS'] = faults
        log = open(os.path.join(self.work, 'serve.log'), 'w+b')
        self.addCleanup(log.close)
        argv = [nx.daemon_path(), '-f'] + \
            (['-o', ','.join(opts)] if opts else []) + [img, mnt]
        proc = subprocess.Popen(argv,
                                stdin=subprocess.DEVNULL, stdout=log,
                                stderr=log, env=env, start_new_session=True)
        self.addCleanup(self.reap, proc)
        deadline = time.monotonic() + 20
        while True:
            new = self.mounts_here() - before
            if new:
                return new.pop(), ''
            if proc.poll() is not None:
                log.seek(0)
                err = log.read().decode(errors='replace')
                rep = nx.sanitizer_report(err)
                if rep:
                    raise AssertionError('sanitizer report:\n%s' % rep)
                return None, err
            if time.monotonic() > deadline:
                raise AssertionError('nextfs-fuse %s %s: no mount' %
                                     (img, mnt))
            time.sleep(0.02)

    def reap(self, proc):
        for path in self.mounts_here():
            if tool('umount', path)[0] != 0:
                subprocess.run(['umount', '-l', path])
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # ------------------------------------------------------ versions

    def test_restore_is_not_redirected(self):
        img = self.make_image()
        with self.snapmount(img) as m:
            os.mkdir(m.p('u'), 0o755)
            os.chown(m.p('u'), UID, GID)
            d, f = m.p('u', 'd'), m.p('u', 'd', 'f')

            def setup():
                os.mkdir(d)
                # big: comparing it takes root a while, time for the swap
                write_file(f, nx.pattern(16 << 20))
                os.utime(f, ns=(10**18, 10**18))
                os.symlink(self.rootonly, m.p('u', 'x'))
            self.as_nobody(setup)
            snap(m, 's1')
            # a chmod: same size and mtime, another ctime, so root has
            # the daemon compare the live file with s1's; the swap comes
            # when root opens its copy in the directory it resolved
            self.as_nobody(os.chmod, f, 0o640)
            sw = Swapper(d, '.nextfs-restore.*', m.p('u', 'x'))
            self.assertTrue(sw.ready, 'no inotify watch')
            rc, _, err = tool('versions', f, '--restore', 's1')
            self.assertTrue(sw.swapped(), 'the swap did not happen: ' + err)
            self.assertTrue(os.path.islink(d))
            self.assertUntouched()
            # the file went into the directory root had resolved (it is
            # called x now), not where the path leads since
            self.assertEqual(rc, 0, err)
            self.assertEqual(os.stat(m.p('u', 'x', 'f')).st_mode & 0o777,
                             0o644)
            self.assertEqual(os.listdir(m.p('u', 'x')), ['f'])

            # (c) --to through the user's link fails and writes nothing;
            # so does a link outside the mount in a directory of theirs
            g = m.p('u', 'g')
            self.as_nobody(write_file, g, b'g\n')
            snap(m, 's2')
            rc, _, err = tool('versions', g, '--restore', 's2', '--to',
                              m.p('u', 'd', 'out'))
            self.assertEqual(rc, 1, err)
            self.assertIn('symbolic link', err)
            udir = os.path.join(self.work, 'udir')
            os.mkdir(udir)
            os.chown(udir, UID, GID)
            self.as_nobody(os.symlink, self.rootonly,
                           os.path.join(udir, 'ln'))
            rc, _, err = tool('versions', g, '--restore', 's2', '--to',
                              os.path.join(udir, 'ln', 'out'))
            self.assertEqual(rc, 1, err)
            self.assertIn('another user owns it', err)
            self.assertUntouched()
            # nor a link of theirs outside the mount into root's part of it
            os.mkdir(m.p('rootdir'), 0o700)
            self.as_nobody(os.symlink, m.p('rootdir'),
                           os.path.join(udir, 'in'))
            rc, _, err = tool('versions', g, '--restore', 's2', '--to',
                              os.path.join(udir, 'in', 'out'))
            self.assertEqual(rc, 1, err)
            self.assertEqual(os.listdir(m.p('rootdir')), [])
            # a DEST that is itself a link is replaced, not followed
            dangling = m.p('u', 'x', 'dangling')
            self.as_nobody(os.symlink, os.path.join(self.rootonly, 'new'),
                           dangling)
            ok('versions', g, '--restore', 's2', '--to', dangling)
            self.assertFalse(os.path.islink(dangling))
            self.assertEqual(read_file(dangling), b'g\n')
            self.assertUntouched()
        self.fsck(img)

    def test_snapshot_side_link_is_not_followed(self):
        img = self.make_image()
        with self.snapmount(img) as m:
            os.mkdir(m.p('u'), 0o755)
            os.chown(m.p('u'), UID, GID)
            e = m.p('u', 'e')
            self.as_nobody(os.symlink, self.rootonly, e)
            snap(m, 's')
            # the link is in the snapshot; a real directory is live

            def real_dir():
                os.unlink(e)
                os.mkdir(e)
            self.as_nobody(real_dir)
            secret = os.path.join(e, 'secret')
            rc, _, err = tool('versions', secret, '--restore', 's')
            self.assertEqual(rc, 1, err)
            self.assertIn('not in snapshot s (a directory of its path is a '
                          'symbolic link there', err)
            self.assertFalse(os.path.lexists(secret))
            rc, out, err = tool('versions', '--json', secret)
            self.assertEqual((rc, out), (1, b''), err)
            self.assertIn('in no snapshot and not in the live tree', err)
            # through the snapshot view itself: the same file's history
            rc, _, err = tool('versions', m.p('.snapshots', 's', 'u', 'e',
                                              'secret'), '--restore', 's')
            self.assertEqual(rc, 1, err)
            self.assertFalse(os.path.lexists(secret))
            self.assertUntouched()
        self.fsck(img)

    # ------------------------------------------- other root commands

    def test_targets_and_outputs(self):
        img = self.make_image()
        with self.snapmount(img) as m:
            os.mkdir(m.p('u'), 0o755)
            os.chown(m.p('u'), UID, GID)
            os.mkdir(os.path.join(self.rootonly, 'old'))
            self.as_nobody(os.symlink, self.rootonly,
                           m.p('u', '.snapshots'))
            # a directory that is not the mount's root is no target
            for cmd in (('snapshot', 'take', m.p('u'), 'new'),
                        ('snapshot', 'delete', m.p('u'), 'old'),
                        ('snapshot', 'run', m.p('u'), '--', 'true')):
                rc, _, err = tool(*cmd)
                self.assertNotEqual(rc, 0, cmd)
                self.assertIn('not the mountpoint of a nextfs volume', err)
            self.assertEqual(sorted(os.listdir(self.rootonly)),
                             ['old', 'secret'])
            os.rmdir(os.path.join(self.rootonly, 'old'))
            ok('snapshot', 'take', m.path, 's')
            # reading commands ask the daemon of the directory's mount
            self.assertEqual(ok('snapshot', 'list', '--names0', m.p('u')),
                             b's\0')
        # export to a dangling link the user planted: refused, nothing
        # created where it points; with --force the link is replaced
        udir = os.path.join(self.work, 'udir')
        os.mkdir(udir)
        os.chown(udir, UID, GID)
        out = os.path.join(udir, 'out.img')
        self.as_nobody(os.symlink, os.path.join(self.rootonly, 'planted'),
                       out)
        rc, _, err = tool('export', img, 's', out)
        self.assertEqual(rc, 1, err)
        self.assertIn('exists', err)
        self.assertUntouched()
        ok('export', '--force', img, 's', out)
        self.assertFalse(os.path.islink(out))
        self.assertEqual(sorted(os.listdir(udir)), ['out.img'])
        self.assertUntouched()
        rc, fsck_out = nx.fsck(out)
        self.assertEqual(rc, 0, fsck_out)
        self.fsck(img)

    # ------------------------------------------- nextfs-fuse, images

    def test_mountpoint_is_not_redirected(self):
        img, udir = self.make_user_image(UID, GID)
        d, x = os.path.join(udir, 'd'), os.path.join(udir, 'x')
        target = os.path.join(self.rootonly, 'm')
        os.mkdir(target, 0o700)

        def setup():
            os.mkdir(d)
            os.mkdir(os.path.join(d, 'm'))
            os.symlink(self.rootonly, x)
        self.as_nobody(setup)
        # the user's link on the way, there before root runs it: refused
        where, err = self.serve(img, os.path.join(x, 'm'))
        self.assertIsNone(where, 'mounted through the user\'s link')
        self.assertIn('another user owns it', err)
        # auto_unmount goes through fusermount3, by the path again: not
        # where the user can change the path
        where, err = self.serve(img, os.path.join(d, 'm'),
                                opts=['auto_unmount'])
        self.assertIsNone(where, 'auto_unmount on a path of the user\'s')
        self.assertIn('users other than root can change', err)
        # root's own link is followed; mountinfo has the real path
        os.symlink(d, os.path.join(self.work, 'rl'))
        where, err = self.serve(img, os.path.join(self.work, 'rl', 'm'))
        self.assertEqual(where, os.path.realpath(os.path.join(d, 'm')), err)
        ok('umount', where)
        # the user exchanges d with the link once root has resolved the
        # path, when the daemon opens the image (it then syncs slowly
        # before it mounts: the window is wide): the mount goes on the
        # directory that was resolved, called x/m since
        sw = Swapper(udir, os.path.basename(img), x, swap=d)
        self.assertTrue(sw.ready, 'no inotify watch')
        where, err = self.serve(img, os.path.join(d, 'm'),
                                faults='slow_sync=300000')
        self.assertTrue(sw.swapped(), 'the swap did not happen: ' + err)
        self.assertTrue(os.path.islink(d))
        self.assertFalse(os.path.ismount(target), 'mounted on root\'s '
                         'directory through the swapped link')
        self.assertEqual(where, os.path.realpath(os.path.join(x, 'm')), err)
        # the usual tools find it where it is
        ok('snapshot', 'take', where, 'after-swap')
        ok('umount', where)
        self.assertEqual(os.listdir(target), [])
        os.rmdir(target)
        self.assertUntouched()
        self.assertEqual(ok('snapshot', 'list', '--names0', img),
                         b'after-swap\0')
        self.fsck(img)

    def test_image_through_links(self):
        rimg = self.make_image(name='root.img')
        ok('snapshot', 'take', rimg, 's')
        digest = nx.sha256_file(rimg)
        udir = os.path.join(self.work, 'udir')
        os.mkdir(udir)
        os.chown(udir, UID, GID)
        uln = os.path.join(udir, 'img')
        self.as_nobody(os.symlink, rimg, uln)
        out = os.path.join(self.work, 'out.img')
        for cmd in (('snapshot', 'take', uln, 't'),
                    ('snapshot', 'delete', uln, 's'),
                    ('snapshot', 'prune', uln, '--keep', 'last=1'),
                    ('restore', uln, 's'),
                    ('check', '--repair', uln),
                    ('export', uln, 's', out),
                    ('diff', uln, 's')):
            rc, _, err = tool(*cmd)
            self.assertNotEqual(rc, 0, cmd)
            self.assertIn('another user owns it', err, cmd)
        self.assertFalse(os.path.exists(out))
        where, err = self.serve(uln, udir)
        self.assertIsNone(where, 'served through the user\'s link')
        self.assertIn('another user owns it', err)
        self.assertEqual(nx.sha256_file(rimg), digest, 'root\'s image '
                         'written through the user\'s link')
        # root's own link works, and names the same volume: the daemon
        # serving it is found through the image's real path
        rln = os.path.join(self.work, 'rootln.img')
        os.symlink(rimg, rln)
        ok('snapshot', 'take', rln, 'by-link')
        mnt = os.path.join(self.work, 'mnt')
        os.mkdir(mnt)
        where, err = self.serve(rln, mnt)
        self.assertEqual(where, os.path.realpath(mnt), err)
        ok('snapshot', 'take', rimg, 'while-mounted')
        self.assertEqual(ok('snapshot', 'list', '--names0', mnt),
                         b's\0by-link\0while-mounted\0')
        ok('umount', mnt)
        self.fsck(rimg)

    # -------------------------------------------------------- diff

    def test_diff_of_deep_trees(self):
        img = self.make_image()
        deep = '/' + '/'.join(['dd'] * DEPTH)
        with self.snapmount(img) as m:
            # a file it cannot read (as nobody: root's, mode 0600, only
            # its ctime changed) is an error, not a guess of "changed"
            # (lost+found readable: the walk itself is allowed)
            os.chmod(m.p('lost+found'), 0o755)
            write_file(m.p('private'), b'x', 0o600)
            snap(m, 'p0')
            os.chmod(m.p('private'), 0o600)
            rc, out, err = tool('diff', m.path, 'p0', user=(UID, GID))
            self.assertEqual(rc, 1, out)
            self.assertIn('comparing /private: Permission denied', err)
            # an output that cannot be written is an error
            write_file(m.p('more'), b'more')
            with open('/dev/full', 'wb') as full:
                rc, _, err = tool('diff', m.path, 'p0', stdout=full)
            self.assertEqual(rc, 1, err)
            self.assertIn('No space left on device', err)
            snap(m, 'empty')
            fd = os.open(m.path, os.O_RDONLY | os.O_DIRECTORY)
            for _ in range(DEPTH):
                os.mkdir('dd', dir_fd=fd)
                nfd = os.open('dd', os.O_RDONLY | os.O_DIRECTORY,
                              dir_fd=fd)
                os.close(fd)
                fd = nfd
            for name in ('leaf', 'old'):
                wfd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644,
                              dir_fd=fd)
                os.write(wfd, b'A' * 100)
                os.close(wfd)
                os.utime(name, ns=(10**18, 10**18), dir_fd=fd)
            snap(m, 'd0')
            # after d0: content only (same size and mtime), a rename, a
            # new file and another 600 directories, all at the bottom
            wfd = os.open('leaf', os.O_WRONLY, dir_fd=fd)
            os.write(wfd, b'B' * 100)
            os.close(wfd)
            os.utime('leaf', ns=(10**18, 10**18), dir_fd=fd)
            os.rename('old', 'renamed', src_dir_fd=fd, dst_dir_fd=fd)
            os.close(os.open('new', os.O_WRONLY | os.O_CREAT, 0o644,
                             dir_fd=fd))
            # a side directory at each level: the walk keeps more
            # directories open than it may and opens some again
            for _ in range(300):
                os.mkdir('ee', dir_fd=fd)
                os.mkdir('x', dir_fd=fd)
                nfd = os.open('ee', os.O_RDONLY | os.O_DIRECTORY,
                              dir_fd=fd)
                os.close(fd)
                fd = nfd
            os.close(fd)
            snap(m, 'd1')
            want0 = (['M /'] +
                     ['+ ' + deep[:3 * (i + 1)] for i in range(DEPTH)] +
                     ['+ %s/leaf' % deep, '+ %s/old' % deep])
            want1 = (['M ' + deep, 'M %s/leaf' % deep,
                            'R %s/old -> %s/renamed' % (deep, deep),
                            '+ %s/new' % deep] +
                           ['+ %s%s' % (deep, '/ee' * (i + 1))
                            for i in range(300)] +
                           ['+ %s%s/x' % (deep, '/ee' * i)
                            for i in range(300)])
            got0 = ok('diff', m.path, 'empty', 'd0').decode().splitlines()
            got1 = ok('diff', m.path, 'd0', 'd1').decode().splitlines()
            self.assertListEqual(sorted(got0), sorted(want0))
            self.assertListEqual(sorted(got1), sorted(want1))
            self.assertEqual(got1, sorted(got1, key=lambda l: l[2:]),
                             'sorted by path')
        # offline: the same lists from the block maps
        self.assertListEqual(ok('diff', img, 'empty', 'd0').decode()
                             .splitlines(), got0)
        self.assertListEqual(ok('diff', img, 'd0', 'd1').decode()
                             .splitlines(), got1)
        with open('/dev/full', 'wb') as full:
            rc, _, err = tool('diff', img, 'empty', 'd0', stdout=full)
        self.assertEqual(rc, 1, err)
        self.fsck(img)

    def test_diff_daemon_and_walk(self):
        """Root (and the mounting user) get the daemon's block-map delta,
        anyone else the walk through the kernel: on trees everyone may
        read both say exactly what the image's diff says; a name in a
        directory nobody may not read never reaches nobody."""
        img = self.make_image()
        with self.snapmount(img) as m:
            os.chmod(m.p('lost+found'), 0o755)
            os.mkdir(m.p('pub'))
            for i in range(12):
                write_file(m.p('pub', 'f%d' % i), b'%d' % i * 300)
            os.mkdir(m.p('pub', 'sub'))
            os.symlink('f1', m.p('pub', 'ln'))
            snap(m, 'p0')
            write_file(m.p('pub', 'f0'), b'other content')
            os.rename(m.p('pub', 'f1'), m.p('pub', 'f1.moved'))
            os.unlink(m.p('pub', 'f2'))
            os.link(m.p('pub', 'f3'), m.p('pub', 'sub', 'f3.link'))
            os.chmod(m.p('pub', 'f4'), 0o640)
            os.setxattr(m.p('pub', 'f5'), 'user.k', b'v')
            os.unlink(m.p('pub', 'f6'))
            os.mkdir(m.p('pub', 'f6'))          # a file became a directory
            os.rename(m.p('pub', 'sub'), m.p('pub', 'sub2'))
            os.unlink(m.p('pub', 'ln'))
            os.symlink('f9', m.p('pub', 'ln'))
            write_file(m.p('new'), b'n')
            snap(m, 'p1')
            os.mkdir(m.p('secret'), 0o700)
            snap(m, 's0')
            write_file(m.p('secret', 'hidden-name'), b'x')
            snap(m, 's1')
            root_out = [ok('diff', m.path, x, y) for x, y in
                        (('p0', 'p1'), ('p1', 's1'))]
            # nobody is not handed the delta; the walk says the same
            rc, user_out, err = tool('diff', m.path, 'p0', 'p1',
                                     user=(UID, GID))
            self.assertEqual(rc, 0, err)
            self.assertEqual(user_out, root_out[0])

            def start_delta(path):
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    fcntl.ioctl(fd, NX_IOC_DELTA_START,
                                struct.pack('IIIIQQ', 1, 0, 0, 0, 0, 0))
                finally:
                    os.close(fd)
            with self.assertRaises(PermissionError):
                self.as_nobody(start_delta, m.path)
            # ... and cannot learn a name it could not list
            rc, out, err = tool('diff', m.path, 'p1', 's1', user=(UID, GID))
            self.assertEqual(rc, 1, out)
            self.assertIn('Permission denied', err)
            self.assertNotIn(b'hidden-name', out)
            self.assertNotIn('hidden-name', err)
        self.assertIn(b'+ /secret/hidden-name\n', root_out[1])
        self.assertEqual(root_out[0], b''.join(
            b'%s\n' % line for line in (
                b'M /', b'+ /new', b'M /pub', b'M /pub/f0',
                b'R /pub/f1 -> /pub/f1.moved', b'- /pub/f2', b'M /pub/f3',
                b'M /pub/f4', b'M /pub/f5', b'- /pub/f6', b'+ /pub/f6',
                b'- /pub/ln', b'+ /pub/ln', b'R /pub/sub -> /pub/sub2',
                b'M /pub/sub2',
                b'+ /pub/sub2/f3.link')))
        self.assertEqual(ok('diff', img, 'p0', 'p1'), root_out[0])
        self.assertEqual(ok('diff', img, 'p1', 's1'), root_out[1])
        self.fsck(img)

    def test_versions_daemon_and_walk(self):
        """Versions of the same size and mtime with other ctimes: root
        has the daemon compare them (no read through the mount), nobody
        reads them (and may not ask the daemon); both list the same: a
        chmod is no new version, one byte is, a file renamed over it
        with the same bytes (another inode) is not."""
        img = self.make_image()
        with self.snapmount(img) as m:
            f, t = m.p('f'), m.p('t')
            data = nx.pattern(300000)

            def same_times(p):
                os.utime(p, ns=(10**18, 10**18))
            write_file(f, data, 0o644)
            same_times(f)
            snap(m, 'a')
            os.chmod(f, 0o600)
            os.chmod(f, 0o644)
            snap(m, 'b')
            with open(f, 'r+b') as fh:
                fh.seek(200000)
                fh.write(b'X')
            same_times(f)
            snap(m, 'c')
            write_file(t, read_file(f), 0o644)
            same_times(t)
            os.rename(t, f)
            snap(m, 'd')
            before = nx.opstats(m.path).get('read', 0)
            root_out = ok('versions', f)
            self.assertEqual(nx.opstats(m.path).get('read', 0), before,
                             'root read the files through the mount')
            rc, user_out, err = tool('versions', f, user=(UID, GID))
            self.assertEqual(rc, 0, err)
            self.assertEqual(user_out, root_out)
            lines = root_out.splitlines()
            self.assertEqual(len(lines), 3, root_out)
            self.assertTrue(lines[1].endswith(b' a b'), root_out)
            self.assertTrue(lines[2].endswith(b' c d (live)'), root_out)

            def same_data(path):
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    fcntl.ioctl(fd, NX_IOC_SAME_DATA,
                                struct.pack('IIQQII', 0, 0, 12, 12, 0, 0))
                finally:
                    os.close(fd)
            with self.assertRaises(PermissionError):
                self.as_nobody(same_data, m.path)
        self.fsck(img)

    def test_send_channel(self):
        """The daemon (root here) writes a send's stream only into a FIFO
        of the caller's: root naming a regular file, nobody's FIFO, a
        symbolic link to root's FIFO or a FIFO nobody reads is refused
        and nothing is written; nobody may not start a send on root's
        mount at all, and "nextfs send" as nobody writes nothing."""
        img = self.make_image()
        with self.snapmount(img) as m:
            write_file(m.p('f'), b'data' * 1000)
            snap(m, 'a')

            def start(path):
                q = bytearray(SEND_START.pack(0, 1, 0, 0, 0, b'',
                                              os.fsencode(path), b''))
                fd = os.open(m.path, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    fcntl.ioctl(fd, NX_IOC_SEND_START, q)
                finally:
                    os.close(fd)
                out = SEND_START.unpack(bytes(q))
                return out[3], out[7].rstrip(b'\0')     # error, msg

            def j(n):
                return os.path.join(self.rootonly, n)
            plain, mine, theirs, link = (j('plain'), j('fifo'),
                                         j('nobodys'), j('link'))
            os.mkfifo(mine, 0o600)
            os.mkfifo(theirs, 0o600)
            os.chown(theirs, UID, GID)
            os.symlink(mine, link)
            with open(plain, 'wb') as fh:
                fh.write(b'keep')
            for path, want in ((plain, errno.EPERM), (theirs, errno.EPERM),
                               (link, errno.EPERM), (mine, errno.ENXIO),
                               ('fifo', errno.EINVAL)):
                err, msg = start(path)
                self.assertEqual(err, want, (path, msg))
            self.assertEqual(read_file(plain), b'keep')
            for n in ('plain', 'fifo', 'nobodys', 'link'):
                os.unlink(j(n))
            with self.assertRaises(PermissionError):
                self.as_nobody(start, '/nonexistent')
            out = os.path.join(self.work, 'nobody-out')
            os.chmod(self.work, 0o777)
            rc, _, err = tool('send', m.path, 'a', '-o', out,
                              user=(UID, GID))
            self.assertEqual(rc, 1, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertFalse(os.path.exists(out))
            self.assertUntouched()
        self.fsck(img)


if __name__ == '__main__':
    nx.main()
