/*
 * cmd_prune.c - "nextfs snapshot prune TARGET --keep SPEC [--dry-run]
 * [--json]": delete the timeline snapshots (@GMT names) that SPEC does
 * not keep.  Which ones is nx_keep_decide()'s business (retention.h);
 * this file lists, deletes oldest first, and reports.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "nextfs/retention.h"
#include "nextfs/snapshot.h"
#include "cli.h"
#include "output.h"

struct prune_args {
	const char *target;
	const char *spec;
	int dry_run, json;
};

static void prune_usage(FILE *out)
{
	fprintf(out,
		"usage: nextfs snapshot prune IMAGE_OR_MOUNTPOINT --keep SPEC "
		"[--dry-run] [--json]\n"
		"\n"
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
		"              why it is kept\n");
}

/* 0, NX_CLI_HELP or NX_CLI_USAGE (after a message). */
static int parse_prune_args(int argc, char **argv, struct prune_args *a)
{
	int i, npos = 0, done = 0;

	memset(a, 0, sizeof(*a));
	for (i = 1; i < argc; i++) {
		const char *arg = argv[i];

		if (done || arg[0] != '-' || !arg[1]) {
			a->target = arg;
			npos++;
		} else if (!strcmp(arg, "--")) {
			done = 1;
		} else if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
			return NX_CLI_HELP;
		} else if (!strcmp(arg, "--dry-run") || !strcmp(arg, "-n")) {
			a->dry_run = 1;
		} else if (!strcmp(arg, "--json")) {
			a->json = 1;
		} else if (!strncmp(arg, "--keep=", 7)) {
			a->spec = arg + 7;
		} else if (!strcmp(arg, "--keep") && i + 1 < argc) {
			a->spec = argv[++i];
		} else {
			nx_cli_error("snapshot prune: %s '%s'",
				     strcmp(arg, "--keep") ? "unknown option" :
				     "missing SPEC after", arg);
			return NX_CLI_USAGE;
		}
	}
	if (npos != 1 || !a->spec) {
		nx_cli_error("snapshot prune: %s", npos != 1 ?
			     "give one IMAGE_OR_MOUNTPOINT" :
			     "--keep SPEC is required (e.g. --keep "
			     "hourly=24,daily=7)");
		return NX_CLI_USAGE;
	}
	return 0;
}

/* What happened to each snapshot. */
enum prune_state { KEPT, NAMED, DELETE, DELETED, FAILED };

static const char *const state_words[] = {
	"keep", "ignore", "delete", "delete", "delete"
};

static void reasons_text(unsigned reasons, char *buf, size_t len)
{
	size_t used = 0;
	int rule;

	buf[0] = 0;
	for (rule = 0; rule < NX_KEEP_NRULES; rule++)
		if (reasons & (1U << rule))
			used += (size_t)snprintf(buf + used, len - used, "%s%s",
						 used ? "," : "",
						 nx_keep_rule_name(rule));
}

static void print_json(const struct nx_cli_snaps *snaps,
		       const struct nx_keep_item *items,
		       const enum prune_state *state, int dry_run)
{
	struct nx_json j;
	int i, rule;

	nx_json_init(&j, stdout);
	nx_json_open(&j, NULL, '{');
	nx_json_bool(&j, "dry_run", dry_run);
	nx_json_open(&j, "snapshots", '[');
	for (i = 0; i < snaps->n; i++) {
		nx_json_open(&j, NULL, '{');
		nx_json_u64(&j, "id", snaps->s[i].id);
		nx_json_str(&j, "name", snaps->s[i].name);
		nx_json_time(&j, "taken", &snaps->s[i].taken);
		nx_json_str(&j, "action", state_words[state[i]]);
		nx_json_bool(&j, "deleted", state[i] == DELETED);
		nx_json_open(&j, "reasons", '[');
		for (rule = 0; rule < NX_KEEP_NRULES; rule++)
			if (items[i].reasons & (1U << rule))
				nx_json_str(&j, NULL, nx_keep_rule_name(rule));
		nx_json_close(&j, ']');
		nx_json_close(&j, '}');
	}
	nx_json_close(&j, ']');
	nx_json_close(&j, '}');
	nx_json_end(&j);
}

/*
 * One line per timeline snapshot, oldest first: "keep NAME (why)",
 * "delete NAME" or "would delete NAME"; then how many named ones were
 * left alone.
 */
static void print_text(const struct nx_cli_snaps *snaps,
		       const struct nx_keep_item *items,
		       const enum prune_state *state, int dry_run)
{
	char why[128], q[NX_QUOTED_NAME_SIZE];
	int i, named = 0;

	for (i = 0; i < snaps->n; i++) {
		nx_out_quote(q, sizeof(q), snaps->s[i].name,
			     strlen(snaps->s[i].name));
		if (state[i] == NAMED) {
			named++;
			continue;
		}
		printf("%-13s %s", state[i] == KEPT ? "keep" :
		       state[i] == DELETED ? "deleted" :
		       dry_run ? "would delete" : "not deleted", q);
		if (state[i] == KEPT) {
			reasons_text(items[i].reasons, why, sizeof(why));
			printf(" (%s)", why[0] ? why : "dated after now");
		}
		putchar('\n');
	}
	if (named)
		printf("%d snapshot%s with other names left alone\n", named,
		       named == 1 ? "" : "s");
}

/* Delete what the decision says, oldest first; stop at the first error. */
static int delete_pruned(struct nx_cli_target *t,
			 const struct nx_cli_snaps *snaps,
			 enum prune_state *state)
{
	char q[NX_QUOTED_NAME_SIZE];
	errcode_t err;
	int i;

	for (i = 0; i < snaps->n; i++) {
		if (state[i] != DELETE)
			continue;
		err = nx_cli_delete(t, snaps->s[i].name);
		if (err) {
			state[i] = FAILED;
			nx_cli_error("cannot delete snapshot %s: %s; stopped",
				     nx_out_quote(q, sizeof(q),
						  snaps->s[i].name,
						  strlen(snaps->s[i].name)),
				     strerror(nx_errno(err)));
			return NX_CLI_FAIL;
		}
		state[i] = DELETED;
	}
	return 0;
}

/* The snapshots of the opened target, oldest first. */
static int list_target(struct nx_cli_target *t, struct nx_cli_snaps *snaps)
{
	int rc;

	memset(snaps, 0, sizeof(*snaps));
	if (t->mnt)
		return nx_cli_mount_snapshots(t->mnt, &snaps->s, &snaps->n,
					      &snaps->blocksize);
	nx_volume_lock(t->vol);
	rc = nx_cli_snaps_of_volume(t->vol, snaps);
	nx_volume_unlock(t->vol);
	return rc;
}

static int prune(const struct prune_args *a, const struct nx_keep_spec *keep)
{
	struct nx_cli_snaps snaps = { 0 };
	struct nx_keep_item *items = NULL;
	enum prune_state *state = NULL;
	struct nx_cli_target t;
	struct timespec now;
	char *mnt = NULL;
	errcode_t err;
	int i, rc;

	rc = nx_cli_open_target(a->target, a->dry_run ? NX_VOL_RDONLY : 0,
				&t.vol, &mnt);
	if (rc)
		return rc;
	t.mnt = mnt;
	rc = list_target(&t, &snaps);
	if (rc)
		goto out;
	items = calloc(snaps.n + 1, sizeof(*items));
	state = calloc(snaps.n + 1, sizeof(*state));
	if (!items || !state) {
		nx_cli_error("out of memory");
		rc = NX_CLI_FAIL;
		goto out;
	}
	for (i = 0; i < snaps.n; i++)
		items[i].name = snaps.s[i].name;
	clock_gettime(CLOCK_REALTIME, &now);
	err = nx_keep_decide(keep, (int64_t)now.tv_sec, items, snaps.n);
	if (err) {
		nx_cli_error("snapshot prune: %s", strerror(nx_errno(err)));
		rc = NX_CLI_FAIL;
		goto out;
	}
	for (i = 0; i < snaps.n; i++) {
		int64_t t;

		if (!items[i].keep)
			state[i] = DELETE;
		else if (nx_tl_name_parse(items[i].name, &t))
			state[i] = NAMED;
		else
			state[i] = KEPT;
	}
	if (!a->dry_run)
		rc = delete_pruned(&t, &snaps, state);
	if (a->json)
		print_json(&snaps, items, state, a->dry_run);
	else
		print_text(&snaps, items, state, a->dry_run);
	if (fflush(stdout))
		rc = NX_CLI_FAIL;
out:
	free(items);
	free(state);
	nx_cli_snaps_free(&snaps);
	free(mnt);
	if (t.vol) {
		err = nx_volume_close(t.vol);
		if (err && !rc) {
			nx_cli_error("closing the volume: %s",
				     error_message(err));
			rc = NX_CLI_FAIL;
		}
	}
	return rc;
}

int nx_cmd_snapshot_prune(int argc, char **argv)
{
	struct prune_args a;
	struct nx_keep_spec keep;
	char msg[256];
	int rc = parse_prune_args(argc, argv, &a);

	if (rc == NX_CLI_HELP) {
		prune_usage(stdout);
		return NX_CLI_OK;
	}
	if (rc)
		return rc;
	if (nx_keep_parse(a.spec, &keep, msg, sizeof(msg))) {
		nx_cli_error("snapshot prune: --keep: %s", msg);
		return NX_CLI_USAGE;
	}
	return prune(&a, &keep);
}
