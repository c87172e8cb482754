#!/usr/bin/env python3
"""The edges of a volume's life (issue 16): unmount, devices, wrong input.

- nextfs umount returns only when the daemon has written everything back
  and released the volume (P11): right after it, the image is unlocked,
  clean for e2fsck -fn and needs no journal replay - even with a disk so
  slow (NEXTFS_FAULTS=slow_sync) that fusermount3 -u returns long before.
  It reports a daemon that ended badly (its message, exit status 3) or
  died, and refuses what it cannot unmount (busy, not mounted, not nextfs).
- Offline commands wait for a daemon that is finishing instead of failing
  "in use", and name the mount of one that still serves.
- Block devices (real loop devices, as root): fuseblk by default, where a
  plain umount waits for the daemon (and the mount's readahead window,
  not the device's, is set); -o noblkdev; either way a kernel
  mount or another exclusive opener gets EBUSY (P12), a device that is
  busy, read-only or smaller than its file system is refused clearly.
- Wrong input gets one line that says what it is: XFS, btrfs, swap, an
  empty file, an image that cannot be written (and that -o ro works).

Runs once (no flavour): ext4 images.
"""

import ctypes
import errno
import json
import fcntl
import os
import re
import selectors
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import nxharness as nx


locked = nx.volume_locked
needs_recovery = nx.needs_recovery


def nextfs(*args, check=None):
    """Run the nextfs tool; CHECK: the exit status it must have."""
    p = nx.run([nx.tool_path()] + list(args), check=False)
    if check is not None and p.returncode != check:
        raise AssertionError('nextfs %s: exit %d, not %d:\n%s' %
                             (' '.join(args), p.returncode, check, p.stdout))
    return p


fill = nx.fill_volume


# A disk slow enough that writing back takes a while (every sync 0.15 s),
# far longer than fusermount3 -u or umount take to return.
SLOW = 'slow_sync=150000'


class UnmountTest(nx.NxTestCase):

    def test_umount_waits_for_the_daemon(self):
        img = self.make_image('128M')
        with nx.environment(NEXTFS_FAULTS=SLOW):
            with self.mounted(img) as m:
                fill(m.path)
                p = nextfs('umount', m.path, check=0)
                self.assertEqual(p.stdout, '')
                # At once, while the daemon process may still exit:
                self.assertFalse(nx.is_mounted(m.path))
                self.assertFalse(locked(img), 'still held after umount')
                self.assertFalse(needs_recovery(img))
                rc, out = nx.fsck(img)
                self.assertEqual(rc, 0, out)

    def test_fusermount_returns_early_offline_commands_wait(self):
        img = self.make_image('128M')
        with nx.environment(NEXTFS_FAULTS=SLOW):
            with self.mounted(img) as m:
                fill(m.path)
                # Serving: a command that needs the volume to itself is
                # refused at once, naming the mount; info asks the daemon.
                p = nextfs('check', img, check=8)   # e2fsck's "operational"
                self.assertIn('is mounted at %s' % m.path, p.stdout)
                self.assertIn('nextfs umount %s' % m.path, p.stdout)
                p = nextfs('info', '--json', img, check=0)
                self.assertTrue(json.loads(p.stdout)['volume']['mounted'])
                nx.run([nx.FUSERMOUNT, '-u', m.path])
                # What the issue saw: the daemon still writes (the test
                # can tell; the next command must wait for it).
                self.assertTrue(locked(img), 'fusermount3 -u waited?')
                p = nextfs('info', img, check=0)
                self.assertRegex(p.stdout, r'Block count:\s+\d+')
                self.assertFalse(locked(img))
                rc, out = nx.fsck(img)
                self.assertEqual(rc, 0, out)

    def test_offline_commands_wait_for_a_daemon_yet_to_hear_of_umount(self):
        """fusermount3 -u has returned, but the daemon has not run since
        (a busy machine): it still says "serving" for a moment.  A
        command must wait for it to finish, not call the volume mounted
        at a mountpoint that is gone."""
        img = self.make_image('64M')
        with self.mounted(img) as m:
            fill(m.path)
            pid = m.proc.pid
            os.kill(pid, signal.SIGSTOP)
            try:
                nx.run([nx.FUSERMOUNT, '-u', m.path])
                self.assertFalse(nx.is_mounted(m.path))
                info = subprocess.Popen([nx.tool_path(), 'info', img],
                                        stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
                # Let the command ask while the daemon cannot answer yet.
                time.sleep(0.3)
            finally:
                os.kill(pid, signal.SIGCONT)
            out, _ = info.communicate(timeout=60)
            self.assertEqual(info.returncode, 0, out)
            self.assertRegex(out, r'Block count:\s+\d+')
            self.assertFalse(locked(img))
        rc, out = nx.fsck(img)
        self.assertEqual(rc, 0, out)

    def test_umount_reports_a_daemon_that_failed(self):
        # Writes fail after the Nth: the mount must get through, a commit
        # not.  N depends on what mounting writes; try a few.
        for n in (20, 12, 30, 45):
            img = self.make_image('64M', name='fail%d.img' % n)
            with nx.environment(NEXTFS_FAULTS='cut=%d:eio' % n):
                try:
                    ctx = self.mounted(img, check=False)
                    m = ctx.__enter__()
                except AssertionError:
                    continue        # the mount itself failed: later cut
                try:
                    fd = os.open(m.p('f'), os.O_WRONLY | os.O_CREAT)
                    os.write(fd, b'x' * 100000)
                    try:
                        os.fsync(fd)
                        failed = False
                    except OSError as e:
                        self.assertEqual(e.errno, errno.EIO)
                        failed = True
                    os.close(fd)
                    if failed:
                        m.expect_status = 1
                        p = nextfs('umount', m.path, check=3)
                        self.assertRegex(p.stdout, r'nextfs: %s: nextfs-fuse: '
                                         r'.*error writing the volume back'
                                         % re.escape(m.path))
                        self.assertFalse(nx.is_mounted(m.path))
                        return
                finally:
                    ctx.__exit__(None, None, None)
        self.fail('no cut point made a commit fail after mounting')

    def test_umount_of_a_dead_daemon(self):
        img = self.make_image('64M')
        with self.mounted(img, check=False) as m:
            nx.write_file(m.p('f'), b'data')
            m.kill()
            p = nextfs('umount', m.path, check=3)
            self.assertIn('had died', p.stdout)
            self.assertIn("nextfs check %s" % img, p.stdout)
            self.assertFalse(nx.is_mounted(m.path))

    def test_umount_refusals(self):
        p = nextfs('umount', self.work, check=1)
        self.assertIn('not mounted', p.stdout)
        nextfs('umount', check=2)
        nextfs('umount', '-l', self.work, check=2)
        img = self.make_image('64M')
        with self.mounted(img) as m:
            fd = os.open(m.p('.'), os.O_RDONLY)
            try:
                p = nextfs('umount', m.path, check=1)
                self.assertTrue(nx.is_mounted(m.path))
            finally:
                os.close(fd)
            if os.geteuid() == 0:
                self.assertIn('busy', p.stdout)
            # umount(8) helper arguments are accepted
            nextfs('umount', m.path, '-n', '-t', 'fuse.nextfs', check=0)
        if os.geteuid() == 0:
            other = tempfile.mkdtemp(dir=self.work)
            nx.run(['mount', '-t', 'tmpfs', 'none', other])
            try:
                p = nextfs('umount', other, check=1)
                self.assertIn('not a nextfs mount (tmpfs)', p.stdout)
            finally:
                nx.run(['umount', other])

    def test_umount_waits_for_a_daemon_whose_mount_name_was_taken(self):
        """A FUSE mount's number goes to the next mount as soon as it is
        unmounted, while its daemon may still be finishing with the
        channel named after it.  The next mount's daemon must still be
        waited for: -o ro holds a shared lock only, which nextfs umount
        cannot wait for, so without the channel it returned while the
        image was still held (seen as a rare failure of the send chain
        on a busy machine)."""
        img = self.make_image('32M')
        with OwnNetns():
            old = EarlierDaemons()
            try:
                # The earlier daemon keeps the name: the volume's channel.
                with self.mounted(img, opts=('ro',)) as m:
                    key = mount_key(m.path)
                    self.assertIn(key, old.socks)
                    p = nextfs('umount', '-v', m.path, check=0)
                    self.assertIn('written back and released', p.stdout)
                    self.assertFalse(locked(img), 'still held after umount')
            finally:
                old.let_go()
            # It lets go: the next daemon takes the name of its mount.
            old = EarlierDaemons()
            try:
                with self.mounted(img, opts=('ro',)) as m:
                    key = mount_key(m.path)
                    self.assertIn(key, old.socks)
                    old.let_go()
                    self.assertEqual(channel_says(key), 'serving %d %s %s' %
                                     (m.proc.pid, img, m.path))
            finally:
                old.let_go()


# ------------------------------------------ channel names of earlier mounts

CLONE_NEWNET = 0x40000000


class OwnNetns:
    """This thread, and what it starts, in a network namespace of its own
    for a while: abstract socket names there are ours alone, so taking
    them all disturbs no other nextfs on the machine."""

    def __enter__(self):
        self.orig = os.open('/proc/thread-self/ns/net', os.O_RDONLY)
        if libc.unshare(CLONE_NEWNET) != 0:
            os.close(self.orig)
            raise unittest.SkipTest('no network namespace: %s' %
                                    os.strerror(ctypes.get_errno()))
        return self

    def __exit__(self, *exc):
        libc.setns(self.orig, CLONE_NEWNET)
        os.close(self.orig)


def mount_key(path):
    st = os.stat(path)
    return 'nextfs/mnt/%d:%d' % (os.major(st.st_dev), os.minor(st.st_dev))


class EarlierDaemons:
    """The daemons of earlier mounts whose numbers the kernel has given
    again: each has the channel named after its mount and is finishing
    (it says so to whoever connects, then hangs up without "done").
    Every mount number that is free now is taken, so the next mount's
    is among them."""

    def __init__(self):
        top = 0
        with open('/proc/self/mountinfo') as f:
            for line in f:
                major, minor = line.split()[2].split(':')
                if major == '0':
                    top = max(top, int(minor))
        self.socks = {}
        for minor in range(1, top + 256):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            key = 'nextfs/mnt/0:%d' % minor
            try:
                s.bind('\0' + key)
                s.listen(8)
            except OSError:
                s.close()
                continue
            s.setblocking(False)
            self.socks[key] = s
        self.stop = False
        # Started here: it shares this thread's network namespace.
        self.thread = threading.Thread(target=self.answer, daemon=True)
        self.thread.start()

    def answer(self):
        sel = selectors.DefaultSelector()
        for s in list(self.socks.values()):
            sel.register(s, selectors.EVENT_READ)
        while not self.stop:
            for key, _ in sel.select(0.05):
                try:
                    c, _ = key.fileobj.accept()
                except OSError:
                    continue
                c.sendall(b'serving 1 /earlier.img /earlier/mnt\n'
                          b'finishing\n')
                c.close()
        sel.close()

    def let_go(self):
        """The earlier daemons are gone."""
        self.stop = True
        self.thread.join()
        for s in self.socks.values():
            s.close()
        self.socks = {}

def channel_says(key, timeout=20):
    """The first line on the channel KEY, once a daemon answers there."""
    deadline = time.monotonic() + timeout
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect('\0' + key)
            s.settimeout(timeout)
            return s.makefile('rb').readline().decode().rstrip('\n')
        except OSError:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
        finally:
            s.close()

# ------------------------------------------------------------ block devices

libc = ctypes.CDLL(None, use_errno=True)


def kernel_mount_errno(dev, mnt):
    """mount(2) DEV read-only as ext4 at MNT: 0 or the errno."""
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong,
                                                   ctypes.c_void_p]
    if libc.mount(dev.encode(), mnt.encode(), b'ext4', 1, None) == 0:
        libc.umount2(mnt.encode(), 0)
        return 0
    return ctypes.get_errno()


def excl_open_errno(dev):
    try:
        os.close(os.open(dev, os.O_RDWR | os.O_EXCL))
        return 0
    except OSError as e:
        return e.errno


class BlockDeviceTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest('loop devices need root')
        self.loops = []

    def tearDown(self):
        for dev in self.loops:
            subprocess.run(['losetup', '-d', dev])
        super().tearDown()

    def loop(self, image, *args):
        p = nx.run(['losetup', '--find', '--show'] + list(args) + [image],
                   check=False)
        if p.returncode:
            self.skipTest('no loop device: %s' % p.stdout.strip())
        dev = p.stdout.strip()
        self.loops.append(dev)
        return dev

    def fstype(self, mnt):
        with open('/proc/self/mountinfo') as f:
            for line in f:
                parts = line.split()
                if parts[4] == mnt:
                    return parts[parts.index('-') + 1]
        return None

    def assert_held(self, dev, m):
        """Nobody else gets DEV while nextfs has it (P12)."""
        k = tempfile.mkdtemp(dir=self.work)
        self.assertEqual(kernel_mount_errno(dev, k), errno.EBUSY)
        self.assertEqual(excl_open_errno(dev), errno.EBUSY)
        mnt2 = tempfile.mkdtemp(dir=self.work)
        p = nx.run([nx.daemon_path(), dev, mnt2], check=False)
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertIn('is mounted at %s' % m.path, p.stdout)

    def assert_released(self, dev):
        self.assertFalse(locked(dev))
        self.assertEqual(excl_open_errno(dev), 0)
        self.assertFalse(needs_recovery(dev))
        rc, out = nx.fsck(dev)
        self.assertEqual(rc, 0, out)

    def test_fuseblk_by_default_and_umount_waits(self):
        dev = self.loop(self.make_image('128M'))
        with nx.environment(NEXTFS_FAULTS=SLOW):
            with self.mounted(dev) as m:
                self.assertEqual(self.fstype(m.path), 'fuseblk.nextfs')
                fill(m.path)
                self.assert_held(dev, m)
                # A plain umount: the kernel waits for FUSE_DESTROY.
                nx.run(['umount', m.path])
                self.assert_released(dev)

    def test_noblkdev_holds_the_device_itself(self):
        dev = self.loop(self.make_image('128M'))
        with nx.environment(NEXTFS_FAULTS=SLOW):
            with self.mounted(dev, opts=['noblkdev']) as m:
                self.assertEqual(self.fstype(m.path), 'fuse.nextfs')
                fill(m.path)
                self.assert_held(dev, m)
                nextfs('umount', m.path, check=0)
                self.assert_released(dev)

    def test_read_ahead_is_the_mounts_own(self):
        """The readahead window goes to the fuseblk mount's own knob
        (MAJ:MIN-fuseblk), found from the directory the daemon mounted
        on; the device's knob (MAJ:MIN) stays as it was."""
        dev = self.loop(self.make_image('64M'))
        rdev = os.stat(dev).st_rdev
        knob = '/sys/class/bdi/%d:%d%%s/read_ahead_kb' % (
            os.major(rdev), os.minor(rdev))

        def knob_value(suffix=''):
            with open(knob % suffix) as f:
                return int(f.read())

        def set_knob(value):
            with open(knob % '', 'w') as f:
                f.write('%d\n' % value)

        was = knob_value()
        set_knob(256)           # not the kernel's default, nor ours
        try:
            with self.mounted(dev) as m:
                self.assertEqual(self.fstype(m.path), 'fuseblk.nextfs')
                self.assertEqual(knob_value('-fuseblk'), 4096)
                self.assertEqual(knob_value(), 256)
        finally:
            set_knob(was)

    def test_busy_readonly_and_short_devices(self):
        img = self.make_image('64M')
        dev = self.loop(img)
        mnt = tempfile.mkdtemp(dir=self.work)
        k = tempfile.mkdtemp(dir=self.work)
        nx.run(['mount', '-t', 'ext4', '-o', 'ro', dev, k])
        try:
            for opt in ([], ['-o', 'noblkdev']):
                p = nx.run([nx.daemon_path()] + opt + [dev, mnt],
                           check=False)
                self.assertEqual(p.returncode, 2, p.stdout)
                self.assertIn('%s is busy (mounted?)' % dev, p.stdout)
        finally:
            nx.run(['umount', k])
        ro = self.loop(img, '--read-only')
        p = nx.run([nx.daemon_path(), '-o', 'noblkdev', ro, mnt],
                   check=False)
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertRegex(p.stdout, r'%s cannot be written .*mount it with '
                         r'-o ro' % ro)
        with self.mounted(ro, opts=['ro']) as m:
            self.assertIn('lost+found', os.listdir(m.path))
        short = self.loop(img, '--sizelimit', str(48 << 20))
        p = nx.run([nx.daemon_path(), short, mnt], check=False)
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertIn('the device is 48.0 MiB', p.stdout)
        self.assertIn('give nextfs the device that holds all of it',
                      p.stdout)


# ------------------------------------------------------------ wrong input

class WrongInputTest(nx.NxTestCase):

    def refused(self, image, *opts):
        mnt = tempfile.mkdtemp(dir=self.work)
        p = nx.run([nx.daemon_path()] + list(opts) + [image, mnt],
                   check=False)
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertEqual(len(p.stdout.splitlines()), 1, p.stdout)
        return p.stdout

    def blank(self, name, size=1 << 20, at=None, magic=b''):
        path = os.path.join(self.work, name)
        with open(path, 'wb') as f:
            f.truncate(size)
            if at is not None:
                f.seek(at)
                f.write(magic)
        return path

    def test_other_file_systems_are_named(self):
        cases = [
            ('xfs', 0, b'XFSB', 'XFS signature found'),
            ('btrfs', 0x10040, b'_BHRfS_M', 'btrfs signature found'),
            ('swap', 4086, b'SWAPSPACE2', 'swap signature found'),
            ('luks', 0, b'LUKS\xba\xbe', 'LUKS (encrypted) signature'),
        ]
        for name, at, magic, say in cases:
            with self.subTest(name):
                img = self.blank(name + '.img', at=at, magic=magic)
                out = self.refused(img)
                self.assertIn('not an ext2/3/4 file system: ' + say, out)
                # the tools say the same
                p = nextfs('info', img, check=1)
                self.assertIn(say, p.stdout)
        out = self.refused(self.blank('zero.img'))
        self.assertIn('its first 68 KiB are zeros', out)
        out = self.refused(self.blank('empty.img', size=0))
        self.assertIn('is empty (0 bytes)', out)
        out = self.refused(self.blank('tiny.img', size=1500))
        self.assertIn('too small (1500 bytes)', out)

    def test_read_only_image_says_ro_works(self):
        img = self.make_image('64M')
        if os.geteuid() == 0:
            # Root may write any file: a read-only bind mount stops it.
            ro_dir = tempfile.mkdtemp(dir=self.work)
            nx.run(['mount', '--bind', self.work, ro_dir])
            self.addCleanup(nx.run, ['umount', ro_dir])
            nx.run(['mount', '-o', 'remount,bind,ro', ro_dir])
            img = os.path.join(ro_dir, os.path.basename(img))
        else:
            os.chmod(img, 0o444)
        before = nx.sha256_file(img)
        out = self.refused(img)
        self.assertRegex(out, r'%s cannot be written \(.*\); mount it with '
                         r'-o ro to serve it read-only' % re.escape(img))
        with self.mounted(img, opts=['ro'], check=False) as m:
            self.assertIn('lost+found', os.listdir(m.path))
        self.assertEqual(nx.sha256_file(img), before)


if __name__ == '__main__':
    nx.main()
