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
	errcode_t err;
	int i, rc;

	rc = nx_cli_target_open(a->target, a->dry_run ? NX_VOL_RDONLY : 0,
				&t);
	if (rc)
		return rc;
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
	if (nx_cli_target_close(&t))
		rc = NX_CLI_FAIL;
	return rc;
}

int nx_cmd_snapshot_prune(struct nx_cli_args *a)
{
	struct prune_args pa = {
		.target = a->pos[0],
		.spec = a->val[NX_OPT_KEEP],
		.dry_run = a->opt[NX_OPT_DRY_RUN],
		.json = a->opt[NX_OPT_JSON],
	};
	struct nx_keep_spec keep;
	char msg[256];

	if (nx_keep_parse(pa.spec, &keep, msg, sizeof(msg))) {
		nx_cli_error("snapshot prune: --keep: %s", msg);
		return NX_CLI_USAGE;
	}
	return prune(&pa, &keep);
}
