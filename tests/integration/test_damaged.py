#!/usr/bin/env python3
"""Damaged volumes are never written (issue 16, P13).

mkdamaged.py makes a corpus of images with the damage the kernel refuses
at mount: a file cut short, wrong superblock, descriptor, bitmap and
inode checksums, superblock fields out of range, descriptors pointing
outside the volume or over other metadata, a corrupt journal superblock,
an orphan list that loops or starts outside the inode table, an orphan
whose map cannot be read, unknown features, the error state; and, on a
volume with three snapshots, damage of the snapshot metadata the engine
relies on: maps, the list, ids, the superblock's snapshot fields.  For
each image:

- nextfs-fuse refuses it for writing with exit status 2 and exactly one
  line naming the damage and the fix, before anything is written: the
  image stays byte-identical; so does an offline writer (a snapshot
  take; a restore, where there are snapshots), with status 1;
- with -o ro it is served (or, where even reading is impossible, refused
  the same way), and still stays byte-identical; with damage of what
  snapshot views read, without the snapshots;
- the repair the line advises works: after it e2fsck -fn finds the
  volume clean and nextfs opens it read-write again (a snapshot taken
  offline); 'nextfs check --repair' does it in one run (a second finds
  nothing).

Reading and repairing are checked on the ext4 images (each kind of damage
is there); the ext3 and ext2 ones, with other layouts, are checked for
the refusal and for staying unchanged.

The corpus does not depend on the flavour: this script runs once.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import mkdamaged
import nxharness as nx
import nxsnap

HERE = os.path.dirname(os.path.abspath(__file__))


def sha256(path):
    """Of the whole content, reading only the data (the images are sparse;
    a hole reads as zeros, and any write would land as data)."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        h.update(b'%d' % size)
        off = 0
        while off < size:
            try:
                off = os.lseek(fd, off, os.SEEK_DATA)
            except OSError:
                break           # only a hole is left
            end = os.lseek(fd, off, os.SEEK_HOLE)
            h.update(b'@%d' % off)
            while off < end:
                chunk = os.pread(fd, min(end - off, 1 << 20), off)
                h.update(chunk)
                off += len(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


def corpus_root():
    """Where the corpus goes: tmpfs if there is one (every write-back and
    repair syncs, and syncs on tmpfs cost nothing), unless the tests were
    given a directory."""
    if not os.environ.get('NEXTFS_TEST_TMPDIR') and \
            os.access('/dev/shm', os.W_OK | os.X_OK):
        return '/dev/shm'
    return nx.tmp_root()


class DamagedTest(nx.NxTestCase):

    @classmethod
    def setUpClass(cls):
        cls.corpus = tempfile.mkdtemp(prefix='nxdamaged.', dir=corpus_root())
        os.chmod(cls.corpus, 0o755)
        nx.run([sys.executable, os.path.join(HERE, 'mkdamaged.py'),
                cls.corpus])
        with open(os.path.join(cls.corpus, 'manifest.json')) as f:
            cls.manifest = json.load(f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.corpus, True)

    def refused(self, image, opts=()):
        """Run the daemon on IMAGE; it must refuse: its one line."""
        mnt = tempfile.mkdtemp(prefix='mnt.', dir=self.work)
        argv = [nx.daemon_path(), '-f'] + list(opts) + [image, mnt]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True,
                             stdin=subprocess.DEVNULL)
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            subprocess.run([nx.FUSERMOUNT, '-u', '-z', mnt])
            p.kill()
            p.communicate()
            self.fail('%s was served, not refused' % ' '.join(argv))
        finally:
            os.rmdir(mnt)
        rep = nx.sanitizer_report(out)
        self.assertIsNone(rep, rep)
        self.assertEqual(p.returncode, 2, out)
        lines = out.splitlines()
        self.assertEqual(len(lines), 1, out)
        self.assertTrue(lines[0].startswith('nextfs-fuse: %s' % image),
                        out)
        return lines[0]

    def check_refusal(self, line, image, exp, rdonly):
        self.assertRegex(line, exp['say'])
        readable = exp['ro'] and not rdonly
        self.assertEqual('mount it with -o ro' in line, readable, line)
        if exp['fix'] == 'e2fsck':
            self.assertIn("repair it with 'e2fsck -f %s'" % image, line)
        elif exp['fix'] == 'nextfs':
            self.assertIn("repair it with 'nextfs check --repair %s'" %
                          image, line)
        elif exp['fix'] == 'truncate':
            self.assertIn("'truncate -s", line)
        else:
            self.assertNotIn('repair', line)

    def refused_offline(self, image, exp, *args):
        """An offline writer (nextfs ARGS IMAGE ...) refuses it the same
        way: one line, status 1."""
        argv = [nx.tool_path()] + list(args)
        p = nx.run(argv, check=False)
        self.assertEqual(p.returncode, 1, p.stdout)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 1, p.stdout)
        self.assertTrue(lines[0].startswith('nextfs: %s' % image), p.stdout)
        self.assertRegex(lines[0], exp['say'])

    def serve_read_only(self, image, exp):
        with self.mounted(image, opts=['ro'], check=False) as m:
            names = os.listdir(m.path)
            if 'dir' in names and 'b' in names:
                self.assertEqual(os.path.getsize(m.p('b')), 5000)
            if exp['snaps_ro'] is not None:
                self.assertEqual(len(os.listdir(m.p('.snapshots'))),
                                 exp['snaps_ro'])

    def repair(self, image, line, exp):
        """Apply the advised fix to a copy; nextfs must then write it."""
        copy = os.path.join(self.corpus, 'fixed.img')
        nx.run(['cp', '--sparse=always', image, copy])
        try:
            if exp['fix'] == 'truncate':
                size = int(re.search(r"'truncate -s (\d+) ", line).group(1))
                os.truncate(copy, size)
            if exp['fix'] == 'nextfs':
                # all of it in one run: the second finds nothing
                p = nx.run([nx.tool_path(), 'check', '--repair', copy],
                           check=False)
                self.assertEqual(p.returncode, 1, p.stdout)
                p = nx.run([nx.tool_path(), 'check', '--repair', copy],
                           check=False)
                self.assertEqual(p.returncode, 0, p.stdout)
                rc, out = nxsnap.fsck_masked(copy)
            else:
                p = nx.run([nx.E2FSCK, '-fy', copy], check=False)
                self.assertIn(p.returncode, (0, 1), p.stdout)
                rc, out = nx.fsck(copy)
            self.assertEqual(rc, 0, out)
            # Accepted for writing again (an offline read-write open).
            nx.run([nx.tool_path(), 'snapshot', 'take', copy, 'repaired'])
        finally:
            os.unlink(copy)

    def test_corpus(self):
        self.assertGreaterEqual(len(self.manifest), 40)
        for name, exp in sorted(self.manifest.items()):
            with self.subTest(name):
                image = os.path.join(self.corpus, name + '.img')
                before = sha256(image)
                line = self.refused(image)
                self.check_refusal(line, image, exp, False)
                self.assertEqual(sha256(image), before,
                                 'refusing %s changed it' % name)
                if exp['ro'] and exp['fix'] != 'truncate':
                    self.refused_offline(image, exp, 'snapshot', 'take',
                                         image, 'x')
                if exp['snaps_ro'] is not None:
                    self.refused_offline(image, exp, 'restore', image, 's1')
                self.assertEqual(sha256(image), before,
                                 'an offline refusal changed %s' % name)
                if exp['flavour'] not in ('ext4', 'snap'):
                    continue    # the same damage on ext4 covers the rest
                if exp['ro']:
                    self.serve_read_only(image, exp)
                else:
                    line_ro = self.refused(image, ['-o', 'ro'])
                    self.check_refusal(line_ro, image, exp, True)
                self.assertEqual(sha256(image), before,
                                 'reading %s changed it' % name)
                if exp['fix']:
                    self.repair(image, line, exp)

    def test_restore_refused_before_it_writes(self):
        """restore --destroy-newer on a volume it must not write - run by
        another user on a root-owned 0644 image, or marked as having
        errors - says so in one line, exits 1 and changes nothing (it
        once crashed there, closing the volume it had closed already)."""
        img = os.path.join(self.corpus, 'restore.img')
        mkdamaged.take_snapshots(mkdamaged.make_base(img, 'ext4', '136M'))
        os.chmod(img, 0o644)
        argv = [nx.tool_path(), 'restore', '--destroy-newer', img, 's1']
        for why, make, prefix in (
                ('cannot be written', None,
                 nx.as_user_argv(nx.NOBODY_UID, nx.NOGROUP_GID)),
                ('marked as having errors',
                 mkdamaged.DAMAGES_BY_NAME['error-state'], [])):
            with self.subTest(why):
                if make:
                    make(mkdamaged.Image(img))
                before = sha256(img)
                p = nx.run(prefix + argv, check=False)
                self.assertEqual(p.returncode, 1, p.stdout)
                self.assertEqual(len(p.stdout.splitlines()), 1, p.stdout)
                self.assertIn(why, p.stdout)
                self.assertEqual(sha256(img), before)
        os.unlink(img)

    def test_with_snapshots_the_fix_is_nextfs_check(self):
        """Stock e2fsck refuses volumes with snapshots: the refusal
        advises nextfs check --repair, and that repairs each kind of
        damage, also those that keep nextfs from opening the volume at
        all (e2fsck goes first then; a superblock it rebuilds from a
        backup gets the snapshot fields back), and the snapshot still
        holds what it held at the take."""
        nextfs = nx.tool_path()
        kinds = ['desc-csum', 'super-csum', 'super-inodes-count',
                 'block-bitmap-csum', 'inode-bitmap-csum',
                 'root-inode-csum', 'journal-super']
        for kind in kinds:
            with self.subTest(kind):
                img = os.path.join(self.corpus, 'snap-%s.img' % kind)
                nx.make_image(img, 'ext4', '136M')
                # (stock e2fsck refuses volumes with snapshots: nextfs
                # check judges them below)
                with self.mounted(img, check=False) as m:
                    with open(m.p('f'), 'wb') as f:
                        f.write(b'at the take\n' * 1000)
                    os.mkdir(m.p('.snapshots', 'before'))
                    with open(m.p('f'), 'wb') as f:
                        f.write(b'after\n')
                mkdamaged.DAMAGES_BY_NAME[kind](mkdamaged.Image(img))
                before = sha256(img)
                line = self.refused(img)
                self.assertIn("repair it with 'nextfs check --repair %s'"
                              % img, line)
                self.assertEqual(sha256(img), before)
                p = nx.run([nextfs, 'check', '--repair', img], check=False)
                self.assertEqual(p.returncode, 1, p.stdout)  # fixed, 0 left
                nx.run([nextfs, 'check', '--views', img])
                with self.mounted(img, check=False) as m:
                    with open(m.p('.snapshots', 'before', 'f'), 'rb') as f:
                        self.assertEqual(f.read(), b'at the take\n' * 1000)
                    with open(m.p('f'), 'rb') as f:
                        self.assertEqual(f.read(), b'after\n')
                    os.mkdir(m.p('.snapshots', 'after'))
                nx.run([nextfs, 'check', '--views', img])
                os.unlink(img)

if __name__ == '__main__':
    nx.main()
