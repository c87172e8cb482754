#!/usr/bin/env python3
"""nextfs send into a stock btrfs receive (real btrfs on a loop device)
and into nextfs receive.

A chain: a full stream of the first snapshot, then 10 incremental ones,
each after a seeded random workload of every kind of change send must
carry (files and directories created, removed, renamed across
directories, swapped, a file replaced by a directory of the same name,
hard links added and removed, symlinks, device nodes, fifos, sockets,
truncates up and down, sparse files, xattrs and POSIX ACLs, modes,
owners, times, names with any bytes but '/').  Each stream goes into
btrfs receive and into nextfs receive - offline into an image, three
steps into its mount - and after every step the received snapshots (and
the nextfs target's live tree) must equal the nextfs snapshot: names,
types, modes, owners, sizes, content hashes, symlink targets, devices,
hard-link groups, xattrs and mtimes.  One offline step is cut at a
random point and finished with "send --resume TOKEN", one mounted step
has its receiver killed and is finished with "receive --resume"; at the
end "nextfs check --views" finds both ends clean.  Streams come from
the mount while it is in use - the daemon makes them, reading no file
through FUSE; the tool's own reading through the mount (when the daemon
cannot reach its FIFO) makes the same bytes - and the last one also
offline from the image (the same bytes).  A send whose reader dies
leaves the daemon serving.  An unprivileged user sends from their own
mount.  New files without an ACL of their own, below a directory with a
default ACL, arrive without one (once, in the ext4 flavour).  Runs per flavour (ext2, ext3, ext4: the block maps differ).
"""

import contextlib
import fcntl
import hashlib
import os
import platform
import random
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import termios
import time

import nxharness as nx
import nxsnap
from nxharness import NOBODY_UID as UID, NOGROUP_GID as GID

STEPS = 10
OPS = 30
MOUNTED = (4, 5, 6)     # the steps nextfs receives into a mount
KILLED = 5              # ... this one's receiver killed mid-stream


def tool(*args, user=None, **kw):
    argv = [nx.tool_path()] + list(args)
    if user:
        argv = nx.as_user_argv(*user) + argv
    if kw.get('input') is None:
        kw['stdin'] = subprocess.DEVNULL
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          **kw)


def manifest(root):
    """Everything send must carry, by path (bytes), from ROOT."""
    out = {}
    inodes = {}
    root = os.fsencode(root)
    def fail(e):
        raise e
    for dirpath, dirnames, filenames in os.walk(root, onerror=fail):
        rel_dir = os.path.relpath(dirpath, root)
        if dirpath == root:     # root's own, and unchanged by workloads
            dirnames[:] = [d for d in dirnames if d != b'lost+found']
        for name in [b''] + dirnames + filenames:
            if dirpath == root and name in (b'.snapshots',):
                continue
            path = os.path.join(dirpath, name) if name else dirpath
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(path)
            e = {'type': stat.S_IFMT(st.st_mode),
                 'mode': stat.S_IMODE(st.st_mode),
                 'owner': (st.st_uid, st.st_gid),
                 'mtime': st.st_mtime_ns}
            if stat.S_ISREG(st.st_mode):
                with open(path, 'rb') as f:
                    e['sha'] = hashlib.sha256(f.read()).hexdigest()
                e['size'] = st.st_size
                inodes.setdefault(st.st_ino, []).append(rel)
            elif stat.S_ISLNK(st.st_mode):
                e['target'] = os.readlink(path)
            elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                e['rdev'] = st.st_rdev
            if not stat.S_ISLNK(st.st_mode):
                e['xattrs'] = sorted(
                    (n, os.getxattr(path, n, follow_symlinks=False))
                    for n in os.listxattr(path, follow_symlinks=False))
            if rel == b'.':
                del e['mtime']  # a snapshot view's root shows its take time
            out[rel] = e
    for paths in inodes.values():
        for p in paths:
            out[p]['links'] = sorted(paths)
    return out


def acl_xattr(uid, perm):
    """A system.posix_acl_access value: owner, user UID, group, mask,
    other."""
    import struct
    entries = [(0x01, 6, 0xffffffff), (0x02, perm, uid),
               (0x04, 4, 0xffffffff), (0x10, 7, 0xffffffff),
               (0x20, 4, 0xffffffff)]
    return struct.pack('<I', 2) + b''.join(
        struct.pack('<HHI', t, p, i) for t, p, i in entries)


class Workload:
    """Seeded random changes of every kind, below ROOT."""

    NAMES = [b'a', b'b', b'dir', b'sub', b'x y', b'\xff\xfe', b'new\nline',
             b'-dash', b'\\back', b'lost', b'f' * 200, b'data.bin']

    def __init__(self, root, seed, priv=True):
        self.priv = priv            # root: devices, chown
        self.root = os.fsencode(root)
        self.r = random.Random(seed)
        self.n = 0

    def entries(self):
        dirs, files = [self.root], []
        for dp, dn, fn in os.walk(self.root):
            if dp == self.root:
                dn[:] = [d for d in dn if d not in (b'.snapshots',
                                                    b'lost+found')]
            dirs += [os.path.join(dp, d) for d in dn]
            files += [os.path.join(dp, f) for f in fn]
        return dirs, files

    def fresh(self, d):
        self.n += 1
        return os.path.join(d, self.r.choice(self.NAMES) + b'.%d' % self.n)

    def data(self, n):
        return bytes(self.r.getrandbits(8) for _ in range(min(n, 64))) * \
            (n // 64 + 1)

    def op(self):
        r = self.r
        dirs, files = self.entries()
        d = r.choice(dirs)
        regs = [f for f in files if stat.S_ISREG(os.lstat(f).st_mode)]
        kind = r.randrange(20)
        if kind == 0 or not files:
            p = self.fresh(d)
            with open(p, 'wb') as f:
                f.write(self.data(r.choice([0, 10, 5000, 70000])))
        elif kind == 1:
            os.mkdir(self.fresh(d))
        elif kind == 2 and regs:                   # overwrite inside
            p = r.choice(regs)
            size = os.path.getsize(p)
            with open(p, 'r+b') as f:
                f.seek(r.randrange(size + 1))
                f.write(self.data(r.choice([1, 100, 9000])))
        elif kind == 3 and regs:                   # truncate up or down
            p = r.choice(regs)
            os.truncate(p, r.choice([0, 1, 4095, 100000,
                                     os.path.getsize(p) // 2]))
        elif kind == 4:                            # sparse: data, hole, data
            p = self.fresh(d)
            with open(p, 'wb') as f:
                f.write(b'head')
                f.seek(r.choice([65536, 300000]))
                f.write(b'tail')
        elif kind == 5:
            os.unlink(r.choice(files))
        elif kind == 6:                            # rename, maybe across
            src = r.choice(files + dirs[1:])
            dst = self.fresh(r.choice(dirs))
            if not dst.startswith(src + b'/'):
                os.rename(src, dst)
        elif kind == 7 and len(files) > 1:         # swap a <-> b
            a, b = r.sample(files, 2)
            tmp = os.path.join(self.root, b'.swap')
            os.rename(a, tmp)
            os.rename(b, a)
            os.rename(tmp, b)
        elif kind == 8 and regs:                   # file -> dir, same name
            p = r.choice(regs)
            os.unlink(p)
            os.mkdir(p)
        elif kind == 9 and regs:                   # hard link added
            os.link(r.choice(regs), self.fresh(d))
        elif kind == 10:
            os.symlink(r.choice([b'a', b'../x', b'/abs/target',
                                 b'\xff' * 300]), self.fresh(d))
        elif kind == 11:
            if self.priv:
                os.mknod(self.fresh(d), stat.S_IFCHR | 0o640,
                         os.makedev(1, 3))
            os.mkfifo(self.fresh(d), 0o600)
        elif kind == 12:
            p = self.fresh(d)
            if len(p) < 100:
                s = socket.socket(socket.AF_UNIX)
                s.bind(p)
                s.close()
        elif kind == 13 and regs:
            p = r.choice(regs)
            if r.randrange(2):
                os.setxattr(p, b'user.k%d' % r.randrange(3),
                            self.data(r.choice([1, 300])))
            else:
                for n in os.listxattr(p):
                    if n.startswith('user.'):
                        os.removexattr(p, n)
                        break
        elif kind == 14 and regs:
            os.setxattr(r.choice(regs), 'system.posix_acl_access',
                        acl_xattr(1000 + r.randrange(3), 4))
        elif kind == 15:
            p = r.choice(files + dirs[1:]) if files else d
            if os.path.isdir(p):        # still ours to write into
                os.chmod(p, r.choice([0o700, 0o755, 0o1777, 0o2750]))
            elif not os.path.islink(p):
                os.chmod(p, r.choice([0o600, 0o644, 0o755, 0o4755, 0o1777,
                                      0o2750]))
        elif kind == 16 and self.priv:
            p = r.choice(files + dirs)
            os.chown(p, r.choice([0, 1000, 65534]), r.choice([0, 100]),
                     follow_symlinks=False)
        elif kind == 17:
            p = r.choice(files + dirs)
            t = r.randrange(10**9, 2 * 10**9) * 10**9 + r.randrange(10**9)
            os.utime(p, ns=(t, t), follow_symlinks=False)
        elif kind == 18 and len(dirs) > 2:         # directory swap
            a, b = r.sample(dirs[1:], 2)
            if not a.startswith(b + b'/') and not b.startswith(a + b'/'):
                tmp = os.path.join(self.root, b'.dswap')
                os.rename(a, tmp)
                os.rename(b, a)
                os.rename(tmp, b)
        elif regs:                                 # append
            with open(r.choice(regs), 'ab') as f:
                f.write(self.data(r.choice([1, 5000])))

    def run(self, n):
        for _ in range(n):
            self.op()


def crc32c(data, crc=0xffffffff):
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82f63b78 if crc & 1 else 0)
    return crc ^ 0xffffffff


def commands(stream):
    """[(index, offset, prefix hash before it, bytes)] of a send stream."""
    h = 1469598103934665603

    def fnv(h, b):
        for x in b:
            h = ((h ^ x) * 1099511628211) & (2**64 - 1)
        return h
    h = fnv(h, stream[:17])
    off, out = 17, []
    while off < len(stream):
        n = int.from_bytes(stream[off:off + 4], 'little')
        out.append((len(out), off, h, stream[off:off + 10 + n]))
        h = fnv(h, stream[off:off + 10])
        off += 10 + n
    return out


def waits_on_stdin(pid, w):
    """Does PID wait in read(2) of its standard input, the pipe whose
    write end is W, with nothing left in the pipe?"""
    nr = {'x86_64': 0, 'aarch64': 63}.get(platform.machine())
    left = bytearray(4)
    fcntl.ioctl(w, termios.FIONREAD, left)
    if int.from_bytes(left, 'little'):
        return False
    if nr is None:
        return True
    with open('/proc/%d/syscall' % pid) as f:
        return f.read().startswith('%d 0x0 ' % nr)


def struct_cmd(cmd):
    return int.from_bytes(cmd[4:6], 'little')


def token(first, parent_first, index, offset, h):
    """A resume token (sendstream.h) for the stream whose first command
    is FIRST (SUBVOL or SNAPSHOT: its UUIDs and ctransids)."""
    import base64
    import struct

    def attrs(cmd):
        a, off = {}, 10
        while off < len(cmd):
            t, n = struct.unpack_from('<HH', cmd, off)
            a[t] = cmd[off + 4:off + 4 + n]
            off += 4 + n
        return a
    a = attrs(first)
    raw = (b'nxr1' + struct.pack('<I', 1) + a[1] + a[2] +
           a.get(20, bytes(16)) + a.get(21, bytes(8)) +
           struct.pack('<QQQ', index, offset, h))
    raw += struct.pack('<I', crc32c(raw))
    return base64.urlsafe_b64encode(raw).rstrip(b'=').decode()


class SendTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        self.need_root()
        self.need_fuse_daemon()
        if not shutil.which('btrfs') or not shutil.which('mkfs.btrfs'):
            self.skipTest('btrfs-progs is not installed')
        self.bt = os.path.join(self.work, 'btrfs')
        os.mkdir(self.bt)
        img = os.path.join(self.work, 'btrfs.img')
        with open(img, 'wb') as f:
            f.truncate(256 << 20)
        nx.run(['mkfs.btrfs', '-q', '-f', img])
        p = subprocess.run(['mount', '-o', 'loop', img, self.bt],
                           stderr=subprocess.PIPE, text=True)
        if p.returncode:
            self.skipTest('cannot loop-mount btrfs: %s' % p.stderr.strip())
        self.addCleanup(subprocess.run, ['umount', self.bt])

    def receive(self, stream):
        p = subprocess.run(['btrfs', 'receive', self.bt], input=stream,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual(p.returncode, 0, p.stderr.decode())

    def send(self, *args, user=None, env=None):
        p = tool('send', *args, user=user, env=env)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        return p.stdout

    def nx_receive(self, target, stream, *args, status=0):
        p = tool('receive', *args, target, input=stream)
        self.assertEqual(p.returncode, status, p.stderr.decode())
        return p

    def assertTree(self, want, got, what):
        for path in sorted(set(want) | set(got)):
            self.assertEqual(got.get(path), want.get(path),
                             '%s, %r' % (what, path))

    def assertSame(self, m, name, user=None):
        where = nxsnap.snap_dir(m, name)
        want = nx.run_as(*user, manifest, where) if user else \
            manifest(where)
        self.assertTree(want, manifest(os.path.join(self.bt, name)),
                        'snapshot %s' % name)
        return want

    def assertReceived(self, tm, name, want):
        """Snapshot NAME of the nextfs target mounted at TM, and its live
        tree, are WANT."""
        self.assertTree(want, manifest(nxsnap.snap_dir(tm, name)),
                        'received snapshot %s' % name)
        self.assertTree(want, manifest(tm.path), 'live tree after %s' % name)

    def cut_and_resume(self, tgt, stream, rnd, *send_args):
        """Receive STREAM into the image TGT cut at a random point, then
        the rest as "send --resume TOKEN" makes it."""
        cmds = commands(stream)
        k = rnd.randrange(cmds[2][1], len(stream) - 1)
        p = self.nx_receive(tgt, stream[:k], status=3)
        self.assertIn(b'stopped before command', p.stderr)
        tok = self.nx_receive(tgt, None, '--token').stdout.strip()
        rest = self.send(*send_args, '--resume', tok.decode())
        # exactly the commands from the one the cut went through
        first = [c[0] for c in cmds if c[1] <= k][-1]
        self.assertEqual([c[3] for c in commands(rest)[2:]],
                         [c[3] for c in cmds[first:]])
        self.nx_receive(tgt, rest, '--resume')

    def kill_and_resume(self, mnt, stream):
        """A receive into the mount MNT killed mid-stream, then
        "receive --resume" with the whole stream."""
        p = subprocess.Popen([nx.tool_path(), 'receive', mnt],
                             stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            p.stdin.write(stream[:len(stream) // 2])
            p.stdin.flush()
            # killed once it applied all it was given and waits for more
            for _ in range(3000):
                if waits_on_stdin(p.pid, p.stdin.fileno()):
                    break
                time.sleep(0.01)
        finally:
            p.kill()
            p.wait()
            try:
                p.stdin.close()
            except BrokenPipeError:
                pass
        self.assertEqual(p.returncode, -signal.SIGKILL)
        self.nx_receive(mnt, stream, '--resume')

    def test_chain(self):
        seed = self.seed()
        rnd = random.Random(seed)
        cut = rnd.choice([i for i in range(1, STEPS + 1)
                          if i not in MOUNTED])
        img = self.make_image('96M')
        tgt = self.make_image('96M', name='target.img')
        tdir = os.path.join(self.work, 'target')
        os.mkdir(tdir)
        with self.mounted(img, check=False) as m, \
                contextlib.ExitStack() as target:
            w = Workload(m.path, seed)
            tm = None                   # the target's mount, while mounted
            for i in range(STEPS + 1):
                name = 's%d' % i
                w.run(OPS)
                os.mkdir(nxsnap.snap_dir(m, name))
                w.run(3)        # the live tree changes while we send
                args = (['-p', 's%d' % (i - 1)] if i else []) + [m.path,
                                                                 name]
                reads = nx.opstats(m.path).get('read', 0)
                stream = self.send(*args)
                self.assertEqual(nx.opstats(m.path).get('read', 0), reads,
                                 'the daemon read no file through FUSE')
                if i == 1:      # the tool reads through the mount: same
                    env = dict(os.environ, TMPDIR='/nonexistent')
                    self.assertEqual(self.send(*args, env=env), stream)
                self.receive(stream)
                want = self.assertSame(m, name)
                if i == MOUNTED[0]:
                    tm = target.enter_context(self.mounted(
                        tgt, check=False, workdir=tdir))
                if tm and i == KILLED:
                    self.kill_and_resume(tm.path, stream)
                elif tm:
                    self.nx_receive(tm.path, stream)
                elif i == cut:
                    self.cut_and_resume(tgt, stream, rnd, *args)
                else:
                    self.nx_receive(tgt, stream)
                if tm:
                    self.assertReceived(tm, name, want)
                else:
                    with self.mounted(tgt, check=False, workdir=tdir,
                                      opts=('ro',)) as rm:
                        self.assertReceived(rm, name, want)
                if i == MOUNTED[-1]:
                    target.close()
                    tm = None
            last = stream
        # offline, from the image: the same stream
        off = self.send('-p', 's%d' % (STEPS - 1), img, 's%d' % STEPS)
        self.assertEqual(off, last)
        for image in (img, tgt):
            p = tool('check', '--views', image)
            self.assertEqual(p.returncode, 0, p.stdout.decode())
            self.assertEqual(nxsnap.fsck_masked(image)[0], 0)

    def test_new_files_below_a_default_acl(self):
        """Files and directories new in a snapshot, in a directory with a
        default ACL but without an ACL of their own, have none at a btrfs
        receive either (the kernel gives a new file its directory's
        default ACL: send makes new files in the root and moves them into
        place, as btrfs send does); those that kept what they inherited
        keep it.  Once: inheritance does not depend on the block maps."""
        if self.flavour != 'ext4':
            self.skipTest('runs once, in the ext4 flavour')
        img = self.make_image('64M')
        with self.mounted(img, check=False) as m:
            os.mkdir(m.p('acl'))
            nx.run(['setfacl', '-d', '-m', 'u:1234:rwx', m.p('acl')])
            os.mkdir(m.p('acl', 'old'))         # inherits: default and all
            os.mkdir(nxsnap.snap_dir(m, 'a'))
            for d in ('acl', 'acl/old'):
                os.mkdir(m.p(d, 'dir'))
                nx.write_file(m.p(d, 'dir', 'f'), b'x')
                os.mkfifo(m.p(d, 'fifo'))
                nx.write_file(m.p(d, 'kept'), b'y')   # keeps its ACL
                nx.run(['setfacl', '-b', m.p(d, 'dir'), m.p(d, 'dir', 'f'),
                        m.p(d, 'fifo')])
            os.mkdir(nxsnap.snap_dir(m, 'b'))
            self.assertTrue(os.listxattr(m.p('acl', 'kept')))
            self.assertFalse(os.listxattr(m.p('acl', 'dir')))
            self.receive(self.send(m.path, 'a'))
            self.receive(self.send('-p', 'a', m.path, 'b'))
            self.assertSame(m, 'b')

    def test_dead_reader(self):
        """A send whose reader is killed ends; the daemon goes on
        serving, and unmounts cleanly."""
        img = self.make_image('64M')
        with self.mounted(img, check=False) as m:
            with open(m.p('big'), 'wb') as f:
                f.write(os.urandom(6 << 20))
            os.mkdir(nxsnap.snap_dir(m, 'a'))
            p = subprocess.Popen([nx.tool_path(), 'send', m.path, 'a'],
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
            self.assertEqual(len(p.stdout.read(65536)), 65536)
            p.kill()
            p.wait()
            p.stdout.close()
            full = self.send(m.path, 'a')
            self.assertEqual(commands(full)[-1][3][4:6], b'\x15\x00')  # END
            # a reader that stops reading: its send waits, others go on
            p = subprocess.Popen([nx.tool_path(), 'send', m.path, 'a'],
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
            self.assertEqual(len(p.stdout.read(65536)), 65536)
            p.send_signal(signal.SIGSTOP)
            self.assertEqual(self.send(m.path, 'a'), full)
            p.kill()
            p.wait()
            p.stdout.close()

    def test_resume(self):
        """send --resume TOKEN: the rest of the stream the token names,
        after the header, the first command and RESUME; a token of
        another pair, or one that does not fit the stream, sends nothing.
        """
        img = self.make_image('64M')
        with self.mounted(img, check=False) as m:
            w = Workload(m.path, 3)
            w.run(20)
            os.mkdir(nxsnap.snap_dir(m, 'a'))
            w.run(20)
            os.mkdir(nxsnap.snap_dir(m, 'b'))
            whole = self.send('-p', 'a', m.path, 'b')
            cmds = commands(whole)
            self.assertGreater(len(cmds), 6)
            i, off, h, _ = cmds[len(cmds) // 2]
            tok = token(cmds[0][3], None, i, off, h)
            rest = self.send('-p', 'a', m.path, 'b', '--resume', tok)
            got = commands(rest)
            self.assertEqual(got[0][3], cmds[0][3])
            self.assertEqual(struct_cmd(got[1][3]), 0x4e58)    # RESUME
            self.assertEqual([c[3] for c in got[2:]],
                             [c[3] for c in cmds[i:]])
            out = os.path.join(self.work, 'out')
            for args in (('a', 'b', token(cmds[0][3], None, i, off,
                                          h ^ 1)),      # another stream
                         (None, 'a', tok)):             # another pair
                argv = (['-p', args[0]] if args[0] else []) + [
                    m.path, args[1], '--resume', args[2], '-o', out]
                p = tool('send', *argv)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn(b'resume token', p.stderr)
                self.assertFalse(os.path.exists(out))

    def test_user_sends_from_own_mount(self):
        img, udir = self.make_user_image(UID, GID)
        with self.mounted(img, user=(UID, GID), workdir=udir,
                          check=False) as m:
            nx.run_as(UID, GID, Workload(m.path, 7, False).run, 20)
            nx.run_as(UID, GID, os.mkdir, nxsnap.snap_dir(m, 'u0'))
            full = self.send(m.path, 'u0', user=(UID, GID))
            nx.run_as(UID, GID, Workload(m.path, 8, False).run, 20)
            nx.run_as(UID, GID, os.mkdir, nxsnap.snap_dir(m, 'u1'))
            inc = self.send('-p', 'u0', m.path, 'u1', user=(UID, GID))
            self.receive(full)
            self.receive(inc)
            self.assertSame(m, 'u1', user=(UID, GID))


if __name__ == '__main__':
    nx.main()
