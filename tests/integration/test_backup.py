#!/usr/bin/env python3
"""Snapshot views that backups can trust (issue 17).

Run: test_backup.py --flavour ext2|ext3|ext4|ext4-inline

- Tools that identify files by (st_dev, st_ino) copy two snapshots and
  the live tree at once exactly: tar, cp -a, rsync -aH (each result is
  checked against manifests recorded when the snapshots were taken), du
  counts each tree fully, cmp reads a changed file.
- Inode numbers: no two trees share one, hard links inside a tree do,
  readdir's d_ino equals stat's st_ino, and all of it stays the same
  after a remount and after other snapshots come and go; -o ino32 keeps
  them below 2^32.
- Names: snapshot names with a newline, a tab, a 0xff byte, quotes and
  backslashes come out of "nextfs snapshot list --json" and "nextfs info
  --json" (mounted and not) as valid JSON with the exact bytes, and the
  text listing quotes them so that bash reads them back exactly.
- df: with a snapshot holding blocks, what statfs promises is what a
  write gets before ENOSPC, for root (f_bfree) and for another user
  (f_bavail: the root-reserved blocks are root's).
"""

import errno
import json
import os
import shutil
import subprocess

import nxharness as nx
import nxsnap
from nxsnap import SKIP

# Snapshot names whose bytes a listing could mangle.
ODD_NAMES = [b'new\nline', b'new', b'tab\there', b'bad\xffbyte',
             b'q"uote', b"it's", b'back\\slash', b'-dash', b'caf\xc3\xa9']


def tool(*args, check=0):
    p = subprocess.run([nx.tool_path()] + list(args), capture_output=True)
    if check is not None and p.returncode != check:
        raise AssertionError('nextfs %r: exit %d, expected %d:\n%s' %
                             (args, p.returncode, check,
                              (p.stdout + p.stderr).decode(
                                  errors='replace')))
    return p


def manifest(root):
    """Everything a backup must keep; the root's own mtime is the take
    time on a snapshot root, so it is left out everywhere."""
    man = nx.tree_state(root, skip_top=SKIP, nlink=True)
    man['.'] = {k: v for k, v in man['.'].items()
                if k not in ('mtime_ns', 'nlink')}
    return man


def ino_map(root):
    """{relpath: st_ino} of every entry below ROOT (root included)."""
    out = {'.': os.lstat(root).st_ino}
    for dp, dns, fns in os.walk(root):
        if dp == root:
            dns[:] = [d for d in dns if d not in SKIP]
        for n in dns + fns:
            p = os.path.join(dp, n)
            out[os.path.relpath(p, root)] = os.lstat(p).st_ino
    return out


class BackupTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        if nx.backend() != 'nextfs':
            self.skipTest('nextfs snapshot views')

    def assert_fsck_masked(self, img):
        rc, out = nxsnap.fsck_masked(img)
        self.assertEqual(rc, 0, 'e2fsck -fn (has_snapshot masked):\n' +
                         nx.tail(out, 40))

    def build_tree(self, m):
        """Two snapshots of a changing tree: {name or None: manifest}."""
        os.mkdir(m.p('docs'))
        nx.write_file(m.p('README.txt'), b'v1\n')
        nx.write_file(m.p('docs', 'big'), nx.pattern(300000, 1))
        os.link(m.p('docs', 'big'), m.p('big-link'))
        os.symlink('docs/big', m.p('sym'))
        mans = {'t1': manifest(m.path)}
        os.mkdir(nxsnap.snap_dir(m, 't1'))
        nx.write_file(m.p('README.txt'), b'v1\nv2\n')
        nx.write_file(m.p('docs', 'big'), nx.pattern(300000, 2))
        nx.write_file(m.p('docs', 'new'), b'new in t2')
        mans['t2'] = manifest(m.path)
        os.mkdir(nxsnap.snap_dir(m, 't2'))
        nx.write_file(m.p('README.txt'), b'v3\n')
        os.unlink(m.p('big-link'))
        mans[None] = manifest(m.path)
        return mans

    def trees(self, m):
        return {'t1': nxsnap.snap_dir(m, 't1'), 't2': nxsnap.snap_dir(m, 't2'),
                None: m.path}

    def assert_copies(self, dest, mans, what, where):
        """WHERE(name) holds exactly the manifest of NAME."""
        for name, want in mans.items():
            self.assertTreesEqual(want, manifest(where(name)),
                                  '%s, %s' % (what, name or 'live'))

    def test_tools_copy_snapshots_exactly(self):
        self.need_root()        # owners survive only a root's copies
        img = self.make_image()
        out = os.path.join(self.work, 'out')
        with self.mounted(img, check=False) as m:
            mans = self.build_tree(m)
            trees = self.trees(m)

            # cmp may not call a changed file equal to its snapshot
            p = subprocess.run(['cmp', '-s', m.p('README.txt'),
                                os.path.join(trees['t1'], 'README.txt')])
            self.assertEqual(p.returncode, 1, 'cmp: live vs t1')

            # tar: one archive of both snapshots and the live tree
            os.mkdir(out)
            tarball = os.path.join(self.work, 'x.tar')
            nx.run(['tar', '--format=posix', '-cf', tarball, '-C', m.p(),
                    '.snapshots/t1', '.snapshots/t2', '.'])
            nx.run(['tar', '-xf', tarball, '-C', out])
            self.assert_copies(out, mans, 'tar', lambda n: os.path.join(
                out, '.snapshots', n) if n else out)
            shutil.rmtree(out)

            # cp -a and rsync -aH of all three at once
            live = os.path.join(out, os.path.basename(m.path))
            copiers = [['cp', '-a']]
            if shutil.which('rsync'):
                # (without it rsync skips setting an mtime that matches
                # to the second: links and dirs made within a second)
                copiers.append(['rsync', '-aH', '--modify-window=-1'])
            for argv in copiers:
                os.mkdir(out)
                nx.run(argv + [trees['t1'], trees['t2'], m.path, out])
                self.assert_copies(out, mans, ' '.join(argv),
                                   lambda n: os.path.join(out, n) if n
                                   else live)
                shutil.rmtree(out)

            # du counts every tree fully, not once for all
            alone = [nx.run(['du', '-sk', t]).stdout.split()[0]
                     for t in (trees['t1'], trees['t2'], m.path)]
            together = [line.split()[0] for line in nx.run(
                ['du', '-sk', trees['t1'], trees['t2'], m.path]
            ).stdout.splitlines()]
            self.assertEqual(together, alone, 'du of three trees at once')
        self.assert_fsck_masked(img)

    def assert_inode_numbers(self, m, names, what, limit=None):
        """Distinct across trees, shared by hard links, d_ino == st_ino."""
        maps = {n: ino_map(nxsnap.snap_dir(m, n)) for n in names}
        maps[None] = ino_map(m.path)
        seen = {}
        for name, inos in maps.items():
            for rel, ino in inos.items():
                other = seen.setdefault(ino, (name, rel))
                if other[0] != name:
                    self.fail('%s: %s in %s and %s in %s share inode %d' %
                              (what, rel, name or 'live', other[1],
                               other[0] or 'live', ino))
                if limit:
                    self.assertLess(ino, limit, '%s: %s' % (what, rel))
        specials = {os.stat(nxsnap.snap_dir(m)).st_ino}
        self.assertFalse(specials & set(seen), '%s: .snapshots' % what)
        for name in names:
            if 'big-link' in maps[name]:
                self.assertEqual(maps[name]['big-link'],
                                 maps[name]['docs/big'],
                                 '%s: hard link in %s' % (what, name))
        # readdir (the kernel uses readdirplus too) agrees with stat
        for root in [m.path, nxsnap.snap_dir(m)] + \
                [nxsnap.snap_dir(m, n) for n in names]:
            for dp, dns, fns in os.walk(root):
                if dp == m.path:
                    dns[:] = [d for d in dns if d not in SKIP]
                with os.scandir(dp) as it:
                    for e in it:
                        self.assertEqual(e.inode(), os.lstat(e.path).st_ino,
                                         '%s: d_ino of %s' % (what, e.path))
        # ".." of a snapshot root is .snapshots
        for name in names:
            self.assertEqual(os.stat(os.path.join(nxsnap.snap_dir(m, name),
                                                  '..')).st_ino,
                             os.stat(nxsnap.snap_dir(m)).st_ino)
        return maps

    def test_inode_numbers(self):
        img = self.make_image()
        with self.mounted(img, check=False) as m:
            self.build_tree(m)
            before = self.assert_inode_numbers(m, ['t1', 't2'], 'mounted')
        with self.mounted(img, check=False) as m:
            after = self.assert_inode_numbers(m, ['t1', 't2'], 'remounted')
            self.assertEqual(before, after, 'inode numbers after remount')
            # other snapshots coming and going change nothing
            os.mkdir(nxsnap.snap_dir(m, 't3'))
            os.rmdir(nxsnap.snap_dir(m, 't1'))
            now = self.assert_inode_numbers(m, ['t2', 't3'], 'later')
            self.assertEqual(now['t2'], before['t2'])
            self.assertEqual(now[None], before[None])
        with self.mounted(img, opts=['ino32'], check=False) as m:
            self.assert_inode_numbers(m, ['t2', 't3'], '-o ino32',
                                      limit=1 << 32)
        self.assert_fsck_masked(img)

    # ------------------------------------------------------------ names

    def listed_json(self, target):
        out = tool('snapshot', 'list', '--json', target).stdout
        return [(e['id'], e['name'].encode('utf-8', 'surrogateescape'),
                 e['taken']) for e in json.loads(out)]

    def test_names_round_trip(self):
        img = self.make_image()
        with self.mounted(img, check=False) as m:
            for n in ODD_NAMES:
                if n.startswith(b'-'):
                    tool('snapshot', 'take', m.path, os.fsdecode(n),
                         check=2)            # an unknown option
                    tool('snapshot', 'take', m.path, '--', os.fsdecode(n))
                else:
                    os.mkdir(os.path.join(os.fsencode(m.path),
                                          b'.snapshots', n))
            mounted = self.listed_json(m.path)
            self.assertEqual([n for _, n, _ in mounted], ODD_NAMES)
            # the image while it is mounted: asked through the mount
            self.assertEqual(self.listed_json(img), mounted)
            info = json.loads(tool('info', '--json', m.path).stdout)
            self.assertTrue(info['volume']['mounted'])
            self.assertEqual([s['name'].encode('utf-8', 'surrogateescape')
                              for s in info['snapshots']], ODD_NAMES)
            text = tool('snapshot', 'list', m.path).stdout
            for line in tool('info', m.path).stdout.splitlines():
                self.assertNotIn(b'\xff', line)
        # offline: the same names, ids and times
        self.assertEqual(self.listed_json(img), mounted)
        info = json.loads(tool('info', '--json', img).stdout)
        self.assertFalse(info['volume']['mounted'])
        self.assertEqual(len(info['snapshots']), len(ODD_NAMES))
        # text: one line per snapshot, the name quoted as bash reads it
        lines = text.splitlines()[1:]
        self.assertEqual(len(lines), len(ODD_NAMES), text)
        for line, name in zip(lines, ODD_NAMES):
            quoted = line.split(None, 1)[1].rsplit(None, 4)[0].strip()
            back = subprocess.run(['bash', '-c', b'printf %s ' + quoted],
                                  capture_output=True, check=True).stdout
            self.assertEqual(back, name, line)
        # names after "--" in every command that takes one
        tool('snapshot', 'delete', img, '-dash', check=2)
        tool('export', img, '--', '-dash', os.path.join(self.work, 'x.img'))
        os.unlink(os.path.join(self.work, 'x.img'))
        tool('diff', img, '--', 'new', '-dash')
        tool('snapshot', 'delete', img, '--', '-dash')
        self.assertNotIn(b'-dash', [n for _, n, _ in self.listed_json(img)])
        self.assert_fsck_masked(img)

    # --------------------------------------------------------------- df

    def fill(self, path):
        """Write PATH until ENOSPC; the bytes it holds then (metadata
        included, as df counts it)."""
        with open(path, 'wb') as f:
            chunk = b'x' * 65536
            try:
                while True:
                    f.write(chunk)
                    f.flush()
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
        return os.stat(path).st_blocks * 512

    def statfs(self, path):
        st = os.statvfs(path)
        return st.f_bfree * st.f_frsize, st.f_bavail * st.f_frsize

    def test_df_tells_what_a_write_gets(self):
        self.need_root()
        img = self.make_image()
        # what a file's own tree blocks and an op's slack may differ by
        slack = 32 * self.bsize
        with self.mounted(img, check=False) as m:
            nx.write_file(m.p('data'), nx.pattern(16 << 20, 7))
            os.mkdir(nxsnap.snap_dir(m, 's'))
            nx.write_file(m.p('data'), nx.pattern(16 << 20, 8))  # s holds
            os.unlink(m.p('data'))          # freed: s holds it all now
            os.mkdir(m.p('pub'), 0o777)
            os.chmod(m.p('pub'), 0o777)
            bfree, bavail = self.statfs(m.path)
            self.assertGreater(bfree - bavail, slack, 'no root reserve?')
            got = nx.run_as(65534, 65534, self.fill, m.p('pub', 'nobody'))
            self.assertLessEqual(bavail - got, slack,
                                 'another user got %d bytes, df promised %d'
                                 % (got, bavail))
            self.assertLessEqual(got - bavail, slack,
                                 'another user took root-reserved blocks: '
                                 '%d bytes, df promised %d' % (got, bavail))
            rfree, ravail = self.statfs(m.path)
            self.assertLessEqual(ravail, slack, 'df after ENOSPC')
            got = self.fill(m.p('root'))
            self.assertLessEqual(abs(rfree - got), slack,
                                 'root got %d bytes, df promised %d' %
                                 (got, rfree))
            self.assertLessEqual(self.statfs(m.path)[0], slack,
                                 'df after ENOSPC (root)')
            # freed space comes back (once the kernel lets go of the
            # inode: it sends FORGET after unlink returns)
            os.unlink(m.p('root'))
            st = nx.wait_statfs(m.path, lambda st: st.f_bfree * st.f_frsize
                                >= rfree - slack)
            self.assertGreaterEqual(st.f_bfree * st.f_frsize, rfree - slack)
            os.unlink(m.p('pub', 'nobody'))
        self.assert_fsck_masked(img)


if __name__ == '__main__':
    nx.main()
