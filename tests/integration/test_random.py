#!/usr/bin/env python3
"""Seeded random operations, applied to a nextfs mount and to a reference
directory on the host; every result (value or errno) must agree, and so
must the whole trees (checked periodically, at the end, and again after a
remount).  The image must then pass e2fsck -fn.

Environment:
  NEXTFS_RANDOM_SEED     seed (default: random; always printed)
  NEXTFS_RANDOM_OPS      maximum number of operations (default 4000)
  NEXTFS_RANDOM_SECONDS  time budget for the operations (default 35)

Run: test_random.py --flavour ext2|ext3|ext4|ext4-inline [unittest args]
"""

import collections
import errno
import hashlib
import os
import random
import stat
import sys
import time

import nxharness as nx

KiB = 1 << 10
MiB = 1 << 20
NAMES = ('a', 'b', 'c', 'd', 'e', 'f', 'g', 'h')
XATTRS = ('user.x0', 'user.x1', 'user.x2', 'user.x3', 'trusted.t0')
OWNERS = (0, 1000, 4242)
COMPARE_EVERY = 500


def errname(e):
    return errno.errorcode.get(e, str(e))


def summary(path):
    """What lstat says about PATH that must agree (not times, not dir
    sizes, which depend on the layout)."""
    st = os.lstat(path)
    fmt = stat.S_IFMT(st.st_mode)
    s = (oct(st.st_mode), st.st_uid, st.st_gid, st.st_nlink)
    if fmt in (stat.S_IFREG, stat.S_IFLNK):
        s += (st.st_size,)
    return s


def file_digest(path):
    """sha256 of a regular file's data (following symlinks), or why not."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return 'not a regular file'
        return nx.sha256_file(path)
    except OSError as e:
        return errname(e.errno)


def probe_host(d):
    """Which optional operations the host reference directory supports."""
    caps = {}
    p = os.path.join(d, '.probe')
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b'x' * 8192)
    for name, mode in (('punch', nx.FALLOC_FL_PUNCH_HOLE |
                        nx.FALLOC_FL_KEEP_SIZE),
                       ('zero', nx.FALLOC_FL_ZERO_RANGE),
                       ('falloc', nx.FALLOC_FL_KEEP_SIZE)):
        try:
            nx.fallocate(fd, mode, 0, 4096)
            caps[name] = True
        except OSError:
            caps[name] = False
    os.close(fd)
    for ns in ('user', 'trusted'):
        try:
            os.setxattr(p, ns + '.probe', b'1')
            caps[ns] = True
        except OSError:
            caps[ns] = False
    os.unlink(p)
    return caps


class Mismatch(AssertionError):
    pass


class Runner:
    """Generates operations from a seed and applies each to all roots."""

    def __init__(self, seed, roots, caps, extents):
        self.rng = random.Random(seed)
        self.seed = seed
        self.roots = roots              # [mount, host]
        self.history = collections.deque(maxlen=25)
        self.count = 0
        self.handles = []   # open files kept across operations: {root: fd}
        self.xattrs = [x for x in XATTRS if caps.get(x.split('.')[0])]
        ops = [(12, self.op_create), (3, self.op_open_trunc),
               (14, self.op_write), (4, self.op_append), (8, self.op_read),
               (5, self.op_truncate), (2, self.op_ftruncate),
               (4, self.op_mkdir), (3, self.op_rmdir), (6, self.op_unlink),
               (7, self.op_rename), (3, self.op_link), (4, self.op_symlink),
               (2, self.op_readlink), (2, self.op_chmod), (1, self.op_chown),
               (2, self.op_utime), (5, self.op_stat), (3, self.op_listdir),
               (1, self.op_fsync), (3, self.op_hopen), (4, self.op_hwrite),
               (3, self.op_hread), (2, self.op_hclose),
               (1, self.op_hftruncate), (2, self.op_hfstat)]
        if self.xattrs:
            ops += [(4, self.op_setxattr), (2, self.op_removexattr),
                    (2, self.op_getxattrs)]
        if caps.get('punch'):
            ops.append((4, self.op_punch))
        # ext4 refuses these on indirect-mapped files; so may nextfs
        if extents and caps.get('zero'):
            ops.append((2, self.op_zero_range))
        if extents and caps.get('falloc'):
            ops.append((3, self.op_fallocate))
        self.ops = [op for w, op in ops for _ in range(w)]
        self.refresh()

    # -- choosing paths (from the host tree, so choices are reproducible)

    def refresh(self):
        host = self.roots[1]
        self.entries, self.files, self.dirs = [], [], ['']
        for dirpath, dirnames, filenames in os.walk(host):
            rel = os.path.relpath(dirpath, host)
            rel = '' if rel == '.' else rel
            dirnames.sort()
            for n in dirnames:
                self.dirs.append(os.path.join(rel, n))
            for n in sorted(filenames):
                self.files.append(os.path.join(rel, n))
            for n in sorted(dirnames + filenames):
                self.entries.append(os.path.join(rel, n))

    def new_path(self):
        return os.path.join(self.rng.choice(self.dirs),
                            self.rng.choice(NAMES))

    def any_path(self):
        if self.entries and self.rng.random() < 0.7:
            return self.rng.choice(self.entries)
        return self.new_path()

    def file_path(self):
        """Mostly an existing non-directory (may be a symlink)."""
        if self.files and self.rng.random() < 0.85:
            return self.rng.choice(self.files)
        return self.any_path()

    def dir_path(self):
        if self.rng.random() < 0.7:
            return self.rng.choice(self.dirs)
        return self.any_path()

    def target_path(self):
        """Mostly a name that does not exist yet."""
        if self.rng.random() < 0.6:
            return self.new_path()
        return self.any_path()

    def size(self, small=256 * KiB, large=4 * MiB):
        if self.rng.random() < 0.8:
            return self.rng.randrange(small)
        return self.rng.randrange(large)

    def data(self):
        r = self.rng.random()
        n = (self.rng.randrange(1, 4 * KiB) if r < 0.7 else
             self.rng.randrange(1, 64 * KiB) if r < 0.95 else
             self.rng.randrange(1, 512 * KiB))
        return self.rng.randbytes(n)

    # -- running

    def apply(self, desc, fn, *paths, content=False):
        """Run FN(root) on every root; results and lstat of PATHS agree,
        and with CONTENT the data of the first path too (so that a wrong
        write, punch or truncate is caught at the operation that did it)."""
        self.count += 1
        results = []
        for root in self.roots:
            try:
                results.append(('ok', fn(root)))
            except OSError as e:
                results.append(('error', errname(e.errno)))
        self.history.append('#%d %s -> %r' % (self.count, desc,
                                              results[0]))
        if results[0] != results[1]:
            self.mismatch(desc, 'result', results)
        for rel in paths:
            got = []
            for root in self.roots:
                try:
                    got.append(summary(os.path.join(root, rel)))
                except OSError as e:
                    got.append(errname(e.errno))
            if got[0] != got[1]:
                self.mismatch(desc, 'lstat of %r' % rel, got)
        if content and paths:
            got = [file_digest(os.path.join(root, paths[0]))
                   for root in self.roots]
            if got[0] != got[1]:
                self.mismatch(desc, 'content of %r' % paths[0], got)

    def mismatch(self, desc, what, pair):
        raise Mismatch(
            'seed %d, operation #%d: %s\n  %s differs: mount %r, host %r\n'
            'recent operations:\n  %s' %
            (self.seed, self.count, desc, what, pair[0], pair[1],
             '\n  '.join(self.history)))

    def close_handles(self):
        for h in self.handles:
            for fd in h['fds'].values():
                os.close(fd)
        self.handles = []

    def step(self):
        self.rng.choice(self.ops)()
        if self.count % 50 == 0:
            self.refresh()

    # -- operations: each picks its arguments once, then applies them

    def op_create(self):
        p, mode = self.target_path(), self.rng.choice((0o644, 0o600, 0o755))

        def fn(root):
            os.close(os.open(os.path.join(root, p),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
        self.apply('create %s %o' % (p, mode), fn, p)

    def op_open_trunc(self):
        p = self.any_path()

        def fn(root):
            os.close(os.open(os.path.join(root, p),
                             os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        self.apply('open O_CREAT|O_TRUNC %s' % p, fn, p,
                   content=True)

    def _with_fd(self, p, flags, fn):
        def run(root):
            fd = os.open(os.path.join(root, p), flags)
            try:
                return fn(fd)
            finally:
                os.close(fd)
        return run

    def op_write(self):
        p, off, data = self.file_path(), self.size(), self.data()
        self.apply('pwrite %s off=%d len=%d' % (p, off, len(data)),
                   self._with_fd(p, os.O_WRONLY,
                                 lambda fd: os.pwrite(fd, data, off)),
                   p, content=True)

    def op_append(self):
        p, data = self.file_path(), self.data()
        self.apply('append %s len=%d' % (p, len(data)),
                   self._with_fd(p, os.O_WRONLY | os.O_APPEND,
                                 lambda fd: os.write(fd, data)),
                   p, content=True)

    def op_read(self):
        p, off, n = self.file_path(), self.size(), self.size(512 * KiB)

        def rd(fd):
            out = bytearray()
            while len(out) < n:
                b = os.pread(fd, n - len(out), off + len(out))
                if not b:
                    break
                out += b
            return hashlib.sha256(out).hexdigest(), len(out)
        self.apply('pread %s off=%d len=%d' % (p, off, n),
                   self._with_fd(p, os.O_RDONLY, rd), p)

    def op_truncate(self):
        p, n = self.file_path(), self.size()
        self.apply('truncate %s %d' % (p, n),
                   lambda root: os.truncate(os.path.join(root, p), n),
                   p, content=True)

    def op_ftruncate(self):
        p, n = self.file_path(), self.size()
        self.apply('ftruncate %s %d' % (p, n),
                   self._with_fd(p, os.O_RDWR,
                                 lambda fd: os.ftruncate(fd, n)),
                   p, content=True)

    def op_punch(self):
        p, off, n = self.file_path(), self.size(), self.size(128 * KiB, MiB)
        mode = nx.FALLOC_FL_PUNCH_HOLE | nx.FALLOC_FL_KEEP_SIZE
        self.apply('punch %s off=%d len=%d' % (p, off, n + 1),
                   self._with_fd(p, os.O_WRONLY, lambda fd:
                                 nx.fallocate(fd, mode, off, n + 1)),
                   p, content=True)

    def op_zero_range(self):
        p, off, n = self.file_path(), self.size(), self.size(128 * KiB, MiB)
        mode = nx.FALLOC_FL_ZERO_RANGE | self.rng.choice(
            (0, nx.FALLOC_FL_KEEP_SIZE))
        self.apply('zero_range %s off=%d len=%d mode=%#x' %
                   (p, off, n + 1, mode),
                   self._with_fd(p, os.O_WRONLY, lambda fd:
                                 nx.fallocate(fd, mode, off, n + 1)),
                   p, content=True)

    def op_fallocate(self):
        p, off, n = self.file_path(), self.size(), self.size(128 * KiB, MiB)
        mode = self.rng.choice((0, nx.FALLOC_FL_KEEP_SIZE))
        self.apply('fallocate %s off=%d len=%d mode=%#x' %
                   (p, off, n + 1, mode),
                   self._with_fd(p, os.O_WRONLY, lambda fd:
                                 nx.fallocate(fd, mode, off, n + 1)),
                   p, content=True)

    def op_mkdir(self):
        p = self.target_path()
        self.apply('mkdir %s' % p,
                   lambda root: os.mkdir(os.path.join(root, p), 0o755),
                   p, os.path.dirname(p))

    def op_rmdir(self):
        p = self.dir_path() or self.new_path()      # never the root
        self.apply('rmdir %s' % p,
                   lambda root: os.rmdir(os.path.join(root, p)),
                   p, os.path.dirname(p))

    def op_unlink(self):
        p = self.file_path()
        self.apply('unlink %s' % p,
                   lambda root: os.unlink(os.path.join(root, p)), p)

    def op_rename(self):
        src, dst = self.any_path(), self.target_path()
        flags = self.rng.choice((0,) * 6 + (nx.RENAME_NOREPLACE,
                                            nx.RENAME_EXCHANGE))
        self.apply('rename %s -> %s flags=%d' % (src, dst, flags),
                   lambda root: nx.renameat2(os.path.join(root, src),
                                             os.path.join(root, dst), flags),
                   src, dst, os.path.dirname(src), os.path.dirname(dst))

    def op_link(self):
        src, dst = self.file_path(), self.target_path()
        self.apply('link %s -> %s' % (src, dst),
                   lambda root: os.link(os.path.join(root, src),
                                        os.path.join(root, dst),
                                        follow_symlinks=False), src, dst)

    def op_symlink(self):
        # relative targets only, never leaving the tree, short and long
        depth = self.rng.choice((1, 1, 2, 3, 60))
        target = '/'.join(self.rng.choice(NAMES) for _ in range(depth))
        p = self.target_path()
        self.apply('symlink %s -> %s' % (p, target),
                   lambda root: os.symlink(target, os.path.join(root, p)), p)

    def op_readlink(self):
        p = self.file_path()
        self.apply('readlink %s' % p,
                   lambda root: os.readlink(os.path.join(root, p)))

    def op_chmod(self):
        p = self.file_path()
        mode = self.rng.choice((0o644, 0o600, 0o755, 0o4755, 0o2750, 0o1777,
                                0o000, 0o777))
        self.apply('chmod %s %o' % (p, mode),
                   lambda root: os.chmod(os.path.join(root, p), mode), p)

    def op_chown(self):
        p = self.file_path()
        uid, gid = self.rng.choice(OWNERS), self.rng.choice(OWNERS)
        self.apply('lchown %s %d:%d' % (p, uid, gid),
                   lambda root: os.chown(os.path.join(root, p), uid, gid,
                                         follow_symlinks=False), p)

    def op_utime(self):
        p = self.file_path()
        t = (self.rng.randrange(-2**31, 2**33) * 10**9 +
             self.rng.randrange(10**9))
        follow = self.rng.random() < 0.5

        def fn(root):
            path = os.path.join(root, p)
            os.utime(path, ns=(t, t + 1), follow_symlinks=follow)
            st = os.stat(path, follow_symlinks=follow)
            return st.st_atime_ns, st.st_mtime_ns
        self.apply('utime %s %d follow=%s' % (p, t, follow), fn, p)

    def op_stat(self):
        p = self.any_path()
        self.apply('lstat %s' % p,
                   lambda root: summary(os.path.join(root, p)))

    def op_listdir(self):
        p = self.dir_path()
        self.apply('listdir %s' % p,
                   lambda root: sorted(os.listdir(os.path.join(root, p))))

    def op_fsync(self):
        p = self.file_path()
        self.apply('fsync %s' % p,
                   self._with_fd(p, os.O_RDONLY, os.fsync))

    def op_setxattr(self):
        p, name = self.file_path(), self.rng.choice(self.xattrs)
        value = self.rng.randbytes(self.rng.choice((0, 1, 10, 60)))
        flags = self.rng.choice((0, 0, os.XATTR_CREATE, os.XATTR_REPLACE))
        self.apply('setxattr %s %s len=%d flags=%d' %
                   (p, name, len(value), flags),
                   lambda root: os.setxattr(os.path.join(root, p), name,
                                            value, flags,
                                            follow_symlinks=False), p)

    def op_removexattr(self):
        p, name = self.file_path(), self.rng.choice(self.xattrs)
        try:
            present = sorted(set(self.xattrs) & set(os.listxattr(
                os.path.join(self.roots[1], p), follow_symlinks=False)))
        except OSError:
            present = []
        if present and self.rng.random() < 0.7:
            name = self.rng.choice(present)
        self.apply('removexattr %s %s' % (p, name),
                   lambda root: os.removexattr(os.path.join(root, p), name,
                                               follow_symlinks=False), p)

    def op_getxattrs(self):
        p = self.file_path()

        def fn(root):
            path = os.path.join(root, p)
            names = sorted(os.listxattr(path, follow_symlinks=False))
            return [(n, os.getxattr(path, n, follow_symlinks=False))
                    for n in names]
        self.apply('getxattrs %s' % p, fn)

    # -- descriptors kept open across other operations (renames, unlinks)

    def op_hopen(self):
        p = self.file_path()
        flags = self.rng.choice((os.O_RDWR, os.O_RDWR, os.O_RDONLY))
        if len(self.handles) >= 4:
            h = self.handles.pop(0)
            for fd in h['fds'].values():
                os.close(fd)
        fds = {}

        def fn(root):
            fds[root] = os.open(os.path.join(root, p), flags)
        try:
            self.apply('open handle %d on %s flags=%d' %
                       (self.count + 1, p, flags), fn, p)
        finally:
            if len(fds) == len(self.roots):
                self.handles.append({'name': '%s@%d' % (p, self.count),
                                     'fds': fds})
            else:
                for fd in fds.values():
                    os.close(fd)

    def _handle(self):
        return self.rng.choice(self.handles) if self.handles else None

    def op_hwrite(self):
        h, off, data = self._handle(), self.size(), self.data()
        if not h:
            return self.op_write()
        self.apply('pwrite handle %s off=%d len=%d' %
                   (h['name'], off, len(data)),
                   lambda root: os.pwrite(h['fds'][root], data, off))

    def op_hread(self):
        h, off, n = self._handle(), self.size(), self.size(512 * KiB)
        if not h:
            return self.op_read()
        self.apply('pread handle %s off=%d len=%d' % (h['name'], off, n),
                   lambda root: hashlib.sha256(
                       os.pread(h['fds'][root], n, off)).hexdigest())

    def op_hftruncate(self):
        h, n = self._handle(), self.size()
        if not h:
            return self.op_ftruncate()
        self.apply('ftruncate handle %s %d' % (h['name'], n),
                   lambda root: os.ftruncate(h['fds'][root], n))

    def op_hfstat(self):
        h = self._handle()
        if not h:
            return self.op_stat()

        def fn(root):
            st = os.fstat(h['fds'][root])
            size = None if stat.S_ISDIR(st.st_mode) else st.st_size
            return oct(st.st_mode), st.st_nlink, size
        self.apply('fstat handle %s' % h['name'], fn)

    def op_hclose(self):
        if not self.handles:
            return self.op_stat()
        h = self.handles.pop(self.rng.randrange(len(self.handles)))
        self.apply('close handle %s' % h['name'],
                   lambda root: os.close(h['fds'][root]))


class RandomOpsTest(nx.NxTestCase):

    def compare(self, roots, what):
        self.assertTreesEqual(nx.tree_state(roots[1], times=False,
                                            nlink=True),
                              nx.tree_state(roots[0], times=False,
                                            nlink=True), what)

    def run_ops(self, runner, roots, nops, budget):
        deadline = time.monotonic() + budget
        try:
            while runner.count < nops and time.monotonic() < deadline:
                runner.step()
                if runner.count % COMPARE_EVERY == 0:
                    self.compare(roots, 'after operation #%d' %
                                 runner.count)
        finally:
            runner.close_handles()
        self.compare(roots, 'after operation #%d (last)' % runner.count)

    def test_random_operations(self):
        self.need_root()        # trusted.* xattrs, chown, setuid modes
        env_seed = os.environ.get('NEXTFS_RANDOM_SEED')
        seed = int(env_seed) if env_seed else \
            random.SystemRandom().randrange(2**32)
        nops = int(os.environ.get('NEXTFS_RANDOM_OPS', '4000'))
        budget = float(os.environ.get('NEXTFS_RANDOM_SECONDS', '35'))
        print('\nrandom seed %d (reproduce: NEXTFS_RANDOM_SEED=%d '
              'NEXTFS_RANDOM_OPS=N)' % (seed, seed), file=sys.stderr)
        host = os.path.join(self.work, 'host')
        os.mkdir(host)
        caps = probe_host(host)
        img = self.make_image('256M')
        t0 = time.monotonic()
        with self.mounted(img) as m:
            os.mkdir(m.p('r'))
            roots = [m.p('r'), host]
            runner = Runner(seed, roots, caps, self.extents)
            try:
                self.run_ops(runner, roots, nops, budget)
            finally:
                print('ran %d operations in %.1f s (NEXTFS_RANDOM_OPS=%d '
                      'replays them)' % (runner.count, time.monotonic() - t0,
                                         runner.count), file=sys.stderr)
        with self.mounted(img) as m:
            roots = [m.p('r'), host]
            self.compare(roots, 'after remount')
            # keep going on the remounted image for a while
            runner = Runner(seed + 1, roots, caps, self.extents)
            self.run_ops(runner, roots, min(500, nops), budget / 5)
        with self.mounted(img) as m:
            self.compare([m.p('r'), host], 'after second remount')


if __name__ == '__main__':
    nx.main()
