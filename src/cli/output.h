/*
 * output.h - how the nextfs tool writes names, times and JSON.
 *
 * Contract (docs/design.md P15: names are data; a name is any bytes but '/'
 * and NUL): every command prints names and paths through these helpers,
 * so that the exact bytes can always be recovered and one name never
 * looks like another or like two lines.
 *  - Text: nx_out_quote() leaves a name as it is when that is safe and
 *    otherwise quotes it the way ls(1) does on a terminal
 *    (--quoting-style=shell-escape): 'a b', 'new'$'\n''line', $'\377'.
 *    Pasted into bash, zsh or ksh it is the name again.  nx_out_escape()
 *    is the line-oriented form of "nextfs diff": bytes below '!', '\',
 *    DEL and bytes that are not printable UTF-8 as \ooo (octal).
 *  - JSON: strings are valid UTF-8 JSON for any bytes: valid UTF-8 as
 *    it is (printable), '"', '\' and control characters (C0, DEL, C1)
 *    escaped, and every byte that is not part of valid UTF-8 as \udcXX
 *    (XX: the byte), which is how Python's surrogateescape represents
 *    it: json.loads(s).encode('utf-8', 'surrogateescape') gives the
 *    exact bytes back.
 *  - Times: text in local time ("2026-12-04 05:07:23"), JSON in ISO 8601
 *    UTC with nanoseconds ("2026-12-04T05:07:23.432613240Z").
 *  - Messages (nx_out_line): one line, whatever they quote: control
 *    characters and bytes that are not UTF-8 as \ooo.
 */
#ifndef NEXTFS_CLI_OUTPUT_H
#define NEXTFS_CLI_OUTPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* Room nx_out_quote() needs for LEN bytes (with the NUL). */
#define NX_QUOTE_SIZE(len)	(6 * (size_t)(len) + 3)
/* ... for any snapshot or file name (NX_NAME_MAX bytes). */
#define NX_QUOTED_NAME_SIZE	NX_QUOTE_SIZE(255)
#define NX_TIME_SIZE		40

/*
 * Quote S (LEN bytes) into BUF of SIZE >= NX_QUOTE_SIZE(LEN) bytes
 * (shorter: cut, still NUL-terminated).  Returns BUF.
 */
char *nx_out_quote(char *buf, size_t size, const char *s, size_t len);
/* Print NUL-terminated S quoted. */
void nx_out_print_quoted(FILE *f, const char *s);
/* Print S in the escaped form of nextfs diff. */
void nx_out_escape(FILE *f, const char *s);
/* Print MSG as one line: see above.  No newline is added. */
void nx_out_line(FILE *f, const char *msg);

/* TS as local "YYYY-MM-DD HH:MM:SS" and as ISO 8601 UTC (NX_TIME_SIZE). */
char *nx_out_local_time(char *buf, size_t size, const struct timespec *ts);
char *nx_out_iso_time(char *buf, size_t size, const struct timespec *ts);

/*
 * A small JSON writer: values go into the innermost open object (with a
 * KEY) or array (KEY NULL); separators and nesting are its business.
 */
#define NX_JSON_DEPTH	16

struct nx_json {
	FILE *f;
	int depth;
	unsigned char first[NX_JSON_DEPTH];	/* nothing written at this level yet */
};

void nx_json_init(struct nx_json *j, FILE *f);
/* Open '{' or '[' as the value of KEY; close it.  nx_json_end: newline. */
void nx_json_open(struct nx_json *j, const char *key, char bracket);
void nx_json_close(struct nx_json *j, char bracket);
void nx_json_end(struct nx_json *j);
void nx_json_str(struct nx_json *j, const char *key, const char *s);
void nx_json_strn(struct nx_json *j, const char *key, const char *s,
		  size_t len);
void nx_json_u64(struct nx_json *j, const char *key, uint64_t v);
void nx_json_bool(struct nx_json *j, const char *key, int v);
/* TS as an ISO 8601 string, and as seconds since the epoch (a number). */
void nx_json_time(struct nx_json *j, const char *key,
		  const struct timespec *ts);
void nx_json_epoch(struct nx_json *j, const char *key,
		   const struct timespec *ts);

/* The bare JSON string for S (LEN bytes), quotes included. */
void nx_json_print_string(FILE *f, const char *s, size_t len);

#endif
