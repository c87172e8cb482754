/*
 * cmd_run.c - "nextfs snapshot run TARGET [--] COMMAND [ARGS...]":
 * a snapshot before and one after COMMAND (snapper's pre/post pairs), so
 * that "nextfs diff TARGET PRE POST" shows what the command changed.
 *
 * Names: run-YYYYMMDD-HHMMSS-CMD-pre and run-YYYYMMDD-HHMMSS-CMD-post-
 * STATUS (UTC; CMD the command's base name; STATUS "exit0", "exit3",
 * "sig9"): the common stem shows the pair, the suffix the outcome.  They
 * never look like "@GMT-...", so retention ("snapshot prune") leaves
 * them alone: a person asked for them.
 *
 * Exit status: the command's (a signal N as 128 + N, as the shell does);
 * 125 when nextfs itself failed (no pre snapshot: the command did not
 * run; no post snapshot: the message gives the command's status); 126/
 * 127 when the command could not be run (the post snapshot is taken
 * anyway, so the pair is complete).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <et/com_err.h>
#include "nextfs/snapshot.h"
#include "cli.h"
#include "output.h"

#define RUN_FAILED	125	/* as timeout(1) and env(1): nextfs failed */
#define RUN_NOEXEC	126
#define RUN_NOTFOUND	127
#define RUN_CMD_MAX	64	/* bytes of the command's name in a name */

/*
 * Take NAME on TARGET (snapact.c).  On a mount the file system is flushed
 * first, so that data written before (also through mmap) is in the
 * snapshot.  Returns 0, EEXIST when MAY_EXIST (the name is taken: try
 * another) or -1 after a message.
 */
static int take_synced(const char *target, const char *name,
		       int may_exist)
{
	char q[NX_QUOTED_NAME_SIZE];
	struct nx_cli_target t;
	errcode_t err = 0;
	int rc = nx_cli_target_open(target, 0, &t);

	if (rc)
		return -1;
	if (t.mnt)
		rc = nx_cli_flush_mount(t.mnt);
	if (!rc)
		err = nx_errno(nx_cli_take(&t, name));
	if (nx_cli_target_close(&t))
		rc = NX_CLI_FAIL;	/* said */
	if (rc)
		return -1;
	if (err == EEXIST && may_exist)
		return EEXIST;
	if (err) {
		nx_out_quote(q, sizeof(q), name, strlen(name));
		nx_cli_error("cannot take snapshot %s: %s", q, strerror(err));
		return -1;
	}
	return 0;
}

/* The stem "run-YYYYMMDD-HHMMSS-CMD" (seq > 1: "...-CMD.SEQ"). */
static void make_stem(char *buf, size_t size, const struct tm *tm,
		      const char *cmd, int seq)
{
	const char *slash = strrchr(cmd, '/');
	char when[32], base[RUN_CMD_MAX + 1], *p;

	snprintf(base, sizeof(base), "%s", slash && slash[1] ? slash + 1 : cmd);
	for (p = base; *p; p++)
		if (*p == '/')
			*p = '_';	/* "dir/": no '/' in a name */
	strftime(when, sizeof(when), "%Y%m%d-%H%M%S", tm);
	if (seq > 1)
		snprintf(buf, size, "run-%s-%s.%d", when, base, seq);
	else
		snprintf(buf, size, "run-%s-%s", when, base);
}

/*
 * Take the pre snapshot under a fresh stem (another run in the same
 * second gets .2, .3, ...).
 */
static int take_pre(const char *target, const char *cmd, char *stem,
		    size_t size)
{
	char name[NX_NAME_MAX + 1];
	time_t now = time(NULL);
	struct tm tm;
	int seq, rc;

	gmtime_r(&now, &tm);
	for (seq = 1; seq < 1000; seq++) {
		make_stem(stem, size, &tm, cmd, seq);
		snprintf(name, sizeof(name), "%s-pre", stem);
		rc = take_synced(target, name, 1);
		if (rc != EEXIST)
			return rc;
	}
	nx_cli_error("cannot find a free snapshot name for this run");
	return -1;
}

static void say_taken(const char *what, const char *name)
{
	fprintf(stderr, "nextfs: %s: ", what);
	nx_out_print_quoted(stderr, name);
	fputc('\n', stderr);
}

/*
 * Run ARGV; its status as the shell reports it (*SIGNO: the signal that
 * ended it, or 0).  While it runs, Ctrl-C and Ctrl-\ reach the command
 * only (as with system(3)), so that the post snapshot is still taken
 * after it is interrupted.
 */
static int run_command(char **argv, int *signo)
{
	struct sigaction ign = { .sa_handler = SIG_IGN }, oint, oquit;
	int status, err = 0, pipefd[2];
	ssize_t n;
	pid_t pid;

	/* The child reports a failed exec through a close-on-exec pipe. */
	if (pipe2(pipefd, O_CLOEXEC) < 0) {
		nx_cli_error("pipe: %s", strerror(errno));
		return RUN_FAILED;
	}
	sigemptyset(&ign.sa_mask);
	sigaction(SIGINT, &ign, &oint);
	sigaction(SIGQUIT, &ign, &oquit);
	pid = fork();
	if (pid == 0) {
		sigaction(SIGINT, &oint, NULL);
		sigaction(SIGQUIT, &oquit, NULL);
		close(pipefd[0]);
		execvp(argv[0], argv);
		err = errno;
		n = write(pipefd[1], &err, sizeof(err));
		(void)n;
		_exit(err == ENOENT ? RUN_NOTFOUND : RUN_NOEXEC);
	}
	close(pipefd[1]);
	if (pid < 0) {
		nx_cli_error("fork: %s", strerror(errno));
		status = -1;
	} else {
		n = read(pipefd[0], &err, sizeof(err));
		if (n != sizeof(err))
			err = 0;
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	close(pipefd[0]);
	sigaction(SIGINT, &oint, NULL);
	sigaction(SIGQUIT, &oquit, NULL);
	*signo = 0;
	if (pid < 0)
		return -1;
	if (err)
		nx_cli_error("%s: %s", argv[0], strerror(err));
	if (WIFSIGNALED(status)) {
		*signo = WTERMSIG(status);
		return 128 + *signo;
	}
	return WEXITSTATUS(status);
}

int nx_cmd_snapshot_run(struct nx_cli_args *a)
{
	char stem[128], name[NX_NAME_MAX + 1];
	int status, signo = 0;

	if (take_pre(a->pos[0], a->pos[1], stem, sizeof(stem)))
		return RUN_FAILED;
	snprintf(name, sizeof(name), "%s-pre", stem);
	say_taken("before", name);
	fflush(NULL);
	status = run_command(a->pos + 1, &signo);
	if (status < 0)
		status = RUN_FAILED;
	if (signo)
		snprintf(name, sizeof(name), "%s-post-sig%d", stem, signo);
	else
		snprintf(name, sizeof(name), "%s-post-exit%d", stem, status);
	if (take_synced(a->pos[0], name, 0)) {
		nx_cli_error("the command exited with status %d, but the "
			     "snapshot after it is missing", status);
		return RUN_FAILED;
	}
	say_taken("after", name);
	return status;
}
