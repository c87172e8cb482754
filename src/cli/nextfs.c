/*
 * nextfs.c - the "nextfs" tool: git-style subcommands around snapshots.
 * Here are main and the command table: every command's name, arguments,
 * usage, options (with their values), handler and help (struct
 * nx_cli_cmd, cli.h); cmdline.c reads command lines by it.
 *
 * Adding a command takes one entry here and one handler file:
 *  - cmd_NAME.c with "int nx_cmd_NAME(struct nx_cli_args *a)", declared
 *    in cli.h, which reads its arguments (a->pos) and options (a->opt,
 *    a->val) and uses the shared modules (cli.h), never another cmd_*.c;
 *  - a struct nx_cli_cmd below, listed in commands[] (or snapshot_cmds[]
 *    for a subcommand of "snapshot"); an option with a new meaning gets
 *    a slot in enum nx_cli_slot (cli.h);
 *  - cmd_NAME.c in meson.build, and the command in docs/nextfs.1 (the
 *    test of the table, tests/integration/test_completion.py, checks
 *    the man page's synopsis names the same commands).
 * Parsing, --help, "nextfs help", the errors of a wrong command line, the
 * "Commands:" list of "nextfs --help" and bash completion ("nextfs
 * __commands") all follow from the entry; only an argument of a new kind
 * needs completion/nextfs.bash told what to offer for it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nextfs/devname.h"
#include "nextfs/safepath.h"
#include "cli.h"

static int run_version(struct nx_cli_args *a);
static int run_help(struct nx_cli_args *a);
static int run_spec(struct nx_cli_args *a);

/* The subcommands of "snapshot". */
static const struct nx_cli_cmd take_cmd = {
	.name = "take", .min = 1, .max = 2, .run = nx_cmd_snapshot_take,
	.params = "target:IMAGE_OR_MOUNTPOINT new:NAME",
	.usage = "IMAGE_OR_MOUNTPOINT [NAME]",
	.help =
	"Take snapshot NAME of an unmounted ext2/3/4 image or device, or of\n"
	"a volume mounted with nextfs-fuse (mkdir in MOUNTPOINT/.snapshots;\n"
	"an image in use by nextfs-fuse goes through its mountpoint).  A\n"
	"NAME that starts with '-' goes after '--'.\n"
	"\n"
	"Without NAME the snapshot is named after the time, UTC, as\n"
	"@GMT-YYYY.MM.DD-HH.MM.SS (Samba's format), and the name printed;\n"
	"if that name exists it waits for the next second.  On a mount it\n"
	"first flushes the mount (syncfs), so that data written through\n"
	"mmap and not yet msync'ed is in the snapshot.\n",
};

static const struct nx_cli_cmd delete_cmd = {
	.name = "delete", .min = 2, .max = 2, .run = nx_cmd_snapshot_delete,
	.params = "target:IMAGE_OR_MOUNTPOINT snap:NAME",
	.usage = "[--wait] IMAGE_OR_MOUNTPOINT NAME",
	.opts = (const struct nx_cli_opt[]) {
		{ "--wait", NULL, NX_OPT_WAIT, 1 },
		{ NULL },
	},
	.help =
	"Delete snapshot NAME of an unmounted image or device, or of a\n"
	"nextfs-fuse mount (rmdir in MOUNTPOINT/.snapshots).  Blocks an\n"
	"older snapshot still needs pass to it; the rest become free.  A\n"
	"NAME that starts with '-' goes after '--'.\n"
	"\n"
	"On a mount the name is gone and free at once, and the daemon\n"
	"hands the blocks over in the background, a few milliseconds at a\n"
	"time (\"nextfs info\" shows what is pending; an unmount finishes\n"
	"or leaves it for the next mount).  An image is done at once.\n"
	"  --wait   on a mount, return once every pending delete is done\n",
};

static const struct nx_cli_cmd list_cmd = {
	.name = "list", .min = 1, .max = 1, .run = nx_cmd_snapshot_list,
	.params = "target:IMAGE_OR_MOUNTPOINT",
	.usage = "[--json|--names0] IMAGE_OR_MOUNTPOINT",
	.opts = (const struct nx_cli_opt[]) {
		{ "--json", NULL, NX_OPT_FORMAT, NX_LIST_JSON },
		{ "--names0", NULL, NX_OPT_FORMAT, NX_LIST_NAMES0 },
		{ NULL },
	},
	.help =
	"List the snapshots of an unmounted image or device, or of a\n"
	"nextfs-fuse mount (any directory of it), oldest first: id, name,\n"
	"take time, space held.  Names print quoted where needed, as ls\n"
	"does; --json prints exact names (see nextfs(1)); --names0 only\n"
	"the names, each followed by a NUL byte.\n",
};

static const struct nx_cli_cmd prune_cmd = {
	.name = "prune", .min = 1, .max = 1, .run = nx_cmd_snapshot_prune,
	.params = "target:IMAGE_OR_MOUNTPOINT",
	.usage = "IMAGE_OR_MOUNTPOINT --keep SPEC [--dry-run] [--json]",
	.opts = (const struct nx_cli_opt[]) {
		{ "--keep", "keep:SPEC", NX_OPT_KEEP, 1, .required = 1 },
		{ "--dry-run", NULL, NX_OPT_DRY_RUN, 1 },
		{ "-n", NULL, NX_OPT_DRY_RUN, 1, .hidden = 1 },
		{ "--json", NULL, NX_OPT_JSON, 1 },
		{ NULL },
	},
	.help =
	"Delete the timeline snapshots (named @GMT-YYYY.MM.DD-HH.MM.SS,\n"
	"as 'snapshot take' without a name and nextfs-fuse -o\n"
	"snapshot_every make them) that SPEC does not keep.  Snapshots\n"
	"with other names are never deleted and count for nothing.\n"
	"\n"
	"SPEC: last=N,hourly=N,daily=N,weekly=N,monthly=N,yearly=N, any\n"
	"of them, separated by ',' or ':'.  A snapshot is kept when it\n"
	"is one of the newest 'last' ones, or the newest snapshot of one\n"
	"of the newest N hours, days, ISO weeks, months or years (UTC)\n"
	"that have a timeline snapshot: daily=7 keeps 7 snapshots, one\n"
	"per day, from the 7 latest days that have one.  The time is the\n"
	"one in the name; names dated after now are kept and not counted.\n"
	"\n"
	"  --dry-run   say what would be deleted, delete nothing\n"
	"  --json      one JSON object: every snapshot, its action and\n"
	"              why it is kept\n",
};

static const struct nx_cli_cmd run_cmd = {
	.name = "run", .min = 2, .max = -1, .run = nx_cmd_snapshot_run,
	.params = "target:IMAGE_OR_MOUNTPOINT cmd:COMMAND rest:ARGS",
	.usage = "IMAGE_OR_MOUNTPOINT [--] COMMAND [ARGS...]",
	.flags = NX_CMD_REST,
	.help =
	"Take a snapshot, run COMMAND, take another one:\n"
	"  run-YYYYMMDD-HHMMSS-CMD-pre, run-YYYYMMDD-HHMMSS-CMD-post-exitN\n"
	"(UTC; -post-sigN when a signal ended it), then exit with the\n"
	"command's status (a signal N: 128+N; 125: a snapshot failed;\n"
	"126/127: COMMAND could not be run).  'nextfs diff MOUNTPOINT PRE\n"
	"POST' shows what the command changed.  Everything written to the\n"
	"mount before is flushed (syncfs) before each snapshot.\n",
};

static const struct nx_cli_cmd image_cmd = {
	.name = "image", .min = 2, .max = 2, .run = nx_cmd_snapshot_image,
	.params = "target:MOUNTPOINT snap:NAME",
	.usage = "[--json] MOUNTPOINT NAME",
	.opts = (const struct nx_cli_opt[]) {
		{ "--json", NULL, NX_OPT_JSON, 1 },
		{ NULL },
	},
	.help =
	"Print the path of the file that is snapshot NAME as a standalone\n"
	"ext2/3/4 image (MOUNTPOINT/.snapshot-images/NAME: read-only, for\n"
	"root and the user who mounted the volume; loop-mount it, copy it\n"
	"with cp --sparse=always, check it with e2fsck).  MOUNTPOINT may\n"
	"also be the image a nextfs-fuse daemon serves.  The path prints\n"
	"quoted where needed, as ls does; --json prints it exactly, with\n"
	"the image's size.\n",
};

static const struct nx_cli_cmd *const snapshot_cmds[] = {
	&take_cmd, &delete_cmd, &list_cmd, &prune_cmd, &run_cmd, &image_cmd,
	NULL,
};

static const struct nx_cli_cmd snapshot_cmd = {
	.name = "snapshot", .subs = snapshot_cmds,
	.summary = "manage snapshots of an image or a nextfs-fuse "
		   "mountpoint; 'snapshot run MNT -- CMD': before and "
		   "after CMD",
	.help =
	"Take, delete or list snapshots of an unmounted ext2/3/4 image\n"
	"or device, or of a volume mounted with nextfs-fuse (through\n"
	"MOUNTPOINT/.snapshots; an image in use by nextfs-fuse goes\n"
	"through its mountpoint too).  Names print quoted where needed,\n"
	"as ls does; --json prints exact names (see nextfs(1)); --names0\n"
	"only the names, each followed by a NUL byte.  A NAME that\n"
	"starts with '-' goes after '--'.  prune deletes @GMT snapshots\n"
	"a SPEC does not keep; run takes a snapshot before and after\n"
	"COMMAND; image prints the path of a snapshot's image file on a\n"
	"mount.  'nextfs snapshot COMMAND --help' says more.\n",
};

static const struct nx_cli_cmd versions_cmd = {
	.name = "versions", .min = 1, .max = 1, .run = nx_cmd_versions,
	.params = "path:PATH",
	.usage = "[--json] PATH\n"
		 "PATH [--restore NAME [--to DEST]]",
	.summary = "a file's versions in the snapshots; --restore NAME gets "
		   "one back",
	.opts = (const struct nx_cli_opt[]) {
		{ "--json", NULL, NX_OPT_JSON, 1 },
		{ "--restore", "snap:NAME", NX_OPT_RESTORE, 1 },
		{ "--to", "file:DEST", NX_OPT_TO, 1 },
		{ NULL },
	},
	.help =
	"List the distinct versions of PATH (a file, symlink or directory\n"
	"on a nextfs-fuse mount; it may be gone from the live tree) in the\n"
	"snapshots and the live tree, oldest first: one line per distinct\n"
	"size, mtime and content, with the snapshots that hold it ('(live)':\n"
	"the live tree).  --restore copies the version snapshot NAME holds\n"
	"(data, mode, owner where permitted, times, xattrs) to DEST\n"
	"(default: PATH), replacing it atomically; the snapshot is only\n"
	"read.  DEST an existing directory: into it.  Directories are not\n"
	"restored (copy them with cp -a from MNT/.snapshots/NAME).\n"
	"No symbolic link below the mountpoint is followed in PATH or DEST,\n"
	"nor another user's anywhere, nor any inside a snapshot.\n",
};

static const struct nx_cli_cmd defrag_cmd = {
	.name = "defrag", .min = 1, .max = -1, .run = nx_cmd_defrag,
	.params = "rest:PATH",
	.usage = "[-r] [--json] PATH...\n"
		 "--image IMAGE [-r] [--json] PATH...",
	.summary = "rewrite fragmented files contiguously, snapshots kept",
	.opts = (const struct nx_cli_opt[]) {
		{ "-r", NULL, NX_OPT_RECURSIVE, 1 },
		{ "--json", NULL, NX_OPT_JSON, 1 },
		{ "--image", "file:IMAGE", NX_OPT_IMAGE, 1 },
		{ NULL },
	},
	.help =
	"Rewrite each regular file PATH (on a nextfs-fuse mount; -r: every\n"
	"regular file below a directory PATH) into contiguous free space and\n"
	"print its extents before and after, and a total.  Old blocks a\n"
	"snapshot still needs go to it as they are; the others become free:\n"
	"every snapshot reads exactly what it read before.  A file is left\n"
	"alone, with one line saying why, when free space is too fragmented\n"
	"to improve it, when it is a symbolic link (never followed) or not a\n"
	"regular file, inside .snapshots, or not yours to write.\n"
	"--image IMAGE: PATHs inside the unmounted volume IMAGE (\"/db/t\").\n"
	"Exit status 1 if any file was refused.\n",
};

static const struct nx_cli_cmd check_cmd = {
	.name = "check", .min = 1, .max = 1, .run = nx_cmd_check,
	.params = "image:IMAGE",
	.usage = "[-r|--repair] [--no-fsck] [--views] [-v] IMAGE",
	.summary = "snapshot-aware consistency check",
	.opts = (const struct nx_cli_opt[]) {
		{ "-r|--repair", NULL, NX_OPT_REPAIR, 1 },
		/* -y, -p and -n as e2fsck takes them */
		{ "-y|-p", NULL, NX_OPT_REPAIR, 1, .hidden = 1 },
		{ "-n", NULL, NX_OPT_REPAIR, 0, .hidden = 1 },
		{ "--no-fsck", NULL, NX_OPT_NO_FSCK, 1 },
		{ "--views", NULL, NX_OPT_VIEWS, 1 },
		{ "-v", NULL, NX_OPT_VERBOSE, 1 },
		{ "--verbose", NULL, NX_OPT_VERBOSE, 1, .hidden = 1 },
		{ NULL },
	},
	.usage_status = 16,	/* as e2fsck: a usage error */
	.help =
	"Check the snapshots of an unmounted volume: the snapshot list,\n"
	"every snapshot inode, that no block is owned twice, the block\n"
	"bitmap, what each snapshot preserves; then run e2fsck -fn on the\n"
	"live volume with has_snapshot masked (copy-free, through a\n"
	"private FUSE mount).\n"
	"\n"
	"  -r, --repair  replay the journal, fix what can be fixed safely\n"
	"                and say what was done; if e2fsck still finds the\n"
	"                live volume damaged, run e2fsck -fy on it (with\n"
	"                has_snapshot masked)\n"
	"  --no-fsck     do not run e2fsck\n"
	"  --views       also run e2fsck on every snapshot as exported\n"
	"  -v            say what is being checked\n"
	"\n"
	"Exit status: 0 clean, 1 errors fixed, 4 errors left,\n"
	"8 operational error, 16 usage error.\n",
};

static const struct nx_cli_cmd export_cmd = {
	.name = "export", .min = 3, .max = 3, .run = nx_cmd_export,
	.params = "target:SOURCE snap:NAME out:OUT.img",
	.usage = "[-f|--force] [--json] SOURCE NAME OUT.img\n"
		 "SOURCE NAME - > stream.img\n"
		 "--since OLD [--json] SOURCE NEW OUT.img",
	.summary = "write a snapshot as a standalone image; --since OLD "
		   "updates an export of OLD",
	.opts = (const struct nx_cli_opt[]) {
		{ "-f|--force", NULL, NX_OPT_FORCE, 1 },
		{ "--json", NULL, NX_OPT_JSON, 1 },
		{ "--since", "snap:OLD", NX_OPT_SINCE, 1 },
		{ NULL },
	},
	.help =
	"Write snapshot NAME as a standalone sparse ext2/3/4 image without\n"
	"snapshots, or to stdout ('-').  SOURCE is an unmounted image or\n"
	"device, or a mounted nextfs volume (its mountpoint, or the image\n"
	"it serves): the output is the same.  An existing OUT.img is\n"
	"replaced only with --force.\n"
	"\n"
	"--since OLD: OUT.img (a file or block device) holds the export of\n"
	"snapshot OLD of this volume; make it the export of NEW in place,\n"
	"writing only the blocks that differ.  Anything else in OUT.img\n"
	"is refused, and nothing is written.  An interrupted update is\n"
	"completed by running the same command again.\n"
	"\n"
	"  --json   print what was written as one JSON object\n",
};

static const struct nx_cli_cmd diff_cmd = {
	.name = "diff", .min = 2, .max = 3, .run = nx_cmd_diff,
	.params = "target:IMAGE_OR_MOUNTPOINT snap:OLD snap:NEW",
	.usage = "[-F] IMAGE_OR_MOUNTPOINT OLD [NEW]",
	.summary = "list what changed between snapshots",
	.opts = (const struct nx_cli_opt[]) {
		{ "-F", NULL, NX_OPT_TYPES, 1 },
		{ NULL },
	},
	.help =
	"List what changed from snapshot OLD to snapshot NEW (default: the\n"
	"live tree): '- PATH' removed, '+ PATH' created, 'M PATH' changed,\n"
	"'R OLD -> NEW' renamed.  -F adds the file type.\n",
};

static const struct nx_cli_cmd send_cmd = {
	.name = "send", .min = 2, .max = 2, .run = nx_cmd_send,
	.params = "target:IMAGE_OR_MOUNTPOINT snap:NAME",
	.usage = "[-p PARENT] IMAGE_OR_MOUNTPOINT NAME [-o FILE] [--json] "
		 "[--resume TOKEN]",
	.summary = "a snapshot as a btrfs send stream",
	.opts = (const struct nx_cli_opt[]) {
		{ "-p", "snap:PARENT", NX_OPT_PARENT, 1 },
		{ "-o", "file:FILE", NX_OPT_OUTPUT, 1 },
		{ "--json", NULL, NX_OPT_JSON, 1 },
		{ "--resume", ":TOKEN", NX_OPT_RESUME, 1 },
		{ NULL },
	},
	.help =
	"Write snapshot NAME as a btrfs send stream (version 1) to FILE or\n"
	"stdout: all of it, or with -p only what changed since snapshot\n"
	"PARENT.  Apply it with \"nextfs receive\" or \"btrfs receive\".\n"
	"--json reports on stderr.  --resume TOKEN (from an interrupted\n"
	"\"nextfs receive\"): only the rest of that stream, after checking\n"
	"that the token names this snapshot pair.\n",
};

static const struct nx_cli_cmd receive_cmd = {
	.name = "receive", .min = 1, .max = 1, .run = nx_cmd_receive,
	.params = "target:IMAGE_OR_MOUNTPOINT",
	.usage = "[-F|--force] [--resume] [-f FILE] [-v] [--json] "
		 "IMAGE_OR_MOUNTPOINT\n"
		 "--abort|--token [--json] IMAGE_OR_MOUNTPOINT",
	.summary = "apply a send stream (stdin) and take its snapshot",
	.opts = (const struct nx_cli_opt[]) {
		{ "-F|--force", NULL, NX_OPT_FORCE, 1 },
		{ "--resume", NULL, NX_OPT_RESUME, 1 },
		{ "-f", "file:FILE", NX_OPT_INPUT, 1 },
		{ "--file", "file:FILE", NX_OPT_INPUT, 1, .hidden = 1 },
		{ "-v", NULL, NX_OPT_VERBOSE, 1 },
		{ "--verbose", NULL, NX_OPT_VERBOSE, 1, .hidden = 1 },
		{ "--json", NULL, NX_OPT_JSON, 1 },
		{ "--abort", NULL, NX_OPT_ABORT, 1 },
		{ "--token", NULL, NX_OPT_TOKEN, 1 },
		{ NULL },
	},
	.help =
	"Apply a send stream (btrfs send stream format: from 'nextfs send'\n"
	"or 'btrfs send') read from standard input or FILE to the target,\n"
	"an image or the mountpoint of a nextfs volume, and take the\n"
	"snapshot it describes there.  A full stream needs a target without\n"
	"snapshots and with an empty live tree; an incremental one needs\n"
	"the stream's parent as the newest snapshot and the live tree\n"
	"unchanged since.  Nothing half received is ever a snapshot.\n"
	"\n"
	"  -F, --force   empty the live tree (full stream) or roll it back\n"
	"                to the parent (incremental) first; give up a\n"
	"                pending receive of another stream\n"
	"  --resume      continue an interrupted receive: with the same\n"
	"                stream again, or one from 'nextfs send ... --resume\n"
	"                TOKEN'\n"
	"  --abort       give up an interrupted receive: the live tree goes\n"
	"                back to where it started\n"
	"  --token       print the resume token of an interrupted receive\n"
	"                (with --json: where it stopped, as JSON)\n"
	"  -f FILE       read the stream from FILE instead of standard input\n"
	"  -v            say what was received\n"
	"  --json        report as JSON on standard output\n"
	"\n"
	"Exit status: 0 received, 1 failed (the target is as it was), 2\n"
	"usage, 3 interrupted (stream cut, out of space, stopped):\n"
	"resumable.\n",
};

static const struct nx_cli_cmd restore_cmd = {
	.name = "restore", .min = 2, .max = 2, .run = nx_cmd_restore,
	.params = "image:IMAGE snap:NAME",
	.usage = "[-r|--destroy-newer] [-v] IMAGE NAME",
	.summary = "roll the live tree back to a snapshot",
	.opts = (const struct nx_cli_opt[]) {
		{ "-r|--destroy-newer", NULL, NX_OPT_DESTROY, 1 },
		{ "-v", NULL, NX_OPT_VERBOSE, 1 },
		{ NULL },
	},
	.help =
	"Roll the live tree of the unmounted volume IMAGE back to snapshot\n"
	"NAME.  The snapshot (and every older one) is kept.  Snapshots newer\n"
	"than NAME make it refuse, unless --destroy-newer deletes them first.\n"
	"If interrupted, run it again.\n",
};

static const struct nx_cli_cmd info_cmd = {
	.name = "info", .min = 1, .max = 1, .run = nx_cmd_info,
	.params = "image:IMAGE_OR_MOUNTPOINT",
	.usage = "[--json] IMAGE_OR_MOUNTPOINT",
	.summary = "volume and snapshot summary",
	.opts = (const struct nx_cli_opt[]) {
		{ "--json", NULL, NX_OPT_JSON, 1 },
		{ NULL },
	},
	.help =
	"Print the volume summary (as dumpe2fs -h) and the snapshots with\n"
	"the space each one holds, of an unmounted volume or of one that\n"
	"nextfs-fuse serves (given its mountpoint or its image).\n",
};

static const struct nx_cli_cmd umount_cmd = {
	.name = "umount|unmount", .min = 1, .max = 1, .run = nx_cmd_umount,
	.params = "dir:MOUNTPOINT",
	.usage = "[-v] MOUNTPOINT",
	.summary = "unmount; return once the volume is written back and "
		   "released",
	.opts = (const struct nx_cli_opt[]) {
		{ "-v", NULL, NX_OPT_VERBOSE, 1 },
		/* umount(8) passes its helpers: no mtab to update, our type */
		{ "-n", NULL, NX_OPT_NOMTAB, 1, .hidden = 1 },
		{ "-t", ":TYPE", NX_OPT_FSTYPE, 1, .hidden = 1 },
		{ NULL },
	},
	.unknown_hint = "a lazy or forced unmount cannot wait for the daemon",
	.help =
	"Unmount a nextfs-fuse mount and wait until the daemon has\n"
	"written everything back and released the volume, so that the\n"
	"next command (e2fsck, cp, losetup -d, another mount) finds it\n"
	"complete and free.  Plain 'fusermount3 -u' returns before\n"
	"that.  As root it unmounts with umount(2), otherwise with\n"
	"fusermount3 -u.  umount(8) runs it for mounts made through\n"
	"mount(8) (it is /sbin/umount.nextfs).\n"
	"\n"
	"  -v       say what happens\n"
	"  -n, -t TYPE  accepted and ignored (umount helper arguments)\n"
	"\n"
	"Exit status: 0 unmounted, written back and released; 1 nothing\n"
	"unmounted (not mounted, busy, not a nextfs mount); 2 usage;\n"
	"3 unmounted, but nextfs-fuse reported an error or ended without\n"
	"a word (its message is printed).\n",
};

static const struct nx_cli_cmd version_cmd = {
	.name = "version|--version|-V", .run = run_version,
	.summary = "print the version (also --version)",
	.help = "Print the version of nextfs, as nextfs-fuse -V does.\n",
};

static const struct nx_cli_cmd help_cmd = {
	.name = "help", .max = 2, .run = run_help,
	.params = "command:COMMAND command:SUBCOMMAND",
	.usage = "[COMMAND [SUBCOMMAND]]",
	.summary = "a command's help, as COMMAND --help prints it",
	.help = "Print the help of COMMAND (SUBCOMMAND of snapshot), or\n"
		"this tool's without one.\n",
};

static const struct nx_cli_cmd spec_cmd = {
	/* for completion/nextfs.bash (nx_cli_print_spec) */
	.name = "__commands", .run = run_spec,
	.flags = NX_CMD_HIDDEN,
};

/* The table: "nextfs --help" lists the commands in this order. */
static const struct nx_cli_cmd *const commands[] = {
	&snapshot_cmd, &versions_cmd, &check_cmd, &export_cmd, &diff_cmd,
	&send_cmd, &receive_cmd, &restore_cmd, &info_cmd, &defrag_cmd,
	&umount_cmd, &version_cmd, &help_cmd, &spec_cmd, NULL,
};

static const struct nx_cli_cmd nextfs_cmd = {
	.name = "nextfs",
	.usage = "COMMAND [ARGS]",
	.subs = commands,
	.help =
	"Run 'nextfs COMMAND --help' for a command's options.\n"
	"Exit status: 0 success, 1 failure (nothing changed), 2 usage\n"
	"(check: as e2fsck; umount: 3 when the daemon ended badly; receive:\n"
	"3 when interrupted and resumable; see 'nextfs COMMAND --help').\n"
	"\n"
	"Unmount with 'nextfs umount MNT': unlike fusermount3 -u it returns\n"
	"only when the volume is written back, so 'nextfs umount MNT &&\n"
	"e2fsck -fn IMAGE' checks the final image.\n",
};

/* mount(8)'s helper: messages and the usage name it by how it was called. */
static const struct nx_cli_cmd mount_helper = {
	.name = "mount.nextfs", .min = 2, .max = 2, .run = nx_cmd_mount_helper,
	.params = "image:SOURCE dir:MOUNTPOINT",
	.usage = "SOURCE MOUNTPOINT [-sfnv] [-o OPTIONS] [-t TYPE]",
	.opts = (const struct nx_cli_opt[]) {
		{ "-o", ":OPTIONS", NX_OPT_MOUNT_OPTIONS, 1 },
		{ "-f", NULL, NX_OPT_FAKE, 1 },
		{ "-v", NULL, NX_OPT_VERBOSE, 1 },
		{ "-n", NULL, NX_OPT_NOMTAB, 1 },
		{ "-s", NULL, NX_OPT_SLOPPY, 1 },
		{ "-t", ":TYPE", NX_OPT_FSTYPE, 1 },
		{ "-N", ":NAMESPACE", NX_OPT_NAMESPACE, 1, .hidden = 1 },
		{ NULL },
	},
	.flags = NX_CMD_HIDDEN | NX_CMD_CLUSTER,
	.help =
	"mount(8)'s helper for nextfs: starts nextfs-fuse SOURCE\n"
	"MOUNTPOINT with OPTIONS, less those meant for mount(8) and\n"
	"systemd only (defaults, auto, noauto, nofail, _netdev, user,\n"
	"users, nouser, owner, group, user=, comment=, x-*, X-*).\n"
	"  -f  do everything but mount    -v  print the command\n"
	"  -s, -n, -t TYPE  accepted and ignored\n",
};

/* "nextfs version" (also --version, -V): meson's project version. */
static int run_version(struct nx_cli_args *a)
{
	printf("nextfs %s\n", NEXTFS_VERSION);
	return fflush(stdout) ? NX_CLI_FAIL : NX_CLI_OK;
}

static int run_help(struct nx_cli_args *a)
{
	return nx_cli_help(&nextfs_cmd, a);
}

static int run_spec(struct nx_cli_args *a)
{
	nx_cli_print_spec(&nextfs_cmd);
	return fflush(stdout) ? NX_CLI_FAIL : NX_CLI_OK;
}

/* umount(8)'s helper is "nextfs umount": run as that. */
static int run_umount_helper(int argc, char **argv)
{
	char **args = calloc((size_t)argc + 2, sizeof(*args));
	int rc;

	if (!args) {
		nx_cli_error("out of memory");
		return NX_CLI_FAIL;
	}
	args[0] = "nextfs";
	args[1] = "umount";
	memcpy(args + 2, argv + 1, (size_t)(argc - 1) * sizeof(*args));
	rc = nx_cli_run(&nextfs_cmd, "", "nextfs", argc + 1, args);
	free(args);
	return rc;
}

int main(int argc, char **argv)
{
	const char *name;

	/* No image or device is opened but as safepath.h resolves it. */
	nx_dev_set_resolver(nx_sp_open_volume);
	if (argc < 1)
		return NX_CLI_USAGE;
	/*
	 * Called through a link as mount(8)'s or umount(8)'s helper
	 * (/sbin/mount.nextfs, /sbin/umount.fuse.nextfs, ...: meson.build)?
	 */
	name = strrchr(argv[0], '/');
	name = name ? name + 1 : argv[0];
	if (!strncmp(name, "mount.", 6))
		return nx_cli_run(&mount_helper, argv[0], argv[0], argc, argv);
	if (!strncmp(name, "umount.", 7))
		return run_umount_helper(argc, argv);
	return nx_cli_run(&nextfs_cmd, "", "nextfs", argc, argv);
}
