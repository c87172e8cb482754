/*
 * cmdline.c - the command table of the nextfs tool: one parser for every
 * command line, the help and usage it prints, and the list bash
 * completion reads (cli.h has the rules).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

#define HELP_INDENT	30	/* where summaries start in "nextfs --help" */
#define HELP_WIDTH	76

/* Parser results besides an exit status. */
#define PARSED		0
#define WANTS_HELP	(-1)

/* Is ARG[0..LEN) one of NAMES ("-r|--repair")? */
static int named(const char *names, const char *arg, size_t len)
{
	const char *p = names;

	for (;;) {
		if (!strncmp(p, arg, len) && (p[len] == '|' || !p[len]))
			return 1;
		p = strchr(p, '|');
		if (!p)
			return 0;
		p++;
	}
}

/* The length of the first of NAMES: the one shown. */
static int shown_len(const char *names)
{
	return (int)strcspn(names, "|");
}

/* The N-th word of the space-separated WORDS: its length, at *START. */
static size_t nth_word(const char *words, int n, const char **start)
{
	const char *p = words ? words : "";

	for (;;) {
		p += strspn(p, " ");
		if (!*p || !n--)
			break;
		p += strcspn(p, " ");
	}
	*start = p;
	return strcspn(p, " ");
}

/* The NAME of the N-th parameter ("target:PATH" gives "PATH"). */
static void param_name(const struct nx_cli_cmd *cmd, int n, char *buf,
		       size_t size)
{
	const char *w, *colon;
	size_t len = nth_word(cmd->params, n, &w);

	colon = memchr(w, ':', len);
	if (colon) {
		len -= (size_t)(colon + 1 - w);
		w = colon + 1;
	}
	snprintf(buf, size, "%.*s", (int)len, len ? w : "ARGUMENT");
}

static const struct nx_cli_cmd *find_sub(const struct nx_cli_cmd *cmd,
					 const char *word)
{
	const struct nx_cli_cmd *const *s;

	for (s = cmd->subs; *s; s++)
		if (named((*s)->name, word, strlen(word)))
			return *s;
	return NULL;
}

static int usage_status(const struct nx_cli_cmd *cmd)
{
	return cmd->usage_status ? cmd->usage_status : NX_CLI_USAGE;
}

/* ------------------------------------------------------------------ */
/* Help                                                                */

/* Each line of CMD's usage, after "usage: " (the first) or its indent. */
static void print_usage_lines(FILE *f, const struct nx_cli_cmd *cmd,
			      const char *prog, int *first)
{
	const struct nx_cli_cmd *const *s;
	const char *line = cmd->usage ? cmd->usage : "";
	size_t len;
	char sub[256];

	if (!cmd->usage && cmd->subs) {
		for (s = cmd->subs; *s; s++) {
			if ((*s)->flags & NX_CMD_HIDDEN)
				continue;
			snprintf(sub, sizeof(sub), "%s %.*s", prog,
				 shown_len((*s)->name), (*s)->name);
			print_usage_lines(f, *s, sub, first);
		}
		return;
	}
	do {
		len = strcspn(line, "\n");
		fprintf(f, "%s%s%s%.*s\n", *first ? "usage: " : "       ",
			prog, len ? " " : "", (int)len, line);
		*first = 0;
		line += len;
	} while (*line++);
}

/* What the arguments of CMD are: "IMAGE NAME [OUT]", "COMMAND [ARGS...]". */
static void synopsis(const struct nx_cli_cmd *cmd, char *buf, size_t size)
{
	const struct nx_cli_cmd *const *s;
	char name[64];
	size_t used = 0;
	int i;

	buf[0] = 0;
	if (cmd->subs) {
		for (s = cmd->subs; *s && used < size; s++)
			if (!((*s)->flags & NX_CMD_HIDDEN))
				used += (size_t)snprintf(buf + used,
							 size - used, "%s%.*s",
							 used ? "|" : "",
							 shown_len((*s)->name),
							 (*s)->name);
		return;
	}
	for (i = 0; used < size && (cmd->max < 0 || i < cmd->max); i++) {
		const char *w;

		if (!nth_word(cmd->params, i, &w))
			break;
		param_name(cmd, i, name, sizeof(name));
		used += (size_t)snprintf(buf + used, size - used,
					 i < cmd->min ? " %s" : " [%s%s]", name,
					 cmd->max < 0 ? "..." : "");
	}
}

/* SUMMARY from column HELP_INDENT, its words wrapped at HELP_WIDTH. */
static void print_summary(FILE *f, const char *summary, int col)
{
	const char *p = summary;
	size_t len;

	while (*p) {
		len = strcspn(p, " ");
		if (col > HELP_INDENT && col + 1 + (int)len > HELP_WIDTH) {
			fprintf(f, "\n%*s", HELP_INDENT, "");
			col = HELP_INDENT;
		} else if (col > HELP_INDENT) {
			fputc(' ', f);
			col++;
		}
		fprintf(f, "%.*s", (int)len, p);
		col += (int)len;
		p += len;
		p += strspn(p, " ");
	}
	fputc('\n', f);
}

/* The "Commands:" list of a group: one entry per command it shows. */
static void print_commands(FILE *f, const struct nx_cli_cmd *group)
{
	const struct nx_cli_cmd *const *s;
	char left[256];
	int n;

	fputs("\nCommands:\n", f);
	for (s = group->subs; *s; s++) {
		if ((*s)->flags & NX_CMD_HIDDEN)
			continue;
		synopsis(*s, left, sizeof(left));
		n = fprintf(f, "  %.*s%s%s", shown_len((*s)->name),
			    (*s)->name, (*s)->subs ? " " : "", left);
		if (n > HELP_INDENT - 2) {
			fputc('\n', f);
			n = 0;
		}
		fprintf(f, "%*s", HELP_INDENT - n, "");
		print_summary(f, (*s)->summary ? (*s)->summary : "",
			      HELP_INDENT);
	}
}

static void print_help(FILE *f, const struct nx_cli_cmd *cmd,
		       const char *prog)
{
	int first = 1;

	print_usage_lines(f, cmd, prog, &first);
	if (cmd->usage && cmd->subs)
		print_commands(f, cmd);
	if (cmd->help)
		fprintf(f, "\n%s", cmd->help);
}

int nx_cli_help(const struct nx_cli_cmd *top, struct nx_cli_args *a)
{
	const struct nx_cli_cmd *cmd = top, *sub;
	char prog[256] = "nextfs";
	size_t used = strlen(prog);
	int i;

	for (i = 0; i < a->npos; i++) {
		sub = cmd->subs ? find_sub(cmd, a->pos[i]) : NULL;
		if (!sub)
			return nx_cli_usage_error(a, "no command '%s'",
						  a->pos[i]);
		used += (size_t)snprintf(prog + used, sizeof(prog) - used,
					 " %.*s", shown_len(sub->name),
					 sub->name);
		if (used >= sizeof(prog))
			return nx_cli_usage_error(a, "too long");
		cmd = sub;
	}
	print_help(stdout, cmd, prog);
	return fflush(stdout) ? NX_CLI_FAIL : NX_CLI_OK;
}

/* ------------------------------------------------------------------ */
/* Wrong command lines                                                 */

static int vusage_error(const struct nx_cli_cmd *cmd, const char *name,
			const char *prog, const char *fmt, va_list ap)
{
	char msg[512];
	int first = 1;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	nx_cli_error("%s%s%s", name, name[0] ? ": " : "", msg);
	print_usage_lines(stderr, cmd, prog, &first);
	fprintf(stderr, "Run '%s --help' for more.\n", prog);
	return usage_status(cmd);
}

static int usage_error(const struct nx_cli_cmd *cmd, const char *name,
		       const char *prog, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int usage_error(const struct nx_cli_cmd *cmd, const char *name,
		       const char *prog, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vusage_error(cmd, name, prog, fmt, ap);
	va_end(ap);
	return rc;
}

int nx_cli_usage_error(const struct nx_cli_args *a, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vusage_error(a->cmd, a->name, a->prog, fmt, ap);
	va_end(ap);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Parsing                                                             */

/* The option ARG names ("--keep=SPEC": *VALUE "SPEC"), or NULL. */
static const struct nx_cli_opt *find_opt(const struct nx_cli_cmd *cmd,
					 const char *arg, const char **value)
{
	const char *eq = strncmp(arg, "--", 2) ? NULL : strchr(arg, '=');
	size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
	const struct nx_cli_opt *o;

	for (o = cmd->opts; o && o->names; o++)
		if (named(o->names, arg, len) && (!eq || o->value)) {
			*value = eq ? eq + 1 : NULL;
			return o;
		}
	return NULL;
}

static void set_opt(struct nx_cli_args *a, const struct nx_cli_opt *o,
		    const char *value)
{
	a->opt[o->slot] = o->set;
	if (o->value)
		a->val[o->slot] = value;
}

/* "-fv" as "-f -v" (NX_CMD_CLUSTER): 1 if every letter is a flag. */
static int set_cluster(struct nx_cli_args *a, const char *arg)
{
	const struct nx_cli_opt *o;
	const char *c, *v;
	char one[3] = "-";

	if (!(a->cmd->flags & NX_CMD_CLUSTER) || arg[1] == '-')
		return 0;
	for (c = arg + 1; *c; c++) {
		one[1] = *c;
		o = find_opt(a->cmd, one, &v);
		if (!o || o->value)
			return 0;
	}
	for (c = arg + 1; *c; c++) {
		one[1] = *c;
		set_opt(a, find_opt(a->cmd, one, &v), NULL);
	}
	return 1;
}

/* After the arguments: what the command line lacks or has too much. */
static int check_counts(struct nx_cli_args *a)
{
	const struct nx_cli_cmd *cmd = a->cmd;
	const struct nx_cli_opt *o;
	char name[64];

	if (cmd->max >= 0 && a->npos > cmd->max)
		return nx_cli_usage_error(a, "unexpected argument '%s'",
					  a->pos[cmd->max]);
	if (a->npos < cmd->min) {
		param_name(cmd, a->npos, name, sizeof(name));
		return nx_cli_usage_error(a, "no %s given", name);
	}
	for (o = cmd->opts; o && o->names; o++)
		if (o->required && !a->opt[o->slot])
			return nx_cli_usage_error(a, "%.*s %s is required",
						  shown_len(o->names),
						  o->names,
						  strchr(o->value, ':') + 1);
	return PARSED;
}

/* ARGV into *A (see cli.h): PARSED, WANTS_HELP or an exit status. */
static int parse(struct nx_cli_args *a, int argc, char **argv)
{
	const struct nx_cli_cmd *cmd = a->cmd;
	const struct nx_cli_opt *o;
	int i, done = 0, rest = 0;
	const char *arg, *value;

	for (i = 1; i < argc; i++) {
		arg = argv[i];
		if (rest || done || arg[0] != '-' || !arg[1]) {
			a->pos[a->npos++] = argv[i];
			if ((cmd->flags & NX_CMD_REST) && !rest) {
				rest = 1;
				if (i + 1 < argc && !strcmp(argv[i + 1], "--"))
					i++;
			}
			continue;
		}
		if (!strcmp(arg, "--")) {
			done = 1;	/* what follows are names */
			continue;
		}
		if (!strcmp(arg, "-h") || !strcmp(arg, "--help"))
			return WANTS_HELP;
		o = find_opt(cmd, arg, &value);
		if (!o && set_cluster(a, arg))
			continue;
		if (!o)
			return nx_cli_usage_error(a, "unknown option '%s' (%s)",
						  arg, cmd->unknown_hint ?
						  cmd->unknown_hint :
						  "a name that starts with "
						  "'-' goes after '--'");
		if (o->value && !value) {
			if (i + 1 == argc)
				return nx_cli_usage_error(a, "no %s after %s",
						strchr(o->value, ':') + 1, arg);
			value = argv[++i];
		}
		set_opt(a, o, value);
	}
	return check_counts(a);
}

/* A group: its subcommand is ARGV[1]. */
static int run_group(const struct nx_cli_cmd *cmd, const char *name,
		     const char *prog, int argc, char **argv)
{
	const char *word = argc > 1 ? argv[1] : NULL;
	const struct nx_cli_cmd *sub;
	char *subname = NULL, *subprog = NULL;
	int rc;

	if (!word) {
		print_help(stderr, cmd, prog);
		return usage_status(cmd);
	}
	if (!strcmp(word, "-h") || !strcmp(word, "--help")) {
		print_help(stdout, cmd, prog);
		return fflush(stdout) ? NX_CLI_FAIL : NX_CLI_OK;
	}
	sub = find_sub(cmd, word);
	if (!sub)
		return usage_error(cmd, name, prog, "unknown command '%s'",
				   word);
	if (asprintf(&subname, "%s%s%.*s", name, name[0] ? " " : "",
		     shown_len(sub->name), sub->name) < 0)
		subname = NULL;
	if (asprintf(&subprog, "%s %.*s", prog, shown_len(sub->name),
		     sub->name) < 0)
		subprog = NULL;
	if (!subname || !subprog) {
		nx_cli_error("out of memory");
		rc = NX_CLI_FAIL;
	} else {
		rc = nx_cli_run(sub, subname, subprog, argc - 1, argv + 1);
	}
	free(subname);
	free(subprog);
	return rc;
}

int nx_cli_run(const struct nx_cli_cmd *cmd, const char *name,
	       const char *prog, int argc, char **argv)
{
	struct nx_cli_args a;
	int rc;

	if (cmd->subs)
		return run_group(cmd, name, prog, argc, argv);
	memset(&a, 0, sizeof(a));
	a.cmd = cmd;
	a.name = name;
	a.prog = prog;
	a.pos = calloc((size_t)argc + 1, sizeof(*a.pos));
	if (!a.pos) {
		nx_cli_error("out of memory");
		return NX_CLI_FAIL;
	}
	rc = parse(&a, argc, argv);
	if (rc == WANTS_HELP) {
		print_help(stdout, cmd, prog);
		rc = fflush(stdout) ? NX_CLI_FAIL : NX_CLI_OK;
	} else if (rc == PARSED) {
		rc = cmd->run(&a);
	}
	free(a.pos);
	return rc;
}

/* ------------------------------------------------------------------ */
/* For bash completion                                                 */

static void print_spec_of(const struct nx_cli_cmd *cmd, const char *path)
{
	const struct nx_cli_cmd *const *s;
	const struct nx_cli_opt *o;
	const char *w;
	char sub[256];
	size_t len;
	int i;

	if (cmd->subs) {
		for (s = cmd->subs; *s; s++) {
			if ((*s)->flags & NX_CMD_HIDDEN)
				continue;
			snprintf(sub, sizeof(sub), "%s%s%.*s", path,
				 path[0] ? " " : "", shown_len((*s)->name),
				 (*s)->name);
			print_spec_of(*s, sub);
		}
		return;
	}
	printf("%s;", path);
	for (o = cmd->opts; o && o->names; o++) {
		len = o->value ? strcspn(o->value, ":") : 0;
		printf("%s%s%s%s%.*s", o == cmd->opts ? "" : " ",
		       o->hidden ? "!" : "", o->names, o->value ? "=" : "",
		       (int)len, o->value ? o->value : "");
	}
	putchar(';');
	for (i = 0; (len = nth_word(cmd->params, i, &w)); i++) {
		if (memchr(w, ':', len))
			len = (size_t)((const char *)memchr(w, ':', len) - w);
		printf("%s%.*s", i ? " " : "", (int)len, w);
	}
	putchar('\n');
}

void nx_cli_print_spec(const struct nx_cli_cmd *top)
{
	print_spec_of(top, "");
}
