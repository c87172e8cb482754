#!/usr/bin/env python3
"""Windows "Previous Versions" through Samba (issue 18, point 4).

Serves a nextfs mount with a real smbd on a loopback port, with the share
definition docs/samba.md gives (read from there, so the documented share
is the tested one) and a private configuration: its lock, state, cache,
pid and private directories in the test's work directory, nothing under
/etc or /var touched.  Two unnamed takes ("nextfs snapshot take MNT",
named @GMT-... after the time) hold two versions of a file; smbclient's
allinfo must list both @GMT versions and get "@GMT-...\\FILE" must return
the old content; a snapshot with another name is not offered.

Skipped where smbd cannot run: smbd, smbclient or the shadow_copy2 module
(packages samba, smbclient, samba-vfs-modules) missing, or not root
(smbd serves guests as "nobody", switching users).

Runs once (no flavour).
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import time

import nxharness as nx
from nxharness import write_file

DOC = os.path.join(nx.SRCROOT, 'docs', 'samba.md')
DOC_MNT = '/srv/nextfs'


def take_unnamed(m):
    """nextfs snapshot take MNT: the @GMT name it printed."""
    name = nx.run([nx.tool_path(), 'snapshot', 'take', m.path],
                  stderr=subprocess.PIPE).stdout.strip()
    if not re.fullmatch(r'@GMT-\d{4}\.\d\d\.\d\d-\d\d\.\d\d\.\d\d', name):
        raise AssertionError('not a @GMT name: %r' % name)
    return name


def documented_share(mnt):
    """The [share] block of docs/samba.md, for the mountpoint MNT."""
    return nx.doc_block(DOC, 'samba-share').replace(DOC_MNT, mnt)


def shadow_copy2_module():
    p = nx.run(['smbd', '-b'], check=False)
    m = re.search(r'MODULESDIR:\s*(\S+)', p.stdout)
    return m and os.path.join(m.group(1), 'vfs', 'shadow_copy2.so')


class Smbd:
    """An smbd of our own: private directories below DIR, port PORT."""

    def __init__(self, d, share):
        self.dir = d
        self.port = nx.free_port()
        self.conf = os.path.join(d, 'smb.conf')
        self.log = os.path.join(d, 'smbd.log')
        for sub in ('lock', 'state', 'cache', 'pid', 'private', 'ncalrpc'):
            os.mkdir(os.path.join(d, sub), 0o755)
        with open(self.conf, 'w') as f:
            f.write('\n'.join([
                '[global]',
                'server role = standalone server',
                'map to guest = Bad User',
                'guest account = nobody',
                'smb ports = %d' % self.port,
                'interfaces = 127.0.0.1',
                'bind interfaces only = yes',
                'disable netbios = yes',
                'lock directory = %s/lock' % d,
                'state directory = %s/state' % d,
                'cache directory = %s/cache' % d,
                'pid directory = %s/pid' % d,
                'private dir = %s/private' % d,
                'ncalrpc dir = %s/ncalrpc' % d,
                'passdb backend = tdbsam:%s/private/passdb.tdb' % d,
                'log file = %s' % self.log,
                'load printers = no',
                'printcap name = /dev/null',
                'disable spoolss = yes',
                '', share]))
        self.proc = None

    def start(self, timeout=30):
        with open(self.log + '.out', 'wb') as out:
            self.proc = subprocess.Popen(
                ['smbd', '--foreground', '--no-process-group', '-s',
                 self.conf], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:                 # until it accepts connections
            if self.proc.poll() is not None:
                raise AssertionError('smbd exited with status %d:\n%s' %
                                     (self.proc.returncode, self.output()))
            try:
                socket.create_connection(('127.0.0.1', self.port),
                                         0.5).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError('smbd does not listen on port %d:'
                                         '\n%s' % (self.port, self.output()))
                time.sleep(0.05)

    def output(self):
        text = ''
        for p in (self.log + '.out', self.log):
            try:
                with open(p, errors='replace') as f:
                    text += f.read()[-3000:]
            except OSError:
                pass
        return text

    def stop(self):
        """smbd and every child it forked (its own session)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(10)
                break
            except subprocess.TimeoutExpired:
                continue
        # the children in its session: gone with the leader or killed
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def client(self, command):
        p = nx.run(['smbclient', '//127.0.0.1/history', '-p',
                    str(self.port), '-N', '-s', self.conf, '-c', command],
                   check=False, cwd=self.dir)
        if p.returncode != 0:
            raise AssertionError('smbclient -c %r: exit %d\n%s\n%s' %
                                 (command, p.returncode, p.stdout,
                                  self.output()))
        return p.stdout


class SambaTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        self.need_fuse_daemon()
        for prog in ('smbd', 'smbclient'):
            if not shutil.which(prog):
                self.skipTest('%s is not installed (packages samba, '
                              'smbclient)' % prog)
        mod = shadow_copy2_module()
        if not mod or not os.path.exists(mod):
            self.skipTest('no vfs_shadow_copy2 module (%s; package '
                          'samba-vfs-modules)' % mod)
        if os.geteuid() != 0:
            self.skipTest('smbd needs root to serve guests as nobody')

    def test_previous_versions(self):
        img = self.make_image()
        with self.mounted(img, check=False) as m:
            # smbd opens files as nobody: the harness mounts as root with
            # allow_other, as docs/samba.md says a share needs
            self.assertIn('allow_other', open('/proc/self/mountinfo')
                          .read().split(m.path, 1)[1].split('\n', 1)[0])
            write_file(m.p('report.txt'), b'first draft\n')
            old = take_unnamed(m)
            write_file(m.p('report.txt'), b'second draft, longer\n')
            new = take_unnamed(m)
            os.mkdir(m.p('.snapshots', 'monday'))
            write_file(m.p('report.txt'), b'live\n')
            sd = os.path.join(self.work, 'samba')
            os.mkdir(sd)
            smbd = Smbd(sd, documented_share(m.path))
            try:
                smbd.start()
                info = smbd.client('allinfo report.txt')
                versions = re.findall(r'^(@GMT-[\d.-]+)$', info, re.M)
                self.assertEqual(sorted(versions), [old, new], info)
                self.assertNotIn('monday', info)
                smbd.client('get "%s\\report.txt" old.txt' % old)
                with open(os.path.join(sd, 'old.txt'), 'rb') as f:
                    self.assertEqual(f.read(), b'first draft\n')
                smbd.client('get "%s\\report.txt" new.txt' % new)
                with open(os.path.join(sd, 'new.txt'), 'rb') as f:
                    self.assertEqual(f.read(), b'second draft, longer\n')
                smbd.client('get report.txt live.txt')
                with open(os.path.join(sd, 'live.txt'), 'rb') as f:
                    self.assertEqual(f.read(), b'live\n')
                # .snapshots itself is not in the share's listing
                self.assertNotIn('.snapshots', smbd.client('ls'))
            finally:
                smbd.stop()
        from nxsnap import fsck_masked
        rc, out = fsck_masked(img)
        self.assertEqual(rc, 0, out)


if __name__ == '__main__':
    nx.main()
