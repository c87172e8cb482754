#!/usr/bin/env python3
"""Crash safety through a real mount: kill -9 of the daemon (docs/design.md P10).

Run: test_crash.py --flavour ext2|ext3|ext4|ext4-inline

Each round: a fresh image is mounted, a tree is written, snapshot
'before' is taken (mkdir .snapshots/before) and its manifest recorded
through the mount (type, mode, owner, size, mtime, xattrs, link targets,
sha256 of every file).  Then a workload runs in a child process: creates,
in-place overwrites of whole 4 KiB blocks, appends, atomic replaces
(write a temporary file, fsync, rename), deletes, fsyncs of specific
files, and the take of a second snapshot 'mid'.  Every operation is
logged (to a file outside the mount) before it starts and after it
returns, fsyncs after fsync returned.  After a seeded random delay the
daemon gets SIGKILL, the dead mount is detached (fusermount3 -u -z), the
workload process is stopped, and the image is mounted again: the daemon
recovers on open.  Then:

- 'before' is exactly its recorded manifest (P10);
- 'mid', if its mkdir returned, exists; if it exists, it is exactly the
  live tree recorded just before its mkdir (the workload is single
  threaded and the mount has no write-back cache, so that is the tree at
  the take);
- every file whose fsync returned has its fsync'd content, or, if the
  workload changed it afterwards, what those later changes can leave:
  its size is one of the sizes it had since that fsync (or between two of
  them, for an interrupted append) and every 1 KiB chunk equals that
  chunk in one of its versions since the fsync (an in-place overwrite
  may land block by block); it may be missing only if a delete of it had
  started (a replace is a rename, which never leaves the name missing).
  A file never fsync'd, if it exists, must be made of chunks of its own
  versions (no stale or foreign data);
- after the unmount, "nextfs check IMAGE" passes, and so does stock
  e2fsck -fn on a copy with HAS_SNAPSHOT masked.

ext2 has no journal: a crash in the middle of a sync can leave it like
any ext2 (e.g. an inode's new size written, the block map that goes with
it not), so there the image only has to come out clean after "e2fsck
-fy" on a masked copy, and only files fsync'd and never touched again
must be exact; other file findings are printed as notes.  The snapshot
checks are as strict as for the other flavours: P10 holds for ext2 too.

One more round runs the daemon with NEXTFS_FAULTS=cut=N:drop (writes
after the Nth vanish, syncs still report success) before killing it.
There a returned fsync or mkdir proves nothing, so only 'before', the
absence of garbage (every file that exists, fsync'd or not, is made of
chunks of its own versions, and 'mid' matches if it exists) and the
checks after the unmount are asserted.

NEXTFS_SEED repeats a run; NEXTFS_CRASH_ROUNDS sets the number of kill
rounds (default 4); NEXTFS_KEEP_FAILED=1 keeps the crashed image (before
recovery) and the workload log of a failing round.
"""

import contextlib
import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import time

import nxharness as nx
import nxsnap
from nxsnap import SKIP, snap_manifest, without_root_mtime

CHUNK = 1024
BLOCK = 4096


def live_manifest(root):
    return nx.tree_state(root, skip_top=SKIP)


# ------------------------------------------------------------ the workload

class Workload:
    """Seeded changes below ROOT/w, each logged to LOG (one JSON a line).

    Records: {"b": op...} before an operation starts, {"e": n} after it
    returned, {"fsynced": path} after an fsync returned.  Contents are
    nx.pattern(size, seed) pieces, so the parent can replay the log.
    """

    def __init__(self, root, log_path, seed, manifest_path):
        self.root = root
        self.rng = random.Random(seed)
        self.log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT |
                              os.O_APPEND, 0o644)
        self.manifest_path = manifest_path
        self.n = 0
        self.sizes = {}         # path -> size as the workload believes
        self.seq = 0

    def log(self, rec):
        os.write(self.log_fd, (json.dumps(rec) + '\n').encode())

    def p(self, rel):
        return os.path.join(self.root, rel)

    def begin(self, rec):
        self.seq += 1
        rec['n'] = self.seq
        self.log({'b': rec})
        return self.seq

    def end(self, n):
        self.log({'e': n})

    def new_seed(self):
        return self.rng.randrange(1 << 30)

    # operations
    def create(self, rel, size):
        seed = self.new_seed()
        n = self.begin({'op': 'create', 'path': rel, 'size': size,
                        'seed': seed})
        nx.write_file(self.p(rel), nx.pattern(size, seed))
        self.sizes[rel] = size
        self.end(n)

    def fsync(self, rel):
        fd = os.open(self.p(rel), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.log({'fsynced': rel})

    def overwrite(self, rel):
        size = self.sizes[rel]
        if size < BLOCK:
            return
        nblocks = size // BLOCK
        first = self.rng.randrange(nblocks)
        count = self.rng.randint(1, min(8, nblocks - first))
        seed = self.new_seed()
        n = self.begin({'op': 'write', 'path': rel, 'off': first * BLOCK,
                        'len': count * BLOCK, 'seed': seed})
        fd = os.open(self.p(rel), os.O_WRONLY)
        try:
            os.pwrite(fd, nx.pattern(count * BLOCK, seed), first * BLOCK)
        finally:
            os.close(fd)
        self.end(n)

    def append(self, rel):
        length = self.rng.choice([100, 5000, 70000])
        seed = self.new_seed()
        n = self.begin({'op': 'write', 'path': rel,
                        'off': self.sizes[rel], 'len': length,
                        'seed': seed})
        with open(self.p(rel), 'ab') as f:
            f.write(nx.pattern(length, seed))
        self.sizes[rel] += length
        self.end(n)

    def replace(self, rel):
        size = self.rng.choice([0, 3000, 40000, 200000])
        seed = self.new_seed()
        tmp = rel + '.tmp'
        n = self.begin({'op': 'replace', 'path': rel, 'size': size,
                        'seed': seed})
        nx.write_file(self.p(tmp), nx.pattern(size, seed))
        self.fsync(tmp)
        os.rename(self.p(tmp), self.p(rel))
        self.sizes[rel] = size
        self.end(n)

    def delete(self, rel):
        n = self.begin({'op': 'delete', 'path': rel})
        os.unlink(self.p(rel))
        del self.sizes[rel]
        self.end(n)

    def take(self, name):
        man = live_manifest(self.root)
        with open(self.manifest_path, 'wb') as f:
            pickle.dump({'name': name, 'manifest': man}, f)
        n = self.begin({'op': 'take', 'name': name})
        os.mkdir(os.path.join(self.root, '.snapshots', name))
        self.end(n)

    def run(self, count, take_at):
        os.makedirs(self.p('w/sub'), exist_ok=True)
        for i in range(count):
            if i == take_at:
                self.take('mid')
            files = sorted(self.sizes)
            r = self.rng.random()
            if sum(self.sizes.values()) > (16 << 20):
                r = 0.75        # keep well below the image size: delete
            if not files or r < 0.2:
                self.n += 1
                d = self.rng.choice(['w', 'w/sub'])
                rel = '%s/f%03d' % (d, self.n)
                self.create(rel, self.rng.choice([0, 700, 4096, 20000,
                                                  100000, 300000]))
                if self.rng.random() < 0.7:
                    self.fsync(rel)
                continue
            rel = self.rng.choice(files)
            if r < 0.45:
                self.overwrite(rel)
            elif r < 0.6:
                self.append(rel)
            elif r < 0.7:
                self.replace(rel)
            elif r < 0.78:
                self.delete(rel)
                continue
            if self.rng.random() < 0.6:
                self.fsync(rel)


def workload_child(root, log_path, seed, manifest_path, count, take_at):
    """Body of the forked workload process (never returns)."""
    status = 0
    try:
        w = Workload(root, log_path, seed, manifest_path)
        w.run(count, take_at)
        w.log({'done': True})
        # Keep the daemon idle but alive until it is killed.
        time.sleep(60)
    except OSError as e:
        try:
            os.write(w.log_fd, (json.dumps({'error': str(e)}) +
                                '\n').encode())
        except Exception:
            pass
    except BaseException:
        status = 1
    finally:
        os._exit(status)


# ------------------------------------------------------- what may survive

class FileHistory:
    def __init__(self):
        self.versions = []      # contents, oldest first
        self.durable = None     # index of the last fsync'd version
        self.exists = False     # as the workload left it (if all returned)
        self.may_vanish = False  # delete/replace begun after the fsync
        self.changed = False    # any change begun after the fsync


def replay(log_path, trust_fsync=True):
    """Per path FileHistory, the ops begun/ended, the 'mid' take state."""
    files = {}
    current = {}                # path -> content as last written
    begun, ended = {}, set()
    take = None                 # None, 'begun' or 'ended'
    records = []
    with open(log_path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                break           # a torn last line: the child was killed

    # path -> the temporary name its file had before a replace renamed it
    # there.  Until that rename is durable the file may still be found
    # under the old name after a crash, holding whatever was written to
    # it since (data is written in place, ordered mode, as on ext4).
    alias = {}

    def hist(path):
        return files.setdefault(path, FileHistory())

    def add_version(h, content):
        h.versions.append(content)
        if h.durable is not None:
            h.changed = True

    def new_version(path, content):
        h = hist(path)
        current[path] = content
        add_version(h, content)
        h.exists = True
        if path in alias:
            add_version(hist(alias[path]), content)

    for rec in records:
        if 'b' in rec:
            op = rec['b']
            begun[op['n']] = op
            kind = op['op']
            if kind == 'create':
                # may be seen empty, partly or fully written
                new_version(op['path'], b'')
                new_version(op['path'], nx.pattern(op['size'], op['seed']))
            elif kind == 'write':
                old = current.get(op['path'], b'')
                data = nx.pattern(op['len'], op['seed'])
                end = op['off'] + op['len']
                new = (old[:op['off']] +
                       b'\0' * max(0, op['off'] - len(old)) + data +
                       old[end:])
                new_version(op['path'], new)
            elif kind == 'replace':
                # rename() replaces atomically: the target shows the old
                # or the new content, but never goes missing
                tmp = op['path'] + '.tmp'
                new_version(tmp, b'')
                new_version(tmp, nx.pattern(op['size'], op['seed']))
                new_version(op['path'], nx.pattern(op['size'], op['seed']))
                alias[op['path']] = tmp
            elif kind == 'delete':
                alias.pop(op['path'], None)
                h = hist(op['path'])
                if h.durable is not None:
                    h.may_vanish = True
                    h.changed = True
                h.exists = False
            elif kind == 'take':
                take = 'begun'
        elif 'e' in rec:
            ended.add(rec['e'])
            op = begun.get(rec['e'])
            if op and op['op'] == 'take':
                take = 'ended'
            if op and op['op'] == 'replace':
                files[op['path'] + '.tmp'].exists = False
        elif 'fsynced' in rec:
            h = hist(rec['fsynced'])
            # the fsync'd content is the latest version; older ones can
            # no longer appear (unless a cut made the fsync a lie)
            if trust_fsync:
                h.versions = h.versions[-1:]
            h.durable = 0
            h.changed = False
            # a replace's temporary file is renamed away right after
            h.may_vanish = rec['fsynced'].endswith('.tmp')
    return files, take, records


def chunk_problems(data, versions):
    """Chunks of DATA that equal no version's chunk at that offset."""
    bad = []
    for off in range(0, len(data), CHUNK):
        piece = data[off:off + CHUNK]
        if not any(v[off:off + len(piece)] == piece for v in versions):
            bad.append(off)
    return bad


# ---------------------------------------------------------------- the test

class CrashTest(nx.NxTestCase):

    def base_tree(self, m, rng):
        os.makedirs(m.p('d1/d2'))
        os.mkdir(m.p('empty'))
        for i, size in enumerate([0, 10, 3000, 5000, 70000, 300000]):
            nx.write_file(m.p('d1' if i % 2 else 'd1/d2', 'b%d' % i),
                          nx.pattern(size, rng.randrange(1 << 30)))
        nx.write_file(m.p('big'), nx.pattern(1 << 20, 7))
        fd = os.open(m.p('sparse'), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.pwrite(fd, b'head', 0)
            os.pwrite(fd, nx.pattern(5000, 8), 3 << 20)
        finally:
            os.close(fd)
        os.symlink('d1/b1', m.p('link'))
        os.link(m.p('d1/b3'), m.p('hard'))

    def kill_daemon(self, m):
        """SIGKILL the daemon and detach its dead mount."""
        m.kill(signal.SIGKILL)
        nx.run([nx.FUSERMOUNT, '-u', '-z', m.path], check=False)

    def stop_workload(self, pid):
        """End the workload process (its mount is gone anyway).

        Killing it loses at most the log record of the call it was in,
        which only makes the checks more lenient, never wrong.
        """
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)

    def check_image(self, img, what):
        """nextfs check and masked e2fsck -fn (repairable for ext2)."""
        problems = []
        p = subprocess.run([nx.tool_path(), 'check', img], capture_output=True,
                           text=True, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            problems.append('nextfs check exit %d:\n%s' %
                            (p.returncode, nx.tail(p.stdout + p.stderr, 30)))
        rc, out = nxsnap.fsck_masked(img)
        if rc != 0:
            problems.append('e2fsck -fn (HAS_SNAPSHOT masked) exit %d:\n%s'
                            % (rc, nx.tail(out, 30)))
        if not problems:
            return
        if self.flavour != 'ext2':
            self.fail('%s: %s' % (what, '\n'.join(problems)))
        # ext2: a crash may leave work for e2fsck (counts, bitmaps,
        # links), but never a block written after what points at it:
        # then -fn cannot finish (exit 8 and up) - see txn.c
        self.assertLess(rc, 8, '%s: e2fsck -fn could not finish:\n%s' %
                        (what, nx.tail(out, 30)))
        # and it must be able to do that work
        print('%s (ext2, accepted if repairable):\n%s' %
              (what, '\n'.join(problems)))
        d = os.path.join(self.work, 'repair')
        os.makedirs(d, exist_ok=True)
        copy = os.path.join(d, 'masked.img')
        try:
            nxsnap.masked_copy(img, copy)
            fy = nx.run([nx.E2FSCK, '-fy', copy], check=False)
            rc, out = nx.fsck(copy)
            self.assertEqual(rc, 0, '%s: not repairable: e2fsck -fy exit '
                             '%d, then -fn:\n%s' % (what, fy.returncode,
                                                    nx.tail(out, 30)))
        finally:
            shutil.rmtree(d, True)

    def verify_files(self, m, files, trust_fsync):
        """(problems, notes) about the files the workload wrote.

        ext2 has no journal: a sync interrupted half-way can leave an
        inode's new size on disk without the block map that goes with it
        (an appended tail reads as a hole), or an inode pointing to an
        indirect block whose new content never arrived (the file reads
        with an I/O error), as any ext2 can.  So on ext2 only a file
        fsync'd and never touched afterwards must be exact; what is wrong
        with the others is reported as a note.
        """
        problems, notes = [], []
        lenient = self.flavour == 'ext2'

        def bad(msg, strict=False):
            (problems if strict or not lenient else notes).append(msg)

        def read(path, full, strict=False):
            try:
                return nx.read_file(full)
            except OSError as e:
                bad('%s: cannot be read: %s' % (path, e), strict)
                return None

        for path, h in sorted(files.items()):
            full = m.p(path)
            exists = os.path.lexists(full)
            if h.durable is None or not trust_fsync:
                # never fsync'd (or fsync proves nothing): if it is
                # there, it must be made of its own versions
                data = read(path, full) if exists and h.versions else None
                if data is not None:
                    chunks = chunk_problems(data, h.versions)
                    if chunks:
                        bad('%s: %d bytes, chunks at %s match none of its '
                            '%d versions' % (path, len(data), chunks[:5],
                                             len(h.versions)))
                continue
            if not exists:
                if not h.may_vanish:
                    bad('%s: fsync\'d, missing' % path, not h.changed)
                continue
            data = read(path, full, not h.changed)
            if data is None:
                continue
            if not h.changed:
                if data != h.versions[0]:
                    bad('%s: fsync\'d and not changed since, but %d bytes '
                        'differ from the %d fsync\'d' %
                        (path, len(data), len(h.versions[0])), True)
                continue
            sizes = [len(v) for v in h.versions]
            if not min(sizes) <= len(data) <= max(sizes):
                bad('%s: size %d, versions since the fsync have %s' %
                    (path, len(data), sizes))
                continue
            chunks = chunk_problems(data, h.versions)
            if chunks:
                bad('%s: chunks at %s match none of the %d versions since '
                    'its fsync' % (path, chunks[:5], len(h.versions)))
        return problems, notes

    def repair_after_crash(self, img, what):
        """'nextfs check --repair', what check advises after a crash, on
        the image as the kill left it (nothing has replayed its journal):
        it must fix everything in one run - a second finds nothing."""
        p = subprocess.run([nx.tool_path(), 'check', '--repair', img],
                           capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        self.assertIn(p.returncode, (0, 1), '%s: check --repair:\n%s' %
                      (what, nx.tail(p.stdout + p.stderr, 30)))
        p = subprocess.run([nx.tool_path(), 'check', '--repair', img],
                           capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, '%s: check --repair again:\n%s' %
                         (what, nx.tail(p.stdout + p.stderr, 30)))
        self.assertNotIn('repaired', p.stdout)

    def one_round(self, rnd, seed, delay, faults=None, repair_first=False):
        rng = random.Random(seed)
        img = self.make_image('64M', name='round%d.img' % rnd)
        log_path = os.path.join(self.work, 'round%d.log' % rnd)
        mid_path = os.path.join(self.work, 'round%d.mid.pickle' % rnd)
        what = 'round %d (seed %d, kill after %.2f s%s)' % (
            rnd, seed, delay, ', NEXTFS_FAULTS=' + faults if faults else '')
        print(what)
        with contextlib.ExitStack() as stack:
            if faults:
                # The setup without faults: 'before' must exist whatever
                # the cut hits afterwards.
                with self.mounted(img, check=False) as m:
                    self.base_tree(m, rng)
                    os.mkdir(nxsnap.snap_dir(m, 'before'))
                    before = snap_manifest(m, 'before')
                with nx.environment(NEXTFS_FAULTS=faults):
                    m = stack.enter_context(self.mounted(img, check=False))
            else:
                m = stack.enter_context(self.mounted(img, check=False))
                self.base_tree(m, rng)
                os.mkdir(nxsnap.snap_dir(m, 'before'))
                before = snap_manifest(m, 'before')
            self.assertGreater(len(before), 10)
            pid = os.fork()
            if pid == 0:
                # runs until it is stopped (or after very many steps)
                workload_child(m.path, log_path, seed, mid_path,
                               count=100000, take_at=rng.randint(3, 60))
            try:
                time.sleep(delay)
                self.kill_daemon(m)
            finally:
                self.stop_workload(pid)

        trust = faults is None
        files, take, records = replay(log_path, trust)
        nops = sum(1 for r in records if 'b' in r)
        nsync = sum(1 for r in records if 'fsynced' in r)
        print('  %d operations begun, %d fsyncs returned, take of mid %s, '
              'workload %s' % (nops, nsync, take or 'not begun',
                               'finished' if any('done' in r for r in
                                                 records) else
                               'interrupted'))
        mid = None
        if take:
            # written completely before the take was logged as begun
            with open(mid_path, 'rb') as f:
                mid = without_root_mtime(pickle.load(f)['manifest'])
        keep = os.environ.get('NEXTFS_KEEP_FAILED') == '1'
        if keep:
            shutil.copyfile(img, img + '.crashed')
        if repair_first:
            # What the snapshots and files must show is the same after
            # the repair as after the daemon's own recovery on open.
            self.repair_after_crash(img, what)
        problems = []
        with self.mounted(img, check=False) as m:
            # P10: 'before' is untouched
            got = snap_manifest(m, 'before')
            d = nx.diff_trees(before, got)
            if d:
                problems.append('snapshot before differs:\n  ' +
                                '\n  '.join(d))
            names = os.listdir(nxsnap.snap_dir(m))
            extra = set(names) - {'before', 'mid'}
            if extra:
                problems.append('unexpected snapshots %s' % sorted(extra))
            if 'mid' in names:
                if mid is None:
                    problems.append('snapshot mid exists, its take %s' %
                                    ('had not begun' if not take else
                                     'was begun but its manifest is '
                                     'unknown'))
                else:
                    d = nx.diff_trees(mid, snap_manifest(m, 'mid'))
                    if d:
                        problems.append('snapshot mid is not the tree at '
                                        'its take:\n  ' + '\n  '.join(d))
            elif take == 'ended' and trust:
                problems.append('snapshot mid is gone although its mkdir '
                                'returned')
            more, notes = self.verify_files(m, files, trust)
            problems += more
        for n in notes:
            print('  note (ext2, no journal): %s' % n)
        if problems and keep:
            kept = os.path.join(nx.tmp_root(), 'nextfs-crash-%s-r%d-%d.img'
                                % (self.flavour, rnd, seed))
            shutil.copyfile(img + '.crashed', kept)
            shutil.copyfile(log_path, kept + '.log')
            problems.append('(image kept as %s, workload log %s.log)' %
                            (kept, kept))
        self.assertFalse(problems, '%s:\n%s' % (what, '\n'.join(problems)))
        self.check_image(img, what)
        os.unlink(img)

    def test_kill_rounds(self):
        self.need_fuse_daemon()
        seed = self.seed()
        rng = random.Random(seed)
        rounds = int(os.environ.get('NEXTFS_CRASH_ROUNDS', '4'))
        for rnd in range(rounds):
            # the workload runs until the kill; the first round is
            # repaired offline before it is mounted again
            self.one_round(rnd, rng.randrange(1 << 30),
                           rng.uniform(0.05, 2.0), repair_first=rnd == 0)

    def test_kill_after_cut(self):
        self.need_fuse_daemon()
        seed = self.seed()
        rng = random.Random(seed ^ 0x5a5a)
        # Counted from the open of the workload's mount: every fsync is
        # a sync of the volume, a few to a few dozen device writes.
        cut = rng.randint(20, 400)
        self.one_round(100, rng.randrange(1 << 30), rng.uniform(0.5, 2.0),
                       faults='cut=%d:drop' % cut)

    def test_repair_after_kill_without_snapshots(self):
        """The same on a volume that never had a snapshot: after kill -9
        during writes, 'nextfs check --repair' replays what the crash
        left and fixes the rest in one run; e2fsck -fn is clean and the
        volume mounts with the files fsync'd before the kill."""
        self.need_fuse_daemon()
        if self.flavour not in ('ext4', 'ext2'):
            self.skipTest('replay and repair as on ext4 (with a journal) '
                          'and ext2 (without), which run it')
        img = self.make_image('64M', name='nosnap.img')
        data = nx.pattern(300000, 5)
        with contextlib.ExitStack() as stack:
            m = stack.enter_context(self.mounted(img, check=False))
            nx.write_file(m.p('kept'), data)
            fd = os.open(m.p('kept'), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            pid = os.fork()
            if pid == 0:
                status = 0
                try:
                    for i in range(100000):
                        nx.write_file(m.p('f%d' % (i % 50)),
                                      nx.pattern(20000 + i, i))
                except BaseException:
                    status = 1
                os._exit(status)
            try:
                time.sleep(1.0)
                self.kill_daemon(m)
            finally:
                self.stop_workload(pid)
        self.repair_after_crash(img, 'no snapshots, kill after 1 s')
        self.assertFalse(nxsnap.has_snapshot_flag(img))
        rc, out = nx.fsck(img)
        self.assertEqual(rc, 0, out)
        with self.mounted(img, check=False) as m:
            self.assertEqual(nx.read_file(m.p('kept')), data)

    def test_commit_timer(self):
        """Changes nobody fsync'd are durable within a few seconds.

        The daemon commits on its own every 5 s (txn.h): a file written
        and closed without fsync and a new directory survive a kill -9
        that comes 8 s later, with no request in between.
        """
        self.need_fuse_daemon()
        img = self.make_image('64M', name='timer.img')
        data = nx.pattern(200000, 11)
        with contextlib.ExitStack() as stack:
            m = stack.enter_context(self.mounted(img, check=False))
            # (a snapshot's take and delete commit: before the writes)
            os.mkdir(nxsnap.snap_dir(m, 'gone'))
            os.rmdir(nxsnap.snap_dir(m, 'gone'))
            nx.write_file(m.p('unsynced'), data)
            os.mkdir(m.p('dir'))
            time.sleep(8)
            self.kill_daemon(m)
        with self.mounted(img, check=False) as m:
            with open(m.p('unsynced'), 'rb') as f:
                self.assertEqual(f.read(), data)
            self.assertTrue(os.path.isdir(m.p('dir')))
            self.assertEqual(os.listdir(nxsnap.snap_dir(m)), [])
        self.check_image(img, 'after the commit timer and kill -9')


if __name__ == '__main__':
    nx.main()
