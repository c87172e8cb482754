#!/usr/bin/env python3
"""Deleting snapshots never changes the snapshots that remain (P5).

A model of the live tree (names, modes, sizes and every 4 KiB of data of
sparse files, some of them spread over up to 1 GB so that ext2/ext3 build
double and triple indirect trees) follows a seeded sequence of writes,
truncates, punches, fallocates, creates, renames, unlinks and chmods on a
nextfs mount.  At every take the model is frozen as what the snapshot must
show forever.  After every delete every kept snapshot is compared with its
frozen model: tree, modes, sizes, and each block (holes read as zeros).

test_random_take_delete interleaves takes and deletes of the oldest, the
newest, a middle one or several in a row, through rmdir, through "nextfs
snapshot delete MNT", offline ("nextfs snapshot delete IMAGE" between an
unmount and a remount) and while another thread writes to the live tree.
test_delete_positions builds one image with six snapshots and deletes, on
copies of it, the oldest, the newest, a middle one, three in a row,
during writes, and offline.  Both end with "nextfs check" clean (with
--views after each random run and in the first position case) and, once
every snapshot is deleted, plain e2fsck -fn clean.

Soak runs (docs/snapshots.md):
  NEXTFS_SEED=N                one seed instead of the fixed set
  NEXTFS_SNAPDELETE_STEPS=N    operations per seed (default 150)

Run: test_snapdelete.py --flavour ext2|ext3|ext4|ext4-inline
"""

import errno
import hashlib
import os
import random
import shutil
import stat
import subprocess
import tempfile
import threading

import nxharness as nx
import nxsnap

MB = 1 << 20
BS = 4096                   # the model's unit, independent of the fs
BIG_SPAN = 10 ** 9          # big sparse files reach this far
SMALL_SPAN = 256 * 1024
ZERO = bytes(BS)
SEEDS = (1, 2)              # the fixed set CI runs
STEPS = 150


# ------------------------------------------------------------ the model

class FileModel:
    """A regular file: mode, size and its non-zero 4 KiB blocks."""

    def __init__(self, mode=0o644):
        self.mode = mode
        self.size = 0
        self.blocks = {}

    def copy(self):
        c = FileModel(self.mode)
        c.size = self.size
        c.blocks = dict(self.blocks)
        return c

    def _put(self, i, data):
        if data.count(0) == BS:
            self.blocks.pop(i, None)
        else:
            self.blocks[i] = bytes(data)

    def _patch(self, off, data):
        pos = 0
        while pos < len(data):
            i, at = divmod(off + pos, BS)
            n = min(BS - at, len(data) - pos)
            blk = bytearray(self.blocks.get(i, ZERO))
            blk[at:at + n] = data[pos:pos + n]
            self._put(i, blk)
            pos += n

    def write(self, off, data):
        self._patch(off, data)
        self.size = max(self.size, off + len(data))

    def zero(self, off, length):
        """Punch: bytes in [off, off+length) below the size become 0."""
        end = min(off + length, self.size)
        pos = off
        while pos < end:
            i, at = divmod(pos, BS)
            n = min(BS - at, end - pos)
            if i in self.blocks:
                if n == BS:
                    del self.blocks[i]
                else:
                    blk = bytearray(self.blocks[i])
                    blk[at:at + n] = bytes(n)
                    self._put(i, blk)
            pos += n

    def truncate(self, size):
        if size < self.size:
            self.zero(size, self.size - size)
            for i in [i for i in self.blocks if i * BS >= size]:
                del self.blocks[i]
        self.size = size

    def block(self, i):
        return self.blocks.get(i, ZERO)


class TreeModel:
    """Directories and regular files of the live tree, by relative path."""

    def __init__(self):
        self.dirs = {''}
        self.files = {}

    def freeze(self):
        t = TreeModel()
        t.dirs = set(self.dirs)
        t.files = {p: f.copy() for p, f in self.files.items()}
        return t


# ------------------------------------------------------------ comparing

def data_ranges(fd, size):
    """(start, end) of the data segments (SEEK_DATA/SEEK_HOLE)."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:
                return
            raise
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, end
        pos = end


def file_mismatches(path, want, limit=4):
    """How the file at PATH differs from FileModel WANT (a list)."""
    st = os.lstat(path)
    out = []
    if not stat.S_ISREG(st.st_mode):
        return ['not a regular file']
    if stat.S_IMODE(st.st_mode) != want.mode:
        out.append('mode %o, want %o' % (stat.S_IMODE(st.st_mode), want.mode))
    if st.st_size != want.size:
        out.append('size %d, want %d' % (st.st_size, want.size))
        return out
    seen = set()
    fd = os.open(path, os.O_RDONLY)
    try:
        for start, end in data_ranges(fd, st.st_size):
            i = start // BS
            while i * BS < end:
                got = os.pread(fd, BS, i * BS).ljust(BS, b'\0')
                seen.add(i)
                exp = want.block(i)
                if got != exp and len(out) < limit:
                    out.append('block %d (offset %d) differs: %s, want %s' %
                               (i, i * BS, digest(got), digest(exp)))
                i += 1
    finally:
        os.close(fd)
    lost = sorted(set(want.blocks) - seen)
    if lost:
        out.append('%d data blocks read as a hole (first at offset %d)' %
                   (len(lost), lost[0] * BS))
    return out


def digest(b):
    return 'zeros' if b.count(0) == len(b) else hashlib.md5(b).hexdigest()[:8]


def tree_mismatches(root, want):
    """How the tree at ROOT differs from TreeModel WANT (a list)."""
    dirs, files = {''}, set()
    for dp, dns, fns in os.walk(root):
        rel = os.path.relpath(dp, root)
        rel = '' if rel == '.' else rel
        if rel == '':
            dns[:] = [d for d in dns if d not in nxsnap.SKIP]
        dirs.update(os.path.join(rel, d) for d in dns)
        files.update(os.path.join(rel, f) for f in fns)
    out = []
    if dirs != want.dirs:
        out.append('directories %s, want %s' % (sorted(dirs),
                                                sorted(want.dirs)))
    for p in sorted(files - set(want.files)):
        out.append('%s: should not exist' % p)
    for p in sorted(set(want.files) - files):
        out.append('%s: missing' % p)
    for p in sorted(files & set(want.files)):
        out += ['%s: %s' % (p, m) for m in
                file_mismatches(os.path.join(root, p), want.files[p])]
    return out


# ------------------------------------------------------------ the runner

class Runner:
    """Seeded operations on a mount and on the model, plus snapshots."""

    def __init__(self, case, img, seed):
        self.case = case
        self.img = img
        self.rng = random.Random(seed)
        self.live = TreeModel()
        self.snaps = []             # [(name, frozen TreeModel)], oldest first
        self.taken = 0
        self.n = 0
        self.log = []               # what happened, for failure messages
        self.ctx = self.m = None

    # -- helpers

    def note(self, what):
        self.log.append(what)
        del self.log[:-30]

    def fail(self, what):
        self.case.fail('%s%s\nlast steps:\n  %s' %
                       (what, self.keep(), '\n  '.join(self.log)))

    def keep(self):
        """NEXTFS_KEEP_FAILED=1: unmount and keep the image; say where."""
        if os.environ.get('NEXTFS_KEEP_FAILED') != '1':
            return ''
        if self.ctx:
            self.unmount()
        kept = tempfile.mktemp(prefix='nextfs-failed-', suffix='.img',
                               dir=nx.tmp_root())
        shutil.copyfile(self.img, kept)
        return ' (image kept as %s)' % kept

    def data(self, n):
        return self.rng.randbytes(n)

    def pick_file(self, big=None):
        names = sorted(p for p in self.live.files
                       if big is None or p.endswith('.big') == big)
        return self.rng.choice(names) if names else None

    # -- operations on the live tree (mounted at self.m)

    def op_create(self):
        self.n += 1
        big = self.rng.random() < 0.4
        rel = os.path.join(self.rng.choice(sorted(self.live.dirs)),
                           'f%d%s' % (self.n, '.big' if big else ''))
        mode = self.rng.choice([0o644, 0o600, 0o755])
        fd = os.open(self.m.p(rel), os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                     mode)
        os.close(fd)
        self.live.files[rel] = FileModel(mode)
        self.note('create ' + rel)

    def write_offset(self, f, big):
        if f.blocks and self.rng.random() < 0.5:
            # Over data that exists (and that snapshots may hold).
            base = self.rng.choice(sorted(f.blocks)) * BS
            return max(0, base + self.rng.randrange(-BS, 2 * BS))
        return self.rng.randrange(BIG_SPAN if big else SMALL_SPAN)

    def op_write(self):
        rel = self.pick_file()
        if not rel:
            return self.op_create()
        f = self.live.files[rel]
        off = self.write_offset(f, rel.endswith('.big'))
        data = self.data(self.rng.choice([1, 700, BS, 3 * BS + 5, 16384,
                                           65536]))
        fd = os.open(self.m.p(rel), os.O_WRONLY)
        try:
            os.pwrite(fd, data, off)
        finally:
            os.close(fd)
        f.write(off, data)
        self.note('write %s %d+%d' % (rel, off, len(data)))

    def op_truncate(self):
        rel = self.pick_file()
        if not rel:
            return
        f = self.live.files[rel]
        size = self.rng.choice([0, f.size // 2, f.size + 5000,
                                self.rng.randrange(f.size + 1)])
        os.truncate(self.m.p(rel), size)
        f.truncate(size)
        self.note('truncate %s %d' % (rel, size))

    def op_punch(self):
        rel = self.pick_file()
        if not rel:
            return
        f = self.live.files[rel]
        off = self.write_offset(f, rel.endswith('.big'))
        length = self.rng.choice([1000, BS, 5 * BS, MB])
        fd = os.open(self.m.p(rel), os.O_WRONLY)
        try:
            nx.fallocate(fd, nx.FALLOC_FL_PUNCH_HOLE |
                         nx.FALLOC_FL_KEEP_SIZE, off, length)
        finally:
            os.close(fd)
        f.zero(off, length)
        self.note('punch %s %d+%d' % (rel, off, length))

    def op_fallocate(self):
        rel = self.pick_file()
        if not rel:
            return
        f = self.live.files[rel]
        off = self.write_offset(f, rel.endswith('.big'))
        length = self.rng.choice([BS, 10 * BS, MB])
        keep = self.rng.random() < 0.5
        fd = os.open(self.m.p(rel), os.O_WRONLY)
        try:
            nx.fallocate(fd, nx.FALLOC_FL_KEEP_SIZE if keep else 0, off,
                         length)
        except OSError as e:
            # As the kernel: no preallocation in block-mapped files.
            if e.errno != errno.EOPNOTSUPP or self.case.extents:
                raise
            return
        finally:
            os.close(fd)
        if not keep:
            f.size = max(f.size, off + length)
        self.note('fallocate %s %d+%d%s' % (rel, off, length,
                                           ' keep' if keep else ''))

    def op_rename(self):
        rel = self.pick_file()
        if not rel:
            return
        d = self.rng.choice(sorted(self.live.dirs))
        if self.rng.random() < 0.3 and len(self.live.files) > 1:
            dst = self.pick_file()          # replaces another file
        else:
            self.n += 1
            dst = os.path.join(d, 'r%d%s' % (self.n, '.big'
                                             if rel.endswith('.big') else ''))
        if dst == rel:
            return
        os.rename(self.m.p(rel), self.m.p(dst))
        self.live.files[dst] = self.live.files.pop(rel)
        self.note('rename %s %s' % (rel, dst))

    def op_unlink(self):
        rel = self.pick_file()
        if rel:
            os.unlink(self.m.p(rel))
            del self.live.files[rel]
            self.note('unlink ' + rel)

    def op_chmod(self):
        rel = self.pick_file()
        if rel:
            mode = self.rng.choice([0o644, 0o640, 0o700, 0o444])
            os.chmod(self.m.p(rel), mode)
            self.live.files[rel].mode = mode
            self.note('chmod %s %o' % (rel, mode))

    def op_mkdir(self):
        if len(self.live.dirs) < 4:
            self.n += 1
            rel = os.path.join(self.rng.choice(sorted(self.live.dirs)),
                               'd%d' % self.n)
            os.mkdir(self.m.p(rel))
            self.live.dirs.add(rel)
            self.note('mkdir ' + rel)

    # -- snapshots

    def take(self):
        name = 's%d' % self.taken
        self.taken += 1
        if self.rng.random() < 0.5:
            os.mkdir(nxsnap.snap_dir(self.m, name))
        else:
            nx.run([nx.tool_path(), 'snapshot', 'take', self.m.path, name])
        self.snaps.append((name, self.live.freeze()))
        self.note('take ' + name)
        self.check_snapshot(name, self.snaps[-1][1], 'right after its take')

    def victims(self, policy):
        names = [s[0] for s in self.snaps]
        if policy == 'oldest':
            return names[:1]
        if policy == 'newest':
            return names[-1:]
        if policy == 'middle':
            return [self.rng.choice(names[1:-1])] if len(names) > 2 else []
        if policy == 'previous':
            # The one before the active: all it holds was in use at the
            # active's take, so everything it frees is in the active's
            # COW set.
            return names[-2:-1]
        k = min(len(names), self.rng.randint(2, 3))
        i = self.rng.randrange(len(names) - k + 1)
        return names[i:i + k]

    def forget(self, name):
        self.snaps = [s for s in self.snaps if s[0] != name]

    def delete_mounted(self, name):
        if self.rng.random() < 0.5:
            os.rmdir(nxsnap.snap_dir(self.m, name))
        else:
            nx.run([nx.tool_path(), 'snapshot', 'delete', self.m.path, name])

    def delete(self, policy=None, how=None):
        policy = policy or self.rng.choice(['oldest', 'newest', 'middle',
                                            'previous', 'several'])
        names = self.victims(policy)
        if not names:
            return
        how = how or self.rng.choice(['mounted'] * 4 +
                                     ['offline', 'writing'])
        self.note('delete %s (%s, %s)' % (' '.join(names), policy, how))
        if how == 'offline':
            self.unmount()
            for name in names:
                nx.run([nx.tool_path(), 'snapshot', 'delete', self.img,
                        name])
                self.forget(name)
            self.check_offline('after offline deletes')
            self.mount()
        elif how == 'writing':
            self.delete_while_writing(names)
        else:
            for name in names:
                self.delete_mounted(name)
                self.forget(name)
        self.check_all('after deleting ' + ' '.join(names))

    def delete_while_writing(self, names):
        """Delete NAMES while a second thread writes one file."""
        self.n += 1
        rel = 'w%d.big' % self.n
        f = FileModel()
        fd = os.open(self.m.p(rel), os.O_CREAT | os.O_RDWR, 0o644)
        f.mode = 0o644
        wrng = random.Random(self.rng.random())
        writes = [(wrng.randrange(BIG_SPAN // 4), wrng.randbytes(
            wrng.choice([BS, 9000, 32768]))) for _ in range(60)]
        done = threading.Event()
        errors = []

        def writer():
            try:
                for off, data in writes:
                    os.pwrite(fd, data, off)
                    # Rewrite earlier data too: moves into the snapshot.
                    os.pwrite(fd, data[::-1], writes[0][0])
            except OSError as e:
                errors.append(e)
            done.set()

        t = threading.Thread(target=writer)
        t.start()
        try:
            for name in names:
                self.delete_mounted(name)
                self.forget(name)
        finally:
            t.join()
            os.close(fd)
        if errors:
            self.fail('writer during delete: %s' % errors[0])
        for off, data in writes:
            f.write(off, data)
            f.write(writes[0][0], data[::-1])
        self.live.files[rel] = f

    # -- mounting and checking

    def mount(self):
        self.ctx = self.case.mounted(self.img, check=False)
        self.m = self.ctx.__enter__()

    def unmount(self):
        ctx, self.ctx, self.m = self.ctx, None, None
        ctx.__exit__(None, None, None)

    def check_snapshot(self, name, want, what):
        bad = tree_mismatches(nxsnap.snap_dir(self.m, name), want)
        if bad:
            self.fail('snapshot %s %s:\n  %s' % (name, what,
                                                 '\n  '.join(bad[:12])))

    def check_all(self, what):
        for name, want in self.snaps:
            self.check_snapshot(name, want, what)
        listed = sorted(os.listdir(nxsnap.snap_dir(self.m)))
        if listed != sorted(s[0] for s in self.snaps):
            self.fail('.snapshots lists %s, want %s %s' %
                      (listed, sorted(s[0] for s in self.snaps), what))

    def check_live(self, what):
        bad = tree_mismatches(self.m.path, self.live)
        if bad:
            self.fail('live tree %s:\n  %s' % (what, '\n  '.join(bad[:12])))

    def check_offline(self, what, views=False):
        argv = [nx.tool_path(), 'check'] + (['--views'] if views else [])
        p = nx.run(argv + [self.img], check=False)
        if p.returncode != 0:
            self.fail('nextfs check %s: exit %d\n%s' %
                      (what, p.returncode, nx.tail(p.stdout, 40)))

    # -- the whole run

    OPS = (('write', 30), ('truncate', 6), ('punch', 8), ('fallocate', 5),
           ('create', 5), ('rename', 4), ('unlink', 3), ('chmod', 3),
           ('mkdir', 1), ('take', 5), ('delete', 4))

    def step(self):
        names = [o for o, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        op = self.rng.choices(names, weights)[0]
        if op == 'take':
            if len(self.snaps) < 8:
                self.take()
        elif op == 'delete':
            self.delete()
        else:
            getattr(self, 'op_' + op)()

    def finish(self, views=True):
        """Compare everything, check offline, then delete the rest."""
        self.check_all('at the end')
        self.check_live('at the end')
        self.unmount()
        self.check_offline('at the end', views=views)
        self.mount()
        self.check_all('after a remount')
        self.check_live('after a remount')
        offline = self.rng.random() < 0.3
        if offline:
            self.unmount()
        while self.snaps:
            name = self.rng.choice(self.snaps)[0]
            self.note('delete %s (cleanup%s)' % (name, ', offline'
                                                 if offline else ''))
            if offline:
                # (e2fsck -fn below checks the result.)
                nx.run([nx.tool_path(), 'snapshot', 'delete', self.img,
                        name])
                self.forget(name)
            else:
                self.delete_mounted(name)
                self.forget(name)
                self.check_all('after deleting ' + name)
        if offline:
            self.mount()
            self.check_all('after the offline deletes')
        self.check_live('with every snapshot deleted')
        self.unmount()
        self.case.assertFalse(nxsnap.has_snapshot_flag(self.img))
        rc, out = nx.fsck(self.img)
        self.case.assertEqual(rc, 0, 'e2fsck -fn with no snapshot left:\n' +
                              nx.tail(out, 30))


class SnapDeleteTest(nx.NxTestCase):

    def runner(self, seed, img=None):
        # Snapshot files of 512 MiB reach ext2's triple-indirect blocks.
        img = img or self.make_image('512M', name='fs%d.img' % seed)
        r = Runner(self, img, seed)
        r.mount()
        self.addCleanup(lambda: r.ctx and r.ctx.__exit__(None, None, None))
        return r

    def test_random_take_delete(self):
        env = os.environ.get('NEXTFS_SEED')
        seeds = (int(env),) if env else SEEDS
        steps = int(os.environ.get('NEXTFS_SNAPDELETE_STEPS', STEPS))
        for seed in seeds:
            print('seed %d, %d steps (NEXTFS_SEED, NEXTFS_SNAPDELETE_STEPS)'
                  % (seed, steps))
            r = self.runner(seed)
            for _ in range(steps):
                r.step()
            r.finish()

    def build_six(self, seed):
        """An image with six snapshots of changing big sparse files."""
        r = self.runner(seed)
        for _ in range(3):
            r.op_create()
        for _ in range(6):
            for _ in range(25):
                r.rng.choice([r.op_write, r.op_write, r.op_write,
                              r.op_truncate, r.op_punch, r.op_rename,
                              r.op_create, r.op_unlink])()
            r.take()
        for _ in range(20):
            r.op_write()
        r.check_all('once built')
        r.unmount()
        return r

    def test_delete_positions(self):
        base = self.build_six(7)
        cases = (('oldest', 'mounted'), ('newest', 'mounted'),
                 ('middle', 'mounted'), ('several', 'mounted'),
                 ('middle', 'writing'), ('several', 'offline'),
                 ('oldest', 'offline'))
        for i, (policy, how) in enumerate(cases):
            with self.subTest(policy=policy, how=how):
                img = os.path.join(self.work, 'case%d.img' % i)
                subprocess.run(['cp', '--sparse=always', base.img, img],
                               check=True)
                r = self.runner(7, img)
                r.live = base.live.freeze()
                r.snaps = [(n, t.freeze()) for n, t in base.snaps]
                r.n = base.n
                r.rng = random.Random(i)
                r.check_all('before deleting')
                r.delete(policy, how)
                if policy == 'several':
                    r.delete('several', how)
                for _ in range(30):
                    r.op_write()
                r.check_all('after writing on')
                r.finish(views=(i == 0))
                os.unlink(img)
        os.unlink(base.img)


if __name__ == '__main__':
    nx.main()
