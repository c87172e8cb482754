#!/usr/bin/env python3
"""Bash completion (completion/nextfs.bash) for nextfs and nextfs-fuse,
and the command table of nextfs it reads.

Each case runs a fresh "bash --norc" that sources the completion file,
sets COMP_WORDS/COMP_CWORD/COMP_LINE/COMP_POINT as bash would for a
command line, calls the completion function and prints COMPREPLY
NUL-separated.  Cases run once with the completion alone and once with
the bash-completion package loaded first (if installed), which is how
bash-completion's loader uses it.  Snapshot names come from images and
from a live mount, and include names the shell must quote.

The command table (src/cli/nextfs.c, printed by the hidden "nextfs
__commands") is what "nextfs --help", every "--help", the parser and the
completion come from; TableTest checks that the man page names the same
commands and the usage lines the same options, and that every command
treats a wrong command line alike.
"""

import os
import re
import shlex
import shutil
import subprocess
import unittest

import nxharness as nx

COMPLETION = os.path.join(nx.SRCROOT, 'completion', 'nextfs.bash')
BASH_COMPLETION = '/usr/share/bash-completion/bash_completion'

# Names the completion must hand back exactly (quoted for the shell).
ODD_NAMES = ['monday', 'my snap', 'tab\there', "a'b=c", 'm\u00e4rz',
             '-dash']


def bash_quote(s):
    return shlex.quote(s)


class CompletionTest(nx.NxTestCase):

    with_bash_completion = False

    def setUp(self):
        super().setUp()
        if not shutil.which('bash'):
            self.skipTest('no bash')
        self.nextfs = os.path.abspath(nx.tool_path())
        self.fuse = os.path.abspath(nx.daemon_path())

    def complete(self, func, words, line=None):
        """COMPREPLY of FUNC for the command line WORDS (cursor at its
        end; the last word is the one being completed)."""
        if line is None:
            line = ' '.join(words)
        script = []
        if self.with_bash_completion:
            script.append('source %s' % BASH_COMPLETION)
        script += [
            'source %s' % bash_quote(COMPLETION),
            'COMP_WORDS=(%s)' % ' '.join(bash_quote(w) for w in words),
            'COMP_CWORD=%d' % (len(words) - 1),
            'COMP_LINE=%s' % bash_quote(line),
            'COMP_POINT=${#COMP_LINE}',
            'COMPREPLY=()',
            '%s 2>/dev/null' % func,
            "printf '%s\\0' \"${COMPREPLY[@]}\"",
        ]
        p = subprocess.run(['bash', '--norc', '--noprofile', '-c',
                            '\n'.join(script)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, cwd=self.work)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors='replace'))
        out = p.stdout.decode('utf-8', 'surrogateescape')
        return [w for w in out.split('\0')[:-1] if w]

    def nx(self, *words, line=None):
        return self.complete('_nextfs', [self.nextfs] + list(words), line)

    def fuse_opts(self, *words, line=None):
        return self.complete('_nextfs_fuse', [self.fuse] + list(words), line)

    def shell_words(self, replies):
        """What bash reads back from each (quoted) reply."""
        out = []
        for r in replies:
            p = subprocess.run(['bash', '--norc', '-c',
                                'printf "%%s\\0" %s' % r],
                               stdout=subprocess.PIPE, check=True)
            out.append(p.stdout.decode('utf-8', 'surrogateescape')[:-1])
        return out

    def image_with_snapshots(self, names):
        img = self.make_image(size='16M', flavour='ext4')
        for n in names:
            nx.run([self.nextfs, 'snapshot', 'take', img, '--', n])
        return img

    # -- nextfs

    def test_subcommands(self):
        cmds = self.nx('')
        for c in ('snapshot', 'check', 'export', 'diff', 'restore', 'info',
                  'version', 'umount', 'receive'):
            self.assertIn(c, cmds)
        self.assertEqual(self.nx('sn'), ['snapshot'])
        self.assertEqual(self.nx('--v'), ['--version'])
        self.assertEqual(self.nx('snapshot', ''),
                         ['take', 'delete', 'list', 'prune',
                          'run', 'image'])
        self.assertEqual(self.nx('snapshot', 'l'), ['list'])

    def test_options_of_each_command(self):
        self.assertEqual(set(self.nx('check', '-')),
                         {'-r', '--repair', '--no-fsck', '--views', '-v',
                          '--help'})
        self.assertEqual(self.nx('check', '--r'), ['--repair'])
        self.assertEqual(set(self.nx('snapshot', 'list', '--')),
                         {'--json', '--names0', '--help'})
        self.assertEqual(self.nx('snapshot', 'take', '-'), ['--help'])
        self.assertEqual(set(self.nx('snapshot', 'prune', '--')),
                         {'--keep', '--dry-run', '--json', '--help'})
        self.assertEqual(self.nx('snapshot', 'prune', '--keep', 'da'),
                         ['daily='])
        self.assertEqual(set(self.nx('restore', '-')),
                         {'-r', '--destroy-newer', '-v', '--help'})
        self.assertEqual(set(self.nx('export', '-')),
                         {'-f', '--force', '--json', '--since', '--help'})
        self.assertEqual(set(self.nx('snapshot', 'image', '-')),
                         {'--json', '--help'})
        self.assertEqual(set(self.nx('receive', '-')),
                         {'-F', '--force', '--resume', '-f', '-v', '--json',
                          '--abort', '--token', '--help'})
        self.assertEqual(set(self.nx('versions', '-')),
                         {'--json', '--restore', '--to', '--help'})
        self.assertEqual(set(self.nx('send', '-')),
                         {'-p', '-o', '--json', '--resume', '--help'})
        # snapshot run MNT -- COMMAND ARGS: a command, then files
        self.assertIn('true', self.nx('snapshot', 'run', self.work, '--',
                                      'tru'))
        self.assertEqual(self.nx('snapshot', 'run', self.work, '--', 'ls',
                                 os.path.join(self.work, 'no')), [])
        nx.write_file(os.path.join(self.work, 'notes'), b'')
        self.assertEqual(self.nx('snapshot', 'run', self.work, '--', 'ls',
                                 os.path.join(self.work, 'no')),
                         [os.path.join(self.work, 'notes')])

    def test_files_where_an_image_goes(self):
        img = self.make_image(size='8M', name='disk one.img')
        self.assertEqual(self.nx('info', os.path.join(self.work, 'disk')),
                         [img])
        self.assertEqual(self.nx('snapshot', 'list', '--json',
                                 os.path.join(self.work, 'disk')), [img])

    def test_snapshot_names_of_an_image(self):
        img = self.image_with_snapshots(ODD_NAMES)
        for words, want in (
                (('snapshot', 'delete', img, ''), ODD_NAMES),
                (('snapshot', 'delete', img, 'm'),
                 ['monday', 'my snap', 'm\u00e4rz']),
                (('snapshot', 'delete', img, 'my\\ '), ['my snap']),
                (('export', '-f', img, 'a'), ["a'b=c"]),
                (('export', img, '--since', 'my'), ['my snap']),
                (('export', img, '--since', 'monday', 't'), ['tab\there']),
                (('snapshot', 'image', img, 'my\\ '), ['my snap']),
                (('diff', img, 'monday', 't'), ['tab\there']),
                (('send', img, 'mo'), ['monday']),
                (('send', img, 'monday', '-p', 't'), ['tab\there']),
                (('restore', '-v', img, '--', '-d'), ['-dash'])):
            self.assertEqual(self.shell_words(self.nx(*words)), want,
                             words)
        # a snapshot name is not offered where a new one or a file goes
        self.assertEqual(self.nx('snapshot', 'take', img, 'mo'), [])
        self.assertNotIn('monday', self.nx('export', img, 'monday', 'mo'))
        # a missing target offers nothing (and says nothing)
        self.assertEqual(self.nx('snapshot', 'delete',
                                 os.path.join(self.work, 'none.img'), ''),
                         [])

    def test_snapshot_names_of_a_mount(self):
        if nx.fuse_unusable_reason():
            self.skipTest(nx.fuse_unusable_reason())
        names = ['first', 'with space', 'q"uote']
        with self.mount_new(size='16M') as m:
            try:
                for n in names:
                    os.mkdir(m.p('.snapshots', n))
                got = self.nx('snapshot', 'delete', m.path, '')
                self.assertEqual(self.shell_words(got), names)
                got = self.nx('diff', m.path, 'w')
                self.assertEqual(self.shell_words(got), ['with space'])
                # versions FILE --restore: the snapshots of FILE's mount
                nx.write_file(m.p('f'), b'x')
                got = self.nx('versions', m.p('f'), '--restore', 'q')
                self.assertEqual(self.shell_words(got), ['q"uote'])
                got = self.nx('versions', m.p('f'), '--restore', 'first',
                              '--to', m.p('f'))
                self.assertEqual(got, [m.p('f')])
            finally:
                # (no snapshot left: e2fsck -fn checks the image after)
                for n in os.listdir(m.p('.snapshots')):
                    os.rmdir(m.p('.snapshots', n))

    # -- nextfs-fuse

    def test_fuse_options(self):
        self.assertEqual(set(self.fuse_opts('-')),
                         {'-f', '-d', '-s', '-o', '-h', '--help', '-V',
                          '--version'})
        self.assertEqual(self.fuse_opts('-o', 'allow_'),
                         ['allow_other', 'allow_root'])
        self.assertEqual(self.fuse_opts('-o', 'ro,allow_'),
                         ['ro,allow_other', 'ro,allow_root'])
        self.assertEqual(self.fuse_opts('-oro,read_'),
                         ['-oro,read_ahead_kb='])
        self.assertEqual(self.fuse_opts('-o', 'fake'), ['fakeroot'])
        self.assertEqual(self.fuse_opts('-o', 'snapshot_'),
                         ['snapshot_every=', 'snapshot_group=',
                          'snapshot_keep='])
        # COMP_WORDS splits at "=": bash replaces only the text after it
        self.assertEqual(
            self.fuse_opts('-o', 'fsname', '=', 'x,read_',
                           line='nextfs-fuse -o fsname=x,read_'),
            ['x,read_ahead_kb='])
        # a value is free text
        self.assertEqual(
            self.fuse_opts('-o', 'read_ahead_kb', '=', '',
                           line='nextfs-fuse -o read_ahead_kb='), [])

    def test_fuse_positionals(self):
        img = self.make_image(size='8M', name='vol.img')
        os.mkdir(os.path.join(self.work, 'volmnt'))
        self.assertEqual(set(self.fuse_opts(os.path.join(self.work, 'vol'))),
                         {img, os.path.join(self.work, 'volmnt')})
        # the mount point: directories only
        self.assertEqual(self.fuse_opts('-o', 'ro', img,
                                        os.path.join(self.work, 'vol')),
                         [os.path.join(self.work, 'volmnt')])


class TableTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        self.nextfs = os.path.abspath(nx.tool_path())

    def run_nextfs(self, *args):
        return subprocess.run([self.nextfs] + list(args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True,
                              cwd=self.work)

    def table(self):
        """{path: (options, kinds)} of "nextfs __commands"."""
        p = self.run_nextfs('__commands')
        self.assertEqual(p.returncode, 0, p.stderr)
        out = {}
        for line in p.stdout.splitlines():
            path, opts, kinds = line.split(';')
            out[path] = (opts.split(), kinds.split())
        return out

    def test_help_and_man_page_agree_with_the_table(self):
        table = self.table()
        firsts = []
        for path in table:
            if path.split()[0] not in firsts:
                firsts.append(path.split()[0])
        listed = re.findall(r'(?m)^  ([a-z][a-z0-9-]*)',
                            self.run_nextfs('--help').stdout)
        self.assertEqual(listed, firsts)
        with open(os.path.join(nx.SRCROOT, 'docs', 'nextfs.1')) as f:
            man = f.read()
        synopsis = man[man.index('.SH SYNOPSIS'):man.index('.SH DESCRIPTION')]
        self.assertEqual(set(re.findall(r'(?m)^\.B nextfs ([a-z][a-z ]*)$',
                                        synopsis)), set(table))
        for path, (opts, _) in table.items():
            p = self.run_nextfs(*path.split(), '--help')
            self.assertEqual((p.returncode, p.stderr), (0, ''), path)
            usage = p.stdout.split('\n\n')[0].replace('nextfs ' + path, '')
            shown = set(re.findall(r'(?<![\w-])(--?[A-Za-z][\w-]*)', usage))
            want = {n for o in opts if not o.startswith('!')
                    for n in o.split('=')[0].split('|')}
            self.assertEqual(shown, want, path)

    def test_every_command_refuses_a_wrong_command_line_alike(self):
        """One line says what is wrong, the usage follows, on stderr;
        nothing on stdout; exit 2 (check: 16, as e2fsck)."""
        for path, (_, kinds) in self.table().items():
            status = 16 if path == 'check' else 2
            wrong = [('--no-such-option', 'unknown option')]
            if 'rest' not in kinds:
                wrong.append(('x ' * (len(kinds) + 1),
                              'unexpected argument'))
            for args, what in wrong:
                p = self.run_nextfs(*path.split(), *args.split())
                lines = p.stderr.splitlines()
                self.assertEqual((p.returncode, p.stdout), (status, ''),
                                 (path, args, p.stderr))
                self.assertRegex(lines[0], r"^nextfs: %s: %s '" %
                                 (path, what))
                self.assertTrue(lines[1].startswith('usage: nextfs %s' %
                                                    path), p.stderr)
                self.assertEqual(lines[-1],
                                 "Run 'nextfs %s --help' for more." % path)


@unittest.skipUnless(os.path.exists(BASH_COMPLETION),
                     'bash-completion is not installed')
class WithBashCompletionTest(CompletionTest):
    """The same, loaded the way bash-completion loads it."""

    with_bash_completion = True


if __name__ == '__main__':
    nx.main(require_fuse=False)
