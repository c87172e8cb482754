#!/usr/bin/env python3
"""A snapshot delete is done at once; its hand-over runs in the background.

Run once (flavour-independent: the hand-over's own slicing and resuming
is covered on every flavour by the unit tests, test_snapdelete.c and
test_crash.c).

Snapshot S in the middle holds every other 64 KiB chunk of a file F
(punched out after both takes), which the older snapshot 'old' still
shows, so deleting S hands 200 extents over to 'old'.  The daemon runs with
NEXTFS_RECLAIM_SLOW (one extent per slice, slices apart), so that the
hand-over is caught in the middle:

- the rmdir returns with S gone from .snapshots and its name free (a new
  S is taken at once), "nextfs info --json" shows the pending delete, and
  'old' and the newer 'new' read what they read at their takes;
- the daemon is killed (SIGKILL) in the middle of it and the volume
  mounted again: both still read what they did (docs/design.md P10),
  and the hand-over finishes;
- a second delete is left in the middle by an unmount: the offline
  tools read the volume as it is (nextfs info, nextfs check, an export
  of 'old' that stock e2fsck passes, e2fsck with HAS_SNAPSHOT masked),
  and "nextfs snapshot delete --wait" on the next mount returns once
  nothing is pending.
"""

import json
import os
import subprocess
import time

import nxharness as nx
import nxsnap
from nxsnap import snap_dir, snap_manifest

CHUNK = 64 * 1024
CHUNKS = 400                # every other one: extents S hands over
PUNCH = 0x02 | 0x01         # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE


def nextfs(*args, check=True):
    return nx.run([nx.tool_path()] + list(args), check=check)


def pending(target):
    info = json.loads(nextfs('info', '--json', target).stdout)
    return info['pending_deletes']


class HandoverTest(nx.NxTestCase):

    def build(self, m):
        """Files, 'old', S (holding every other chunk of F), 'new'."""
        nx.write_file(m.p('a'), nx.pattern(300000, 1))
        nx.write_file(m.p('F'), nx.pattern(CHUNK * CHUNKS, 100))
        os.mkdir(snap_dir(m, 'old'))
        mans = {'old': snap_manifest(m, 'old')}
        nx.write_file(m.p('a'), nx.pattern(300000, 2))
        os.mkdir(snap_dir(m, 'S'))
        # Every other chunk of F moves into S: extents of S that the
        # chunks F keeps separate, whatever the allocator chose.
        fd = os.open(m.p('F'), os.O_RDWR)
        try:
            for i in range(0, CHUNKS, 2):
                nx.fallocate(fd, PUNCH, i * CHUNK, CHUNK)
        finally:
            os.close(fd)
        os.mkdir(snap_dir(m, 'new'))
        mans['new'] = snap_manifest(m, 'new')
        return mans

    def check_snapshots(self, m, mans, what):
        for name, man in mans.items():
            self.assertTreesEqual(man, snap_manifest(m, name),
                                  '%s: snapshot %s' % (what, name))

    def test_delete_in_the_background(self):
        img = self.make_image('160M')
        with nx.environment(NEXTFS_RECLAIM_SLOW='20'):
            with nx.mounted(img, check=False) as m:
                mans = self.build(m)
                os.rmdir(snap_dir(m, 'S'))
                # gone and free at once, the hand-over still running
                self.assertNotIn('S', os.listdir(snap_dir(m)))
                p = pending(m.path)
                self.assertEqual(p['snapshots'], 1)
                self.assertGreater(p['held_bytes'], CHUNK * CHUNKS // 2)
                os.mkdir(snap_dir(m, 'S'))
                mans['S'] = snap_manifest(m, 'S')
                self.check_snapshots(m, mans, 'hand-over running')
                self.assertEqual(pending(m.path)['snapshots'], 1)
                m.kill()
                nx.run([nx.FUSERMOUNT, '-u', '-z', m.path], check=False)
        # the next mount finishes what the killed daemon left
        with nx.mounted(img, check=False) as m:
            self.assertEqual(sorted(os.listdir(snap_dir(m))),
                             ['S', 'new', 'old'])
            self.check_snapshots(m, mans, 'after kill -9 and a mount')
            nextfs('snapshot', 'delete', '--wait', m.path, 'new')
            del mans['new']
            self.assertEqual(pending(m.path),
                             {'snapshots': 0, 'held_bytes': 0})
            self.check_snapshots(m, mans, 'after delete --wait')
        # an unmount in the middle of a hand-over leaves it on disk (it
        # goes on for 2 s, then stops: here a slice a second, and each
        # deleted snapshot takes two at least)
        with nx.environment(NEXTFS_RECLAIM_SLOW='1000'):
            with nx.mounted(img, check=False) as m:
                for i in range(4):
                    nx.write_file(m.p('b'), nx.pattern(CHUNK, 7 + i))
                    os.mkdir(snap_dir(m, 'T%d' % i))
                    os.unlink(m.p('b'))
                for i in range(4):
                    os.rmdir(snap_dir(m, 'T%d' % i))
        self.assertGreaterEqual(pending(img)['snapshots'], 1)
        nextfs('check', img)
        rc, out = nxsnap.fsck_masked(img)
        self.assertEqual(rc, 0, out)
        exp = os.path.join(os.path.dirname(img), 'old.img')
        nextfs('export', img, 'old', exp)
        rc, out = nx.fsck(exp)
        self.assertEqual(rc, 0, out)
        os.unlink(exp)
        with nx.mounted(img, check=False) as m:
            self.check_snapshots(m, mans, 'after an unmount in the middle')
            nextfs('snapshot', 'delete', '--wait', m.path, 'S')
            self.assertEqual(pending(m.path)['snapshots'], 0)
            os.rmdir(snap_dir(m, 'old'))
        self.assertEqual(pending(img)['snapshots'], 0)
        self.assertFalse(nxsnap.has_snapshot_flag(img))
        rc, out = nx.fsck(img)
        self.assertEqual(rc, 0, out)


if __name__ == '__main__':
    nx.main()
