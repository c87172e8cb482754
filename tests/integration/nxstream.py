"""nxstream - send streams and trees for the replication tests.

Written independently of the C code, so that it can serve as an oracle:

- Stream / parse(): the btrfs send stream format (btrfs-progs
  Documentation/dev/dev-send-stream.rst): encode any command, also ones
  no honest sender writes (hostile streams), and take streams apart into
  their commands (to cut them, or to build a resume stream).
- decode_token() / resume_stream(): "nextfs receive --token" and what
  "nextfs send --resume TOKEN" sends (sendstream.h).
- Btrfs: a loop-mounted btrfs (root only) to make real "btrfs send"
  streams, and to "btrfs receive" streams into.
- populate() / mutate(): a seeded tree with every kind of file and a
  seeded round of every kind of change, on any directory (a btrfs
  subvolume, a nextfs mount).
- manifest(): tree_state() of nxharness, comparable across file systems
  (btrfs counts no subdirectories in a directory's link count).
"""

import base64
import contextlib
import errno
import os
import random
import shutil
import socket
import stat
import struct
import subprocess
import tempfile

import nxharness as nx
from nxsnap import crc32c_raw

# ------------------------------------------------------------ the format

MAGIC = b'btrfs-stream\0'

C = dict(SUBVOL=1, SNAPSHOT=2, MKFILE=3, MKDIR=4, MKNOD=5, MKFIFO=6,
         MKSOCK=7, SYMLINK=8, RENAME=9, LINK=10, UNLINK=11, RMDIR=12,
         SET_XATTR=13, REMOVE_XATTR=14, WRITE=15, CLONE=16, TRUNCATE=17,
         CHMOD=18, CHOWN=19, UTIMES=20, END=21, UPDATE_EXTENT=22,
         FALLOCATE=23, FILEATTR=24, ENCODED_WRITE=25, RESUME=0x4e58)
A = dict(UUID=1, CTRANSID=2, INO=3, SIZE=4, MODE=5, UID=6, GID=7, RDEV=8,
         CTIME=9, MTIME=10, ATIME=11, OTIME=12, XATTR_NAME=13,
         XATTR_DATA=14, PATH=15, PATH_TO=16, PATH_LINK=17, FILE_OFFSET=18,
         DATA=19, CLONE_UUID=20, CLONE_CTRANSID=21, CLONE_PATH=22,
         CLONE_OFFSET=23, CLONE_LEN=24, FALLOCATE_MODE=25,
         RESUME_INDEX=0x4e01, RESUME_OFFSET=0x4e02, RESUME_HASH=0x4e03)


def u64(v):
    return struct.pack('<Q', v)


def u32(v):
    return struct.pack('<I', v)


def tspec(sec, nsec=0):
    return struct.pack('<qI', sec, nsec)


def _b(s):
    return s.encode('utf-8', 'surrogateescape') if isinstance(s, str) else s


def command(cmd, attrs, version=1, crc=None):
    """One command: ATTRS is [(attribute number, bytes)], in order."""
    payload = b''
    for i, (a, v) in enumerate(attrs):
        v = _b(v)
        if version >= 2 and a == A['DATA'] and i == len(attrs) - 1:
            payload += struct.pack('<H', a) + v
        else:
            payload += struct.pack('<HH', a, len(v)) + v
    hdr = struct.pack('<IHI', len(payload), cmd, 0)
    if crc is None:
        crc = crc32c_raw(hdr + payload, 0)
    return struct.pack('<IHI', len(payload), cmd, crc) + payload


def command_raw(cmd, payload, crc=None):
    """A command with PAYLOAD as it is (attributes that lie about their
    lengths, ...) and, unless CRC, a correct checksum."""
    hdr = struct.pack('<IHI', len(payload), cmd, 0)
    if crc is None:
        crc = crc32c_raw(hdr + payload, 0)
    return struct.pack('<IHI', len(payload), cmd, crc) + payload


class Stream:
    """A stream being written: s.add(...) commands, s.data the bytes."""

    def __init__(self, version=1):
        self.version = version
        self.data = bytearray(MAGIC + u32(version))

    def raw(self, b):
        self.data += b
        return self

    def add(self, cmd, *attrs, crc=None):
        if isinstance(cmd, str):
            cmd = C[cmd]
        attrs = [(A[a] if isinstance(a, str) else a, v) for a, v in attrs]
        return self.raw(command(cmd, attrs, self.version, crc))

    # the commands with their usual attributes
    def subvol(self, name, uuid, ctransid=1):
        return self.add('SUBVOL', ('PATH', name), ('UUID', uuid),
                        ('CTRANSID', u64(ctransid)))

    def snapshot(self, name, uuid, parent_uuid, ctransid=2,
                 parent_ctransid=1):
        return self.add('SNAPSHOT', ('PATH', name), ('UUID', uuid),
                        ('CTRANSID', u64(ctransid)),
                        ('CLONE_UUID', parent_uuid),
                        ('CLONE_CTRANSID', u64(parent_ctransid)))

    def mkfile(self, path, ino=300):
        return self.add('MKFILE', ('PATH', path), ('INO', u64(ino)))

    def mkdir(self, path, ino=301):
        return self.add('MKDIR', ('PATH', path), ('INO', u64(ino)))

    def symlink(self, path, target, ino=302):
        return self.add('SYMLINK', ('PATH', path), ('INO', u64(ino)),
                        ('PATH_LINK', target))

    def rename(self, a, b):
        return self.add('RENAME', ('PATH', a), ('PATH_TO', b))

    def link(self, new, old):
        return self.add('LINK', ('PATH', new), ('PATH_LINK', old))

    def unlink(self, path):
        return self.add('UNLINK', ('PATH', path))

    def rmdir(self, path):
        return self.add('RMDIR', ('PATH', path))

    def write(self, path, offset, data):
        return self.add('WRITE', ('PATH', path),
                        ('FILE_OFFSET', u64(offset)), ('DATA', data))

    def clone(self, path, offset, length, uuid, src, src_offset):
        return self.add('CLONE', ('PATH', path), ('FILE_OFFSET', u64(offset)),
                        ('CLONE_LEN', u64(length)), ('CLONE_UUID', uuid),
                        ('CLONE_CTRANSID', u64(1)), ('CLONE_PATH', src),
                        ('CLONE_OFFSET', u64(src_offset)))

    def truncate(self, path, size):
        return self.add('TRUNCATE', ('PATH', path), ('SIZE', u64(size)))

    def chmod(self, path, mode):
        return self.add('CHMOD', ('PATH', path), ('MODE', u64(mode)))

    def chown(self, path, uid, gid):
        return self.add('CHOWN', ('PATH', path), ('UID', u64(uid)),
                        ('GID', u64(gid)))

    def utimes(self, path, sec, nsec=0):
        t = tspec(sec, nsec)
        return self.add('UTIMES', ('PATH', path), ('ATIME', t),
                        ('MTIME', t), ('CTIME', t))

    def set_xattr(self, path, name, value):
        return self.add('SET_XATTR', ('PATH', path), ('XATTR_NAME', name),
                        ('XATTR_DATA', value))

    def end(self):
        return self.add('END')


class Cmd:
    __slots__ = ('index', 'offset', 'type', 'crc', 'raw', 'attrs')


def parse(data):
    """(version, [Cmd]) of a well-formed stream; raises ValueError."""
    if data[:13] != MAGIC:
        raise ValueError('not a send stream')
    version = struct.unpack_from('<I', data, 13)[0]
    out, off = [], 17
    while off < len(data):
        if off + 10 > len(data):
            raise ValueError('cut in a command header at %d' % off)
        ln, typ, crc = struct.unpack_from('<IHI', data, off)
        if off + 10 + ln > len(data):
            raise ValueError('cut in a command at %d' % off)
        c = Cmd()
        c.index, c.offset, c.type, c.crc = len(out), off, typ, crc
        c.raw = bytes(data[off:off + 10 + ln])
        c.attrs, p = {}, off + 10
        while p < off + 10 + ln:
            a = struct.unpack_from('<H', data, p)[0]
            if version >= 2 and a == A['DATA']:
                c.attrs[a] = bytes(data[p + 2:off + 10 + ln])
                break
            alen = struct.unpack_from('<H', data, p + 2)[0]
            c.attrs[a] = bytes(data[p + 4:p + 4 + alen])
            p += 4 + alen
        out.append(c)
        off += 10 + ln
    return version, out


def prefix_hash(data, cmds, index):
    """FNV-1a 64 over the stream header and the first INDEX commands'
    headers (sendstream.h)."""
    h = 1469598103934665603
    for b in bytes(data[:17]) + b''.join(c.raw[:10] for c in cmds[:index]):
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def decode_token(token):
    """The fields of a resume token (sendstream.h) as a dict."""
    raw = base64.urlsafe_b64decode(token + '=' * (-len(token) % 4))
    if len(raw) != 84 or raw[:4] != b'nxr1':
        raise ValueError('not a resume token')
    crc = struct.unpack_from('<I', raw, 80)[0]
    if crc != crc32c_raw(raw[:80]) ^ 0xFFFFFFFF:
        raise ValueError('resume token checksum')
    (version,) = struct.unpack_from('<I', raw, 4)
    ctransid, = struct.unpack_from('<Q', raw, 24)
    pct, index, offset, h = struct.unpack_from('<4Q', raw, 48)
    return dict(version=version, uuid=raw[8:24], ctransid=ctransid,
                parent_uuid=raw[32:48], parent_ctransid=pct, index=index,
                offset=offset, hash=h)


def resume_stream(data, token):
    """What "nextfs send --resume TOKEN" sends for the stream DATA: the
    header, the first command, RESUME, and the commands from there on."""
    t = decode_token(token)
    version, cmds = parse(data)
    start = [c for c in cmds if c.index == t['index']]
    if not start or start[0].offset != t['offset'] or \
            prefix_hash(data, cmds, t['index']) != t['hash']:
        raise ValueError('the token is not a position in this stream')
    s = Stream(version)
    s.raw(cmds[0].raw)
    s.add('RESUME', ('RESUME_INDEX', u64(t['index'])),
          ('RESUME_OFFSET', u64(t['offset'])),
          ('RESUME_HASH', u64(t['hash'])))
    s.raw(bytes(data[t['offset']:]))
    return bytes(s.data)


# ------------------------------------------------------------ btrfs

def btrfs_unusable_reason():
    """None if a loop-mounted btrfs can be made here, else why not."""
    if os.geteuid() != 0:
        return 'needs root (loop mounts)'
    for prog in ('mkfs.btrfs', 'btrfs'):
        if not shutil.which(prog):
            return '%s is not installed (btrfs-progs)' % prog
    with open('/proc/filesystems') as f:
        if 'btrfs' not in f.read().split():
            if subprocess.run(['modprobe', 'btrfs'],
                              stderr=subprocess.DEVNULL).returncode != 0:
                return 'the kernel has no btrfs'
    return None


class Btrfs:
    """A fresh btrfs on a loop device under WORKDIR (context manager)."""

    def __init__(self, workdir, size='256M'):
        self.image = os.path.join(workdir, 'btrfs.img')
        self.path = tempfile.mkdtemp(prefix='btrfs.', dir=workdir)
        self.size = size
        self.mounted = False

    def __enter__(self):
        with open(self.image, 'wb') as f:
            f.truncate(nx_size(self.size))
        nx.run(['mkfs.btrfs', '-q', '-f', self.image])
        nx.run(['mount', '-o', 'loop', self.image, self.path])
        self.mounted = True
        return self

    def __exit__(self, *exc):
        if self.mounted:
            nx.run(['umount', self.path], check=False)
        os.rmdir(self.path)
        os.unlink(self.image)

    def p(self, *parts):
        return os.path.join(self.path, *parts)

    def subvolume(self, name):
        nx.run(['btrfs', '-q', 'subvolume', 'create', self.p(name)])
        return self.p(name)

    def snapshot(self, src, name):
        """A read-only snapshot of subvolume SRC (as btrfs send needs)."""
        nx.run(['btrfs', '-q', 'subvolume', 'snapshot', '-r', self.p(src),
                self.p(name)])
        return self.p(name)

    def send(self, name, out, parent=None, extra=()):
        argv = ['btrfs', '-q', 'send', '-f', out] + list(extra)
        if parent:
            argv += ['-p', self.p(parent)]
        nx.run(argv + [self.p(name)])
        return out

    def receive(self, stream, into=''):
        return nx.run(['btrfs', 'receive', '-f', stream, self.p(into)],
                      check=False)


def nx_size(size):
    units = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
    size = str(size)
    return int(size[:-1]) * units[size[-1]] if size[-1] in units \
        else int(size)


# ------------------------------------------------------------ trees

ODD_NAMES = ['spaces in name', 'new\nline', 'tab\there', '\u00e9t\u00e9',
             'bytes-\udcff\udcfe', '-dash', "quote'\"", 'back\\slash']


def _name(rng):
    if rng.random() < 0.15:
        return rng.choice(ODD_NAMES) + str(rng.randrange(100))
    return 'n%d' % rng.randrange(10000)


def _files(root):
    out = []
    for dirpath, dirs, files in os.walk(root):
        if dirpath == root:
            dirs[:] = [d for d in dirs if d not in ('lost+found',
                                                    '.snapshots')]
        for n in files:
            out.append(os.path.join(dirpath, n))
    return out


def _dirs(root):
    out = [root]
    for dirpath, dirs, files in os.walk(root):
        if dirpath == root:
            dirs[:] = [d for d in dirs if d not in ('lost+found',
                                                    '.snapshots')]
        out += [os.path.join(dirpath, d) for d in dirs]
    return out


def _data(rng, n):
    return nx.pattern(n, rng.randrange(1 << 30))


def populate(root, seed, files=40, devices=True):
    """Every kind of file below ROOT: regular files (empty, small, large,
    sparse), directories, hard links, symbolic links, fifos, sockets
    (skipped where binding is impossible), device nodes (root only), odd
    names, xattrs and ACLs, owners, modes, times."""
    rng = random.Random(seed)
    dirs = [root]
    for i in range(6):
        d = os.path.join(rng.choice(dirs), 'd%d-%s' % (i, _name(rng)))
        os.mkdir(d, 0o755)
        dirs.append(d)
    for i in range(files):
        p = os.path.join(rng.choice(dirs), 'f%d-%s' % (i, _name(rng)))
        kind = rng.random()
        if kind < 0.15:
            nx.write_file(p, b'')
        elif kind < 0.75:
            nx.write_file(p, _data(rng, rng.randrange(1, 20000)))
        elif kind < 0.9:
            nx.write_file(p, _data(rng, rng.randrange(100000, 400000)))
        else:           # sparse: data, a hole, data, a hole at the end
            with open(p, 'wb') as f:
                f.write(_data(rng, 5000))
                f.seek(1 << 20)
                f.write(_data(rng, 3000))
                f.truncate(3 << 20)
        if rng.random() < 0.3:
            os.setxattr(p, 'user.k%d' % i, _data(rng, rng.randrange(1, 60)))
        if os.geteuid() == 0 and rng.random() < 0.3:
            os.chown(p, rng.randrange(1000, 1010), rng.randrange(1000, 1010))
        os.chmod(p, rng.choice([0o644, 0o600, 0o755, 0o4755, 0o640]))
    fl = _files(root)
    for i in range(4):
        os.link(rng.choice(fl), os.path.join(rng.choice(dirs), 'hl%d' % i))
    for i in range(4):
        os.symlink(rng.choice(['../up', 'rel/target', '/absolute/path',
                               'x' * 300]),
                   os.path.join(rng.choice(dirs), 'sl%d-%s' % (i, _name(rng))))
    os.mkfifo(os.path.join(root, 'fifo'))
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(os.path.join(root, 'sock'))
    except OSError:
        pass                    # (a path too long for sun_path)
    sock.close()
    big = max(fl, key=lambda p: os.lstat(p).st_size)
    # shared extents on btrfs (send: clone commands), a copy elsewhere
    nx.run(['cp', '--reflink=auto', big, os.path.join(root, 'reflinked')])
    if devices and os.geteuid() == 0:
        os.mknod(os.path.join(root, 'null-dev'), 0o666 | stat.S_IFCHR,
                 os.makedev(1, 3))
        os.mknod(os.path.join(root, 'blk-dev'), 0o660 | stat.S_IFBLK,
                 os.makedev(7, 200))
    acl = os.path.join(dirs[-1], 'with-acl')
    nx.write_file(acl, b'acl\n')
    nx.run(['setfacl', '-m', 'u:1234:rw-,g:5678:r--', acl], check=False)
    nx.run(['setfacl', '-d', '-m', 'u:1234:rwx', dirs[-1]], check=False)
    for p in _files(root) + _dirs(root)[1:]:
        if not os.path.islink(p) and rng.random() < 0.5:
            t = rng.randrange(10 ** 9, 17 * 10 ** 8)
            os.utime(p, ns=(t * 10 ** 9 + rng.randrange(10 ** 9),
                            t * 10 ** 9 + rng.randrange(10 ** 9)))


def mutate(root, seed, steps=40):
    """A seeded round of every kind of change below ROOT: create, write,
    truncate up and down, unlink, rename (also over an existing file and
    of directories), swap two names, replace a file by a directory,
    remove a directory tree, hard links added and removed, symlinks,
    copies sharing extents (btrfs: clones), chmod, chown, xattrs set and
    removed, times."""
    rng = random.Random(seed)
    for step in range(steps):
        fl, dl = _files(root), _dirs(root)
        op = rng.randrange(15)
        try:
            if op == 0 or not fl:
                nx.write_file(os.path.join(rng.choice(dl), 'c%d' % step),
                              _data(rng, rng.randrange(0, 30000)))
            elif op == 1:
                p = rng.choice(fl)
                if os.path.isfile(p) and not os.path.islink(p):
                    with open(p, 'r+b') as f:
                        f.seek(rng.randrange(0, 200000))
                        f.write(_data(rng, rng.randrange(1, 9000)))
            elif op == 2:
                p = rng.choice(fl)
                if os.path.isfile(p) and not os.path.islink(p):
                    os.truncate(p, rng.choice([0, 1, 4095, 70000, 2 << 20]))
            elif op == 3:
                os.unlink(rng.choice(fl))
            elif op == 4:
                os.rename(rng.choice(fl),
                          os.path.join(rng.choice(dl), 'r%d' % step))
            elif op == 5 and len(fl) > 1:     # rename over another file
                a, b = rng.sample(fl, 2)
                if not os.path.isdir(b):
                    os.rename(a, b)
            elif op == 6 and len(dl) > 2:     # move a directory
                d = rng.choice(dl[1:])
                t = rng.choice(dl)
                if not (t + '/').startswith(d + '/'):
                    os.rename(d, os.path.join(t, 'm%d' % step))
            elif op == 7 and len(fl) > 1:     # swap two names
                a, b = rng.sample(fl, 2)
                nx.renameat2(a, b, 2)         # RENAME_EXCHANGE
            elif op == 8:                     # a file becomes a directory
                p = rng.choice(fl)
                os.unlink(p)
                os.mkdir(p)
                nx.write_file(os.path.join(p, 'inside'), b'x')
            elif op == 9:
                os.link(rng.choice(fl),
                        os.path.join(rng.choice(dl), 'h%d' % step))
            elif op == 10:
                os.symlink('t%d' % step,
                           os.path.join(rng.choice(dl), 's%d' % step))
                # and a copy sharing extents with an older file
                p = rng.choice(fl)
                if os.path.isfile(p) and not os.path.islink(p):
                    nx.run(['cp', '--reflink=auto', p,
                            os.path.join(rng.choice(dl), 'k%d' % step)])
            elif op == 11:
                p = rng.choice(fl)
                if not os.path.islink(p):
                    os.chmod(p, rng.choice([0o600, 0o644, 0o2755]))
                    if os.geteuid() == 0:
                        os.chown(p, rng.randrange(2000, 2005), 2000)
            elif op == 12:
                p = rng.choice(fl)
                if stat.S_ISREG(os.lstat(p).st_mode):
                    names = os.listxattr(p)
                    if names and rng.random() < 0.5:
                        os.removexattr(p, rng.choice(names))
                    else:
                        os.setxattr(p, 'user.m%d' % step,
                                    _data(rng, rng.randrange(1, 100)))
            elif op == 13 and len(dl) > 2:    # a whole directory goes
                shutil.rmtree(rng.choice(dl[1:]))
            else:
                p = rng.choice(fl + dl[1:])
                if not os.path.islink(p):
                    os.utime(p, ns=(rng.randrange(10 ** 18),
                                    rng.randrange(10 ** 18)))
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.EISDIR, errno.ENOTDIR,
                               errno.EINVAL, errno.ENOTEMPTY, errno.EEXIST):
                raise


def manifest(root, root_mtime=True, times=True):
    """tree_state() of ROOT (.snapshots and lost+found left out), as two
    file systems can agree on it: without directories' link counts (btrfs
    keeps them at 1) and, unless ROOT_MTIME, without the root's mtime (a
    snapshot directory shows its take time); TIMES False: no mtimes."""
    man = nx.tree_state(root, times=times,
                        skip_top=('lost+found', '.snapshots'))
    for rel, rec in man.items():
        if rel != '//links':
            rec.pop('nlink', None)
    if not root_mtime:
        man['.'].pop('mtime_ns', None)
    return man


@contextlib.contextmanager
def pipe_into(argv, **kw):
    """A process reading its stdin from us: yield (process, writable
    file)."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, **kw)
    try:
        yield p, p.stdin
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()
