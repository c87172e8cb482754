#!/usr/bin/env python3
"""A file's history and pre/post pairs (issue 18, points 5 and 6).

- nextfs versions PATH lists the distinct versions of a file across the
  snapshots and the live tree, oldest first, with the snapshots holding
  each: a chmod alone is no new version, a rewrite with the same size and
  mtime is (content compared), a file deleted and made again shows both
  lives and the snapshots it is absent from.  --json parses with
  json.load and gives odd snapshot names back byte for byte.
- --restore NAME [--to DEST] copies that version (content, holes, mode,
  times, xattrs) into place atomically; the snapshot stays exactly as its
  manifest recorded at the take; directories are refused.  The same as
  the unprivileged owner of the mount ("nobody").
- nextfs snapshot run MNT -- CMD takes run-...-pre and run-...-post-STATUS
  (never @GMT names), flushes data written before, also through mmap not
  yet msync'ed, returns the command's status (signals 128+N, 127 when it
  cannot be found), and nextfs diff MNT PRE POST lists exactly what the
  command changed (also offline on the image afterwards).

Runs once (no flavour): ext4 images.
"""

import contextlib
import json
import mmap
import os
import re
import stat
import subprocess

import nxharness as nx
import nxsnap
from nxharness import NOBODY_UID as UID, NOGROUP_GID as GID
from nxharness import read_file, write_file

ODD = b'odd\nname \xff'          # newline, space, not UTF-8


def tool(*args, user=None):
    """(status, stdout bytes, stderr text) of the nextfs tool."""
    argv = [nx.tool_path()] + list(args)
    if user:
        argv = nx.as_user_argv(*user) + argv
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL)
    err = p.stderr.decode(errors='replace')
    rep = nx.sanitizer_report(err)
    if rep:
        raise AssertionError('sanitizer report:\n%s' % rep)
    return p.returncode, p.stdout, err


def ok(*args, user=None):
    rc, out, err = tool(*args, user=user)
    if rc != 0:
        raise AssertionError('nextfs %r: exit %d\n%s' % (args, rc, err))
    return out


def snap(root, name, manifests=None):
    """Take NAME; MANIFESTS[NAME] = the live tree just before."""
    if manifests is not None:
        manifests[name] = take_time_manifest(root)
    os.mkdir(os.path.join(os.fsencode(root), b'.snapshots',
                          os.fsencode(name)))


def take_time_manifest(root):
    man = nxsnap.without_root_mtime(nx.tree_state(root,
                                                  skip_top=nxsnap.SKIP))
    man['.'].pop('nlink', None)         # the live root counts .snapshots
    return man


def snapshot_manifest(root, name):
    return take_time_manifest(os.fsdecode(os.path.join(
        os.fsencode(root), b'.snapshots', os.fsencode(name))))


def restored_state(path):
    st = os.lstat(path)
    return {'sha256': nx.sha256_file(path), 'mode': st.st_mode, 'uid': st.st_uid,
            'gid': st.st_gid, 'mtime': st.st_mtime_ns,
            'atime': st.st_atime_ns, 'xattrs': nx._xattrs(path),
            'ino': st.st_ino, 'blocks': st.st_blocks}


def set_mtime(path, sec):
    os.utime(path, ns=(sec * 10**9 + 5, sec * 10**9 + 123456789))


def make_history(root):
    """The history the versions tests read (runs as the mount's owner).

    v1 (s1, s2: chmod only between), v2 (s3), v2' same size and mtime,
    other bytes (s4), absent (s5), v3 sparse, made again (s6, odd name),
    v4 (live).
    """
    f = os.path.join(root, 'dir', 'f')
    mans = {}
    os.mkdir(os.path.join(root, 'dir'))
    write_file(f, b'version one\n', 0o640)
    os.setxattr(f, 'user.tag', b'one')
    set_mtime(f, 1_000_000_000)
    snap(root, 's1', mans)
    os.chmod(f, 0o600)
    snap(root, 's2', mans)
    write_file(f, b'version two\n')
    set_mtime(f, 1_100_000_000)
    snap(root, 's3', mans)
    write_file(f, b'version 2bis\n'[:12])       # same size as v2
    set_mtime(f, 1_100_000_000)                 # and the same mtime
    snap(root, 's4', mans)
    os.unlink(f)
    snap(root, 's5', mans)
    with open(f, 'wb') as fh:                   # sparse: 1 MiB hole
        fh.seek(1 << 20)
        fh.write(b'version three\n')
    os.chmod(f, 0o751)
    os.setxattr(f, 'user.tag', b'three')
    os.setxattr(f, 'user.other', b'\x00\xff')
    set_mtime(f, 1_200_000_000)
    snap(root, ODD, mans)
    write_file(f, b'version four, live\n')
    return mans


def versions_json(path, user=None):
    out = ok('versions', '--json', path, user=user)
    return json.loads(out.decode('utf-8'))


def names(v):
    return [n.encode('utf-8', 'surrogateescape') for n in v['snapshots']]


class SnapCase(nx.NxTestCase):
    """Mounts checked with e2fsck -fn on a copy with has_snapshot masked
    (stock e2fsck refuses the feature; nxsnap.py)."""

    @contextlib.contextmanager
    def snapmount(self, img=None, **kw):
        img = img or self.make_image()
        with self.mounted(img, check=False, **kw) as m:
            yield m
        rc, out = nxsnap.fsck_masked(img)
        self.assertEqual(rc, 0, out)


class VersionsChecks(SnapCase):
    """What the versions tests check, as root or as another user."""


    user = None                 # run the tool and file access as (uid, gid)

    def do(self, fn, *args):
        """FN(*ARGS) as the test's user."""
        if self.user:
            return nx.run_as(*self.user, fn, *args)
        return fn(*args)

    def check_history(self, m):
        user = self.user
        f = m.p('dir', 'f')
        doc = versions_json(f, user)
        self.assertEqual(doc['path'], '/dir/f')
        self.assertEqual(os.path.realpath(doc['mount']),
                         os.path.realpath(m.path))
        got = [(names(v), v['live'], v['size'], v['mode'],
                int(float(v['mtime_epoch']))) for v in doc['versions']]
        self.assertEqual(got, [
            ([b's1', b's2'], False, 12, 0o640, 1_000_000_000),
            ([b's3'], False, 12, 0o600, 1_100_000_000),
            ([b's4'], False, 12, 0o600, 1_100_000_000),
            ([ODD], False, (1 << 20) + 14, 0o751, 1_200_000_000),
            ([], True, 19, 0o751, self.do(os.stat, f).st_mtime_ns // 10**9),
        ])
        self.assertEqual([n.encode('utf-8', 'surrogateescape')
                          for n in doc['absent']], [b's5'])
        # the text form: one line per version, odd names quoted as ls
        text = ok('versions', f, user=user).decode()
        lines = text.splitlines()
        self.assertEqual(len(lines), 1 + 5 + 1, text)
        self.assertTrue(lines[1].endswith(' s1 s2'), text)
        self.assertTrue(lines[4].endswith(" 'odd'$'\\n''name '$'\\377'"),
                        text)
        self.assertTrue(lines[5].endswith(' (live)'), text)
        self.assertEqual(lines[6], 'absent from: s5')
        # a path inside a snapshot view is the same file's history
        self.assertEqual(versions_json(m.p('.snapshots', 's3', 'dir', 'f'),
                                       user)['versions'], doc['versions'])

    def check_restore(self, m, mans):
        user, do = self.user, self.do
        f = m.p('dir', 'f')
        src = os.path.join(os.fsencode(m.path), b'.snapshots', ODD,
                           b'dir', b'f')
        # --to a new name: everything of the version, holes included
        dest = m.p('dir', 'restored')
        ok('versions', f, '--restore', os.fsdecode(ODD), '--to', dest,
           user=user)
        self.assertSame(src, dest)
        self.assertLess(do(os.stat, dest).st_blocks * 512, 1 << 20,
                        'the hole was filled')
        # --to a directory: into it, under the file's name
        do(os.mkdir, m.p('other'))
        ok('versions', f, '--restore', 's3', '--to', m.p('other'),
           user=user)
        self.assertEqual(do(read_file, m.p('other', 'f')),
                         b'version two\n')
        # in place: replaced by a rename, the old inode untouched
        old_ino = do(os.stat, f).st_ino
        ok('versions', f, '--restore', 's1', user=user)
        self.assertSame(m.p('.snapshots', 's1', 'dir', 'f'), f)
        self.assertNotEqual(do(os.stat, f).st_ino, old_ino)
        self.assertEqual(sorted(do(os.listdir, m.p('dir'))),
                         ['f', 'restored'], 'a temporary file was left')
        # a gone file comes back too
        do(os.unlink, f)
        ok('versions', f, '--restore', 's3', user=user)
        self.assertEqual(do(read_file, f), b'version two\n')
        # what cannot be done says why and changes nothing
        rc, _, err = tool('versions', f, '--restore', 's5', user=user)
        self.assertEqual((rc, err.strip()),
                         (1, 'nextfs: %s: not in snapshot s5' % f))
        rc, _, err = tool('versions', m.p('dir'), '--restore', 's1',
                          user=user)
        self.assertEqual(rc, 2)
        self.assertIn('only files and symlinks are restored', err)
        rc, _, err = tool('versions', f, '--restore', 'nosuch', user=user)
        self.assertEqual(rc, 1)
        self.assertIn('no snapshot nosuch', err)
        # every snapshot as its manifest recorded at the take
        for n, man in mans.items():
            self.assertTreesEqual(do(snapshot_manifest, m.path, n), man,
                                  'snapshot %r after restores' % n)

    def assertSame(self, a, b):
        sa, sb = self.do(restored_state, a), self.do(restored_state, b)
        for k in ('ino', 'blocks'):
            del sa[k], sb[k]
        self.assertEqual(sa, sb)

class VersionsTest(VersionsChecks):

    def test_history_and_restore(self):
        with self.snapmount() as m:
            mans = make_history(m.path)
            self.check_history(m)
            self.check_restore(m, mans)

    def test_symlink_and_root(self):
        with self.snapmount() as m:
            os.symlink('one', m.p('link'))
            snap(m.path, 'a')
            os.unlink(m.p('link'))
            os.symlink('two', m.p('link'))
            snap(m.path, 'b')
            doc = versions_json(m.p('link'))
            self.assertEqual([(names(v), v['type'], v['size'], v['live'])
                              for v in doc['versions']],
                             [([b'a'], 'symlink', 3, False),
                              ([b'b'], 'symlink', 3, True)])
            ok('versions', m.p('link'), '--restore', 'a')
            self.assertEqual(os.readlink(m.p('link')), 'one')
            # the root: its real mtime, not the snapshots' take times
            snap(m.path, 'c')
            doc = versions_json(m.path)
            self.assertEqual(doc['path'], '/')
            self.assertEqual(names(doc['versions'][-1]), [b'c'])

    def test_not_on_a_mount(self):
        rc, _, err = tool('versions', self.work)
        self.assertEqual(rc, 1)
        self.assertIn('is not on a nextfs mount', err)


class UnprivilegedVersionsTest(VersionsChecks):
    """The same as "nobody" on nobody's own mount."""

    def setUp(self):
        super().setUp()
        self.need_root()
        self.need_fuse_daemon()
        try:
            nx.run_as(UID, GID, lambda: os.close(os.open('/dev/fuse',
                                                         os.O_RDWR)))
        except OSError as e:
            self.skipTest('/dev/fuse is not usable by nobody (%s)' % e)

    def test_as_nobody(self):
        img, udir = self.make_user_image(UID, GID)
        self.user = (UID, GID)
        with self.snapmount(img, user=(UID, GID), workdir=udir) as m:
            mans = nx.run_as(UID, GID, make_history, m.path)
            self.check_history(m)
            self.check_restore(m, mans)
            self.assertEqual(self.do(os.stat, m.p('dir', 'f')).st_uid, UID)


# ------------------------------------------------------------ run

RUN_NAME = re.compile(r'^run-\d{8}-\d{6}-(?P<cmd>[^/]+?)-'
                      r'(?P<kind>pre|post-(exit|sig)\d+)$')


def snapshot_names(m):
    out = ok('snapshot', 'list', '--names0', m.path)
    return [n.decode('utf-8', 'surrogateescape')
            for n in out.split(b'\0')[:-1]]


class RunTest(SnapCase):

    def run_pair(self, m, *cmd, want):
        before = set(snapshot_names(m))
        rc, out, err = tool('snapshot', 'run', m.path, '--', *cmd)
        self.assertEqual(rc, want, err)
        new = [n for n in snapshot_names(m) if n not in before]
        self.assertEqual(len(new), 2, new)
        pre, post = new
        self.assertEqual(err.splitlines()[0], 'nextfs: before: ' + pre)
        self.assertEqual(err.splitlines()[-1], 'nextfs: after: ' + post)
        for n in (pre, post):
            self.assertRegex(n, RUN_NAME)
            self.assertNotRegex(n, r'^@GMT-')
        self.assertEqual(pre[:-len('-pre')],
                         post[:post.rindex('-post-')], 'not a pair')
        return pre, post, out

    def test_pair_status_and_diff(self):
        img = self.make_image()
        with self.snapmount(img) as m:
            write_file(m.p('old'), b'old')
            write_file(m.p('keep'), b'keep')
            write_file(m.p('change'), b'1')
            # written through mmap and not msync'ed: the pre snapshot
            # must hold it all the same (syncfs before the take)
            write_file(m.p('mapped'), b'\0' * 4096)
            fd = os.open(m.p('mapped'), os.O_RDWR)
            mm = mmap.mmap(fd, 4096)
            mm[:6] = b'mapped'
            script = ('echo new > new; rm old; echo 22 >> change; '
                      'echo out; exit 3')
            pre, post, out = self.run_pair(
                m, 'sh', '-c', 'cd "$1" && ' + script, 'sh', m.path,
                want=3)
            mm.close()
            os.close(fd)
            self.assertEqual(out, b'out\n', 'the command\'s stdout')
            self.assertTrue(pre.endswith('-sh-pre'), pre)
            self.assertTrue(post.endswith('-sh-post-exit3'), post)
            self.assertEqual(read_file(m.p('.snapshots', pre, 'mapped'))[:6],
                             b'mapped')
            self.assertEqual(read_file(m.p('.snapshots', post, 'change')),
                             b'122\n')
            want = ['M /', 'M /change', '+ /new', '- /old']
            self.assertEqual(ok('diff', m.path, pre, post).decode()
                             .splitlines(), want)
            # a signal: 128+N and a -sigN name; a missing command: 127
            pre, post, _ = self.run_pair(m, 'sh', '-c', 'kill -TERM $$',
                                         want=128 + 15)
            self.assertTrue(post.endswith('-post-sig15'), post)
            pre, post, _ = self.run_pair(m, 'no-such-command-here',
                                         want=127)
            self.assertTrue(post.endswith('-post-exit127'), post)
            self.assertEqual(ok('diff', m.path, pre, post), b'')
            first = sorted(n for n in snapshot_names(m)
                           if n.endswith('-sh-pre'))[0]
        # offline, the image's diff says the same
        self.assertEqual(ok('diff', img, first,
                            first[:-4] + '-post-exit3').decode()
                         .splitlines(), want)

    def test_usage(self):
        with self.snapmount() as m:
            rc, _, err = tool('snapshot', 'run', m.path)
            self.assertEqual(rc, 2)
            self.assertIn('no COMMAND', err)
            rc, _, err = tool('snapshot', 'run', self.work + '/nothing',
                              'true')
            self.assertEqual(rc, 125, err)
            self.assertEqual(snapshot_names(m), [])


if __name__ == '__main__':
    nx.main()
