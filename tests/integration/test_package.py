#!/usr/bin/env python3
"""The Debian package: build it from this source tree with
"dpkg-buildpackage -us -uc -b" (in a copy, in a temporary directory),
install it with "dpkg -i" into this machine, use the installed programs
(mount an image from an fstab line of type nextfs with "mount -T FSTAB",
i.e. through /sbin/mount.nextfs and /usr/bin/nextfs-fuse, take a
snapshot through the mount with /usr/bin/nextfs, unmount with umount(8),
which waits through /sbin/umount.nextfs, check), then purge it ("dpkg
-P") and check that none of its files is left.  The package is purged
even if the test fails; /etc/fstab and /run/mount/utab are never touched
(an fstab of its own, LIBMOUNT_UTAB).

Skipped, with the reason, when the machine cannot do it: not root (dpkg
-i), dpkg-buildpackage or a build dependency missing (.ci/run installs
them), a nextfs package or nextfs files already installed (the test
would replace and then remove them), a sanitizer build (the package is
built with its own flags: one run, in the ordinary build, is enough), or
no usable /dev/fuse.  Takes about 40 s, most of it compiling.
"""

import json
import os
import shutil
import subprocess
import time

import nxharness as nx

PACKAGE = 'nextfs'
BINARIES = ('/usr/bin/nextfs', '/usr/bin/nextfs-fuse')
HELPERS = ('/sbin/mount.nextfs', '/sbin/mount.fuse.nextfs',
           '/sbin/umount.nextfs', '/sbin/umount.fuse.nextfs',
           '/sbin/umount.fuseblk.nextfs')
# What the package must hold (it may hold more).
REQUIRED = BINARIES + HELPERS + (
    '/usr/share/man/man1/nextfs.1.gz',
    '/usr/share/man/man1/nextfs-fuse.1.gz',
    '/usr/share/bash-completion/completions/nextfs',
    '/usr/share/bash-completion/completions/nextfs-fuse',
    '/usr/share/doc/nextfs/README.md.gz',
    '/usr/share/doc/nextfs/snapshots.md.gz',
    '/usr/share/doc/nextfs/copyright',
    '/usr/share/doc/nextfs/changelog.gz',
)
DPKG_LOCK_WAIT = 300      # seconds: other dpkg/apt runs may hold the lock


def installed_version():
    """The installed version of the package, or None."""
    p = subprocess.run(['dpkg-query', '-W', '-f', '${db:Status-Abbrev} '
                        '${Version}', PACKAGE], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    if p.returncode != 0 or not p.stdout.startswith('i'):
        return None
    return p.stdout.split()[-1]


def dpkg(*args):
    """Run dpkg, waiting while another dpkg or apt holds its lock."""
    deadline = time.monotonic() + DPKG_LOCK_WAIT
    while True:
        p = nx.run(['dpkg'] + list(args), check=False)
        if p.returncode == 0:
            return p
        if 'lock' not in p.stdout or time.monotonic() > deadline:
            raise AssertionError('dpkg %s failed with status %d:\n%s' %
                                 (' '.join(args), p.returncode, p.stdout))
        time.sleep(1)


def purge():
    if installed_version() is not None or subprocess.run(
            ['dpkg-query', '-W', PACKAGE], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL).returncode == 0:
        dpkg('-P', PACKAGE)


def source_files():
    """The files of this source tree (what git tracks or would track)."""
    p = subprocess.run(['git', '-C', nx.SRCROOT, 'ls-files', '-z',
                        '--cached', '--others', '--exclude-standard'],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    if p.returncode == 0 and p.stdout:
        return [f for f in p.stdout.decode().split('\0')
                if f and os.path.lexists(os.path.join(nx.SRCROOT, f))]
    out = []
    for d, dirs, files in os.walk(nx.SRCROOT):
        rel = os.path.relpath(d, nx.SRCROOT)
        dirs[:] = [x for x in dirs if rel != '.' or not (
            x.startswith('build') or x.startswith('obj-') or x == '.git')]
        out += [os.path.normpath(os.path.join(rel, f)) for f in files]
    return out


class PackageTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        self.need_root()
        if os.environ.get('NEXTFS_B_SANITIZE', 'none') != 'none':
            self.skipTest('sanitizer build: the package is built with its '
                          'own flags and tested in the ordinary build')
        for prog in ('dpkg-buildpackage', 'dpkg-checkbuilddeps', 'dh'):
            if not shutil.which(prog):
                self.skipTest('%s is not installed (apt-get install '
                              'dpkg-dev debhelper)' % prog)
        p = nx.run(['dpkg-checkbuilddeps', '-B'], check=False,
                   cwd=nx.SRCROOT)
        if p.returncode != 0:
            self.skipTest('build dependencies missing: %s' %
                          p.stdout.strip())
        if installed_version() is not None:
            self.skipTest('a %s package (%s) is installed: the test would '
                          'replace and purge it' %
                          (PACKAGE, installed_version()))
        for f in BINARIES + HELPERS:
            if os.path.lexists(f):
                self.skipTest('%s exists (not from a package): the test '
                              'would replace it' % f)
        why = nx.fuse_unusable_reason()
        if why:
            self.skipTest(why)
        self.version = os.environ.get('NEXTFS_PROJECT_VERSION')
        if not self.version:
            self.skipTest('NEXTFS_PROJECT_VERSION not set (run through '
                          'meson test)')

    def build_package(self):
        """Build in a copy of the tree; returns the path of the .deb."""
        src = os.path.join(self.work, 'src')
        for f in source_files():
            dst = os.path.join(src, f)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.join(nx.SRCROOT, f), dst,
                         follow_symlinks=False)
        env = dict(os.environ,
                   DEB_BUILD_OPTIONS='noddebs parallel=%d' %
                   (os.cpu_count() or 1))
        for k in ('ASAN_OPTIONS', 'UBSAN_OPTIONS', 'MESON_TESTTHREADS'):
            env.pop(k, None)
        nx.run(['dpkg-buildpackage', '-us', '-uc', '-b'], cwd=src, env=env)
        arch = nx.run(['dpkg', '--print-architecture']).stdout.strip()
        deb = os.path.join(self.work, 'nextfs_%s_%s.deb' %
                           (self.version, arch))
        self.assertTrue(os.path.exists(deb), 'expected %s, got %s' %
                        (deb, sorted(os.listdir(self.work))))
        return deb

    def check_control(self, deb):
        field = lambda f: nx.run(['dpkg-deb', '-f', deb, f]).stdout.strip()
        self.assertEqual(field('Package'), PACKAGE)
        self.assertEqual(field('Version'), self.version)
        depends = {d.split()[0] for d in field('Depends').split(', ')}
        for d in ('fuse3', 'e2fsprogs', 'libfuse3-3', 'libext2fs2',
                  'libc6'):
            self.assertIn(d, depends)

    def use_installed_programs(self):
        """Mount with the installed daemon, snapshot with the installed
        tool, unmount, check the volume."""
        for prog in BINARIES:
            out = nx.run([prog, '--version']).stdout.splitlines()[0]
            self.assertEqual(out, '%s %s' % (os.path.basename(prog),
                                             self.version))
        img = self.make_image(size='32M')
        mnt = os.path.join(self.work, 'mnt')
        os.mkdir(mnt)
        fstab = os.path.join(self.work, 'fstab')
        with open(fstab, 'w') as f:
            f.write('%s %s nextfs noauto,nofail,x-systemd.automount,rw '
                    '0 0\n' % (img, mnt))
        with nx.environment(LIBMOUNT_UTAB=os.path.join(self.work, 'utab')):
            nx.run(['mount', '-T', fstab, mnt])
            self.addCleanup(self.unmount_if_mounted, mnt)
            pids = [p for p in os.listdir('/proc') if p.isdigit() and
                    self.cmdline(p)[:1] == [b'/usr/bin/nextfs-fuse'] and
                    img.encode() in self.cmdline(p)]
            self.assertEqual(len(pids), 1, 'no /usr/bin/nextfs-fuse for %s'
                             % img)
            nx.write_file(os.path.join(mnt, 'notes.txt'), b'version 1\n')
            nx.run(['/usr/bin/nextfs', 'snapshot', 'take', mnt, 'monday'])
            nx.write_file(os.path.join(mnt, 'notes.txt'), b'version 2\n')
            self.assertEqual(nx.read_file(os.path.join(
                mnt, '.snapshots', 'monday', 'notes.txt')), b'version 1\n')
            listed = json.loads(nx.run(['/usr/bin/nextfs', 'snapshot',
                                        'list', '--json', mnt]).stdout)
            self.assertEqual([s['name'] for s in listed], ['monday'])
            # umount(8) runs /sbin/umount.nextfs: it returns once the
            # daemon has written the image back and let go of it.
            nx.run(['umount', mnt])
            self.assertFalse(nx.is_mounted(mnt))
            self.assertFalse(nx.volume_locked(img))
        # snapshot-aware check (runs e2fsck through a private FUSE mount)
        nx.run(['/usr/bin/nextfs', 'check', img])
        nx.run(['/usr/bin/nextfs', 'snapshot', 'delete', img, 'monday'])
        rc, out = nx.fsck(img)
        self.assertEqual(rc, 0, out)

    @staticmethod
    def cmdline(pid):
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as f:
                return f.read().split(b'\0')
        except OSError:
            return []

    @staticmethod
    def unmount_if_mounted(mnt):
        if nx.is_mounted(mnt):
            nx.run(['/usr/bin/nextfs', 'umount', mnt], check=False)
        if nx.is_mounted(mnt):
            nx.run(['umount', '-l', mnt], check=False)

    def test_build_install_use_purge(self):
        deb = self.build_package()
        self.check_control(deb)
        self.addCleanup(purge)          # also when anything below fails
        dpkg('-i', deb)
        self.assertEqual(installed_version(), self.version)
        files = [f for f in nx.run(['dpkg', '-L', PACKAGE]).stdout
                 .splitlines() if f.startswith('/')]
        for f in REQUIRED:
            self.assertIn(f, files)
        self.assertEqual(os.readlink('/usr/share/bash-completion/'
                                     'completions/nextfs-fuse'), 'nextfs')
        self.use_installed_programs()
        dpkg('-P', PACKAGE)
        p = subprocess.run(['dpkg-query', '-W', PACKAGE],
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        self.assertNotEqual(p.returncode, 0, 'dpkg still knows the package')
        left = [f for f in files
                if os.path.lexists(f) and not os.path.isdir(f)]
        self.assertEqual(left, [], 'files left after dpkg -P')
        self.assertFalse(os.path.lexists('/usr/share/doc/nextfs'))


if __name__ == '__main__':
    nx.main(require_fuse=False)
