"""nxharness - shared machinery for the nextfs integration tests.

Every test makes an image with images/mkimages.sh, mounts it with the
daemon in foreground mode, runs its checks through the kernel's FUSE
client, unmounts, and runs "e2fsck -fn" on the image.  A test fails if the
checker finds anything, if the daemon dies or exits non-zero, or if the
mount has to be torn down lazily.

Environment (all optional; meson sets the first two):
  NEXTFS_FUSE       path of the nextfs-fuse executable
  NEXTFS_MKIMAGES   path of images/mkimages.sh
  NEXTFS_FUSE_CMD   mount with something else, to check the tests
                    themselves:  "fuse2fs" (Debian's fuse2fs), "kernel"
                    (loop mount with the kernel's ext4 driver), or a
                    command template with {daemon} {image} {mnt} and the
                    token {opts} (expands to "-o a,b" or to nothing)
  NEXTFS_TEST_TMPDIR  where images and mount points go (default: $TMPDIR
                    or /tmp)
  NEXTFS_KEEP_FAILED  "1": keep the image of a failed fsck and print its path

Sanitizer builds (build-san/ of tests/run-suite.sh, meson
-Db_sanitize=address,undefined): the daemon and the nextfs tool inherit
ASAN_OPTIONS/UBSAN_OPTIONS from meson and print their reports on stderr.  The daemon's stderr is its log
(daemon.log in the work directory); every report in it - also from a
daemon the test killed on purpose, also a leak report at exit - fails the
test, and so does a report in the output of any command run().
"""

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import os
import pickle
import random
import re
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRCROOT = os.path.dirname(os.path.dirname(HERE))

FLAVOURS = ('ext2', 'ext3', 'ext4', 'ext4-inline')
BLOCK_SIZE = {'ext2': 1024, 'ext3': 4096, 'ext4': 4096, 'ext4-inline': 4096}
HAS_EXTENTS = {'ext2': False, 'ext3': False, 'ext4': True,
               'ext4-inline': True}
SKIP_EXIT = 77          # meson's "skipped" exit status

NOBODY_UID = 65534
NOGROUP_GID = 65534


# ---------------------------------------------------------------- tools

def tool(env, name, *fallbacks):
    """Path of a helper program: $ENV, then PATH, then FALLBACKS."""
    if os.environ.get(env):
        return os.environ[env]
    found = shutil.which(name)
    if found:
        return found
    for f in fallbacks:
        if os.access(f, os.X_OK):
            return f
    return name


E2FSCK = tool('E2FSCK', 'e2fsck', '/sbin/e2fsck', '/usr/sbin/e2fsck')
DEBUGFS = tool('DEBUGFS', 'debugfs', '/sbin/debugfs', '/usr/sbin/debugfs')
FUSERMOUNT = tool('FUSERMOUNT', 'fusermount3', '/bin/fusermount3')


def mkimages_path():
    return os.environ.get('NEXTFS_MKIMAGES') or \
        os.path.join(SRCROOT, 'images', 'mkimages.sh')


def daemon_path():
    return os.environ.get('NEXTFS_FUSE') or \
        os.path.join(SRCROOT, 'build', 'src', 'fuse', 'nextfs-fuse')


def tool_path():
    """The nextfs tool: $NEXTFS, else the build's."""
    return os.environ.get('NEXTFS') or \
        os.path.join(SRCROOT, 'build', 'src', 'cli', 'nextfs')


def backend():
    """'nextfs', 'fuse2fs', 'kernel' or 'custom'."""
    cmd = os.environ.get('NEXTFS_FUSE_CMD', '').strip()
    if not cmd:
        return 'nextfs'
    if cmd in ('fuse2fs', 'kernel'):
        return cmd
    return 'custom'


def is_fuse_backend():
    return backend() != 'kernel'


def tmp_root():
    return os.environ.get('NEXTFS_TEST_TMPDIR') or tempfile.gettempdir()


# First line of an ASan/LSan/UBSan report (and of ASan's internal
# failures); the UBSan line is "FILE:LINE:COL: runtime error: ...".
SANITIZER_REPORT = re.compile(
    r'^(==\d+==ERROR: \w*Sanitizer|==\d+==\w*Sanitizer CHECK failed'
    r'|.*: runtime error: |SUMMARY: \w*Sanitizer)', re.M)


def sanitizer_report(text, lines=80):
    """The sanitizer report(s) in TEXT (from the first one on), or None."""
    if not text:
        return None
    m = SANITIZER_REPORT.search(text)
    if not m:
        return None
    start = text.rfind('\n', 0, m.start()) + 1
    return tail_head(text[start:], lines)


def tail_head(text, lines):
    t = text.splitlines()
    if len(t) > lines:
        t = t[:lines] + ['... (%d lines cut)' % (len(t) - lines)]
    return '\n'.join(t)


def run(argv, check=True, **kw):
    """subprocess.run with captured text output; raises with the output.

    A sanitizer report in the output raises even with CHECK false.
    """
    kw.setdefault('stdout', subprocess.PIPE)
    kw.setdefault('stderr', subprocess.STDOUT)
    kw.setdefault('stdin', subprocess.DEVNULL)
    p = subprocess.run(argv, text=True, errors='replace', **kw)
    for out in (p.stdout, p.stderr):
        rep = sanitizer_report(out if isinstance(out, str) else None)
        if rep:
            raise AssertionError('%s: sanitizer report:\n%s' %
                                 (' '.join(map(shlex.quote, argv)), rep))
    if check and p.returncode != 0:
        raise AssertionError('%s failed with status %d:\n%s' %
                             (' '.join(map(shlex.quote, argv)), p.returncode,
                              p.stdout))
    return p


def as_user_argv(uid, gid):
    """Prefix that runs a command as uid/gid with no supplementary groups."""
    return ['setpriv', '--reuid=%d' % uid, '--regid=%d' % gid,
            '--clear-groups']


# ---------------------------------------------------------------- images

def make_image(path, flavour, size='64M', extra=()):
    """Make an image of FLAVOUR with images/mkimages.sh."""
    run(['bash', mkimages_path(), flavour, path, str(size)] + list(extra))
    return path


def fsck(image):
    """Run e2fsck -fn; returns (exit status, output)."""
    p = run([E2FSCK, '-fn', image], check=False)
    return p.returncode, p.stdout


def volume_locked(path):
    """Does someone hold the volume lock of PATH (nextfs's flock)?"""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def needs_recovery(image):
    """Is the journal of IMAGE waiting to be replayed?"""
    out = run([DEBUGFS, '-R', 'features', image], check=False).stdout
    return 'needs_recovery' in out


def fill_volume(path, files=100, mib=4):
    """Many small files and a big one: something to write back."""
    os.mkdir(os.path.join(path, 'many'))
    for i in range(files):
        write_file(os.path.join(path, 'many', 'f%d' % i), b'%d\n' % i)
    write_file(os.path.join(path, 'big'), pattern(mib << 20))


def debugfs(image, request):
    """Output of a read-only debugfs request on IMAGE."""
    p = run([DEBUGFS, '-R', request, image], check=False,
            stderr=subprocess.DEVNULL)
    return p.stdout


def debugfs_cat(image, path):
    """Content of PATH in IMAGE, read with debugfs (no mount involved)."""
    p = subprocess.run([DEBUGFS, '-R', 'cat "%s"' % path, image],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       stdin=subprocess.DEVNULL)
    # debugfs prints all 60 bytes of i_block for inline data: cut to size
    size = re.search(r'\bSize: (\d+)', debugfs(image, 'stat "%s"' % path))
    return p.stdout[:int(size.group(1))] if size else p.stdout


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


# ---------------------------------------------------------------- mounts

def mounted_paths():
    """Mount points currently in /proc/self/mountinfo (never blocks)."""
    out = set()
    with open('/proc/self/mountinfo') as f:
        for line in f:
            mp = line.split()[4]
            # mountinfo escapes space, tab, newline and backslash in octal
            mp = mp.encode().decode('unicode_escape')
            out.add(mp)
    return out


def is_mounted(path):
    return os.path.realpath(path) in mounted_paths()


def fuse_unusable_reason():
    """None if /dev/fuse can be opened read-write, else why not."""
    if not os.path.exists('/dev/fuse'):
        return '/dev/fuse does not exist'
    try:
        fd = os.open('/dev/fuse', os.O_RDWR)
    except OSError as e:
        return 'cannot open /dev/fuse: %s' % e
    os.close(fd)
    return None


class Mount:
    """One mounted image.  Use through mounted(); .path is the mount point."""

    def __init__(self, image, path, log_path, user=None):
        self.image = image
        self.path = path
        self.log_path = log_path
        self.user = user        # (uid, gid) for an unprivileged mount
        self.proc = None
        self.killed = False     # daemon killed on purpose by the test
        self.expect_status = 0  # the daemon's exit status the test wants
        self.log_start = 0      # this daemon's part of the (shared) log

    def p(self, *parts):
        """Path inside the mount."""
        return os.path.join(self.path, *parts)

    def log_tail(self, lines=40):
        try:
            with open(self.log_path, errors='replace') as f:
                text = f.readlines()
        except OSError:
            return ''
        return ''.join(text[-lines:])

    def log_text(self):
        """What this daemon wrote to the log."""
        try:
            with open(self.log_path, 'rb') as f:
                f.seek(self.log_start)
                return f.read().decode(errors='replace')
        except OSError:
            return ''

    def check_sanitizer(self, problems):
        """A sanitizer report in the daemon's log is a failure."""
        rep = sanitizer_report(self.log_text())
        if rep:
            problems.append('sanitizer report in the daemon log %s:\n%s' %
                            (self.log_path, rep))

    # -- start

    def _fuse_argv(self, opts):
        cmd = os.environ.get('NEXTFS_FUSE_CMD', '').strip()
        if not cmd:
            tmpl = ['{daemon}', '-f', '{opts}', '{image}', '{mnt}']
        elif cmd == 'fuse2fs':
            tmpl = ['fuse2fs', '{image}', '{mnt}', '-f', '-o',
                    'fakeroot,default_permissions', '{opts}']
        else:
            tmpl = shlex.split(cmd)
        argv = []
        for t in tmpl:
            if t == '{opts}':
                if opts:
                    argv += ['-o', ','.join(opts)]
                continue
            argv.append(t.format(daemon=daemon_path(), image=self.image,
                                 mnt=self.path))
        if self.user:
            argv = as_user_argv(*self.user) + argv
        return argv

    def start(self, opts=(), timeout=20):
        opts = list(opts)
        if backend() == 'kernel':
            kopts = ['loop'] + [o for o in opts if o in ('ro', 'rw')]
            run(['mount', '-t', 'ext4', '-o', ','.join(kopts), self.image,
                 self.path])
            return
        if os.geteuid() == 0 and not self.user and 'allow_other' not in opts:
            # Tests act as other users through child processes.
            opts.append('allow_other')
        argv = self._fuse_argv(opts)
        with open(self.log_path, 'ab') as log:
            self.log_start = log.tell()
            log.write(('$ %s\n' % ' '.join(map(shlex.quote, argv))).encode())
            log.flush()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while not is_mounted(self.path):
            if self.proc.poll() is not None:
                raise AssertionError(
                    'daemon exited with status %d before mounting:\n%s' %
                    (self.proc.returncode, self.log_tail()))
            if time.monotonic() > deadline:
                raise AssertionError('mount did not appear within %d s:\n%s'
                                     % (timeout, self.log_tail()))
            time.sleep(0.02)
        if not self.user:
            os.stat(self.path)      # waits for FUSE_INIT to be answered

    # -- stop

    def _umount_argv(self, lazy):
        if backend() == 'kernel':
            return ['umount'] + (['-l'] if lazy else []) + [self.path]
        if backend() == 'nextfs' and not lazy:
            # Returns once the daemon has written everything back and
            # released the image (P11), or fails saying why not.
            argv = [tool_path(), 'umount', self.path]
        else:
            argv = [FUSERMOUNT, '-u'] + (['-z'] if lazy else []) + \
                [self.path]
        if self.user:
            argv = as_user_argv(*self.user) + argv
        return argv

    def unmount(self, problems):
        """Unmount, retrying while busy; True if it had to be lazy.

        With nextfs the unmount is "nextfs umount": when it returns the
        image must be complete and free.  Its failure other than "busy"
        (exit status 3: the daemon reported an error or died) is a
        problem, unless the test killed the daemon.
        """
        if not is_mounted(self.path):
            return False
        for _ in range(50):
            p = run(self._umount_argv(False), check=False)
            if not is_mounted(self.path):
                if p.returncode != 0 and not self.killed:
                    problems.append('%s exited with status %d:\n%s' %
                                    (' '.join(self._umount_argv(False)),
                                     p.returncode, p.stdout))
                return False
            time.sleep(0.1)
        problems.append('mount still busy after 5 s of retries; '
                        'lazy unmount')
        run(self._umount_argv(True), check=False)
        return True

    def check_released(self, problems):
        """Right after the unmount returned: nothing holds the image."""
        if backend() != 'nextfs' or self.proc is None:
            return
        fd = os.open(self.image, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            problems.append('the image is still locked by the daemon '
                            'when the unmount has returned')
        finally:
            os.close(fd)

    def stop_daemon(self, problems, timeout=60):
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            problems.append('daemon still running %d s after unmount; '
                            'killed' % timeout)
            self.kill()
        rc = self.proc.returncode
        if rc != self.expect_status and not self.killed:
            problems.append('daemon exited with status %d (%s)\n%s' %
                            (rc, ('signal %d' % -rc) if rc < 0 else 'error',
                             self.log_tail()))

    def kill(self, sig=signal.SIGKILL):
        """Kill the daemon (crash simulation); the mount stays until stop."""
        if self.proc is None:
            raise unittest.SkipTest('no daemon process with this backend')
        self.killed = True
        try:
            self.proc.send_signal(sig)
        except ProcessLookupError:
            pass
        self.proc.wait()


def close_fds_below(path):
    """Detach this process's descriptors that point into PATH.

    Each one is replaced by /dev/null rather than closed, so that whatever
    object still owns the number later closes /dev/null, not a reused fd.
    """
    prefix = os.path.realpath(path) + '/'
    null = None
    for fd in os.listdir('/proc/self/fd'):
        try:
            target = os.readlink('/proc/self/fd/' + fd)
        except OSError:
            continue
        if target == prefix[:-1] or target.startswith(prefix):
            if null is None:
                null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, int(fd))
    if null is not None:
        os.close(null)


@contextlib.contextmanager
def environment(**kw):
    """Set environment variables for the duration (None: unset); the
    daemons started meanwhile inherit them."""
    def apply(values):
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    saved = {k: os.environ.get(k) for k in kw}
    try:
        apply(kw)
        yield
    finally:
        apply(saved)


@contextlib.contextmanager
def mounted(image, opts=(), user=None, check=True, workdir=None,
            timeout=20):
    """Mount IMAGE; yield a Mount; unmount, reap the daemon, fsck.

    USER: (uid, gid) to mount as that user through setpriv (unprivileged
    mount).  CHECK: run e2fsck -fn afterwards and fail on any problem.
    """
    workdir = workdir or os.path.dirname(os.path.abspath(image))
    mnt = tempfile.mkdtemp(prefix='mnt.', dir=workdir)
    os.chmod(mnt, 0o755)
    if user:
        os.chown(mnt, *user)
    m = Mount(os.path.abspath(image), mnt,
              os.path.join(workdir, 'daemon.log'), user)
    problems = []
    try:
        m.start(opts, timeout)
        yield m
    finally:
        # A failed assertion can leave descriptors open; they would keep
        # the mount busy and turn the real failure into an unmount mess.
        close_fds_below(mnt)
        was_mounted = is_mounted(mnt)
        lazy = m.unmount(problems)
        # At once, before the daemon is reaped: the unmount must have
        # waited for everything to be written and released (P11).
        if was_mounted and not lazy and not m.killed:
            m.check_released(problems)
        if check:
            fsck_problem(m.image, problems)
        if m.proc is not None:
            if not was_mounted and m.proc.poll() is None:
                m.kill()            # never mounted: start() has failed
            else:
                m.stop_daemon(problems, 10 if lazy else 60)
            m.check_sanitizer(problems)
        try:
            os.rmdir(mnt)
        except OSError:
            pass
        if problems:
            raise AssertionError('\n'.join(problems))


def fsck_problem(image, problems):
    """e2fsck -fn IMAGE; any finding goes to PROBLEMS."""
    rc, out = fsck(image)
    if rc != 0:
        kept = ''
        if os.environ.get('NEXTFS_KEEP_FAILED') == '1':
            kept = tempfile.mktemp(prefix='nextfs-failed-', suffix='.img',
                                   dir=tmp_root())
            shutil.copyfile(image, kept)
            kept = '\n(image kept as %s)' % kept
        problems.append('e2fsck -fn %s: exit status %d%s\n%s' %
                        (image, rc, kept, tail(out, 60)))


def doc_block(doc, marker):
    """The fenced block between "<!-- MARKER-begin -->" and the end of
    the block in the file DOC: a configuration the docs give and a test
    serves, so that the documented one is the tested one."""
    with open(doc) as f:
        text = f.read()
    m = re.search(r'<!-- %s-begin -->\s*```\w*\n(.*?)```' % re.escape(marker),
                  text, re.S)
    if not m:
        raise AssertionError('%s: no block after <!-- %s-begin -->' %
                             (doc, marker))
    return m.group(1)


def free_port():
    """A TCP port of 127.0.0.1 that nothing listens on (for a server
    of our own: smbd, ganesha.nfsd)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def tail(text, lines):
    t = text.splitlines()
    if len(t) > lines:
        t = ['... (%d lines cut)' % (len(t) - lines)] + t[-lines:]
    return '\n'.join(t)


# ------------------------------------------------------ other credentials

def run_as(uid, gid, fn, *args, groups=(), umask=None):
    """Call FN(*ARGS) in a forked child running as uid/gid/groups.

    Returns what FN returned (must be picklable); an OSError in the child
    is raised again here with the same errno, any other exception becomes
    an AssertionError carrying the child's traceback.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            try:
                os.setgroups(list(groups))
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
                if umask is not None:
                    os.umask(umask)
                res = ('ok', fn(*args))
            except OSError as e:
                res = ('oserror', e.errno, e.strerror, e.filename)
            except BaseException:
                res = ('exception', traceback.format_exc())
            data = pickle.dumps(res)
            while data:
                n = os.write(w, data)
                data = data[n:]
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    os.waitpid(pid, 0)
    if not chunks:
        raise AssertionError('child as uid %d died without a result' % uid)
    res = pickle.loads(b''.join(chunks))
    if res[0] == 'ok':
        return res[1]
    if res[0] == 'oserror':
        if res[3] is None:
            raise OSError(res[1], res[2])
        raise OSError(res[1], res[2], res[3])
    raise AssertionError('child as uid %d raised:\n%s' % (uid, res[1]))


# ------------------------------------------------------ libc extras

libc = ctypes.CDLL(None, use_errno=True)

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2

FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602
FS_IMMUTABLE_FL = 0x00000010
FS_APPEND_FL = 0x00000020
FS_EXTENT_FL = 0x00080000
FS_INLINE_DATA_FL = 0x10000000

_SYS_RENAMEAT2 = {'x86_64': 316, 'aarch64': 276, 'i686': 353,
                  'armv7l': 382, 'ppc64le': 357, 's390x': 347,
                  'riscv64': 276}


def _raise_errno(what):
    e = ctypes.get_errno()
    raise OSError(e, '%s: %s' % (what, os.strerror(e)))


def fallocate(fd, mode, offset, length):
    f = libc.fallocate
    f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                  ctypes.c_int64]
    if f(fd, mode, offset, length) != 0:
        _raise_errno('fallocate')


def renameat2(old, new, flags=0):
    o, n = os.fsencode(old), os.fsencode(new)
    if hasattr(libc, 'renameat2'):
        f = libc.renameat2
        f.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                      ctypes.c_char_p, ctypes.c_uint]
        rc = f(AT_FDCWD, o, AT_FDCWD, n, flags)
    else:
        nr = _SYS_RENAMEAT2[os.uname().machine]
        rc = libc.syscall(ctypes.c_long(nr), ctypes.c_int(AT_FDCWD), o,
                          ctypes.c_int(AT_FDCWD), n, ctypes.c_uint(flags))
    if rc != 0:
        _raise_errno('renameat2')


class _Timespec(ctypes.Structure):
    _fields_ = [('tv_sec', ctypes.c_long), ('tv_nsec', ctypes.c_long)]


def utimensat(path, atime, mtime, nofollow=False):
    """ATIME/MTIME: (sec, nsec), or UTIME_NOW / UTIME_OMIT."""
    def ts(t):
        if t in (UTIME_NOW, UTIME_OMIT):
            return _Timespec(0, t)
        return _Timespec(t[0], t[1])
    times = (_Timespec * 2)(ts(atime), ts(mtime))
    f = libc.utimensat
    f.argtypes = [ctypes.c_int, ctypes.c_char_p,
                  ctypes.POINTER(_Timespec), ctypes.c_int]
    if f(AT_FDCWD, os.fsencode(path), times,
         AT_SYMLINK_NOFOLLOW if nofollow else 0) != 0:
        _raise_errno('utimensat')


def get_inode_flags(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        buf = fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack('l', 0))
        return struct.unpack('l', buf)[0]
    finally:
        os.close(fd)


def set_inode_flags(path, flags):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack('l', flags))
    finally:
        os.close(fd)


# NX_IOC_GET_OPSTATS (include/nextfs/nxioctl.h): _IOR('N', 0xE4, 4096 bytes)
NX_OPSTATS_SIZE = 4096
NX_IOC_GET_OPSTATS = (2 << 30) | (NX_OPSTATS_SIZE << 16) | (ord('N') << 8) | 0xE4


def opstats(path):
    """The daemon's request counters: {operation: count} (its own
    NX_IOC_GET_OPSTATS request is counted too)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        buf = bytearray(NX_OPSTATS_SIZE)
        fcntl.ioctl(fd, NX_IOC_GET_OPSTATS, buf, True)
    finally:
        os.close(fd)
    return {name: int(n) for name, n in
            (line.split() for line in
             buf.rstrip(b'\0').decode().splitlines())}


def wait_statfs(path, ready, timeout=5.0):
    """Poll statvfs(PATH) until READY(result) holds; return the result.

    Space and inodes of unlinked files come back when the kernel drops its
    last reference (FUSE sends FORGET asynchronously), so a test that
    depends on the space being free again waits for it here, a bounded
    time, instead of racing.
    """
    deadline = time.monotonic() + timeout
    while True:
        st = os.statvfs(path)
        if ready(st) or time.monotonic() > deadline:
            return st
        time.sleep(0.05)


def pattern(n, seed=0):
    """N bytes of reproducible, incompressible-looking data."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(b'%d:%d' % (seed, i)).digest()
        i += 1
    return bytes(out[:n])


def write_file(path, data, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)


def read_file(path):
    with open(path, 'rb') as f:
        return f.read()


# ------------------------------------------------------ tree comparison

def _xattrs(path):
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EPERM):
            return {}
        raise
    out = {}
    for n in sorted(names):
        try:
            out[n] = os.getxattr(path, n, follow_symlinks=False)
        except OSError as e:
            out[n] = 'error %s' % errno.errorcode.get(e.errno, e.errno)
    return out


def tree_state(root, times=True, nlink=False, skip_top=('lost+found',)):
    """Describe every entry below ROOT for comparison.

    Returns {relpath: {property: value}} plus the key '//links' holding the
    hard-link grouping (sorted tuple of sorted name tuples).  Directory
    sizes (layout dependent) and atimes are left out.
    """
    state = {}
    by_inode = {}

    def add(rel, path):
        st = os.lstat(path)
        fmt = stat.S_IFMT(st.st_mode)
        rec = {'mode': oct(st.st_mode), 'uid': st.st_uid, 'gid': st.st_gid}
        if times:
            rec['mtime_ns'] = st.st_mtime_ns
        if nlink or fmt == stat.S_IFDIR:
            rec['nlink'] = st.st_nlink
        if fmt == stat.S_IFREG:
            rec['size'] = st.st_size
            rec['sha256'] = sha256_file(path)
        elif fmt == stat.S_IFLNK:
            rec['target'] = os.readlink(path)
        elif fmt in (stat.S_IFCHR, stat.S_IFBLK):
            rec['rdev'] = (os.major(st.st_rdev), os.minor(st.st_rdev))
        rec['xattrs'] = _xattrs(path)
        if fmt != stat.S_IFDIR and st.st_nlink > 1:
            by_inode.setdefault(st.st_ino, []).append(rel)
        state[rel] = rec

    add('.', root)
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == '.':
            dirnames[:] = [d for d in dirnames if d not in skip_top]
            filenames = [f for f in filenames if f not in skip_top]
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            add(rel, os.path.join(dirpath, name))
    state['//links'] = tuple(sorted(tuple(sorted(v))
                                    for v in by_inode.values()
                                    if len(v) > 1))
    return state


def diff_trees(a, b, limit=25):
    """Human-readable differences between two tree_state() results."""
    out = []
    for rel in sorted(set(a) | set(b)):
        if rel not in b:
            out.append('only in first: %s' % rel)
        elif rel not in a:
            out.append('only in second: %s' % rel)
        elif a[rel] != b[rel]:
            if rel == '//links':
                out.append('hard link groups differ:\n  %r\n  %r' %
                           (a[rel], b[rel]))
                continue
            for k in sorted(set(a[rel]) | set(b[rel])):
                va, vb = a[rel].get(k), b[rel].get(k)
                if va != vb:
                    out.append('%s: %s %r != %r' % (rel, k, va, vb))
        if len(out) >= limit:
            out.append('...')
            break
    return out


# ------------------------------------------------------ test case base

class NxTestCase(unittest.TestCase):
    """Base class: per-test work directory, image and mount helpers."""

    flavour = 'ext4'            # set by main() from --flavour

    @property
    def bsize(self):
        return BLOCK_SIZE[self.flavour]

    @property
    def extents(self):
        return HAS_EXTENTS[self.flavour]

    def seed(self):
        """A random seed, or NEXTFS_SEED; printed so a failure repeats."""
        s = os.environ.get('NEXTFS_SEED')
        seed = int(s) if s else random.randrange(1 << 30)
        print('seed %d (NEXTFS_SEED to repeat)' % seed)
        return seed

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix='nxtest.', dir=tmp_root())
        # Other users (permission tests, unprivileged mounts) must be able
        # to reach the mount points below it.
        os.chmod(self.work, 0o755)
        self.addCleanup(shutil.rmtree, self.work, True)

    def make_image(self, size='64M', extra=(), name='fs.img', flavour=None):
        return make_image(os.path.join(self.work, name),
                          flavour or self.flavour, size, extra)

    def make_user_image(self, uid, gid, size='64M'):
        """(image, directory): an image the user owns, its root directory
        theirs, in a directory of theirs (the workdir of their mount)."""
        udir = os.path.join(self.work, 'user%d' % uid)
        os.mkdir(udir, 0o755)
        os.chown(udir, uid, gid)
        img = self.make_image(size, name=os.path.join(udir, 'fs.img'),
                              extra=['-E', 'root_owner=%d:%d' % (uid, gid)])
        os.chown(img, uid, gid)
        return img, udir

    def mounted(self, image, **kw):
        kw.setdefault('workdir', self.work)
        return mounted(image, **kw)

    def mount_new(self, size='64M', extra=(), **kw):
        """Context manager: new image of this flavour, mounted."""
        return self.mounted(self.make_image(size, extra), **kw)

    def need_root(self):
        if os.geteuid() != 0:
            self.skipTest('needs root')

    def need_fuse_daemon(self):
        if not is_fuse_backend():
            self.skipTest('needs a FUSE daemon (not the kernel backend)')

    def assertErrno(self, err, fn, *args, **kw):
        """FN(*ARGS) must fail with errno ERR."""
        try:
            fn(*args, **kw)
        except OSError as e:
            if e.errno != err:
                self.fail('%s%r: expected %s, got %s (%s)' %
                          (getattr(fn, '__name__', fn), args,
                           errno.errorcode[err],
                           errno.errorcode.get(e.errno, e.errno), e))
            return
        self.fail('%s%r: expected %s, but it succeeded' %
                  (getattr(fn, '__name__', fn), args, errno.errorcode[err]))

    def assertTreesEqual(self, a, b, what=''):
        d = diff_trees(a, b)
        if d:
            self.fail('trees differ%s:\n  %s' %
                      ((' (' + what + ')') if what else '', '\n  '.join(d)))


# ------------------------------------------------------ entry point

def _sigterm(signum, frame):
    # meson sends SIGTERM on timeout: unwind so that mounts are cleaned up.
    raise SystemExit('terminated by signal %d' % signum)


def main(require_fuse=True):
    """Run the calling script's tests for --flavour FLAVOUR."""
    args = sys.argv[1:]
    flavour = os.environ.get('NEXTFS_FLAVOUR', 'ext4')
    if '--flavour' in args:
        i = args.index('--flavour')
        flavour = args[i + 1]
        del args[i:i + 2]
    if flavour not in FLAVOURS:
        print('unknown flavour %r (one of %s)' % (flavour,
              ', '.join(FLAVOURS)), file=sys.stderr)
        sys.exit(2)
    signal.signal(signal.SIGTERM, _sigterm)
    os.umask(0o022)
    NxTestCase.flavour = flavour
    print('flavour %s, backend %s%s' %
          (flavour, backend(),
           (', daemon ' + daemon_path()) if backend() == 'nextfs' else ''),
          file=sys.stderr)
    if require_fuse and is_fuse_backend():
        why = fuse_unusable_reason()
        if why:
            print('SKIP: %s; FUSE mounts are impossible here' % why,
                  file=sys.stderr)
            sys.exit(SKIP_EXIT)
        if backend() == 'nextfs' and not os.access(daemon_path(), os.X_OK):
            print('FAIL: daemon %s does not exist or is not executable '
                  '(set NEXTFS_FUSE)' % daemon_path(), file=sys.stderr)
            sys.exit(1)
    prog = unittest.main(module='__main__', argv=[sys.argv[0]] + args,
                         exit=False, verbosity=2)
    res = prog.result
    if not res.wasSuccessful():
        sys.exit(1)
    if res.testsRun and len(res.skipped) == res.testsRun:
        sys.exit(SKIP_EXIT)
    sys.exit(0)
