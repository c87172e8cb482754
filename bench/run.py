#!/usr/bin/env python3
"""Benchmark nextfs-fuse against Debian's fuse2fs and kernel ext4.

    sudo python3 bench/run.py --build build [--quick] [--out results.json]
    python3 bench/run.py --compare OLD.json NEW.json

Runs the workloads of issue 5 on the same image size with each system
(nextfs-fuse from the build directory, fuse2fs, the kernel's ext4 on a
loop device), then the snapshot costs with nextfs alone; prints medians,
nextfs/other ratios and the issue's targets (PASS/MISS), and writes every
raw number to a JSON file.  Python 3 standard library only; needs fio,
fuse2fs, tar, find, e2fsprogs.  Run as root for cold-cache reads
(drop_caches) and the kernel loop mount; without root those are skipped
with a note.  See bench/README.md for what each number means.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRCROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from nxbench import agebench, delbench, layoutbench         # noqa: E402
from nxbench import mounts, recvbench                       # noqa: E402
from nxbench import metabench                               # noqa: E402
from nxbench import replbench                               # noqa: E402
from nxbench import report, snapbench, workloads           # noqa: E402
from nxbench.mounts import BenchError                       # noqa: E402

MIB, GIB = 1 << 20, 1 << 30

# overwrite_pairs: without/with snapshot overwrite pairs per repetition,
# on each kind of image (sparse, device-like); the ratio is the median
# over all pairs of all repetitions.
FULL = dict(image_size=4 * GIB, seq_size=GIB, rand_file=256 * MIB,
            rand_io=64 * MIB, creates=2000, tree_limit=None, reps=3,
            scaling_snaps=8, overwrite_pairs=2, snapdir_snaps=1024,
            aged_write=GIB, diff_files=200000,
            send_files=4000, delete_gib=(1, 4, 10),
            meta_files=100000)
QUICK = dict(image_size=GIB, seq_size=256 * MIB, rand_file=64 * MIB,
             rand_io=16 * MIB, creates=500, tree_limit=1500, reps=1,
             scaling_snaps=8, overwrite_pairs=5, snapdir_snaps=256,
             aged_write=256 * MIB, diff_files=50000,
             send_files=1000, delete_gib=(1, 4),
             meta_files=20000)

# workloads that need an earlier one's files
NEEDS = {'seq_read': 'seq_write', 'rand_read': 'rand_write',
         'rand_read_4j': 'rand_write',
         'find_stat': 'untar', 'rm_rf': 'untar'}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def daemon_in(build):
    """BUILD's nextfs-fuse: src/fuse/, or src/cli/ in builds of older
    trees (to run the bench on a build of one)."""
    new = os.path.join(build, 'src', 'fuse', 'nextfs-fuse')
    old = os.path.join(build, 'src', 'cli', 'nextfs-fuse')
    return old if not os.path.exists(new) and os.path.exists(old) else new


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description='Benchmark nextfs-fuse against fuse2fs and kernel ext4.')
    ap.add_argument('--build', default=os.path.join(SRCROOT, 'build'),
                    help='meson build directory with src/fuse/nextfs-fuse '
                    '(default: build)')
    ap.add_argument('--quick', action='store_true',
                    help='1 repetition, smaller sizes (about 2 minutes)')
    ap.add_argument('--reps', type=int,
                    help='repetitions (default 3, --quick 1)')
    ap.add_argument('--out', help='result file (default: '
                    'bench-results-DATE.json in the current directory)')
    ap.add_argument('--systems', default=','.join(mounts.SYSTEMS),
                    help='comma-separated subset of %s' %
                    ','.join(mounts.SYSTEMS))
    ap.add_argument('--workloads',
                    default=','.join(w for w, _, _ in workloads.WORKLOADS),
                    help='comma-separated subset of the workloads')
    ap.add_argument('--no-snapshots', action='store_true',
                    help='skip the snapshot costs')
    ap.add_argument('--no-repl', action='store_true',
                    help='skip diff (and send) between snapshots')
    ap.add_argument('--repl-only', action='store_true',
                    help='run only diff (and send) between snapshots')
    ap.add_argument('--diff-files', type=int,
                    help='files in the diff tree (default 200000, '
                    '--quick 50000)')
    ap.add_argument('--send-files', type=int,
                    help='files (about 64 KiB each) in the send tree '
                    '(default 4000, --quick 1000)')
    ap.add_argument('--no-delete', action='store_true',
                    help='skip the snapshot delete hand-over (issue 30)')
    ap.add_argument('--no-receive', action='store_true',
                    help='skip nextfs receive against cp -a')
    ap.add_argument('--no-meta', action='store_true',
                    help='skip find per entry and mount time vs size')
    ap.add_argument('--meta-files', type=int,
                    help='files in the find tree (default 100000, '
                    '--quick 20000)')
    ap.add_argument('--no-aged', action='store_true',
                    help='skip the write on an aged volume')
    ap.add_argument('--no-layout', action='store_true',
                    help='skip the layout under a snapshot (issue 29)')
    ap.add_argument('--layout-only', action='store_true',
                    help='run only the layout under a snapshot')
    ap.add_argument('--pairs', type=int,
                    help='snapshot overwrite without/with pairs per '
                    'repetition and image kind (default 2, --quick 5)')
    ap.add_argument('--tree', default=None,
                    help='source tree to tar (default /usr/include, else '
                    '/usr/share/doc)')
    ap.add_argument('--workdir', default=None,
                    help='where the run makes its directory for images '
                    'and logs (default /var/tmp; needs twice the image '
                    'size free)')
    ap.add_argument('--keep', action='store_true',
                    help='keep the work directory (logs)')
    ap.add_argument('--timeout', type=int, default=600,
                    help='seconds before one operation counts as hung')
    ap.add_argument('--compare', nargs=2, metavar=('OLD', 'NEW'),
                    help='print the medians of two result files, then exit')
    return ap.parse_args(argv)


def make_tarball(src, workdir, limit):
    """An uncompressed tarball of SRC (its first LIMIT entries in sorted
    walk order, or all of it), so untar measures the file system, not
    gzip."""
    parent, base = os.path.split(os.path.abspath(src))
    names = []
    for root, dirs, files in os.walk(src):
        dirs.sort()
        rel = os.path.relpath(root, parent)
        names.append(rel)
        for f in sorted(files):
            names.append(os.path.join(rel, f))
        if limit and len(names) >= limit:
            break
    if limit:
        names = names[:limit]
    listing = os.path.join(workdir, 'tree.list')
    with open(listing, 'w') as f:
        f.write('\n'.join(names) + '\n')
    tarball = os.path.join(workdir, 'tree.tar')
    mounts.run(['tar', '-C', parent, '--no-recursion', '-cf', tarball,
                '-T', listing])
    size = os.path.getsize(tarball)
    return {'source': os.path.abspath(src), 'entries': len(names),
            'tar_bytes': size, 'tarball': tarball}


def tool_version(argv):
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=10)
        return p.stdout.strip().splitlines()[0] if p.stdout else None
    except (OSError, subprocess.SubprocessError):
        return None


def build_info(build):
    info = {'dir': os.path.abspath(build)}
    try:
        with open(os.path.join(build, 'meson-info',
                               'intro-buildoptions.json')) as f:
            for o in json.load(f):
                if o.get('name') in ('buildtype', 'optimization', 'b_ndebug'):
                    info[o['name']] = o.get('value')
    except (OSError, ValueError):
        pass
    info['git'] = tool_version(['git', '-C', SRCROOT, 'describe', '--always',
                                '--dirty'])
    # nextfs-fuse -V: its libfuse and libext2fs, and which crc32c it runs
    try:
        p = subprocess.run([daemon_in(build), '-V'], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=10)
        info['version'] = '; '.join(p.stdout.strip().splitlines())
    except (OSError, subprocess.SubprocessError):
        info['version'] = None
    return info


def host_info():
    cpu = None
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    cpu = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open('/proc/meminfo') as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return {'hostname': platform.node(), 'kernel': platform.release(),
            'cpu': cpu, 'cpus': os.cpu_count(), 'mem_bytes': mem}


def raw_disk(workdir, size):
    """Plain file write+fsync and cold read on the work directory's file
    system: the ceiling every image-file-backed system sits on.  One
    sample; see raw_ceiling()."""
    path = os.path.join(workdir, 'raw.dat')
    s = workloads.Session(None, None, None, None, None, None, 600)
    try:
        w = s.io('write', path, size, 1)
        dropped = mounts.drop_caches()
        r = s.io('read', path)
        return {'write_mib_s': w['bytes'] / MIB / w['seconds'],
                'read_mib_s': r['bytes'] / MIB / r['seconds'],
                'read_cold': dropped}
    except BenchError as e:
        return {'error': str(e)}
    finally:
        if os.path.exists(path):
            os.unlink(path)


def raw_ceiling(samples):
    """meta.raw_disk: the best write and the best cold read rate of the
    SAMPLES (taken at the start and at the end of the run; a ceiling is
    what the device can at least do, so the higher one), with all
    samples."""
    ok = [x for x in samples if 'error' not in x]
    if not ok:
        return {'error': samples[0]['error'] if samples else
                'not measured', 'samples': samples}
    return {'write_mib_s': max(x['write_mib_s'] for x in ok),
            'read_mib_s': max(x['read_mib_s'] for x in ok),
            'read_cold': all(x['read_cold'] for x in ok),
            'samples': samples}


def check_systems(args, workdir, fuse_bin, params, notes):
    """The systems that can run here, with a note for each one that
    cannot."""
    wanted = [x for x in args.systems.split(',') if x]
    for x in wanted:
        if x not in mounts.SYSTEMS:
            raise SystemExit('unknown system %s' % x)
    ok = []
    loop_ok = {}
    fuse = mounts.fuse_usable()
    for x in wanted:
        if x in ('nextfs', 'fuse2fs') and not fuse:
            notes.append('%s skipped: /dev/fuse is not usable' % x)
        elif x == 'nextfs' and not os.access(fuse_bin, os.X_OK):
            notes.append('nextfs skipped: %s not built (meson setup BUILD '
                         '&& ninja -C BUILD)' % fuse_bin)
        elif x == 'fuse2fs' and not shutil.which('fuse2fs'):
            notes.append('fuse2fs skipped: not installed (apt-get install '
                         'fuse2fs)')
        elif x in ('kernel', 'floor'):
            if 'why' not in loop_ok:
                w = mounts.loop_usable(workdir, params['mkimages'])
                loop_ok['why'] = w and 'loop mount impossible (%s)' % w
            why = loop_ok['why']
            if x == 'floor' and not why and not fuse:
                why = '/dev/fuse is not usable'
            if x == 'floor' and not why:
                params['floor_bin'], why = mounts.build_floor(workdir)
            if why:
                notes.append('%s skipped: %s' % (
                    'kernel ext4' if x == 'kernel' else 'FUSE floor', why))
            else:
                ok.append(x)
        else:
            ok.append(x)
    return ok


def main(argv):
    args = parse_args(argv)
    if args.compare:
        report.compare(args.compare[0], args.compare[1], sys.stdout)
        return 0
    if not shutil.which('fio'):
        raise SystemExit('fio is needed (apt-get install fio)')
    base = dict(QUICK if args.quick else FULL)
    reps = args.reps or base['reps']
    if args.pairs:
        base['overwrite_pairs'] = args.pairs
    if args.diff_files:
        base['diff_files'] = args.diff_files
    if args.send_files:
        base['send_files'] = args.send_files
    if args.meta_files:
        base['meta_files'] = args.meta_files
    wl = [w for w in args.workloads.split(',') if w]
    for w in list(wl):
        if w not in [x for x, _, _ in workloads.WORKLOADS]:
            raise SystemExit('unknown workload %s' % w)
        if w in NEEDS and NEEDS[w] not in wl:
            wl.append(NEEDS[w])
    fuse_bin = daemon_in(args.build)
    cli = os.path.join(args.build, 'src', 'cli', 'nextfs')
    out_path = args.out or 'bench-results-%s.json' % \
        datetime.datetime.now().strftime('%Y%m%d-%H%M%S')

    mounts.install_signal_handlers()
    # always a new directory of our own: it is removed at the end
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix='nextfs-bench-',
                               dir=args.workdir or '/var/tmp')
    tracker = mounts.Tracker()
    notes = []
    params = dict(base, workloads=wl, timeout=args.timeout,
                  mkimages=os.path.join(SRCROOT, 'images', 'mkimages.sh'))
    res = {'meta': {'started': datetime.datetime.now().isoformat(),
                    'args': vars(args), 'reps': reps, 'notes': notes,
                    'host': host_info(), 'root': mounts.is_root(),
                    'versions': {
                        'nextfs': build_info(args.build),
                        'fuse2fs': tool_version(['fuse2fs', '-V']),
                        'fio': tool_version(['fio', '--version']),
                        'e2fsprogs': tool_version(['mke2fs', '-V'])}},
           'suite': {}, 'snapshot_costs': [], 'take_scaling': [],
           'snapdir': [], 'aged': [], 'repl': [], 'receive': [],
           'delete': [], 'layout': [], 'meta_reads': []}
    t_start = time.perf_counter()
    interrupted = None
    try:
        if not mounts.is_root():
            notes.append('not root: caches cannot be dropped, so "cold" '
                         'reads are only remount-cold')
        systems = check_systems(args, workdir, fuse_bin, params, notes)
        res['meta']['systems'] = systems
        src = args.tree or next((d for d in ('/usr/include',
                                             '/usr/share/doc')
                                 if os.path.isdir(d)), None)
        tree = make_tarball(src, workdir, base['tree_limit'])
        params['tree'] = tree
        res['meta']['params'] = {k: v for k, v in params.items()
                                 if k != 'tree'}
        res['meta']['tree'] = {k: v for k, v in tree.items()
                               if k != 'tarball'}
        log('work directory %s; image %d MiB, file %d MiB, tree %s '
            '(%d entries, %.0f MiB); %d repetition(s)' % (
                workdir, params['image_size'] // MIB,
                params['seq_size'] // MIB, tree['source'], tree['entries'],
                tree['tar_bytes'] / MIB, reps))
        raw = [raw_disk(workdir, params['seq_size'])]
        res['meta']['raw_disk'] = raw_ceiling(raw)
        log('raw file on the work directory: %s' % raw[-1])
        for rep in range(reps):
            if 'nextfs' in systems and not args.no_repl:
                log('[rep %d/%d] nextfs diff and send between snapshots' %
                    (rep + 1, reps))
                res['repl'].append(replbench.run_repl(
                    tracker, params, workdir, fuse_bin, cli, log))
            if args.repl_only:
                continue
            if 'nextfs' in systems and not args.no_layout:
                log('[rep %d/%d] nextfs layout under a snapshot' %
                    (rep + 1, reps))
                res['layout'].append(layoutbench.run_layout(
                    tracker, params, workdir, fuse_bin, log,
                    kernel='kernel' in systems))
            if args.layout_only:
                continue
            for sysname in systems:
                log('[rep %d/%d] %s' % (rep + 1, reps, sysname))
                r, meta = workloads.run_suite(tracker, sysname, params,
                                              workdir, fuse_bin, log)
                r['_meta'] = meta
                res['suite'].setdefault(sysname, []).append(r)
            if not args.no_aged:
                log('[rep %d/%d] write on an aged volume and a fresh one' %
                    (rep + 1, reps))
                res['aged'].append(agebench.run_aged(
                    tracker, params, workdir, fuse_bin, args.build, systems,
                    log))
            if 'nextfs' in systems and not args.no_snapshots:
                log('[rep %d/%d] nextfs snapshot costs' % (rep + 1, reps))
                t0 = time.perf_counter()
                c = snapbench.run_costs(tracker, params, workdir, fuse_bin,
                                        cli, log)
                c['wall_seconds'] = time.perf_counter() - t0
                res['snapshot_costs'].append(c)
                log('[rep %d/%d] nextfs snapshot take on 1 GiB and 1 TiB' %
                    (rep + 1, reps))
                t0 = time.perf_counter()
                c = snapbench.run_take_scaling(tracker, params, workdir,
                                               fuse_bin, cli, log)
                c['wall_seconds'] = time.perf_counter() - t0
                res['take_scaling'].append(c)
                log('[rep %d/%d] nextfs ls -la .snapshots' % (rep + 1, reps))
                res['snapdir'].append(snapbench.run_snapdir(
                    tracker, params, workdir, fuse_bin, cli, log))
            if 'nextfs' in systems and not args.no_delete:
                log('[rep %d/%d] nextfs snapshot delete: hand-over of %s '
                    'GiB' % (rep + 1, reps, ', '.join(
                        str(g) for g in params['delete_gib'])))
                res['delete'].append(delbench.run_delete(
                    tracker, params, workdir, fuse_bin, log))
            if 'nextfs' in systems and not args.no_meta:
                log('[rep %d/%d] find per entry, mount time vs size' %
                    (rep + 1, reps))
                res['meta_reads'].append(metabench.run_meta(
                    tracker, params, workdir, fuse_bin, systems, log))
            if 'nextfs' in systems and not args.no_receive:
                log('[rep %d/%d] nextfs receive against cp -a' %
                    (rep + 1, reps))
                res['receive'].append(recvbench.run_receive(
                    tracker, params, workdir, fuse_bin, cli, log))
        # a second sample of the device ceiling, at the other end of the
        # run (drift on the machine; the ceiling is the better of the two)
        raw.append(raw_disk(workdir, params['seq_size']))
        res['meta']['raw_disk'] = raw_ceiling(raw)
        log('raw file on the work directory: %s' % raw[-1])
        if 'nextfs' not in systems:
            res['meta']['snapshots_skipped'] = 'nextfs not available'
        elif args.no_snapshots:
            res['meta']['snapshots_skipped'] = '--no-snapshots'
    except KeyboardInterrupt as e:
        interrupted = str(e) or 'Ctrl-C'
        log('interrupted (%s): cleaning up, writing partial results' %
            interrupted)
    finally:
        tracker.cleanup()
        res['meta']['seconds'] = time.perf_counter() - t_start
        res['meta']['interrupted'] = interrupted
        if interrupted:
            res['meta'].setdefault('snapshots_skipped', 'interrupted')
        _finish_notes(res)
        res['summary'] = report.summarize(res)
        res['summary']['layout'] = layoutbench.summarize(res['layout'])
        with open(out_path, 'w') as f:
            json.dump(res, f, indent=1, sort_keys=True)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log('kept %s' % workdir)
    res['meta'].setdefault('systems', [])
    report.print_tables(res, sys.stdout)
    layoutbench.print_table(res['layout'], sys.stdout)
    print('\nraw results: %s (%.0f s)' % (out_path, res['meta']['seconds']))
    return 130 if interrupted else 0


def _finish_notes(res):
    """Notes on anything that makes the numbers less than they seem."""
    notes = res['meta']['notes']
    for sysname, reps in res['suite'].items():
        for i, r in enumerate(reps):
            m = r.get('_meta', {})
            if m.get('o_direct') is False:
                notes.append('%s: O_DIRECT refused, random I/O ran '
                             'buffered' % sysname)
            for wl, v in sorted(r.items()):
                if isinstance(v, dict) and v.get('error'):
                    notes.append('%s rep %d %s: %s' % (
                        sysname, i + 1, wl, v['error'][:300]))
            if m.get('fsck_clean') is False:
                notes.append('%s rep %d: e2fsck -fn found errors after the '
                             'run' % (sysname, i + 1))
            if m.get('dropped_caches') is False:
                notes.append('%s: caches could not be dropped' % sysname)
            for p in m.get('problems', []):
                notes.append('%s rep %d: %s' % (sysname, i + 1, p))
            if m.get('error'):
                notes.append('%s rep %d aborted: %s' % (sysname, i + 1,
                                                        m['error']))
    for i, a in enumerate(res['aged']):
        if a.get('error'):
            notes.append('aged volume: %s' % a['error'])
        for sysname in agebench.AGED_SYSTEMS:
            for kind, r in sorted((a.get(sysname) or {}).items()):
                what = '%s rep %d, write on a %s volume' % (sysname, i + 1,
                                                          kind)
                if r.get('error'):
                    notes.append('%s: %s' % (what, r['error'][:300]))
                if r.get('fsck_clean') is False:
                    notes.append('%s: e2fsck -fn found errors' % what)
                for p in r.get('problems', []):
                    notes.append('%s: %s' % (what, p))
    for c in res['snapshot_costs']:
        if c.get('fsck_clean_after_delete') is False:
            notes.append('snapshot costs: e2fsck -fn found errors after '
                         'the last snapshot was deleted')
        for p in c.get('problems', []):
            notes.append('snapshot costs: %s' % p)
        for key in ('overwrite_pairs', 'overwrite_pairs_device'):
            for pair in c.get(key) or []:
                for p in pair.get('problems', []):
                    notes.append('snapshot costs, %s overwrite pair: %s' %
                                 (pair.get('image'), p))
    # dedupe, keep order
    seen = set()
    res['meta']['notes'] = [n for n in notes
                            if not (n in seen or seen.add(n))]


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
