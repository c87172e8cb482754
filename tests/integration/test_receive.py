#!/usr/bin/env python3
"""test_receive.py - nextfs receive (docs/replication.md, docs/design.md
P17): streams of a real "btrfs send" (full and incremental, every kind of
change) received into images and mounts equal btrfs's snapshots; a cut,
killed or stopped receive resumes (same stream, or a resume stream built
from the token) to the same end; hostile and corrupt streams leave the
target as it was; preconditions refuse without writing; a user receives
into their own image.  Runs once (the receive goes through the fs layer
like every write; the round trip also runs on ext2, indirect-mapped with
1 KiB blocks).
"""

import json
import os
import random
import signal
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import nxharness as nx
import nxsnap
import nxstream as ns

NEXTFS = nx.tool_path()


def receive(target, *args, stream=None, data=None, user=None):
    """Run nextfs receive; (exit status, stdout, stderr)."""
    argv = [NEXTFS, 'receive'] + list(args) + [target]
    if stream:
        argv[2:2] = ['-f', stream]
    if user:
        argv = nx.as_user_argv(*user) + argv
    p = subprocess.run(argv, input=data, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE,
                       stdin=None if data is not None else subprocess.DEVNULL)
    out, err = p.stdout.decode(errors='replace'), \
        p.stderr.decode(errors='replace')
    for text in (out, err):
        rep = nx.sanitizer_report(text)
        if rep:
            raise AssertionError('sanitizer report:\n' + rep)
    return p.returncode, out, err


def snapshots(img):
    p = nx.run([NEXTFS, 'snapshot', 'list', '--json', img])
    return [s['name'] for s in json.loads(p.stdout)]


class Streams:
    """The btrfs streams every test uses, made once (class setup)."""

    def __init__(self, work, seed):
        with ns.Btrfs(work) as b:
            v = b.subvolume('v')
            ns.populate(v, seed)
            b.snapshot('v', 's1')
            ns.mutate(v, seed + 1)
            b.snapshot('v', 's2')
            ns.mutate(v, seed + 2)
            b.snapshot('v', 's3')
            self.full = b.send('s1', os.path.join(work, 's1.stream'))
            self.i2 = b.send('s2', os.path.join(work, 's2.stream'),
                             parent='s1')
            # the third in version 2 of the format where btrfs has it
            self.v2 = '--proto' in nx.run(['btrfs', 'send', '--help'],
                                          check=False).stdout
            self.i3 = b.send('s3', os.path.join(work, 's3.stream'),
                             parent='s2',
                             extra=['--proto', '2'] if self.v2 else [])
            self.snap = {n: ns.manifest(b.p(n), root_mtime=False)
                         for n in ('s1', 's2', 's3')}
            self.live = {n: ns.manifest(b.p(n)) for n in ('s1', 's2', 's3')}


class ReceiveTest(nx.NxTestCase):

    @classmethod
    def setUpClass(cls):
        cls.streams = None
        cls.why = ns.btrfs_unusable_reason()
        if cls.why:
            return
        cls.shared = tempfile.mkdtemp(prefix='nxrecv.', dir=nx.tmp_root())
        os.chmod(cls.shared, 0o755)
        seed = int(os.environ.get('NEXTFS_SEED') or
                   random.randrange(1 << 30))
        print('seed %d (NEXTFS_SEED to repeat)' % seed, file=sys.stderr)
        cls.streams = Streams(cls.shared, seed)

    @classmethod
    def tearDownClass(cls):
        if cls.streams:
            shutil.rmtree(cls.shared, True)

    def need_streams(self):
        if not self.streams:
            self.skipTest('no btrfs streams: ' + self.why)
        return self.streams

    def assert_received(self, m, names, live):
        """The snapshots NAMES of the mount M and its live tree are
        btrfs's."""
        st = self.need_streams()
        for n in names:
            self.assertTreesEqual(st.snap[n], ns.manifest(
                m.p('.snapshots', n), root_mtime=False), 'snapshot ' + n)
        self.assertTreesEqual(st.live[live], ns.manifest(m.path), 'live')

    def assert_clean(self, img):
        rc, out = nxsnap.fsck_masked(img)
        self.assertEqual(rc, 0, 'e2fsck -fn (masked):\n' + nx.tail(out, 30))
        p = nx.run([NEXTFS, 'check', img], check=False)
        self.assertEqual(p.returncode, 0, 'nextfs check:\n' + p.stdout)

    def ok(self, rc_out_err, what=''):
        rc, out, err = rc_out_err
        self.assertEqual(rc, 0, '%s: exit %d:\n%s%s' % (what, rc, out, err))
        return out

    # ------------------------------------------------------ round trips

    def test_btrfs_streams_into_images_and_a_mount(self):
        """Full and incremental streams of btrfs, every kind of change:
        offline into ext4, the third (version 2 of the format) through a
        mount; all three offline into ext2 (indirect-mapped, 1 KiB
        blocks)."""
        st = self.need_streams()
        img = self.make_image('128M', flavour='ext4')
        self.ok(receive(img, stream=st.full), 'full')
        out = self.ok(receive(img, '--json', stream=st.i2), 'i2')
        rep = json.loads(out)
        self.assertEqual(rep['status'], 'received')
        self.assertEqual((rep['snapshot'], rep['parent']), ('s2', 's1'))
        self.assertTrue(rep['incremental'])
        self.assertEqual(snapshots(img), ['s1', 's2'])
        self.assertEqual(nx.read_file(st.i3)[13], 2 if st.v2 else 1)
        with self.mounted(img, check=False) as m:
            os.listdir(m.path)      # the kernel caches some of it
            self.ok(receive(m.path, stream=st.i3), 'i3 into the mount')
            self.assert_received(m, ('s1', 's2', 's3'), 's3')
        self.assert_clean(img)
        # a received snapshot is the parent of the next one by the
        # sender's identity: s3 again is refused as received already
        rc, out, err = receive(img, stream=st.i3)
        self.assertEqual(rc, 1)
        self.assertIn('exists on the target already', err)
        img2 = self.make_image('128M', name='ext2.img', flavour='ext2')
        for s in (st.full, st.i2, st.i3):
            self.ok(receive(img2, stream=s), s)
        with self.mounted(img2, check=False) as m:
            self.assert_received(m, ('s1', 's2', 's3'), 's3')
        self.assert_clean(img2)

    # ------------------------------------------------- interruptions

    def cut_points(self, path, n):
        data = nx.read_file(path)
        _, cmds = ns.parse(data)
        rng = random.Random(len(data))
        # inside the stream: in a command, at a boundary, in the middle
        pts = sorted(rng.randrange(cmds[2].offset, len(data) - 1)
                     for _ in range(n))
        return data, pts

    def test_cut_streams_resume(self):
        """A stream cut anywhere leaves a receive pending (exit 3, a token
        printed); --resume with the whole stream, or with the resume
        stream built from the token, ends where an uncut receive does."""
        st = self.need_streams()
        img = self.make_image('128M')
        data, pts = self.cut_points(st.full, 2)
        for i, k in enumerate(pts):     # the second resumes, cut again
            rc, out, err = receive(img, *(['--resume'] if i else []),
                                   data=data[:k])
            self.assertEqual(rc, 3, err)
            self.assertIn('stopped before command', err)
            self.assertEqual(snapshots(img), [])
        tok = self.ok(receive(img, '--token')).strip()
        # a resume cut again before it reaches the cursor applies
        # nothing and is still an interruption: exit 3, the same token
        rc, out, err = receive(img, '--resume', data=data[:pts[-1]])
        self.assertEqual(rc, 3, err)
        self.assertEqual(self.ok(receive(img, '--token')).strip(), tok)
        t = ns.decode_token(tok)
        self.assertGreater(t['index'], 2)
        # another stream with the same first command: every CRC fine,
        # one command before the cursor with its attributes in another
        # order (the same length): the prefix hash differs; refused
        _, cmds = ns.parse(data)
        c = [c for c in cmds[1:t['index']] if len(c.attrs) > 1][-1]
        forged = data[:c.offset] + ns.command(
            c.type, list(reversed(list(c.attrs.items())))) + \
            data[c.offset + len(c.raw):]
        self.assertEqual(len(forged), len(data))
        rc, out, err = receive(img, '--resume', data=forged)
        self.assertEqual(rc, 1, err)
        self.assertIn('differs from the one', err)
        self.assertEqual(self.ok(receive(img, '--token')).strip(), tok)
        self.ok(receive(img, '--resume', data=ns.resume_stream(data, tok)),
                'resume stream')
        data, pts = self.cut_points(st.i2, 1)
        rc, out, err = receive(img, data=data[:pts[0]])
        self.assertEqual(rc, 3, err)
        rc, out, err = receive(img, data=data)          # no --resume
        self.assertEqual(rc, 1)
        self.assertIn('is pending on the target', err)
        self.ok(receive(img, '--resume', stream=st.i2), 'resume i2')
        self.assertEqual(receive(img, '--token')[0], 1)
        with self.mounted(img, check=False) as m:
            self.assert_received(m, ('s1', 's2'), 's2')
        self.assert_clean(img)

    def feed_and_kill(self, target, data, sig, after, args=()):
        """Pipe DATA into nextfs receive slowly; send SIG after AFTER
        bytes; its exit status."""
        p = subprocess.Popen([NEXTFS, 'receive'] + list(args) + [target],
                             stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        try:
            p.stdin.write(data[:after])
            p.stdin.flush()
            time.sleep(0.3)             # let it apply what it has
            p.send_signal(sig)
            try:
                p.stdin.write(data[after:after + 4096])
                p.stdin.close()
            except BrokenPipeError:
                pass
            err = p.stderr.read()
            p.wait(timeout=60)
            p.stderr.close()
        finally:
            if p.poll() is None:
                p.kill()
        return p.returncode, err.decode(errors='replace')

    def big_stream(self):
        """A crafted full stream of 24 MiB of data between two sets of
        small files: a receive killed after 18 MiB has committed (every
        16 MiB of stream) a cursor in the middle."""
        s = ns.Stream()
        s.subvol('big', bytes([9] * 16)).mkdir('a').mkdir('b')
        for i in range(100):
            s.mkfile('a/%d' % i).write('a/%d' % i, 0, b'%d' % i)
        s.mkfile('huge')
        chunk = nx.pattern(49152, 7)
        for off in range(0, 24 << 20, len(chunk)):
            s.write('huge', off, chunk)
        for i in range(100):
            s.mkfile('b/%d' % i).rename('b/%d' % i, 'b/r%d' % i)
            s.link('b/l%d' % i, 'a/%d' % i)
        return bytes(s.end().data)

    def test_killed_receivers_resume(self):
        """kill -9 of the tool after a commit in the middle, SIGINT of the
        resumed one (exit 3), kill -9 of the tool feeding a mount, and
        kill -9 of the daemon itself after a commit in the middle of a
        receive: each time --resume completes it, nothing twice."""
        st = self.need_streams()
        big = self.big_stream()
        ref = self.make_image('128M', name='ref.img')
        self.ok(receive(ref, data=big), 'uninterrupted')
        img = self.make_image('128M')
        rc, err = self.feed_and_kill(img, big, signal.SIGKILL, 18 << 20)
        self.assertEqual(rc, -signal.SIGKILL)
        t = ns.decode_token(self.ok(receive(img, '--token')).strip())
        self.assertGreater(t['offset'], 8 << 20)    # committed mid-way
        rc, err = self.feed_and_kill(img, big, signal.SIGINT, 22 << 20,
                                     ['--resume'])
        self.assertEqual(rc, 3, err)
        self.assertIn('stopped by signal', err)
        self.ok(receive(img, '--resume', data=big))
        with self.mounted(ref, check=False) as m:
            want = ns.manifest(m.path, times=False)   # (it sets none)
        with self.mounted(img, check=False) as m:
            self.assertTreesEqual(want, ns.manifest(m.path, times=False),
                                  'resumed')
            self.ok(receive(m.path, '-F', stream=st.full))
            i2 = nx.read_file(st.i2)
            rc, err = self.feed_and_kill(m.path, i2, signal.SIGKILL,
                                         len(i2) // 2)
            self.assertEqual(rc, -signal.SIGKILL)
            # the daemon stops the dead client's session at the next BEGIN
            self.ok(receive(m.path, '--resume', stream=st.i2))
            i3 = nx.read_file(st.i3)
            p = subprocess.Popen([NEXTFS, 'receive', m.path],
                                 stdin=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
            p.stdin.write(i3[:len(i3) // 2])
            p.stdin.flush()
            time.sleep(0.3)
            fd = os.open(m.path, os.O_RDONLY)
            os.fsync(fd)                # a commit in the middle
            os.close(fd)
            m.kill()                    # the daemon dies: a crash
            p.kill()
            p.wait()
            try:
                p.stdin.close()
            except BrokenPipeError:
                pass
        # after the crash: journal replay at the next open, then resume
        t = ns.decode_token(self.ok(receive(img, '--token')).strip())
        self.assertGreater(t['index'], 1)
        self.ok(receive(img, '--resume', stream=st.i3), 'after a crash')
        with self.mounted(img, check=False) as m:
            self.assert_received(m, ('s1', 's2', 's3'), 's3')
        self.assert_clean(img)

    # ------------------------------------------------ hostile streams

    UA = bytes(range(16))
    UB = bytes(range(16, 32))

    def base(self, img):
        """A small tree received from a crafted full stream."""
        s = ns.Stream()
        s.subvol('base', self.UA)
        s.mkdir('d').mkdir('d/sub').mkfile('a').write('a', 0, b'A' * 5000)
        s.mkfile('b').write('b', 0, b'B' * 100).mkfile('d/c')
        s.symlink('sl', 'd').link('d/a2', 'a')
        s.set_xattr('a', 'user.x', b'1').chmod('a', 0o640).end()
        self.ok(receive(img, data=bytes(s.data)), 'base')

    def incremental(self, *cmds, prefix=True):
        """An incremental stream on base: a few valid changes, then CMDS."""
        s = ns.Stream()
        s.snapshot('next', self.UB, self.UA)
        if prefix:      # parks a, moves b, writes, creates: to roll back
            s.unlink('a').rename('b', 'd/b2').write('d/c', 0, b'C' * 9000)
            s.mkfile('new').write('new', 10, b'new').truncate('d/a2', 1)
            s.mkdir('nd').rename('d/sub', 'nd/sub')
        for c in cmds:
            c(s)
        return bytes(s.data)

    def state(self, img):
        with self.mounted(img, check=False) as m:
            man = ns.manifest(m.path)
            inos = {r: os.lstat(m.p(r)).st_ino for r in man if r[0] != '/'}
        return man, inos

    def test_hostile_streams_roll_back(self):
        """Each hostile or corrupt stream fails with one line naming the
        command, after valid commands changed the tree: the live tree is
        the parent again, every file under its own inode number, no
        snapshot, nothing pending, and a good stream then needs no -F."""
        img = self.make_image('64M')
        self.base(img)
        before, inos = self.state(img)
        cases = [
            ('an absolute path', lambda s: s.mkfile('/etc/x')),
            ("'..'", lambda s: s.mkfile('d/../../x')),
            ("'..'", lambda s: s.rename('d', '../escaped')),
            ('an absolute path', lambda s: s.rename('/etc', 'x')),
            ('empty', lambda s: s.mkfile('d//x')),
            ('not a directory', lambda s: s.mkfile('sl/x')),
            ('nextfs', lambda s: s.mkdir('.snapshots/x')),
            ('nextfs', lambda s: s.mkdir('.nextfs-receive')),
            ('Invalid argument', lambda s: s.rename('nd', 'nd/sub/in')),
            ('not a regular file', lambda s: s.write('d', 0, b'x')),
            ('largest file', lambda s: s.truncate('d/c', 1 << 62)),
            ('largest file', lambda s: s.write('d/c', (1 << 62), b'x')),
            ('other than', lambda s: s.clone('d/c', 0, 10, b'\7' * 16,
                                             'a', 0)),
            ('not there', lambda s: s.unlink('nope')),
            ('exists already', lambda s: s.mkfile('nd')),
            ('not empty', lambda s: s.rmdir('nd')),
            ('not empty', lambda s: s.mkdir('e').rename('e', 'd')),
            ('hard link to a directory', lambda s: s.link('l', 'd')),
            ('unknown command type 200', lambda s: s.add(200)),
            ('checksum mismatch', lambda s: s.add(
                'UNLINK', ('PATH', 'new'), crc=1)),
            ('runs past the end', lambda s: s.raw(ns.command_raw(
                ns.C['UNLINK'], b'\x0f\x00\x40\x00new'))),
            ('a second snapshot', lambda s: s.subvol('again', self.UB)),
            ('permission bits', lambda s: s.chmod('d/c', 0o170777)),
        ]
        for what, c in cases:
            rc, out, err = receive(img, data=self.incremental(c))
            self.assertEqual(rc, 1, '%s: %s' % (what, err))
            self.assertIn(what, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertIn('back at snapshot', err)
            self.assertEqual(snapshots(img), ['base'])
            self.assertEqual(receive(img, '--token')[0], 1)
        after, inos2 = self.state(img)
        self.assertTreesEqual(before, after, 'after the hostile streams')
        self.assertEqual(inos, inos2)
        # through a mount: the daemon rolls back and the kernel forgets
        # what it had cached of the changes (no remount in between)
        with self.mounted(img, check=False) as m:
            self.assertTreesEqual(before, ns.manifest(m.path))
            rc, out, err = receive(m.path, data=self.incremental(
                lambda s: s.write('d', 0, b'x')))
            self.assertEqual(rc, 1, err)
            self.assertIn('back at snapshot', err)
            self.assertTreesEqual(before, ns.manifest(m.path), 'mounted')
        # the live tree is unchanged since base: a good one needs no -F;
        # nextfs's records of the sender's volume in it change nothing
        # here (a sender reading an image raw passes them on)
        forged = ns.Stream()
        forged.snapshot('next', self.UB, self.UA)
        forged.set_xattr('', 'system.nextfs.received', b'\7' * 32)
        forged.set_xattr('', 'system.nextfs.recv', b'\7' * 200).end()
        self.ok(receive(img, data=bytes(forged.data)))
        self.assertEqual(snapshots(img), ['base', 'next'])
        self.assertEqual(receive(img, '--token')[0], 1)   # no cursor
        s = ns.Stream()         # next is known by its true identity
        s.snapshot('after', bytes([0xcc] * 16), self.UB).end()
        self.ok(receive(img, data=bytes(s.data)))
        self.assert_clean(img)

    def test_refusals_write_nothing(self):
        """A full stream into a tree that is not empty, an incremental one
        without its parent, a name taken, a live tree changed since the
        parent: refused, the image byte for byte as it was; -F then
        rolls back and receives; --abort gives up a pending receive."""
        img = self.make_image('64M')
        self.base(img)
        h = nx.sha256_file(img)
        s = ns.Stream()
        s.subvol('other', self.UB).mkfile('x').end()
        full = bytes(s.data)
        s = ns.Stream()
        s.snapshot('x', self.UB, bytes(16)).end()
        for data, what in ((full, 'needs a target without snapshots'),
                           (s.data, 'does not have'),
                           (self.incremental(lambda s: s.end())[:30] +
                            b'', 'cut'),
                           (b'not a stream at all', 'not a btrfs send')):
            rc, out, err = receive(img, data=bytes(data))
            self.assertIn(rc, (1, 3), err)
            self.assertIn(what, err)
            self.assertEqual(nx.sha256_file(img), h, what)
        s = ns.Stream()
        s.snapshot('base', self.UB, self.UA).end()
        rc, out, err = receive(img, data=bytes(s.data))
        self.assertIn('exists on the target already', err)
        self.assertEqual(nx.sha256_file(img), h)
        with self.mounted(img, check=False) as m:
            nx.write_file(m.p('d', 'changed'), b'x')
        h = nx.sha256_file(img)
        rc, out, err = receive(img, data=self.incremental(lambda s: s.end()))
        self.assertEqual(rc, 1)
        self.assertIn("changed since snapshot 'base' (M /d)", err)
        self.assertEqual(nx.sha256_file(img), h)
        # a pending receive: a new one refuses, --abort gives it up (on
        # the mount: the daemon's); -F through the mount rolls back the
        # change made since base and receives
        data = self.incremental(lambda s: s.end())
        self.assertEqual(receive(img, '-F', data=data[:-12])[0], 3)
        rc, out, err = receive(img, data=data)
        self.assertIn('is pending', err)
        with self.mounted(img, check=False) as m:
            self.ok(receive(m.path, '--abort'))
            self.assertEqual(receive(m.path, '--token')[0], 1)
            # (the cut -F receive had rolled d/changed back already)
            self.assertFalse(os.path.exists(m.p('d', 'changed')))
            nx.write_file(m.p('d', 'again'), b'x')
            os.unlink(m.p('b'))
            # the kernel caches d/c (empty) and the names: the daemon
            # must make it forget what the receive changes
            self.assertEqual(nx.read_file(m.p('d', 'c')), b'')
            self.assertFalse(os.path.exists(m.p('new')))
            self.ok(receive(m.path, '-F', data=data), '-F')
            self.assertEqual(nx.read_file(m.p('d', 'c')), b'C' * 9000)
            self.assertEqual(nx.read_file(m.p('new')), b'\0' * 10 + b'new')
            self.assertFalse(os.path.exists(m.p('d', 'again')))
            self.assertFalse(os.path.exists(m.p('a')))
            self.assertEqual(nx.read_file(m.p('d', 'b2')), b'B' * 100)
        self.assert_clean(img)

    # --------------------------------------------------- sending on

    def sent_by_b(self):
        """B, an ext4 image that received A's (btrfs's) s1, s2 and s3,
        sends them on: s1 full from the image (read raw), s2 and s3
        incremental from B's mount.  Made once: {name: stream file}."""
        cls = type(self)
        if not getattr(cls, 'b_streams', None):
            st = self.need_streams()
            d = tempfile.mkdtemp(prefix='b.', dir=self.shared)
            img = nx.make_image(os.path.join(d, 'b.img'), 'ext4', '128M')
            for s in (st.full, st.i2, st.i3):
                self.ok(receive(img, stream=s), s)
            out = {n: os.path.join(d, n + '.stream') for n in ('s1', 's2',
                                                            's3')}
            nx.run([NEXTFS, 'send', img, 's1', '-o', out['s1']])
            with self.mounted(img, check=False, workdir=d) as m:
                for n, parent in (('s2', 's1'), ('s3', 's2')):
                    nx.run([NEXTFS, 'send', '-p', parent, m.path, n, '-o',
                            out[n]])
            cls.b_streams = out
        return cls.b_streams

    def test_received_snapshots_sent_on_into_btrfs(self):
        """A stock btrfs receive takes what B sends of snapshots it
        received (the incremental one by B's parent's identity, which is
        A's): nextfs's own records on B stay on B."""
        st, b = self.need_streams(), self.sent_by_b()
        with ns.Btrfs(self.work) as bt:
            for n in ('s1', 's2'):
                p = bt.receive(b[n])
                self.assertEqual(p.returncode, 0, p.stdout)
                self.assertTreesEqual(st.snap[n], ns.manifest(
                    bt.p(n), root_mtime=False), 'btrfs ' + n)

    def test_cascade_keeps_the_first_senders_identity(self):
        """A -> B -> C: B sends on under A's identity, so C, which got
        s1 from B, takes A's incremental s2 on top, then B's s3 (from B's
        mount) on top of A's s2, and ends with A's trees."""
        st, b = self.need_streams(), self.sent_by_b()
        img = self.make_image('128M', flavour='ext4')
        self.ok(receive(img, stream=b['s1']), 's1 from B')
        self.ok(receive(img, stream=st.i2), "s2 from A onto B's s1")
        self.ok(receive(img, stream=b['s3']), "s3 from B onto A's s2")
        with self.mounted(img, check=False) as m:
            self.assert_received(m, ('s1', 's2', 's3'), 's3')

    # ------------------------------------------------------ users

    def test_user_receives_into_own_image(self):
        """No root needed: a user receives a btrfs stream (files of other
        owners, device nodes) into an image of theirs, offline and through
        their own mount; through root's mount, users who did not mount it
        may not receive."""
        st = self.need_streams()
        uid = gid = nx.NOBODY_UID
        img, udir = self.make_user_image(uid, gid, '128M')
        for s in (st.full, st.i2):
            shutil.copy(s, udir)
            os.chown(os.path.join(udir, os.path.basename(s)), uid, gid)
        rc, out, err = receive(img, user=(uid, gid),
                               stream=os.path.join(udir, 's1.stream'))
        self.assertEqual(rc, 0, err)
        with self.mounted(img, check=False) as m:
            self.assertTreesEqual(st.live['s1'], ns.manifest(m.path))
            rc, out, err = receive(m.path, user=(uid, gid),
                                   stream=os.path.join(udir, 's2.stream'))
            self.assertEqual(rc, 1)
            self.assertIn('only root and the user who mounted', err)
        # ... but into their own mount they do
        with self.mounted(img, check=False, user=(uid, gid)) as m:
            rc, out, err = receive(m.path, user=(uid, gid),
                                   stream=os.path.join(udir, 's2.stream'))
            self.assertEqual(rc, 0, err)
        with self.mounted(img, check=False) as m:
            self.assert_received(m, ('s1', 's2'), 's2')
        self.assert_clean(img)


if __name__ == '__main__':
    nx.main()
