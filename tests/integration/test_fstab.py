#!/usr/bin/env python3
"""fstab and mount(8)/umount(8) (issue 19): the helpers that are links to
the nextfs tool (/sbin/mount.nextfs, mount.fuse.nextfs, umount.nextfs,
umount.fuse.nextfs, umount.fuseblk.nextfs; src/cli/mount_helper.c).

- An image-file line of type nextfs with options for mount(8) and systemd
  (noauto, nofail, _netdev, x-systemd.*, X-mount.*, comment=, defaults)
  mounts: none of them reaches nextfs-fuse (libfuse would refuse it),
  allow_other and rw do, and another user reads the files.
- A loop device line mounts as fuseblk.nextfs; a fuse.nextfs line with
  ro,noblkdev mounts the same device read-only as a plain FUSE mount.
- "umount MNT" returns only when the daemon has written the volume back
  and let go (checked on a disk made slow with NEXTFS_FAULTS): the image
  is unlocked, needs no recovery and is clean for e2fsck -fn at once.
- A "user" line mounts for a non-root user (nobody; -o fakeroot lets it
  write the root-owned image), and that user's "umount MNT" also waits.

The test never touches /etc/fstab, /sbin or /run/mount/utab: it runs in
a private mount namespace (unshare -m) where an overlay puts the build's
helpers into /sbin, reads an fstab of its own (mount -T) and keeps
libmount's utab in its work directory (LIBMOUNT_UTAB).  Root only.
Runs once (no flavour): ext4 images; about 10 s.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

import nxharness as nx

HELPERS = ('mount.nextfs', 'mount.fuse.nextfs', 'umount.nextfs',
           'umount.fuse.nextfs', 'umount.fuseblk.nextfs')
IN_NAMESPACE = 'NEXTFS_FSTAB_NAMESPACE'
# A disk slow enough that writing back takes a while (every sync 0.15 s):
# an umount that does not wait returns long before the daemon is done.
SLOW = 'slow_sync=150000'


def enter_private_namespace():
    """Re-run this script in its own mount namespace with the build's
    helpers in /sbin; returns only inside it (or exits: skip/fail)."""
    if os.environ.get(IN_NAMESPACE):
        return
    if os.geteuid() != 0:
        print('SKIP: needs root (mount(8) with an fstab of our own, loop '
              'devices, a private mount namespace)', file=sys.stderr)
        sys.exit(nx.SKIP_EXIT)
    for prog in ('unshare', 'mount', 'umount', 'losetup', 'setpriv'):
        if not shutil.which(prog):
            print('SKIP: %s is not installed' % prog, file=sys.stderr)
            sys.exit(nx.SKIP_EXIT)
    p = nx.run(['unshare', '--mount', 'true'], check=False)
    if p.returncode != 0:
        print('SKIP: no private mount namespace here: %s' % p.stdout.strip(),
              file=sys.stderr)
        sys.exit(nx.SKIP_EXIT)
    env = dict(os.environ, **{IN_NAMESPACE: '1'})
    p = subprocess.run(['unshare', '--mount', '--propagation', 'private',
                        sys.executable] + sys.argv, env=env)
    sys.exit(p.returncode)


def install_helpers():
    """Inside the namespace: an overlay on /sbin's directory that adds
    links to the build's nextfs tool, and a utab of our own."""
    sbin = os.path.realpath('/sbin')
    links = tempfile.mkdtemp(prefix='nxhelpers.', dir=nx.tmp_root())
    os.chmod(links, 0o755)
    for h in HELPERS:
        os.symlink(nx.tool_path(), os.path.join(links, h))
    p = nx.run(['mount', '-t', 'overlay', 'overlay', '-o',
                'lowerdir=%s:%s' % (links, sbin), sbin], check=False)
    if p.returncode != 0:
        shutil.rmtree(links)
        print('SKIP: cannot put the helpers into %s with an overlay: %s' %
              (sbin, p.stdout.strip()), file=sys.stderr)
        sys.exit(nx.SKIP_EXIT)
    os.environ['LIBMOUNT_UTAB'] = os.path.join(links, 'utab')
    return links


locked = nx.volume_locked
needs_recovery = nx.needs_recovery


def mountinfo(mnt):
    """(fstype, source, mount options, super options) of MNT, or None."""
    with open('/proc/self/mountinfo') as f:
        for line in f:
            parts = line.split()
            if parts[4] == mnt:
                sep = parts.index('-')
                return (parts[sep + 1], parts[sep + 2], parts[5],
                        parts[sep + 3])
    return None


def utab_options(mnt):
    try:
        with open(os.environ['LIBMOUNT_UTAB']) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        fields = dict(f.split('=', 1) for f in line.split() if '=' in f)
        if fields.get('TARGET') == mnt:
            return fields.get('OPTS')
    return None


def daemon_pids(source):
    """Live nextfs-fuse processes serving SOURCE."""
    out = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as f:
                argv = f.read().split(b'\0')
            with open('/proc/%s/stat' % pid) as f:
                state = f.read().rsplit(')', 1)[1].split()[0]
        except OSError:
            continue
        if (os.path.basename(argv[0]) == b'nextfs-fuse' and
                source.encode() in argv and state != 'Z'):
            out.append(int(pid))
    return out


fill = nx.fill_volume


class FstabTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        if nx.backend() != 'nextfs':
            self.skipTest('tests the nextfs mount helpers, not the %s '
                          'backend' % nx.backend())
        self.fstab = os.path.join(self.work, 'fstab')
        self.loops = []

    def tearDown(self):
        # Whatever a failed test left mounted: unmount, waiting.
        for mnt in sorted(nx.mounted_paths()):
            if mnt.startswith(self.work + '/'):
                nx.run([nx.tool_path(), 'umount', mnt], check=False)
                if nx.is_mounted(mnt):
                    nx.run(['umount', '-l', mnt], check=False)
        for dev in self.loops:
            subprocess.run(['losetup', '-d', dev])
        super().tearDown()

    def write_fstab(self, *lines):
        with open(self.fstab, 'w') as f:
            f.write('# nextfs test fstab\n')
            for line in lines:
                f.write(' '.join(line) + '\n')
        os.chmod(self.fstab, 0o644)

    def mountpoint(self, name, owner=None):
        path = os.path.join(self.work, name)
        os.mkdir(path)
        if owner is not None:
            os.chown(path, owner, owner)
        return path

    def loop(self, image):
        p = nx.run(['losetup', '--find', '--show', image], check=False)
        if p.returncode:
            self.skipTest('no loop device: %s' % p.stdout.strip())
        self.loops.append(p.stdout.strip())
        return self.loops[-1]

    def assert_released(self, source, mnt):
        """What "umount MNT" promises when it returns: the daemon has
        written the volume back and let go of it (its process exits just
        after saying so: waited for, not asserted at once)."""
        self.assertIsNone(mountinfo(mnt))
        self.assertFalse(locked(source), 'volume still held after umount')
        self.assertFalse(needs_recovery(source))
        rc, out = nx.fsck(source)
        self.assertEqual(rc, 0, out)
        deadline = time.monotonic() + 10
        while daemon_pids(source) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(daemon_pids(source), [], 'daemon still running')

    def test_image_line_with_mount_and_systemd_options(self):
        img = self.make_image('128M')
        mnt = self.mountpoint('mnt')
        self.write_fstab((img, mnt, 'nextfs',
                          'noauto,nofail,_netdev,x-systemd.automount,'
                          'x-systemd.device-timeout=5s,X-mount.mode=0755,'
                          'comment=test,defaults,allow_other,rw', '0', '0'))
        with nx.environment(NEXTFS_FAULTS=SLOW):
            nx.run(['mount', '-T', self.fstab, mnt])
            fstype, source, vfsopts, opts = mountinfo(mnt)
            self.assertEqual((fstype, source), ('fuse.nextfs', img))
            self.assertIn('allow_other', opts.split(','))
            self.assertIn('rw', vfsopts.split(','))
            self.assertEqual(utab_options(mnt), 'helper=nextfs')
            self.assertEqual(len(daemon_pids(img)), 1)
            fill(mnt)
            # allow_other: another user reads what root wrote.
            p = nx.run(nx.as_user_argv(nx.NOBODY_UID, nx.NOGROUP_GID) +
                       ['cat', os.path.join(mnt, 'many', 'f7')])
            self.assertEqual(p.stdout, '7\n')
            nx.run(['umount', mnt])
            self.assert_released(img, mnt)
        self.assertIsNone(utab_options(mnt))

    def test_plain_image_line_umount_waits(self):
        # Without x-* options mount(8) records nothing in utab itself:
        # the helper's own entry is what makes umount(8) wait.
        img = self.make_image('128M')
        mnt = self.mountpoint('mnt')
        self.write_fstab((img, mnt, 'nextfs', 'defaults', '0', '0'))
        with nx.environment(NEXTFS_FAULTS=SLOW):
            nx.run(['mount', '-T', self.fstab, mnt])
            fill(mnt)
            nx.run(['umount', mnt])
            self.assert_released(img, mnt)

    def test_mount_t_nextfs_passes_only_file_system_options(self):
        img = self.make_image('32M')
        mnt = self.mountpoint('mnt')
        # -f: the helper says what it would run, and runs nothing.
        p = nx.run(['mount', '-f', '-v', '-t', 'nextfs', '-o',
                    'nofail,x-systemd.automount,users,ro,fakeroot',
                    img, mnt])
        self.assertIn("nextfs-fuse -o 'ro,noexec,nosuid,nodev,fakeroot' "
                      "%s %s" % (img, mnt), p.stdout)
        self.assertIsNone(mountinfo(mnt))
        # What nextfs-fuse does not know is refused in one line.
        p = nx.run(['mount', '-t', 'nextfs', '-o', 'no_such_option',
                    img, mnt], check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn('no_such_option', p.stdout)
        self.assertIsNone(mountinfo(mnt))
        self.assertFalse(locked(img))

    def test_loop_device_lines(self):
        dev = self.loop(self.make_image('128M'))
        mnt = self.mountpoint('mnt')
        ro = self.mountpoint('ro')
        self.write_fstab((dev, mnt, 'nextfs', 'nofail,x-systemd.'
                          'device-timeout=5s', '0', '0'),
                         (dev, ro, 'fuse.nextfs', 'noauto,ro,noblkdev',
                          '0', '0'))
        with nx.environment(NEXTFS_FAULTS=SLOW):
            nx.run(['mount', '-T', self.fstab, dev])    # by its source
            self.assertEqual(mountinfo(mnt)[:2], ('fuseblk.nextfs', dev))
            fill(mnt)
            nx.run(['umount', mnt])
            self.assert_released(dev, mnt)
        nx.run(['mount', '-T', self.fstab, ro])
        self.assertEqual(mountinfo(ro)[:2], ('fuse.nextfs', dev))
        self.assertEqual(nx.read_file(os.path.join(ro, 'many', 'f3')),
                         b'3\n')
        with self.assertRaises(OSError):
            nx.write_file(os.path.join(ro, 'new'), b'x')
        nx.run(['umount', ro])
        self.assert_released(dev, ro)

    def test_user_line(self):
        img = self.make_image('64M')
        os.chown(img, nx.NOBODY_UID, nx.NOGROUP_GID)
        mnt = self.mountpoint('mnt', owner=nx.NOBODY_UID)
        self.write_fstab((img, mnt, 'nextfs', 'noauto,user,fakeroot',
                          '0', '0'))
        as_nobody = nx.as_user_argv(nx.NOBODY_UID, nx.NOGROUP_GID)
        with nx.environment(NEXTFS_FAULTS=SLOW):
            nx.run(as_nobody + ['mount', '-T', self.fstab, mnt])
            fstype, _, vfsopts, opts = mountinfo(mnt)
            self.assertEqual(fstype, 'fuse.nextfs')
            self.assertIn('user_id=%d' % nx.NOBODY_UID, opts.split(','))
            # "user" implies noexec,nosuid,nodev (mount(8) adds them).
            for flag in ('noexec', 'nosuid', 'nodev'):
                self.assertIn(flag, vfsopts.split(','))
            nx.run(as_nobody + ['sh', '-c', 'mkdir %s/d && echo hi > '
                                '%s/d/f' % (mnt, mnt)])
            nx.run(as_nobody + ['umount', mnt])
            self.assert_released(img, mnt)


if __name__ == '__main__':
    enter_private_namespace()
    links = install_helpers()
    try:
        nx.main()
    finally:
        subprocess.run(['umount', os.path.realpath('/sbin')])
        shutil.rmtree(links, True)
