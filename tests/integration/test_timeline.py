#!/usr/bin/env python3
"""The snapshot timeline: unnamed takes, prune, timed snapshots, syncfs.

Run: test_timeline.py --flavour ext2|ext3|ext4|ext4-inline

- `nextfs snapshot take MNT` without a name names the snapshot
  @GMT-YYYY.MM.DD-HH.MM.SS after the current second, UTC; takes in the
  same second wait for the next one instead of colliding.
- `nextfs snapshot prune` deletes exactly the @GMT snapshots a spec does
  not keep (checked against a model written with Python's calendar),
  never a named one, nothing under --dry-run; what stays equals the
  manifest recorded when it was taken.
- nextfs-fuse -o snapshot_every=1s,snapshot_keep=... takes and prunes on
  its own (real seconds, no fake clock: the shortest period is honest);
  a take that fails (no free inode) is logged and the next tick succeeds.
- A take through `nextfs snapshot take MNT` holds data written through a
  shared mapping that was never msync'ed (the tool calls syncfs first).
Every mount ends with e2fsck -fn on a copy with HAS_SNAPSHOT masked.
"""

import datetime
import errno
import json
import mmap
import os
import re
import shutil
import subprocess
import time

import nxharness as nx
import nxsnap
from nxsnap import SKIP, snap_manifest, without_root_mtime

TL_RE = re.compile(r'^@GMT-\d{4}\.\d\d\.\d\d-\d\d\.\d\d\.\d\d$')
TL_FMT = '@GMT-%Y.%m.%d-%H.%M.%S'


def nextfs(*args, check=0, **kw):
    """Run the tool; CHECK: expected exit status (None: any)."""
    p = nx.run([nx.tool_path()] + list(args), check=False,
               stderr=subprocess.PIPE, **kw)
    if check is not None and p.returncode != check:
        raise AssertionError('nextfs %s: exit %d, expected %d:\n%s%s' %
                             (' '.join(args), p.returncode, check,
                              p.stdout, p.stderr))
    return p


def tl_name(dt):
    return dt.strftime(TL_FMT)


def tl_time(name):
    return datetime.datetime.strptime(name, TL_FMT).replace(
        tzinfo=datetime.timezone.utc)


def timeline(path):
    return sorted(n for n in os.listdir(path) if TL_RE.match(n))


def wait_for(cond, timeout, what):
    """Poll COND until it returns a true value; fail after TIMEOUT s."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError('timed out after %g s waiting for %s' %
                                 (timeout, what))
        time.sleep(0.05)


def model_keep(names, spec, now):
    """The kept @GMT names by the definition in nextfs(1), in Python."""
    times = {n: tl_time(n) for n in names if TL_RE.match(n)}
    times = {n: t for n, t in times.items() if t <= now}
    newest = sorted(times, key=lambda n: times[n], reverse=True)
    keys = {
        'hourly': lambda t: (t.year, t.month, t.day, t.hour),
        'daily': lambda t: t.date(),
        'weekly': lambda t: t.isocalendar()[:2],
        'monthly': lambda t: (t.year, t.month),
        'yearly': lambda t: t.year,
    }
    kept = set(newest[:spec.get('last', 0)])
    for rule, key in keys.items():
        periods = []
        for n in newest:
            k = key(times[n])
            if k in periods:
                continue
            periods.append(k)
            if len(periods) <= spec.get(rule, 0):
                kept.add(n)
    return kept


class TimelineTest(nx.NxTestCase):

    def fsck_masked_clean(self, image):
        rc, out = nxsnap.fsck_masked(image)
        self.assertEqual(rc, 0, 'e2fsck -fn (HAS_SNAPSHOT masked):\n' +
                         nx.tail(out, 30))

    def live(self, m):
        return nx.tree_state(m.path, skip_top=SKIP)

    # ------------------------------------------------------ unnamed takes

    def test_unnamed_take_is_named_after_utc_time(self):
        img = self.make_image()
        with self.mounted(img, check=False) as m:
            nx.write_file(m.p('a'), b'one')
            before = datetime.datetime.now(datetime.timezone.utc)
            # UTC whatever the local time zone (+05:30 here).
            p = nextfs('snapshot', 'take', m.path,
                       env=dict(os.environ, TZ='Asia/Kolkata'))
            after = datetime.datetime.now(datetime.timezone.utc)
            name = p.stdout.strip()
            self.assertRegex(name, TL_RE)
            t = tl_time(name)
            self.assertLessEqual(before.replace(microsecond=0), t)
            self.assertLessEqual(t, after)
            self.assertEqual(nx.read_file(m.p('.snapshots', name, 'a')),
                             b'one')
            # The take time (mtime of the root) is in the named second.
            mt = os.stat(m.p('.snapshots', name)).st_mtime
            self.assertLess(abs(mt - t.timestamp() - 0.5), 1.5)
            # Named takes keep working and print nothing.
            self.assertEqual(nextfs('snapshot', 'take', m.path,
                                    'monday').stdout, '')
        # Offline, on the image itself.
        name2 = nextfs('snapshot', 'take', img).stdout.strip()
        self.assertRegex(name2, TL_RE)
        self.assertGreater(name2, name)
        self.fsck_masked_clean(img)

    def test_takes_in_one_second_do_not_collide(self):
        with self.mounted(self.make_image(), check=False) as m:
            # Sequential takes back to back: the second and third come in
            # the same second as the one before and must wait for the next.
            names = [nextfs('snapshot', 'take', m.path).stdout.strip()
                     for _ in range(3)]
            self.assertEqual(names, sorted(set(names)), names)
            # A snapshot of the current second taken by hand, and two
            # takes at once: both succeed, with different, later names.
            now = datetime.datetime.now(datetime.timezone.utc)
            n = tl_name(now)
            if n not in names:
                os.mkdir(m.p('.snapshots', n))
                names.append(n)
            procs = [subprocess.Popen([nx.tool_path(), 'snapshot', 'take',
                                       m.path], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
                     for _ in range(2)]
            outs = [p.communicate(timeout=30) for p in procs]
            for p, (out, err) in zip(procs, outs):
                self.assertEqual(p.returncode, 0, err)
            got = [o.strip() for o, _ in outs]
            self.assertNotEqual(got[0], got[1])
            for g in got:
                self.assertNotIn(g, names)
                self.assertGreater(g, tl_name(now))
            self.assertEqual(set(timeline(m.p('.snapshots'))),
                             set(names) | set(got))

    # ------------------------------------------------------------ prune

    # A timeline across the edges of days, ISO weeks, months and years.
    PRUNE_TIMES = [
        (2025, 11, 30, 23, 0, 0),       # Sun, 2025-W48
        (2025, 12, 29, 10, 0, 0),       # Mon, 2026-W01 (ISO year 2026)
        (2025, 12, 31, 23, 59, 59),     # Wed, 2026-W01, year 2025
        (2026, 1, 1, 0, 0, 0),          # Thu, 2026-W01, year 2026
        (2026, 1, 1, 12, 0, 0),
        (2026, 1, 4, 23, 0, 0),         # Sun, 2026-W01
        (2026, 1, 5, 0, 0, 0),          # Mon, 2026-W02
        (2026, 1, 5, 1, 0, 0),
        (2026, 2, 1, 0, 0, 0),
    ]
    PRUNE_SPEC = {'last': 1, 'daily': 2, 'weekly': 2, 'monthly': 2,
                  'yearly': 2}
    PRUNE_SPEC_TEXT = 'last=1,daily=2:weekly=2,monthly=2:yearly=2'

    def make_timeline(self, m):
        """Snapshots with past timeline names, named ones between them;
        manifests of the live tree at each take."""
        manifests = {}
        names = []
        for i, tt in enumerate(self.PRUNE_TIMES):
            nx.write_file(m.p('f%d' % i), nx.pattern(3000 + 700 * i, i))
            nx.write_file(m.p('common'), nx.pattern(5000, 100 + i))
            n = tl_name(datetime.datetime(*tt))
            os.mkdir(m.p('.snapshots', n))
            manifests[n] = without_root_mtime(self.live(m))
            names.append(n)
            if i in (2, 6):
                named = 'hand-%d' % i
                os.mkdir(m.p('.snapshots', named))
                manifests[named] = without_root_mtime(self.live(m))
        # Not strict timeline names: a person's, never pruned.
        for odd in ('@GMT-2026.02.30-00.00.00', '@GMT-2025.1.01-00.00.00'):
            os.mkdir(m.p('.snapshots', odd))
            manifests[odd] = without_root_mtime(self.live(m))
        return names, manifests

    def check_remaining(self, m, manifests, expect_names):
        self.assertEqual(sorted(os.listdir(m.p('.snapshots'))),
                         sorted(expect_names))
        for n in expect_names:
            self.assertTreesEqual(snap_manifest(m, n), manifests[n], n)

    def test_prune_keeps_what_the_spec_says(self):
        img = self.make_image()
        now = datetime.datetime.now(datetime.timezone.utc)
        with self.mounted(img, check=False) as m:
            names, manifests = self.make_timeline(m)
            every = sorted(manifests)
            keep = model_keep(names, self.PRUNE_SPEC, now)
            gone = set(names) - keep
            self.assertTrue(gone and keep - {names[-1]})  # a real test

            # Bad specs: one line, exit 2, nothing deleted.
            for bad in ('', 'daily', 'daily=x', 'fortnightly=2', 'last=0',
                        'daily=1,daily=2'):
                p = nextfs('snapshot', 'prune', m.path, '--keep', bad,
                           check=2)
                self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
            nextfs('snapshot', 'prune', m.path, check=2)
            self.assertEqual(sorted(os.listdir(m.p('.snapshots'))), every)

            # --dry-run: says what would go, deletes nothing.
            p = nextfs('snapshot', 'prune', m.path, '--keep',
                       self.PRUNE_SPEC_TEXT, '--dry-run')
            would = {l.split()[-1] for l in p.stdout.splitlines()
                     if l.startswith('would delete')}
            self.assertEqual(would, gone)
            p = nextfs('snapshot', 'prune', m.path, '--dry-run', '--json',
                       '--keep=' + self.PRUNE_SPEC_TEXT)
            j = json.loads(p.stdout)
            self.assertTrue(j['dry_run'])
            acts = {s['name']: s for s in j['snapshots']}
            self.assertEqual(sorted(acts), every)
            self.assertEqual({n for n, s in acts.items()
                              if s['action'] == 'delete'}, gone)
            self.assertEqual({n for n, s in acts.items()
                              if s['action'] == 'ignore'},
                             set(every) - set(names))
            self.assertFalse(any(s['deleted'] for s in j['snapshots']))
            self.assertEqual(acts[names[-1]]['reasons'],
                             ['last', 'daily', 'weekly', 'monthly',
                              'yearly'])
            self.assertEqual(sorted(os.listdir(m.p('.snapshots'))), every)

            # The real thing, through the mount.
            p = nextfs('snapshot', 'prune', m.path, '--keep',
                       self.PRUNE_SPEC_TEXT, '--json')
            j = json.loads(p.stdout)
            self.assertFalse(j['dry_run'])
            self.assertEqual({s['name'] for s in j['snapshots']
                              if s['deleted']}, gone)
            left = sorted(set(every) - gone)
            self.check_remaining(m, manifests, left)
            # Again: nothing more to do.
            p = nextfs('snapshot', 'prune', m.path, '--keep',
                       self.PRUNE_SPEC_TEXT)
            self.assertNotIn('delete', p.stdout)
        self.fsck_masked_clean(img)

        # Offline, on the image: a smaller spec prunes further.
        keep2 = model_keep(names, {'last': 2}, now)
        p = nextfs('snapshot', 'prune', img, '--keep', 'last=2')
        self.assertEqual({l.split()[-1] for l in p.stdout.splitlines()
                          if l.startswith('deleted')}, keep - keep2)
        with self.mounted(img, check=False) as m:
            self.check_remaining(m, manifests,
                                 sorted(keep2 | (set(every) - set(names))))
        self.fsck_masked_clean(img)

    # ----------------------------------------------------- daemon timer

    def test_timed_snapshots_and_retention(self):
        img = self.make_image()
        with self.mounted(img, check=False,
                          opts=['snapshot_every=1s',
                                'snapshot_keep=last=2:daily=1']) as m:
            snaps = m.p('.snapshots')
            os.mkdir(m.p('.snapshots', 'by-hand'))
            seen = set()

            def four_taken():
                now = timeline(snaps)
                # Between a take and its prune there may be one more.
                self.assertLessEqual(len(now), 3, now)
                seen.update(now)
                return len(seen) >= 4 and len(now) <= 2
            wait_for(four_taken, 15, 'four timed snapshots, two kept')
            self.assertTrue(os.path.isdir(m.p('.snapshots', 'by-hand')))
            # A timed snapshot holds what was written before its tick.
            nx.write_file(m.p('data'), b'before the tick')
            os.sync()
            written = time.time()

            def later_snapshot():
                for n in timeline(snaps):
                    if tl_time(n).timestamp() >= written + 1:
                        return n
                return None
            n = wait_for(later_snapshot, 10, 'a snapshot after the write')
            self.assertEqual(nx.read_file(m.p('.snapshots', n, 'data')),
                             b'before the tick')
            self.assertNotIn('failed', m.log_text())
        self.fsck_masked_clean(img)
        # The timeline stayed consistent: at most 3 @GMT snapshots left.
        p = nextfs('snapshot', 'list', '--json', img)
        left = [s['name'] for s in json.loads(p.stdout)]
        self.assertIn('by-hand', left)
        self.assertLessEqual(len([n for n in left if TL_RE.match(n)]), 3)

    def test_failed_timed_take_is_logged_and_retried(self):
        # Few inodes: filling them makes the take's new inode fail.
        img = self.make_image(extra=['-N', '64'])
        with self.mounted(img, check=False,
                          opts=['snapshot_every=1s',
                                'snapshot_keep=last=2']) as m:
            snaps = m.p('.snapshots')
            wait_for(lambda: timeline(snaps), 10, 'a timed snapshot')
            os.mkdir(m.p('fill'))
            made = []

            def fill_and_fail():
                # Take every inode, also those prune frees between ticks.
                while True:
                    p = m.p('fill', 'f%d' % len(made))
                    try:
                        os.close(os.open(p, os.O_CREAT | os.O_WRONLY))
                    except OSError as e:
                        if e.errno != errno.ENOSPC:
                            raise
                        break
                    made.append(p)
                return 'No space left on device' in m.log_text()
            wait_for(fill_and_fail, 15, 'a failed timed take in the log')
            log = m.log_text()
            self.assertRegex(log, r'timed snapshot @GMT-\S+ failed: No '
                             r'space left on device; trying again in 1 s')
            failed_at = time.time()
            for p in made:
                os.unlink(p)

            def retried():
                return [n for n in timeline(snaps)
                        if tl_time(n).timestamp() > failed_at]
            wait_for(retried, 10, 'a timed snapshot after the failure')
        self.fsck_masked_clean(img)

    def test_bad_timer_options_refuse_the_mount(self):
        img = self.make_image()
        before = nx.sha256_file(img)
        mnt = os.path.join(self.work, 'mnt')
        os.mkdir(mnt)
        for opts, msg in (
                ('snapshot_every=0s', 'snapshot_every: bad duration'),
                ('snapshot_every=1w', 'snapshot_every: bad duration'),
                ('snapshot_every=1h,snapshot_keep=daily=x',
                 'snapshot_keep: daily:'),
                ('snapshot_every=1h,snapshot_keep=last=0',
                 'keeps no snapshot'),
                ('snapshot_keep=daily=3', 'snapshot_keep needs '
                 'snapshot_every'),
                ('ro,snapshot_every=1h', 'needs a writable mount')):
            p = nx.run([nx.daemon_path(), '-f', '-o', opts, img, mnt],
                       check=False, timeout=30)
            self.assertEqual(p.returncode, 1, p.stdout)
            self.assertEqual(len(p.stdout.splitlines()), 1, p.stdout)
            self.assertIn(msg, p.stdout)
            self.assertFalse(nx.is_mounted(mnt))
        self.assertEqual(nx.sha256_file(img), before)

    def test_timer_options_through_mount_fuse3(self):
        # What an fstab line does: mount(8) -> mount.fuse3 -> the daemon,
        # with the options as plain -o options.
        self.need_root()
        self.need_fuse_daemon()
        if not shutil.which('mount.fuse3'):
            self.skipTest('no mount.fuse3')
        img = self.make_image()
        mnt = os.path.join(self.work, 'fstab-mnt')
        os.mkdir(mnt)
        nx.run(['mount', '-t', 'fuse', '%s#%s' % (nx.daemon_path(), img),
                mnt, '-o', 'snapshot_every=1s,snapshot_keep=last=1:daily=1'])
        try:
            wait_for(lambda: timeline(os.path.join(mnt, '.snapshots')), 10,
                     'a timed snapshot')
        finally:
            nextfs('umount', mnt)
        self.fsck_masked_clean(img)

    # ------------------------------------------------------------ syncfs

    def test_take_holds_unsynced_mmap_writes(self):
        img = self.make_image()
        with self.mounted(img, check=False) as m:
            size = 3 * 4096
            nx.write_file(m.p('mapped'), b'A' * size)
            fd = os.open(m.p('mapped'), os.O_RDWR)
            try:
                os.fsync(fd)
                mm = mmap.mmap(fd, size, mmap.MAP_SHARED,
                               mmap.PROT_READ | mmap.PROT_WRITE)
                try:
                    mm[4096:4096 + 5] = b'BBBBB'
                    mm[size - 3:] = b'CCC'
                    # no msync: the pages are dirty in the page cache
                    nextfs('snapshot', 'take', m.path, 'mapped')
                finally:
                    mm.close()
            finally:
                os.close(fd)
            want = b'A' * 4096 + b'BBBBB' + b'A' * (size - 4096 - 8) + \
                b'CCC'
            self.assertEqual(
                nx.read_file(m.p('.snapshots', 'mapped', 'mapped')), want)
        self.fsck_masked_clean(img)


if __name__ == '__main__':
    nx.main()
