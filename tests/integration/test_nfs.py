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
  "echo 2 > /proc/sys/vm/drop_caches" and after a daemon restart;
- they are ESTALE, never another file, for a deleted file, for an inode
  number freed and given to a new file, for the files of a deleted
  snapshot and for a handle of another volume (a copy of the image given
  a new UUID);
- readdir resumes from a cookie (raw getdents64 d_off, lseek on a fresh
  open) after the directory changed and the daemon restarted: no entry
  twice, none missing that existed throughout (linear and htree
  directories, "/", .snapshots).

Skipped where the machine cannot do it: not root (open_by_handle_at needs
CAP_DAC_READ_SEARCH; drop_caches).  The kernel's nfsd is not tested (not
in this kernel): it decodes handles with the same exportfs code.

Runs once (no flavour).
"""

import ctypes
import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import nxharness as nx
import nxsnap

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
                new = self.reuse_inode(m, old_ino)
                nx.write_file(new, b'a new file in the old inode\n')
                self.assert_stale(mount_fd, stale['reused'],
                                  'handle of a file whose inode was reused')
                self.check_handle(m, mount_fd, self.expect(
                    m, os.path.relpath(new, m.path)), 'the new file')
            finally:
                os.close(mount_fd)
        self.assert_fsck_masked(img)

    def reuse_inode(self, m, ino, tries=50):
        """A new file with inode number INO (freed just now)."""
        for i in range(tries):
            p = m.p('new%d' % i)
            nx.write_file(p, b'')
            if os.lstat(p).st_ino == ino:
                return p
            time.sleep(0.02)        # the release may still be on its way
        self.fail('inode %d was not reused by %d new files' % (ino, tries))

    def test_handle_of_another_volume(self):
        """A copy of the image with a new UUID: same inode numbers, same
        generations, but the handle is stale there, not its file."""
        a = self.make_image(name='a.img')
        with self.mounted(a) as m:
            nx.write_file(m.p('file'), b'volume a\n')
            fh = name_to_handle(m.p('file'))
        b = os.path.join(self.work, 'b.img')
        shutil.copyfile(a, b)
        nx.run(['tune2fs', '-U', 'random', b], stderr=subprocess.STDOUT)
        with self.mounted(b) as m:
            nx.write_file(m.p('file'), b'volume b\n')
            mount_fd = os.open(m.path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                self.assert_stale(mount_fd, fh, 'handle of volume a on b')
            finally:
                os.close(mount_fd)

    def test_readdir_cookies(self):
        """Resume from a cookie on a fresh open after the directory
        changed and the daemon restarted: no entry twice, none lost."""
        img = self.make_image()
        dirs = {'small': 12, 'big': 400}    # one block (linear), htree
        with self.mounted(img, check=False) as m:
            for d, n in dirs.items():
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


if __name__ == '__main__':
    nx.main()
