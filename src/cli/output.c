/*
 * output.c - names, times and JSON as the nextfs tool writes them (see
 * output.h for the contract).
 */
#include "output.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Characters                                                          */

/*
 * Length of the valid UTF-8 sequence at S (LEFT bytes available), 0 if
 * the byte at S does not start one (overlong forms, surrogates and
 * values above U+10FFFF are not valid).  *CP gets the code point.
 */
static size_t utf8_seq(const unsigned char *s, size_t left, uint32_t *cp)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t n, i;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		*cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		*cp = c & 0x0f;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;	/* no UTF-16 surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		*cp = c & 0x07;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;	/* nothing above U+10FFFF */
	} else {
		return 0;
	}
	if (left < n || s[1] < lo || s[1] > hi)
		return 0;
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		*cp = (*cp << 6) | (s[i] & 0x3f);
	}
	return n;
}

/* C0 and C1 controls and DEL: never written raw. */
static int is_control(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp < 0xa0);
}

/*
 * The next unit of S: a printable character (*PRINTABLE = 1, the length
 * of its UTF-8 sequence) or one byte that must be escaped.
 */
static size_t next_unit(const char *s, size_t left, int *printable,
			uint32_t *cp)
{
	size_t n = utf8_seq((const unsigned char *)s, left, cp);

	*printable = n && !is_control(*cp);
	return n && *printable ? n : 1;
}

/* ------------------------------------------------------------------ */
/* Text                                                                */

/* Characters a shell word may hold unquoted ('#' and '~' not first). */
static int shell_safe(unsigned char c, size_t pos)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9'))
		return 1;
	if ((c == '#' || c == '~') && pos)
		return 1;
	return c >= 0x80 || strchr("%+,-./:=@_", c) != NULL;
}

static int needs_quotes(const char *s, size_t len)
{
	size_t i, n;
	uint32_t cp;
	int printable;

	if (!len)
		return 1;
	for (i = 0; i < len; i += n) {
		n = next_unit(s + i, len - i, &printable, &cp);
		if (!printable || !shell_safe((unsigned char)s[i], i))
			return 1;
	}
	return 0;
}

struct qbuf {
	char *buf;
	size_t size, used;
};

static void qput(struct qbuf *q, const char *s, size_t n)
{
	while (n--) {
		if (q->used + 1 < q->size)
			q->buf[q->used++] = *s;
		s++;
	}
}

/* Inside $'...': the C escape of byte C. */
static void qput_escaped_byte(struct qbuf *q, unsigned char c)
{
	static const char named[] = "\a\b\t\n\v\f\r";
	static const char letter[] = "abtnvfr";
	const char *p = c ? strchr(named, c) : NULL;
	char esc[5];

	if (p) {
		esc[0] = '\\';
		esc[1] = letter[p - named];
		qput(q, esc, 2);
	} else {
		snprintf(esc, sizeof(esc), "\\%03o", c);
		qput(q, esc, 4);
	}
}

char *nx_out_quote(char *buf, size_t size, const char *s, size_t len)
{
	enum { OUT, SINGLE, DOLLAR } state = OUT;
	struct qbuf q = { buf, size, 0 };
	size_t i, n, k;
	uint32_t cp;
	int printable;

	if (!size)
		return buf;
	if (!needs_quotes(s, len)) {
		qput(&q, s, len);
		buf[q.used] = 0;
		return buf;
	}
	for (i = 0; i < len; i += n) {
		n = next_unit(s + i, len - i, &printable, &cp);
		if (printable && s[i] != '\'') {
			if (state != SINGLE) {
				qput(&q, state == DOLLAR ? "''" : "'",
				     state == DOLLAR ? 2 : 1);
				state = SINGLE;
			}
			qput(&q, s + i, n);
			continue;
		}
		if (state != DOLLAR) {
			qput(&q, state == SINGLE ? "'$'" : "$'",
			     state == SINGLE ? 3 : 2);
			state = DOLLAR;
		}
		if (s[i] == '\'')
			qput(&q, "\\'", 2);
		else
			for (k = 0; k < n; k++)
				qput_escaped_byte(&q, (unsigned char)s[i + k]);
	}
	if (state != OUT)
		qput(&q, "'", 1);
	buf[q.used] = 0;
	return buf;
}

void nx_out_print_quoted(FILE *f, const char *s)
{
	size_t len = strlen(s);
	char small[NX_QUOTED_NAME_SIZE], *big = NULL, *buf = small;

	if (NX_QUOTE_SIZE(len) > sizeof(small)) {
		big = malloc(NX_QUOTE_SIZE(len));
		if (!big) {
			nx_out_escape(f, s);	/* exact all the same */
			return;
		}
		buf = big;
	}
	fputs(nx_out_quote(buf, NX_QUOTE_SIZE(len), s, len), f);
	free(big);
}

/* Write S with every unit for which ESCAPE() says so as \ooo. */
static void print_octal_escaped(FILE *f, const char *s,
				int (*escape)(unsigned char c, int printable))
{
	size_t len = strlen(s), i, n, k;
	uint32_t cp;
	int printable;

	for (i = 0; i < len; i += n) {
		n = next_unit(s + i, len - i, &printable, &cp);
		if (!escape((unsigned char)s[i], printable)) {
			fwrite(s + i, 1, n, f);
			continue;
		}
		for (k = 0; k < n; k++)
			fprintf(f, "\\%03o", (unsigned char)s[i + k]);
	}
}

/* diff: spaces separate fields, a backslash starts an escape. */
static int diff_escape(unsigned char c, int printable)
{
	return !printable || c <= ' ' || c == '\\';
}

static int line_escape(unsigned char c, int printable)
{
	return !printable;
}

void nx_out_escape(FILE *f, const char *s)
{
	print_octal_escaped(f, s, diff_escape);
}

void nx_out_line(FILE *f, const char *msg)
{
	print_octal_escaped(f, msg, line_escape);
}

char *nx_out_local_time(char *buf, size_t size, const struct timespec *ts)
{
	time_t t = ts->tv_sec;
	struct tm tm;

	if (!localtime_r(&t, &tm) ||
	    !strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, size, "@%lld", (long long)ts->tv_sec);
	return buf;
}

char *nx_out_iso_time(char *buf, size_t size, const struct timespec *ts)
{
	time_t t = ts->tv_sec;
	struct tm tm;
	size_t n;

	if (!gmtime_r(&t, &tm) ||
	    !(n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm))) {
		snprintf(buf, size, "@%lld", (long long)ts->tv_sec);
		return buf;
	}
	snprintf(buf + n, size - n, ".%09ldZ", (long)ts->tv_nsec);
	return buf;
}

/* ------------------------------------------------------------------ */
/* JSON                                                                */

void nx_json_print_string(FILE *f, const char *s, size_t len)
{
	size_t i, n;
	uint32_t cp;

	putc('"', f);
	for (i = 0; i < len; i += n) {
		unsigned char c = (unsigned char)s[i];

		n = utf8_seq((const unsigned char *)s + i, len - i, &cp);
		if (!n) {			/* not UTF-8: surrogateescape */
			fprintf(f, "\\udc%02x", c);
			n = 1;
		} else if (c == '"' || c == '\\') {
			fprintf(f, "\\%c", c);
		} else if (!is_control(cp)) {
			fwrite(s + i, 1, n, f);
		} else if (c == '\n') {
			fputs("\\n", f);
		} else if (c == '\t') {
			fputs("\\t", f);
		} else if (c == '\r') {
			fputs("\\r", f);
		} else {
			fprintf(f, "\\u%04x", (unsigned)cp);
		}
	}
	putc('"', f);
}

void nx_json_init(struct nx_json *j, FILE *f)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
	j->first[0] = 1;
}

/* Separator and key before a value. */
static void json_key(struct nx_json *j, const char *key)
{
	if (!j->first[j->depth])
		fputs(", ", j->f);
	j->first[j->depth] = 0;
	if (key) {
		nx_json_print_string(j->f, key, strlen(key));
		fputs(": ", j->f);
	}
}

void nx_json_open(struct nx_json *j, const char *key, char bracket)
{
	json_key(j, key);
	putc(bracket, j->f);
	if (j->depth + 1 < NX_JSON_DEPTH)
		j->depth++;
	j->first[j->depth] = 1;
}

void nx_json_close(struct nx_json *j, char bracket)
{
	putc(bracket, j->f);
	if (j->depth)
		j->depth--;
}

void nx_json_end(struct nx_json *j)
{
	putc('\n', j->f);
}

void nx_json_strn(struct nx_json *j, const char *key, const char *s,
		  size_t len)
{
	json_key(j, key);
	nx_json_print_string(j->f, s, len);
}

void nx_json_str(struct nx_json *j, const char *key, const char *s)
{
	nx_json_strn(j, key, s, strlen(s));
}

void nx_json_u64(struct nx_json *j, const char *key, uint64_t v)
{
	json_key(j, key);
	fprintf(j->f, "%" PRIu64, v);
}

void nx_json_bool(struct nx_json *j, const char *key, int v)
{
	json_key(j, key);
	fputs(v ? "true" : "false", j->f);
}

void nx_json_time(struct nx_json *j, const char *key,
		  const struct timespec *ts)
{
	char buf[NX_TIME_SIZE];

	nx_json_str(j, key, nx_out_iso_time(buf, sizeof(buf), ts));
}

void nx_json_epoch(struct nx_json *j, const char *key,
		   const struct timespec *ts)
{
	long long sec = ts->tv_sec;
	long nsec = ts->tv_nsec;

	json_key(j, key);
	/* tv_nsec counts up from tv_sec, also before 1970. */
	if (sec < 0 && nsec) {
		sec++;
		nsec = 1000000000L - nsec;
		fprintf(j->f, "-%lld.%09ld", -sec, nsec);
		return;
	}
	fprintf(j->f, "%lld.%09ld", sec, nsec);
}
