"""Images and mounts of the systems under test.

Every mount the benchmark makes is registered in a Tracker; whatever
happens (an exception, Ctrl-C, SIGTERM), Tracker.cleanup() unmounts it,
stops the daemon we started (by its pid, never by name) and detaches the
loop device.  FUSE daemons run in the foreground (-f) in their own
session, so that we know their pid (for /proc/PID/io and VmHWM) and a
Ctrl-C in the terminal reaches only us: we tear down in order.
"""

import os
import signal
import subprocess
import time

SYSTEMS = ('nextfs', 'fuse2fs', 'kernel', 'floor')

# the "FUSE floor": libfuse's passthrough_ll example, as its package ships
# it, compiled at run time (never kept in this repository); it serves a
# kernel ext4 on a loop device, the least work a FUSE daemon can do per
# request
FLOOR_SOURCE_NAME = 'passthrough_ll.c'
FLOOR_SOURCE_DEFAULT = '/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c'


def floor_source():
    """Where libfuse3-dev put passthrough_ll.c (dpkg -L), or None."""
    try:
        p = run(['dpkg', '-L', 'libfuse3-dev'], check=False)
        for line in p.stdout.splitlines():
            if line.endswith('/' + FLOOR_SOURCE_NAME) and \
                    os.path.isfile(line):
                return line
    except OSError:
        pass
    return FLOOR_SOURCE_DEFAULT if os.path.isfile(FLOOR_SOURCE_DEFAULT) \
        else None


def build_floor(workdir):
    """Compile passthrough_ll.c into WORKDIR; (path, None) or (None, why
    not)."""
    src = floor_source()
    if not src:
        return None, ('%s not found (apt-get install libfuse3-dev)' %
                      FLOOR_SOURCE_NAME)
    out = os.path.join(workdir, 'passthrough_ll')
    try:
        flags = run(['pkg-config', '--cflags', '--libs', 'fuse3']).stdout
        # its own directory first: it includes passthrough_helpers.h
        run(['cc', '-O2', '-I', os.path.dirname(src), '-o', out, src] +
            flags.split())
    except (OSError, BenchError) as e:
        return None, 'cannot compile %s: %s' % (src, str(e)[-300:])
    return out, None


class BenchError(Exception):
    pass


def is_root():
    return os.geteuid() == 0


def run(argv, check=True, timeout=None, **kw):
    """Run a helper program, capturing its output."""
    kw.setdefault('stdout', subprocess.PIPE)
    kw.setdefault('stderr', subprocess.PIPE)
    p = subprocess.run(argv, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise BenchError('%s failed (exit %d): %s' %
                         (' '.join(argv), p.returncode,
                          (p.stderr or p.stdout or '').strip()[-500:]))
    return p


# ------------------------------------------------------------ page cache

def drop_caches():
    """Write back and drop the page, dentry and inode caches.

    Returns False when that is impossible (not root, or a container that
    does not allow it); the caller records the fact in the results.
    """
    os.sync()
    try:
        with open('/proc/sys/vm/drop_caches', 'w') as f:
            f.write('3\n')
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- images

def make_image(mkimages, path, size, lazy=False):
    """An empty ext4 image with Debian 12's defaults, the same for all.

    images/mkimages.sh gives an explicit feature set independent of the
    host's mke2fs.conf; -i 16384 restores Debian's inode ratio (the
    script's default is denser, for the tests).  Inode tables and the
    journal are initialised at mkfs time unless LAZY: otherwise the
    kernel's ext4lazyinit thread would zero them in the background
    while the kernel is being measured.
    """
    if os.path.exists(path):
        os.unlink(path)
    with open(path, 'wb') as f:
        f.truncate(size)
    init = '1' if lazy else '0'
    extra = ['-i', '16384', '-E',
             'lazy_itable_init=%s,lazy_journal_init=%s' % (init, init)]
    if mkimages and os.path.exists(mkimages):
        run(['bash', mkimages, 'ext4', path, '%dk' % (size // 1024)] + extra)
    else:
        run(['mke2fs', '-q', '-F', '-t', 'ext4', '-b', '4096'] + extra +
            [path, '%dk' % (size // 1024)])


def fsck(image):
    """(clean, output) of "e2fsck -fn IMAGE"."""
    p = run(['e2fsck', '-fn', image], check=False, timeout=600)
    return p.returncode == 0, (p.stdout + p.stderr).strip()[-2000:]


# ---------------------------------------------------------------- mounts

def _unescape_mountinfo(s):
    # mountinfo escapes space, tab, newline and backslash in octal
    out, i = [], 0
    while i < len(s):
        esc = s[i + 1:i + 4]
        if s[i] == '\\' and len(esc) == 3 and esc.isdigit():
            out.append(chr(int(esc, 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return ''.join(out)


def is_mounted(path):
    """Whether PATH is a mount point (reads mountinfo, never blocks)."""
    path = os.path.realpath(path)
    with open('/proc/self/mountinfo') as f:
        for line in f:
            fields = line.split(' ')
            if len(fields) > 4 and _unescape_mountinfo(fields[4]) == path:
                return True
    return False


def fuse_usable():
    try:
        fd = os.open('/dev/fuse', os.O_RDWR)
        os.close(fd)
        return True
    except OSError:
        return False


class Mount:
    """One mounted image: start() mounts, stop() unmounts and reaps."""

    def __init__(self, system, image, mnt, log_path, fuse_bin=None):
        self.system = system
        self.image = image
        self.mnt = os.path.realpath(mnt)
        # floor: where the kernel ext4 that passthrough_ll serves is
        self.src = self.mnt + '.src' if system == 'floor' else None
        self.src_mounted = False
        self.log_path = log_path
        self.fuse_bin = fuse_bin
        self.proc = None
        self.loopdev = None
        self.exit_status = None
        self.mount_seconds = None
        self.umount_seconds = None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def is_fuse(self):
        return self.system != 'kernel'

    def _daemon_argv(self):
        if self.system == 'nextfs':
            return [self.fuse_bin, '-f', self.image, self.mnt]
        if self.system == 'floor':
            # xattr: answer getxattr as nextfs does; without it the kernel
            # stops asking after the first ENOSYS and the floor would skip
            # the security.capability lookup before every write (about 3
            # requests per file of untar) that a file system with xattrs
            # cannot
            return [self.fuse_bin, '-f', '-o', 'source=%s,xattr' % self.src,
                    self.mnt]
        argv = ['fuse2fs', self.image, self.mnt, '-f']
        if not is_root():
            argv += ['-o', 'fakeroot']
        return argv

    def log_tail(self, n=20):
        try:
            with open(self.log_path, errors='replace') as f:
                return ''.join(f.readlines()[-n:]).strip()
        except OSError:
            return ''

    def start(self, timeout=120):
        os.makedirs(self.mnt, exist_ok=True)
        if is_mounted(self.mnt):
            raise BenchError('%s is already a mount point' % self.mnt)
        t0 = time.perf_counter()
        if self.is_fuse():
            self._start_fuse(timeout)
        else:
            self._start_kernel()
        self.mount_seconds = time.perf_counter() - t0

    def _start_fuse(self, timeout):
        if self.system == 'floor':
            self._start_kernel(self.src)
        log = open(self.log_path, 'ab')
        try:
            self.proc = subprocess.Popen(self._daemon_argv(),
                                         stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log,
                                         start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while not is_mounted(self.mnt):
            if self.proc.poll() is not None:
                self.exit_status = self.proc.returncode
                self.proc = None
                raise BenchError('%s exited with status %d before mounting:'
                                 ' %s' % (self.system, self.exit_status,
                                          self.log_tail()))
            if time.monotonic() > deadline:
                raise BenchError('%s did not mount within %d s' %
                                 (self.system, timeout))
            time.sleep(0.01)

    def _start_kernel(self, where=None):
        p = run(['losetup', '--find', '--show', self.image])
        self.loopdev = p.stdout.strip()
        if where:
            os.makedirs(where, exist_ok=True)
        run(['mount', '-t', 'ext4', self.loopdev, where or self.mnt])
        self.src_mounted = where is not None

    def _stop_src(self, lazy_if_busy=False):
        """floor: unmount the kernel ext4 under the daemon (after it)."""
        if self.src_mounted and is_mounted(self.src):
            run(['umount', self.src], check=False, timeout=120)
            if lazy_if_busy and is_mounted(self.src):
                run(['umount', '-l', self.src], check=False, timeout=30)
        self.src_mounted = False

    def alive(self):
        """False when a FUSE daemon died under us."""
        return not self.is_fuse() or (self.proc is not None and
                                      self.proc.poll() is None)

    def _umount_argv(self, lazy=False):
        if is_root() or not self.is_fuse():
            return ['umount'] + (['-l'] if lazy else []) + [self.mnt]
        return ['fusermount3', '-u'] + (['-z'] if lazy else []) + [self.mnt]

    def stop(self, timeout=600):
        """Unmount; for FUSE also wait until the daemon wrote everything
        back and exited (a plain FUSE unmount returns before that).
        Returns a list of problems (empty when all went well)."""
        problems = []
        t0 = time.perf_counter()
        if is_mounted(self.mnt):
            for _ in range(50):
                if run(self._umount_argv(), check=False).returncode == 0:
                    break
                time.sleep(0.1)       # EBUSY right after a child exited
            else:
                problems.append('unmount failed; detached lazily')
                run(self._umount_argv(lazy=True), check=False)
        if self.proc is not None:
            try:
                self.exit_status = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                problems.append('daemon did not exit; killed')
                self.kill()
            else:
                if self.exit_status != 0:
                    problems.append('daemon exited with status %s: %s' %
                                    (self.exit_status, self.log_tail(5)))
            self.proc = None
        self._stop_src()
        if self.loopdev:
            run(['losetup', '-d', self.loopdev], check=False)
            self.loopdev = None
        self.umount_seconds = time.perf_counter() - t0
        return problems

    def kill(self):
        """Last resort: our daemon, by pid."""
        if self.proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                self.proc.send_signal(sig)
                self.exit_status = self.proc.wait(5)
                break
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                break
        self.proc = None

    def abort(self):
        """Tear down after an error: lazy unmount, kill, detach."""
        if is_mounted(self.mnt):
            run(self._umount_argv(), check=False, timeout=30)
        if is_mounted(self.mnt):
            run(self._umount_argv(lazy=True), check=False, timeout=30)
        if self.proc is not None:
            try:
                self.exit_status = self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
            self.proc = None
        self._stop_src(lazy_if_busy=True)
        if self.loopdev:
            run(['losetup', '-d', self.loopdev], check=False, timeout=30)
            self.loopdev = None


class Tracker:
    """Every live mount, for cleanup on any exit path."""

    def __init__(self):
        self.mounts = []

    def mount(self, system, image, mnt, log_path, fuse_bin=None,
              timeout=120):
        m = Mount(system, image, mnt, log_path, fuse_bin)
        self.mounts.append(m)
        try:
            m.start(timeout)
        except BaseException:
            self.mounts.remove(m)
            m.abort()
            raise
        return m

    def unmount(self, m):
        try:
            return m.stop()
        finally:
            if m in self.mounts:
                self.mounts.remove(m)

    def abort(self, m):
        try:
            m.abort()
        finally:
            if m in self.mounts:
                self.mounts.remove(m)

    def cleanup(self):
        # a second Ctrl-C must not leave mounts behind half torn down
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while self.mounts:
            m = self.mounts.pop()
            try:
                m.abort()
            except Exception as e:          # keep cleaning up the rest
                print('cleanup of %s failed: %s' % (m.mnt, e))


def install_signal_handlers():
    """SIGTERM and SIGHUP unwind like Ctrl-C, through every finally."""
    def handler(signum, frame):
        raise KeyboardInterrupt('signal %d' % signum)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


def loop_usable(workdir, mkimages):
    """Whether a kernel loop mount works here (None) or why not (str)."""
    if not is_root():
        return 'not root'
    img = os.path.join(workdir, 'loopcheck.img')
    mnt = os.path.join(workdir, 'loopcheck.mnt')
    m = None
    try:
        make_image(mkimages, img, 16 << 20)
        m = Mount('kernel', img, mnt, os.devnull)
        m.start()
        return None
    except (BenchError, OSError, subprocess.SubprocessError) as e:
        return str(e)
    finally:
        if m is not None:
            m.abort()
        for p in (img,):
            if os.path.exists(p):
                os.unlink(p)
        if os.path.isdir(mnt):
            os.rmdir(mnt)


def proc_io(pid):
    """The daemon's /proc/PID/io counters (all threads) as a dict."""
    out = {}
    with open('/proc/%d/io' % pid) as f:
        for line in f:
            k, v = line.split(':')
            out[k.strip()] = int(v)
    return out


def proc_cpu_seconds(pid):
    """User + system CPU seconds of process PID (all its threads, those
    that exited included), or None."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            fields = f.read().rsplit(')', 1)[1].split()
    except (OSError, IndexError):
        return None
    # utime and stime: fields 14 and 15 of stat(5), 12 and 13 after ')'
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def proc_status_kib(pid, field):
    """A "kB" field of /proc/PID/status (VmHWM, VmRSS), in KiB."""
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    return None
