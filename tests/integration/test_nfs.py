#!/usr/bin/env python3
"""Serving the volume and its snapshots over NFS (issue 28).

An NFS server gives its clients file handles and must turn them back
into the same files later: after the kernel dropped its caches, after the
nextfs daemon was restarted.  The kernel's nfsd and nfs-ganesha's VFS
back end both decode handles through the kernel's exportfs code, which
open_by_handle_at(2) also runs; so the handle tests use
name_to_handle_at/open_by_handle_at directly (docs/nfs.md):

- handles of live files and directories, of .snapshots, of a snapshot's
  root and of files and directories inside a snapshot decode to the same
  object (inode number, content, listing) with the same parent ("..",
  from inside a snapshot up through .snapshots to "/") after
  "echo 2 > /proc/sys/vm/drop_caches" and after a daemon restart; so do
  handles of .snapshot-images and the image files in it, also where the
  volume has a real entry of that name in its root;
- they are ESTALE, never another file, for a deleted file, for an inode
  number freed and given to a new file, for the files of a deleted
  snapshot and for a handle of another volume (a copy of the image given
  a new UUID);
- readdir resumes from a cookie (raw getdents64 d_off, lseek on a fresh
  open) after the directory changed and the daemon restarted: no entry
  twice, none missing that existed throughout (linear and htree
  directories, on ext4 and on ext2, "/", .snapshots).

End to end: nfs-ganesha (Debian's nfs-ganesha, nfs-ganesha-vfs) exports
a mount with the EXPORT block of docs/nfs.md and a private configuration
(NFSv4 on a free port of 127.0.0.1; pid file, log, recovery and
credential cache directories in the test's work directory; nothing
written under /etc, /run or /var), and libnfs's command
line client (libnfs-utils: nfs-ls, nfs-cat, nfs-cp) lists and reads live
files and .snapshots/NAME/... (the old content), writes a live file and
is refused a write into a snapshot.  A client that keeps its handles
(libnfs through ctypes) then sees the daemon restarted underneath
(ganesha stopped first: it holds files of the mount open): its handles
still give the same files or fail as stale, never another file's data.
The volume is a loop device there (a fuseblk mount), which is what gives
ganesha a file system id that survives the remount (docs/nfs.md).

Skipped where the machine cannot do it: not root (open_by_handle_at needs
CAP_DAC_READ_SEARCH; drop_caches), nfs-ganesha or libnfs-utils missing.
Without a loop device the export test runs on the image file, where a
handle may also come back stale after the restart (the file system id
ganesha derives from the mount can change; docs/nfs.md).  The kernel's
nfsd is not tested (this kernel has none): it decodes handles with the
same exportfs code.

Runs once (no flavour).
"""

import ctypes
import errno
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time

import nxharness as nx
import nxsnap

DOC = os.path.join(nx.SRCROOT, 'docs', 'nfs.md')
DOC_MNT = '/srv/nextfs'

libc = ctypes.CDLL(None, use_errno=True)

MAX_HANDLE_SZ = 128


class FileHandle(ctypes.Structure):
    _fields_ = [('handle_bytes', ctypes.c_uint),
                ('handle_type', ctypes.c_int),
                ('f_handle', ctypes.c_ubyte * MAX_HANDLE_SZ)]


def name_to_handle(path):
    fh = FileHandle()
    fh.handle_bytes = MAX_HANDLE_SZ
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(nx.AT_FDCWD, os.fsencode(path),
                              ctypes.byref(fh), ctypes.byref(mount_id),
                              0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    return fh


def open_by_handle(mount_fd, fh, flags=os.O_RDONLY):
    fd = libc.open_by_handle_at(mount_fd, ctypes.byref(fh), flags)
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, 'open_by_handle_at: %s' % os.strerror(e))
    return fd


def drop_caches():
    """Make the kernel forget every unused dentry and inode (ours too)."""
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('2\n')


def getdents(fd, size=512):
    """One getdents64 call: [(name, d_off)]; [] at the end."""
    buf = ctypes.create_string_buffer(size)
    n = libc.getdents64(fd, buf, ctypes.c_size_t(size))
    if n < 0:
        e = ctypes.get_errno()
        raise OSError(e, 'getdents64: %s' % os.strerror(e))
    out, pos = [], 0
    while pos < n:
        off = int.from_bytes(buf.raw[pos + 8:pos + 16], 'little',
                             signed=True)
        reclen = int.from_bytes(buf.raw[pos + 16:pos + 18], 'little')
        name = buf.raw[pos + 19:pos + reclen].split(b'\0', 1)[0]
        out.append((os.fsdecode(name), off))
        pos += reclen
    return out


def listing(fd, limit=5000):
    """Every entry getdents64 gives from FD's position: [(name, d_off)]."""
    entries = []
    while True:
        chunk = getdents(fd)
        if not chunk:
            return entries
        entries += chunk
        if len(entries) > limit:
            raise AssertionError('a listing that does not end: %r ...' %
                                 entries[:20])


def read_all(fd):
    data = b''
    while True:
        b = os.read(fd, 65536)
        if not b:
            return data
        data += b


def need_handles(case):
    case.need_fuse_daemon()
    if nx.backend() != 'nextfs':
        case.skipTest('nextfs snapshot views')
    if os.geteuid() != 0:
        case.skipTest('open_by_handle_at and drop_caches need root')


def reuse_inode(case, m, ino, tries=50):
    """A new file in M with inode number INO (freed just now)."""
    for i in range(tries):
        p = m.p('new%d' % i)
        nx.write_file(p, b'')
        if os.lstat(p).st_ino == ino:
            return p
        time.sleep(0.02)            # the release may still be on its way
    case.fail('inode %d was not reused by %d new files' % (ino, tries))


def restart(m, opts=()):
    """Stop the daemon of M and start it again on the same mountpoint."""
    problems = []
    m.unmount(problems)
    m.stop_daemon(problems)
    if problems:
        raise AssertionError('\n'.join(problems))
    m.start(opts)


class HandleTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        need_handles(self)

    def assert_fsck_masked(self, img):
        rc, out = nxsnap.fsck_masked(img)
        self.assertEqual(rc, 0, 'e2fsck -fn (has_snapshot masked):\n' +
                         nx.tail(out, 40))

    # -- what a handle must give back

    def expect(self, m, rel):
        path = m.p(rel)
        st = os.lstat(path)
        exp = {'rel': rel, 'ino': st.st_ino, 'dir': os.path.isdir(path),
               'handle': name_to_handle(path)}
        if exp['dir']:
            exp['parent'] = os.lstat(os.path.join(path, '..')).st_ino
            exp['names'] = sorted(os.listdir(path))
        else:
            exp['data'] = nx.read_file(path)
        return exp

    def check_handle(self, m, mount_fd, exp, what):
        """EXP's handle, decoded with nothing cached, is the same object."""
        drop_caches()
        rel = exp['rel']
        flags = os.O_RDONLY | (os.O_DIRECTORY if exp['dir'] else 0)
        try:
            fd = open_by_handle(mount_fd, exp['handle'], flags)
        except OSError as e:
            self.fail('%s: handle of %s: %s' % (what, rel, e))
        try:
            self.assertEqual(os.fstat(fd).st_ino, exp['ino'],
                             '%s: handle of %s' % (what, rel))
            if not exp['dir']:
                self.assertEqual(read_all(fd), exp['data'],
                                 '%s: content by handle of %s' % (what, rel))
                return
            # reconnected up to "/" under its own name ...
            self.assertEqual(os.readlink('/proc/self/fd/%d' % fd),
                             os.path.normpath(m.p(rel)),
                             '%s: path of the handle of %s' % (what, rel))
            # ... with the right parent and content
            self.assertEqual(os.stat('..', dir_fd=fd).st_ino, exp['parent'],
                             '%s: ".." by handle of %s' % (what, rel))
            names = [n for n, _ in listing(fd) if n not in ('.', '..')]
            self.assertEqual(sorted(names), exp['names'],
                             '%s: listing by handle of %s' % (what, rel))
        finally:
            os.close(fd)

    def assert_stale(self, mount_fd, fh, what):
        drop_caches()
        try:
            fd = open_by_handle(mount_fd, fh)
        except OSError as e:
            self.assertEqual(e.errno, errno.ESTALE, '%s: %s' % (what, e))
            return
        try:
            data = read_all(fd) if not os.path.isdir('/proc/self/fd/%d' %
                                                     fd) else b'(a directory)'
        finally:
            os.close(fd)
        self.fail('%s: decoded (to %r) instead of ESTALE' % (what, data[:40]))

    def check_all(self, m, exps, what):
        fd = os.open(m.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for exp in exps:
                self.check_handle(m, fd, exp, what)
        finally:
            os.close(fd)

    # -- the tests

    def test_handles_survive_cache_drop_and_restart(self):
        """Live, .snapshots, snapshot roots and everything inside: the
        same objects after drop_caches and after a restart; ESTALE for a
        deleted file, a reused inode number and a deleted snapshot."""
        img = self.make_image()
        with self.mounted(img, check=False) as m:
            os.makedirs(m.p('d', 'sub'))
            nx.write_file(m.p('d', 'sub', 'f'), b'as it was\n')
            nx.write_file(m.p('d', 'other'), b'other\n')
            os.mkdir(m.p('.snapshots', 'first'))
            nx.write_file(m.p('d', 'sub', 'f'), b'as it is now\n')
            os.mkdir(m.p('d', 'new'))
            os.mkdir(m.p('.snapshots', 'second'))
            nx.write_file(m.p('gone'), b'deleted later\n')
            nx.write_file(m.p('reused'), b'the old file\n')
            # the deepest snapshot directory first: decoding it alone
            # reconnects sub, d, first and .snapshots up to "/"
            exps = [self.expect(m, rel) for rel in (
                '.snapshots/first/d/sub', '.snapshots/first/d/sub/f',
                '.snapshots/first/d', '.snapshots/first', '.snapshots',
                '.snapshots/second/d/new', 'd/sub', 'd/sub/f', 'd', '.')]
            stale = {rel: name_to_handle(m.p(rel)) for rel in (
                'gone', 'reused', '.snapshots/second',
                '.snapshots/second/d', '.snapshots/second/d/sub/f')}
            old_ino = os.lstat(m.p('reused')).st_ino
            self.assertNotIn('.snapshots', os.listdir(m.path))
            self.check_all(m, exps, 'after drop_caches')
            # still hidden from everyone who lists "/"
            self.assertNotIn('.snapshots', os.listdir(m.path))

            restart(m)
            self.check_all(m, exps, 'after a restart')

            os.unlink(m.p('gone'))
            os.rmdir(m.p('.snapshots', 'second'))
            mount_fd = os.open(m.path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                for rel, fh in stale.items():
                    if rel != 'reused':
                        self.assert_stale(mount_fd, fh, 'handle of deleted ' +
                                          rel)
                # its inode number goes to a new file: a new generation
                os.unlink(m.p('reused'))
                drop_caches()       # the kernel lets go: the inode is freed
                new = reuse_inode(self, m, old_ino)
                nx.write_file(new, b'a new file in the old inode\n')
                self.assert_stale(mount_fd, stale['reused'],
                                  'handle of a file whose inode was reused')
                self.check_handle(m, mount_fd, self.expect(
                    m, os.path.relpath(new, m.path)), 'the new file')
            finally:
                os.close(mount_fd)
        self.assert_fsck_masked(img)

    def test_handles_of_snapshot_images(self):
        """The image files in .snapshot-images and that directory: the
        same after drop_caches and after a restart, also on a volume with
        a real .snapshot-images in its root (hidden from the kernel's
        listing of "/" as from everyone's: it is no .snapshots); ESTALE
        once the snapshot is deleted."""
        img = self.make_image(size='16M')
        nx.run([nx.DEBUGFS, '-w', '-R', 'mkdir .snapshot-images', img])
        with self.mounted(img, check=False) as m:
            nx.write_file(m.p('f'), b'in both snapshots\n')
            os.mkdir(m.p('.snapshots', 'first'))
            os.mkdir(m.p('.snapshots', 'second'))
            exps = [self.expect(m, rel) for rel in (
                '.snapshot-images', '.snapshot-images/first',
                '.snapshots/first', '.snapshots')]
            gone = name_to_handle(m.p('.snapshot-images', 'second'))
            self.check_all(m, exps, 'after drop_caches')
            names = os.listdir(m.path)
            self.assertNotIn('.snapshots', names)
            self.assertNotIn('.snapshot-images', names)
            restart(m)
            self.check_all(m, exps, 'after a restart')
            os.rmdir(m.p('.snapshots', 'second'))
            mount_fd = os.open(m.path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                self.assert_stale(mount_fd, gone,
                                  'handle of a deleted snapshot\'s image')
            finally:
                os.close(mount_fd)
        self.assert_fsck_masked(img)

    def test_handle_of_another_volume(self):
        """A copy of the image with a new UUID: same inode numbers, same
        generations, but the handle is stale there, not its file."""
        a = self.make_image(name='a.img')
        with self.mounted(a) as m:
            nx.write_file(m.p('file'), b'volume a\n')
            fh = name_to_handle(m.p('file'))
        b = os.path.join(self.work, 'b.img')
        shutil.copyfile(a, b)
        # tune2fs rewrites the checksums only of a freshly checked volume
        nx.run([nx.E2FSCK, '-fp', b])
        nx.run(['tune2fs', '-U', 'random', b])
        with self.mounted(b) as m:
            nx.write_file(m.p('file'), b'volume b\n')
            mount_fd = os.open(m.path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                self.assert_stale(mount_fd, fh, 'handle of volume a on b')
            finally:
                os.close(mount_fd)

    def test_readdir_cookies(self):
        """Resume from a cookie on a fresh open after the directory
        changed and the daemon restarted: no entry twice, none lost.
        ext4: a one-block (linear) and an indexed directory; ext2 (no
        dir_index): both linear, cookies are byte offsets."""
        for flavour in ('ext4', 'ext2'):
            with self.subTest(flavour=flavour):
                self.check_cookies(flavour)

    def check_cookies(self, flavour):
        img = self.make_image(name=flavour + '.img', flavour=flavour)
        sizes = {'small': 12, 'big': 400}
        with self.mounted(img, check=False) as m:
            for d, n in sizes.items():
                os.mkdir(m.p(d))
                for i in range(n):
                    nx.write_file(m.p(d, 'entry-%04d' % i), b'')
            for i in range(6):
                os.mkdir(m.p('.snapshots', 'snap%d' % i))
            for i in range(8):
                nx.write_file(m.p('top%d' % i), b'')
            first = {rel: self.read_half(m.p(rel))
                     for rel in ('small', 'big', '.snapshots', '.')}
            removed = self.change(m, first)
            restart(m)
            for rel, (seen, cookie, before) in first.items():
                rest = self.read_from(m.p(rel), cookie)
                self.assert_resumed(rel, seen, rest, before, removed[rel])
        self.assert_fsck_masked(img)

    def read_half(self, path):
        """(the first half of the names, the cookie after them, all)."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            entries = listing(fd)
        finally:
            os.close(fd)
        names = [n for n, _ in entries]
        k = len(names) // 2
        return names[:k], entries[k - 1][1], names

    def read_from(self, path, cookie):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.lseek(fd, cookie, os.SEEK_SET)
            return [n for n, _ in listing(fd)]
        finally:
            os.close(fd)

    def change(self, m, first):
        """Remove names before and after each cookie, add new ones."""
        removed = {}
        for rel, (seen, _, names) in first.items():
            later = [n for n in names if n not in seen]
            gone = [n for n in seen[2:4] + later[1:len(later):7]
                    if n not in ('.', '..', 'lost+found', 'small', 'big')]
            for n in gone:
                if rel == '.snapshots':
                    os.rmdir(m.p(rel, n))
                else:
                    os.unlink(m.p(rel, n))
            removed[rel] = set(gone)
            if rel == '.snapshots':
                os.mkdir(m.p(rel, 'later'))
            else:
                for i in range(200 if rel == 'big' else 3):
                    nx.write_file(m.p(rel, 'added-%04d' % i), b'')
        return removed

    def assert_resumed(self, rel, seen, rest, before, removed):
        twice = set(seen) & set(rest)
        self.assertFalse(twice, '%s: listed again after the cookie: %s' %
                         (rel, sorted(twice)[:10]))
        self.assertEqual(len(rest), len(set(rest)),
                         '%s: duplicates after the cookie' % rel)
        lost = set(before) - removed - set(seen) - set(rest)
        self.assertFalse(lost, '%s: never listed although there all along: '
                         '%s' % (rel, sorted(lost)[:10]))
        self.assertFalse(set(rest) & removed,
                         '%s: deleted names listed' % rel)


# ---------------------------------------------------------------- NFSv4
#
# Just enough of an NFSv4.0 client (RFC 7530) to keep file handles
# across a server restart, which libnfs's client cannot (it does not
# reconnect NFSv4): COMPOUNDs of PUTROOTFH, LOOKUP, GETFH, PUTFH, GETATTR
# (type, size, fileid) and READ with the anonymous stateid, which need
# no client state; one TCP connection per call, AUTH_SYS as root.

OP_GETATTR, OP_GETFH, OP_LOOKUP = 9, 10, 15
OP_PUTFH, OP_PUTROOTFH, OP_READ = 22, 24, 25
NFS4ERR_STALE = 70
NFS_PROGRAM, NFS_V4, NFSPROC4_COMPOUND = 100003, 4, 1
FATTR4_TYPE, FATTR4_SIZE, FATTR4_FILEID = 1, 4, 20


class Nfs4Error(Exception):
    def __init__(self, op, status):
        super().__init__('NFSv4 operation %d: status %d%s' %
                         (op, status, ' (NFS4ERR_STALE)'
                          if status == NFS4ERR_STALE else ''))
        self.status = status


class Xdr:
    """XDR encoder (append) and decoder (read from pos)."""

    def __init__(self, data=b''):
        self.data = bytearray(data)
        self.pos = 0

    def u32(self, v):
        self.data += struct.pack('>I', v)
        return self

    def u64(self, v):
        self.data += struct.pack('>Q', v)
        return self

    def opaque(self, b):
        self.u32(len(b))
        self.data += b + b'\0' * (-len(b) % 4)
        return self

    def get(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def get_opaque(self):
        n = self.get('>I')
        b = bytes(self.data[self.pos:self.pos + n])
        self.pos += n + (-n % 4)
        return b


def getattr_result(x):
    for _ in range(x.get('>I')):        # the bitmap of what follows
        x.get('>I')
    v = Xdr(x.get_opaque())
    return v.get('>I'), v.get('>Q'), v.get('>Q')


def read_result(x):
    x.get('>I')                         # eof
    return x.get_opaque()


RESULTS = {OP_GETFH: Xdr.get_opaque, OP_GETATTR: getattr_result,
           OP_READ: read_result}


class Nfs4Client:

    def __init__(self, port):
        self.port = port
        self.xid = int.from_bytes(os.urandom(4), 'big')

    def rpc(self, args):
        self.xid = (self.xid + 1) & 0xffffffff
        cred = Xdr().u32(0).opaque(b'nextfs-test').u32(0).u32(0).u32(0)
        call = Xdr().u32(self.xid).u32(0).u32(2).u32(NFS_PROGRAM)
        call.u32(NFS_V4).u32(NFSPROC4_COMPOUND)
        call.u32(1).opaque(bytes(cred.data)).u32(0).opaque(b'')
        msg = bytes(call.data) + args
        with socket.create_connection(('127.0.0.1', self.port), 10) as s:
            s.sendall(struct.pack('>I', 0x80000000 | len(msg)) + msg)
            reply, last = b'', False
            while not last:             # record marking: fragments
                n = struct.unpack('>I', self.recv(s, 4))[0]
                last = bool(n & 0x80000000)
                reply += self.recv(s, n & 0x7fffffff)
        x = Xdr(reply)
        head = [x.get('>I') for _ in range(3)]
        if head != [self.xid, 1, 0]:
            raise AssertionError('RPC reply refused: %r' % head)
        x.get('>I')                     # verifier
        x.get_opaque()
        if x.get('>I') != 0:
            raise AssertionError('RPC call not executed')
        return x

    @staticmethod
    def recv(s, n):
        b = b''
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                raise AssertionError('ganesha closed the connection')
            b += c
        return b

    def compound(self, ops):
        """OPS: [(op, encode args)]; the results, or Nfs4Error."""
        args = Xdr().opaque(b'').u32(0).u32(len(ops))
        for op, encode in ops:
            encode(args.u32(op))
        x = self.rpc(bytes(args.data))
        x.get('>I')                     # status: that of the last op
        x.get_opaque()
        out = []
        for _ in range(x.get('>I')):
            op, status = x.get('>I'), x.get('>I')
            if status:
                raise Nfs4Error(op, status)
            out.append(RESULTS.get(op, lambda x: None)(x))
        return out

    def lookup(self, path):
        ops = [(OP_PUTROOTFH, lambda a: a)]
        ops += [(OP_LOOKUP, lambda a, c=c: a.opaque(os.fsencode(c)))
                for c in path.strip('/').split('/')]
        return self.compound(ops + [(OP_GETFH, lambda a: a)])[-1]

    def getattr(self, fh):
        """(type, size, fileid)"""
        bits = (1 << FATTR4_TYPE) | (1 << FATTR4_SIZE) | (1 << FATTR4_FILEID)
        return self.compound([(OP_PUTFH, lambda a: a.opaque(fh)),
                              (OP_GETATTR, lambda a: a.u32(1).u32(bits))])[1]

    def read(self, fh, count=65536):
        # stateid: seqid 0 and 12 zero bytes, the anonymous one
        return self.compound([(OP_PUTFH, lambda a: a.opaque(fh)),
                              (OP_READ, lambda a: a.u32(0).u32(0).u32(0)
                               .u32(0).u64(0).u32(count))])[1]


# ---------------------------------------------------------------- ganesha

def documented_export(mnt):
    """The EXPORT block of docs/nfs.md, for the mountpoint MNT."""
    return nx.doc_block(DOC, 'ganesha-export').replace(DOC_MNT, mnt)


class Ganesha:
    """A ganesha.nfsd of our own: NFSv4 on a free port of 127.0.0.1,
    configuration, log, pid file, recovery and credential cache
    directories below DIR (nothing in /etc, /run or /var)."""

    def __init__(self, d, export):
        self.dir = d
        self.port = nx.free_port()
        self.conf = os.path.join(d, 'ganesha.conf')
        self.log = os.path.join(d, 'ganesha.log')
        os.makedirs(os.path.join(d, 'recovery'), exist_ok=True)
        with open(self.conf, 'w') as f:
            f.write('\n'.join([
                'NFS_CORE_PARAM {',
                '\tNFS_Port = %d;' % self.port,
                '\tBind_addr = 127.0.0.1;',
                '\tNFS_Protocols = 4;',     # 3 needs rpcbind on port 111
                '\tEnable_NLM = false;',
                '\tEnable_RQUOTA = false;',
                '\tEnable_UDP = false;',
                '}',
                'NFSV4 {',
                '\tRecoveryBackend = fs;',
                '\tRecoveryRoot = %s/recovery;' % d,
                '\tGraceless = true;',      # no 90 s grace period
                '}',
                'NFS_KRB5 {',               # it makes this directory
                '\tActive_krb5 = false;',
                '\tCCacheDir = %s/ccache;' % d,
                '}',
                export]))
        self.proc = None

    def start(self, timeout=30):
        # libblkid (the volume UUID) keeps its cache in BLKID_FILE
        env = dict(os.environ,
                   BLKID_FILE=os.path.join(self.dir, 'blkid.tab'))
        self.proc = subprocess.Popen(
            ['ganesha.nfsd', '-F', '-f', self.conf, '-L', self.log, '-p',
             os.path.join(self.dir, 'ganesha.pid')],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT, start_new_session=True, env=env)
        deadline = time.monotonic() + timeout
        while True:                     # until it accepts connections
            if self.proc.poll() is not None:
                return 'ganesha.nfsd exited with status %d:\n%s' % (
                    self.proc.returncode, self.output())
            try:
                socket.create_connection(('127.0.0.1', self.port),
                                         0.5).close()
                return None
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError('ganesha.nfsd does not listen on '
                                         'port %d:\n%s' %
                                         (self.port, self.output()))
                time.sleep(0.05)

    def output(self, lines=15):
        try:
            with open(self.log, errors='replace') as f:
                return nx.tail(f.read(), lines)
        except OSError:
            return ''

    def config_errors(self):
        """What ganesha found wrong in the configuration (it runs on,
        without the export or the parameter)."""
        return re.findall(r'^.*config_errs_to_log :CONFIG :.*$',
                          self.output(10000), re.M)

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def url(self, path):
        return 'nfs://127.0.0.1/nextfs%s?version=4&nfsport=%d' % (
            path, self.port)

    def client(self, prog, *args, check=True):
        p = nx.run([prog] + list(args), check=False)
        if check and p.returncode != 0:
            raise AssertionError('%s %s: exit %d\n%s\n%s' % (
                prog, ' '.join(args), p.returncode, p.stdout,
                self.output()))
        return p

    def ls(self, path):
        out = self.client('nfs-ls', self.url(path)).stdout
        return sorted(line.split()[-1] for line in out.splitlines()
                      if line.strip())

    def cat(self, path):
        p = subprocess.run(['nfs-cat', self.url(path)], capture_output=True,
                           stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise AssertionError('nfs-cat %s: exit %d\n%s' % (
                path, p.returncode, p.stderr.decode(errors='replace')))
        return p.stdout


class GaneshaTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        need_handles(self)
        for prog in ('ganesha.nfsd', 'nfs-ls', 'nfs-cat', 'nfs-cp'):
            if not shutil.which(prog):
                self.skipTest('%s is not installed (packages nfs-ganesha, '
                              'nfs-ganesha-vfs, libnfs-utils)' % prog)

    def loop_device(self, image):
        """IMAGE as a loop device, or None where there is none."""
        p = nx.run(['losetup', '--find', '--show', image], check=False)
        if p.returncode:
            return None
        dev = p.stdout.strip()
        self.addCleanup(subprocess.run, ['losetup', '-d', dev])
        return dev

    def start(self, g):
        why = g.start()
        errors = g.config_errors()
        if errors:                      # the documented block is wrong
            self.fail('ganesha.nfsd rejects its configuration:\n' +
                      '\n'.join(errors))
        if why:
            self.skipTest('nfs-ganesha cannot run here: ' + why)

    def test_export_and_restart(self):
        """libnfs's tools on the documented export; handles a client
        kept, after nextfs and ganesha were restarted."""
        img = self.make_image()
        dev = self.loop_device(img)
        with self.mounted(dev or img, check=False) as m:
            os.makedirs(m.p('d', 'sub'))
            nx.write_file(m.p('d', 'sub', 'f'), b'the old content\n')
            os.mkdir(m.p('pub'))
            os.chmod(m.p('pub'), 0o1777)    # root is squashed to nobody
            nx.write_file(m.p('reused'), b'to be deleted\n')
            os.mkdir(m.p('.snapshots', 'monday'))
            nx.write_file(m.p('d', 'sub', 'f'), b'the live content\n')
            g = Ganesha(os.path.join(self.work, 'ganesha'),
                        documented_export(m.path))
            try:
                self.start(g)
                self.check_clients(m, g)
                c = Nfs4Client(g.port)
                kept = {p: self.keep(c, p) for p in (
                    'd/sub/f', '.snapshots/monday/d/sub/f',
                    '.snapshots/monday/d/sub', '.snapshots/monday',
                    '.snapshots', 'd', '.')}
                reused = c.lookup('/nextfs/reused')
                old_ino = os.lstat(m.p('reused')).st_ino
                # the daemon restarted underneath; ganesha holds files of
                # the mount open, so it goes first and comes back after
                g.stop()
                restart(m)
                self.start(g)
                os.unlink(m.p('reused'))
                drop_caches()
                reuse_inode(self, m, old_ino)
                self.check_kept(c, kept, strict=dev is not None)
                self.assert_stale(c, reused, 'a deleted file whose inode '
                                  'number a new file has')
                self.assertEqual(g.cat('/.snapshots/monday/d/sub/f'),
                                 b'the old content\n')
            finally:
                g.stop()
        rc, out = nxsnap.fsck_masked(img)
        self.assertEqual(rc, 0, 'e2fsck -fn (has_snapshot masked):\n' +
                         nx.tail(out, 40))

    def check_clients(self, m, g):
        """libnfs's command line client: list, read, write, refused."""
        self.assertEqual(g.ls('/'), ['d', 'lost+found', 'pub', 'reused'],
                         '"/" over NFS (.snapshots hidden, as locally)')
        self.assertEqual(g.ls('/.snapshots'), ['monday'])
        self.assertEqual(g.ls('/.snapshots/monday/d/sub'), ['f'])
        self.assertEqual(g.cat('/d/sub/f'), b'the live content\n')
        self.assertEqual(g.cat('/.snapshots/monday/d/sub/f'),
                         b'the old content\n')
        local = os.path.join(self.work, 'upload')
        nx.write_file(local, b'written over NFS\n')
        g.client('nfs-cp', local, g.url('/pub/upload'))
        self.assertEqual(nx.read_file(m.p('pub', 'upload')),
                         b'written over NFS\n')
        p = g.client('nfs-cp', local, g.url('/.snapshots/monday/pub/x'),
                     check=False)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertIn('NFS4ERR_ROFS', p.stdout)
        self.assertFalse(os.path.exists(m.p('.snapshots', 'monday', 'pub',
                                            'x')))
        # what changes on the server side shows at once (the documented
        # Attr_Expiration_Time = 0): a new snapshot, a longer file
        os.mkdir(m.p('.snapshots', 'tuesday'))
        nx.write_file(m.p('d', 'sub', 'f'), b'the live content, now longer\n')
        self.assertEqual(g.ls('/.snapshots'), ['monday', 'tuesday'])
        self.assertEqual(g.cat('/d/sub/f'), b'the live content, now longer\n')

    def keep(self, c, path):
        fh = c.lookup('/nextfs/' + path if path != '.' else '/nextfs')
        attrs = c.getattr(fh)
        data = c.read(fh) if attrs[0] == 1 else None    # NF4REG
        return fh, attrs, data

    def check_kept(self, c, kept, strict):
        """Each kept handle gives its file again; or, where the file
        system id may have changed (no loop device), NFS4ERR_STALE."""
        for path, (fh, attrs, data) in kept.items():
            drop_caches()
            try:
                self.assertEqual(c.getattr(fh), attrs,
                                 'handle of %s after the restart' % path)
                if data is not None:
                    self.assertEqual(c.read(fh), data, 'content of %s by '
                                     'its handle after the restart' % path)
            except Nfs4Error as e:
                if strict or e.status != NFS4ERR_STALE:
                    self.fail('handle of %s after the restart: %s' %
                              (path, e))

    def assert_stale(self, c, fh, what):
        drop_caches()
        for call in (c.getattr, c.read):
            try:
                got = call(fh)
            except Nfs4Error as e:
                self.assertEqual(e.status, NFS4ERR_STALE, '%s: %s' % (what, e))
                continue
            self.fail('%s: %r instead of NFS4ERR_STALE' % (what, got))


if __name__ == '__main__':
    nx.main()
