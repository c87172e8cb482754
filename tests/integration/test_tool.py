#!/usr/bin/env python3
"""The nextfs tool: check, export, diff, restore, info on real images.

Run: test_tool.py --flavour ext2|ext3|ext4|ext4-inline

The oracle: the snapshot oracle's seeded workload (test_snapshots.Workload)
runs on a mounted volume; snapshots are taken at several points and the
live tree's manifest (tree_state, with link counts) is recorded at each.
Then, with the volume unmounted:
  - "nextfs check" is clean (its own checks plus e2fsck -fn on the live
    volume with has_snapshot masked, served copy-free through FUSE), also
    with --views (e2fsck on every snapshot as exported);
  - every snapshot exported with "nextfs export" passes stock e2fsck -fn
    and, mounted read-only (kernel loop mount, or nextfs-fuse where loop
    mounts are impossible), shows exactly the recorded manifest; the
    stream ('-') has the same bytes;
  - "nextfs diff" between consecutive snapshots and against the live tree
    turns the older manifest into the newer one when applied (renames
    move subtrees, '-' removes, '+' adds, 'M' is exactly the set of paths
    whose recorded state differs);
  - "nextfs restore" makes the live tree equal to the snapshot's manifest,
    keeps the other snapshots as recorded, and the image checks clean.
Bad input (wrong image, unknown snapshot, a volume in use, a full output
disk) gets a clear message, the documented exit status and no change.
"""

import errno
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile

import nxharness as nx
import nxsnap
from test_snapshots import Workload

SKIP = nxsnap.SKIP


class ToolWorkload(Workload):
    """The oracle's workload; with 1 KiB blocks several 700-byte xattrs do
    not fit in the one xattr block: ENOSPC, as from ext4 itself."""

    def op_xattr(self):
        try:
            super().op_xattr()
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise



def nextfs(*args, check=None, **kw):
    """Run the tool; CHECK: expected exit status (None: any)."""
    p = nx.run([nx.tool_path()] + list(args), check=False, **kw)
    if check is not None and p.returncode != check:
        raise AssertionError('nextfs %s: exit %d, expected %d:\n%s' %
                             (' '.join(args), p.returncode, check,
                              nx.tail(p.stdout, 40)))
    return p


def manifest(root):
    return nx.tree_state(root, nlink=True, skip_top=SKIP)


def without_root_nlink(state):
    """The live view counts .snapshots in the root's links; exports not."""
    out = dict(state)
    out['.'] = {k: v for k, v in state['.'].items() if k != 'nlink'}
    return out


def without_root(state):
    """A snapshot directory under .snapshots shows the take time as its
    mtime, not the root's: compare what is below it."""
    return {k: v for k, v in state.items() if k != '.'}


def image_digest(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            h.update(chunk)
    return h.hexdigest()


def unescape(p):
    """Undo nextfs diff's \\ooo escapes."""
    out, i = bytearray(), 0
    b = p.encode()
    while i < len(b):
        if b[i:i + 1] == b'\\' and i + 3 < len(b) + 0 and \
                all(48 <= c <= 55 for c in b[i + 1:i + 4]):
            out.append(int(b[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(b[i])
            i += 1
    return out.decode(errors='surrogateescape')


def parse_diff(text):
    """[(kind, path, newpath)] with manifest-style paths ('.' = root)."""
    def rel(p):
        p = unescape(p)
        return '.' if p == '/' else p.lstrip('/')
    out = []
    for line in text.splitlines():
        kind, rest = line[0], line[2:]
        if kind == 'R':
            old, new = rest.split(' -> ')
            out.append((kind, rel(old), rel(new)))
        else:
            out.append((kind, rel(rest), None))
    return out


def apply_diff(test, old, new, changes, what):
    """Check that CHANGES turn manifest OLD into manifest NEW exactly."""
    old = {k: v for k, v in old.items() if k != '//links'}
    new = {k: v for k, v in new.items() if k != '//links'}
    renames = [(o, n) for k, o, n in changes if k == 'R']
    removed = {p for k, p, _ in changes if k == '-'}
    added = {p for k, p, _ in changes if k == '+'}
    modified = {p for k, p, _ in changes if k == 'M'}

    def moved(p):
        best = None
        for o, n in renames:
            if (p == o or p.startswith(o + '/')) and \
                    (best is None or len(o) > len(best[0])):
                best = (o, n)
        return p if best is None else best[1] + p[len(best[0]):]

    mapping = {p: moved(p) for p in old if p not in removed}
    predicted = set(mapping.values()) | added
    test.assertEqual(sorted(predicted - set(new)), [],
                     '%s: diff predicts paths that do not exist' % what)
    test.assertEqual(sorted(set(new) - predicted), [],
                     '%s: paths the diff does not account for' % what)
    for p, q in mapping.items():
        if q in added:
            continue            # replaced by a different file
        changed = old[p] != new[q]
        test.assertEqual(changed, q in modified,
                         '%s: %s -> %s %s but diff says %s' %
                         (what, p, q, 'changed' if changed else 'unchanged',
                          'M' if q in modified else 'nothing'))


class ToolTest(nx.NxTestCase):

    def assertCheckClean(self, img, *extra):
        p = nextfs('check', *extra, img)
        self.assertEqual(p.returncode, 0, 'nextfs check %s:\n%s' %
                         (' '.join(extra), nx.tail(p.stdout, 40)))

    def ro_manifest(self, image):
        """Manifest of IMAGE mounted read-only: by the kernel (loop) where
        possible, else by nextfs-fuse."""
        if os.geteuid() == 0 and shutil.which('mount') and \
                os.path.exists('/dev/loop-control'):
            mnt = tempfile.mkdtemp(dir=self.work)
            p = subprocess.run(['mount', '-o', 'loop,ro', image, mnt],
                               capture_output=True, text=True)
            if p.returncode == 0:
                try:
                    return manifest(mnt)
                finally:
                    subprocess.run(['umount', mnt], check=True)
                    os.rmdir(mnt)
            os.rmdir(mnt)
        with self.mounted(image, opts=['ro']) as m:
            return manifest(m.path)

    def assert_export(self, img, name, want, what, stream=False):
        out = os.path.join(self.work, name + '.img')
        nextfs('export', img, name, out, check=0)
        rc, text = nx.fsck(out)
        self.assertEqual(rc, 0, 'e2fsck -fn on export of %s %s:\n%s' %
                         (name, what, nx.tail(text, 40)))
        self.assertFalse(nxsnap.has_snapshot_flag(out))
        self.assertTreesEqual(without_root_nlink(want),
                              without_root_nlink(self.ro_manifest(out)),
                              'export of %s %s' % (name, what))
        if stream:
            copy = os.path.join(self.work, name + '.stream')
            with open(copy, 'wb') as f:
                nextfs('export', img, name, '-', check=0, stdout=f,
                       stderr=subprocess.PIPE)
            self.assertEqual(image_digest(copy), image_digest(out))
            os.unlink(copy)
        os.unlink(out)

    # ------------------------------------------------------------ oracle

    def build(self, seed, nsnaps=3):
        img = self.make_image('256M')
        manifests = {}
        with self.mounted(img, check=False) as m:
            w = ToolWorkload(m.path, seed, self.bsize)
            w.run(40)
            for i in range(nsnaps):
                name = 'snap%d' % i
                manifests[name] = manifest(m.path)
                os.mkdir(nxsnap.snap_dir(m, name))
                w.run(100)
            manifests[None] = manifest(m.path)
        return img, manifests

    def test_oracle(self):
        seed = self.seed()
        img, manifests = self.build(seed)
        names = [n for n in manifests if n]
        self.assertCheckClean(img, '-v')
        self.assertCheckClean(img, '--views')
        info = nextfs('info', img, check=0).stdout
        self.assertIn('Filesystem features:', info)
        for n in names:
            self.assertIn(n, info)

        # export: stock e2fsck and a read-only mount see the manifest
        for n in names:
            self.assert_export(img, n, manifests[n], '', stream=True)

        # diff: consecutive snapshots, and the newest against the live tree
        pairs = list(zip(names, names[1:])) + [(names[-1], None)]
        for old, new in pairs:
            args = ['diff', img, old] + ([new] if new else [])
            text = nextfs(*args, check=0).stdout
            apply_diff(self, manifests[old], manifests[new],
                       parse_diff(text), 'diff %s %s' % (old, new or 'live'))

        # restore: refused over newer snapshots, then to the newest, then
        # (dropping the newer ones) to the oldest
        before = image_digest(img)
        p = nextfs('restore', img, names[0], check=1)
        self.assertIn('newer', p.stdout)
        self.assertEqual(image_digest(img), before)
        nextfs('restore', img, names[-1], check=0)
        self.assertCheckClean(img, '--views')
        with self.mounted(img, check=False) as m:
            self.assertTreesEqual(manifests[names[-1]], manifest(m.path),
                                  'live tree after restore %s' % names[-1])
            for n in names:
                self.assertTreesEqual(
                    without_root(manifests[n]),
                    without_root(manifest(nxsnap.snap_dir(m, n))),
                    'snapshot %s after restore' % n)
        for n in names:
            self.assert_export(img, n, manifests[n], 'after restore')
        nextfs('restore', '--destroy-newer', img, names[0], check=0)
        self.assertCheckClean(img)
        self.assert_export(img, names[0], manifests[names[0]],
                           'after its restore')
        with self.mounted(img, check=False) as m:
            self.assertEqual(os.listdir(nxsnap.snap_dir(m)), [names[0]])
            self.assertTreesEqual(manifests[names[0]], manifest(m.path),
                                  'live tree after restore %s' % names[0])
            os.rmdir(nxsnap.snap_dir(m, names[0]))
        rc, text = nx.fsck(img)
        self.assertEqual(rc, 0, nx.tail(text, 40))

    def test_export_with_open_unlinked_files(self):
        """Files unlinked but open at the take are not in the export.

        The snapshot holds them on its orphan list, as the live volume
        did; a mount would free them, and a standalone image must pass
        e2fsck -n, which does not process the list.
        """
        img = self.make_image('64M')
        with self.mounted(img, check=False) as m:
            nx.write_file(m.p('kept'), b'kept\n')
            fds = []
            for name in ('gone1', 'gone2'):
                nx.write_file(m.p(name), nx.pattern(100000, len(fds)))
                fds.append(os.open(m.p(name), os.O_RDONLY))
                os.unlink(m.p(name))
            os.mkdir(nxsnap.snap_dir(m, 's'))
            want = manifest(m.path)
            for fd in fds:
                os.close(fd)
        self.assert_export(img, 's', want, 'taken with two open orphans')
        self.assertCheckClean(img, '--views')

    def test_diff_on_mountpoint(self):
        """Through a mounted daemon the same changes are reported."""
        seed = self.seed()
        img = self.make_image('96M')
        with self.mounted(img, check=False) as m:
            w = ToolWorkload(m.path, seed, self.bsize)
            w.run(30)
            os.mkdir(nxsnap.snap_dir(m, 'a'))
            w.run(60)
            os.mkdir(nxsnap.snap_dir(m, 'b'))
            w.run(60)
            mounted_out = [nextfs('diff', m.path, 'a', 'b', check=0).stdout,
                           nextfs('diff', m.path, 'b', check=0).stdout]
            # the volume is busy: image-mode commands are refused, and
            # told where it is mounted
            busy = 'is mounted at %s' % m.path
            p = nextfs('diff', img, 'a', check=1)
            self.assertIn(busy, p.stdout)
            p = nextfs('check', img, check=8)
            self.assertIn(busy, p.stdout)
            p = nextfs('restore', img, 'b', check=1)
            self.assertIn(busy, p.stdout)
            p = nextfs('diff', m.path, 'nope', check=1)
            self.assertIn('no such snapshot', p.stdout)
        image_out = [nextfs('diff', img, 'a', 'b', check=0).stdout,
                     nextfs('diff', img, 'b', check=0).stdout]
        self.maxDiff = None
        self.assertEqual(mounted_out, image_out)
        self.assertCheckClean(img)

    def test_diff_root_mtime_on_mountpoint(self):
        """A root whose only change is its mtime is reported modified
        through the mount as on the image, although stat() on a snapshot
        root shows its take time (the daemon is asked for the real one).
        """
        img = self.make_image('64M')
        with self.mounted(img, check=False) as m:
            os.mkdir(m.p('d'))
            os.mkdir(nxsnap.snap_dir(m, 'a'))
            os.utime(m.path, (1000000000, 1000000000))
            os.mkdir(nxsnap.snap_dir(m, 'b'))
            nx.write_file(m.p('d', 'f'), b'x')
            os.mkdir(nxsnap.snap_dir(m, 'c'))
            mounted_out = [nextfs('diff', m.path, x, y, check=0).stdout
                           for x, y in (('a', 'b'), ('b', 'c'))]
        image_out = [nextfs('diff', img, x, y, check=0).stdout
                     for x, y in (('a', 'b'), ('b', 'c'))]
        self.assertEqual(image_out, ['M /\n', 'M /d\n+ /d/f\n'])
        self.assertEqual(mounted_out, image_out)
        self.assertCheckClean(img)

    # ------------------------------------------------------------ check

    def patch_super(self, img, fn):
        """Change the primary superblock (checksum kept valid)."""
        with open(img, 'r+b') as f:
            f.seek(nxsnap.SB_OFFSET)
            sb = bytearray(f.read(1024))
            fn(sb)
            ro = struct.unpack_from('<I', sb, nxsnap.RO_COMPAT_OFF)[0]
            if ro & nxsnap.RO_COMPAT_METADATA_CSUM:
                struct.pack_into('<I', sb, nxsnap.CHECKSUM_OFF,
                                 nxsnap.crc32c_raw(bytes(
                                     sb[:nxsnap.CHECKSUM_OFF])))
            f.seek(nxsnap.SB_OFFSET)
            f.write(sb)

    def test_check_exit_codes(self):
        img = self.make_image()
        with self.mounted(img, check=False) as m:
            nx.write_file(m.p('f'), b'one')
            os.mkdir(nxsnap.snap_dir(m, 's1'))
            nx.write_file(m.p('f'), b'two')
            os.mkdir(nxsnap.snap_dir(m, 's2'))
        self.assertCheckClean(img)

        # a broken list head: found (4), nothing changed without -r
        self.patch_super(img, lambda sb: struct.pack_into('<I', sb, 0x190,
                                                          7))
        p = nextfs('check', img, check=4)
        self.assertIn('snapshot list', p.stdout)
        nextfs('snapshot', 'list', img, check=1)     # the engine refuses
        broken = image_digest(img)
        nextfs('check', img, check=4)
        self.assertEqual(image_digest(img), broken)
        p = nextfs('check', '--repair', img, check=1)
        self.assertIn('repaired', p.stdout)
        self.assertCheckClean(img)
        listing = nextfs('snapshot', 'list', img, check=0).stdout
        self.assertIn('s1', listing)
        self.assertIn('s2', listing)
        with self.mounted(img, check=False) as m:
            self.assertEqual(nx.read_file(nxsnap.snap_dir(m, 's1') + '/f'),
                             b'one')
            self.assertEqual(nx.read_file(nxsnap.snap_dir(m, 's2') + '/f'),
                             b'two')

    def test_check_repairs_damaged_live_tree(self):
        """Damage e2fsck -fy can fix in the live tree (here a wrong link
        count, as a crash without a journal can leave): check finds it
        and changes nothing, check --repair fixes it with e2fsck -fy
        (HAS_SNAPSHOT masked for it and put back), and the snapshot and
        the live files come through intact."""
        img = self.make_image()
        with self.mounted(img, check=False) as m:
            nx.write_file(m.p('f'), b'old')
            nx.write_file(m.p('g'), b'keep')
            os.mkdir(nxsnap.snap_dir(m, 's1'))
            nx.write_file(m.p('f'), b'new')
        self.assertCheckClean(img)

        def has_snapshot(on):
            def fn(sb):
                ro = struct.unpack_from('<I', sb, nxsnap.RO_COMPAT_OFF)[0]
                ro = (ro | nxsnap.RO_COMPAT_HAS_SNAPSHOT) if on else \
                    (ro & ~nxsnap.RO_COMPAT_HAS_SNAPSHOT)
                struct.pack_into('<I', sb, nxsnap.RO_COMPAT_OFF, ro)
            return fn
        self.patch_super(img, has_snapshot(False))
        nx.run([nx.DEBUGFS, '-w', '-R', 'sif /g links_count 7', img])
        self.patch_super(img, has_snapshot(True))

        p = nextfs('check', img, check=4)
        self.assertIn('e2fsck', p.stdout)
        broken = image_digest(img)
        nextfs('check', img, check=4)
        self.assertEqual(image_digest(img), broken)
        p = nextfs('check', '--repair', img)
        self.assertIn(p.returncode, (0, 1), nx.tail(p.stdout, 40))
        self.assertIn('-fy', p.stdout)
        self.assertTrue(nxsnap.has_snapshot_flag(img))
        self.assertCheckClean(img)
        with self.mounted(img, check=False) as m:
            self.assertEqual(os.stat(m.p('g')).st_nlink, 1)
            self.assertEqual(nx.read_file(m.p('g')), b'keep')
            self.assertEqual(nx.read_file(m.p('f')), b'new')
            self.assertEqual(nx.read_file(nxsnap.snap_dir(m, 's1') + '/f'),
                             b'old')
            os.rmdir(nxsnap.snap_dir(m, 's1'))
        self.assertCheckClean(img)

    def test_check_stale_feature(self):
        img = self.make_image()
        self.patch_super(img, lambda sb: struct.pack_into(
            '<I', sb, nxsnap.RO_COMPAT_OFF,
            struct.unpack_from('<I', sb, nxsnap.RO_COMPAT_OFF)[0] |
            nxsnap.RO_COMPAT_HAS_SNAPSHOT))
        self.assertNotEqual(nx.fsck(img)[0], 0)      # stock e2fsck refuses
        nextfs('check', img, check=4)
        nextfs('check', '-r', img, check=1)
        self.assertEqual(nx.fsck(img)[0], 0)
        self.assertCheckClean(img)

    # ------------------------------------------------------------ bad input

    def test_bad_input(self):
        junk = os.path.join(self.work, 'junk.img')
        with open(junk, 'wb') as f:
            f.truncate(4 << 20)
        p = nextfs('check', junk, check=8)
        self.assertIn('not an ext2/3/4 file system', p.stdout)
        nextfs('info', junk, check=1)
        nextfs('export', junk, 's', os.path.join(self.work, 'o'), check=1)

        img = self.make_image()
        with self.mounted(img, check=False) as m:
            nx.write_file(m.p('f'), os.urandom(2 << 20))
            os.mkdir(nxsnap.snap_dir(m, 's'))
        before = image_digest(img)
        out = os.path.join(self.work, 'out.img')
        p = nextfs('export', img, 'nope', out, check=1)
        self.assertIn("no snapshot named 'nope'", p.stdout)
        self.assertFalse(os.path.exists(out))
        p = nextfs('restore', img, 'nope', check=1)
        self.assertIn("no snapshot named 'nope'", p.stdout)
        nextfs('diff', img, 'nope', check=1)
        nextfs('diff', img, check=2)
        nextfs('check', check=16)
        # a full output disk: clear error, no partial file left behind
        with open('/dev/full', 'wb') as full:
            p = nextfs('export', img, 's', '-', check=1, stdout=full,
                       stderr=subprocess.PIPE)
        self.assertIn('No space left', p.stderr)
        nextfs('export', img, 's', out, check=0)
        p = nextfs('export', img, 's', out, check=1)     # no overwrite
        self.assertIn('exists', p.stdout)
        nextfs('export', '--force', img, 's', out, check=0)
        p = nextfs('export', img, 's', img, check=2)     # onto itself
        self.assertEqual(image_digest(img), before)
        if os.geteuid() == 0 and shutil.which('mount'):
            self.full_disk(img)
        self.assertEqual(image_digest(img), before)

    def full_disk(self, img):
        """Export onto a file system too small for it."""
        small = tempfile.mkdtemp(dir=self.work)
        p = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=256k',
                            'nxtmp', small], capture_output=True)
        if p.returncode != 0:
            return
        try:
            out = os.path.join(small, 'x.img')
            p = nextfs('export', img, 's', out, check=1)
            self.assertIn('No space left', p.stdout)
            self.assertFalse(os.path.exists(out))
        finally:
            subprocess.run(['umount', small], check=True)
            os.rmdir(small)


if __name__ == '__main__':
    nx.main()
