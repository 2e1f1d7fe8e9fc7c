/* Text output shared by the commands: UTF-8 checks and JSON strings. */
#include <stdbool.h>
#include <string.h>

#include "base/text.h"

/* Length of the valid UTF-8 sequence at @s (at most @n bytes), 0 if there is none. */
size_t tp_text_utf8_len(const unsigned char *s, size_t n)
{
	size_t len;
	unsigned char lo = 0x80, hi = 0xbf;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (n < len)
		return 0;
	/* No overlong forms, no surrogates, nothing above U+10FFFF. */
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

/* Length of the run of printable ASCII at @s, none of it in @special: written as it is. */
size_t tp_text_plain_run(const unsigned char *s, size_t n, const char *special)
{
	size_t i = 0;

	while (i < n && s[i] >= 0x20 && s[i] < 0x7f && !strchr(special, s[i]))
		i++;
	return i;
}

/* Quoted; printable ASCII and valid UTF-8 as they are, the rest escaped as C (@json false:
 * \x for control bytes and invalid UTF-8) or JSON (\u, U+FFFD) has it. */
static void quote(FILE *f, const char *str, size_t n, bool json)
{
	const unsigned char *s = (const unsigned char *)str;

	fputc('"', f);
	for (size_t i = 0; i < n;) {
		size_t u = tp_text_plain_run(s + i, n - i, "\"\\");

		if (u) {
			fwrite(s + i, 1, u, f);
			i += u;
			continue;
		}
		u = tp_text_utf8_len(s + i, n - i);
		if (s[i] == '"' || s[i] == '\\')
			fprintf(f, "\\%c", s[i]);
		else if (s[i] == '\n')
			fputs("\\n", f);
		else if (s[i] == '\t')
			fputs("\\t", f);
		else if (json && s[i] < 0x20)
			fprintf(f, "\\u%04x", s[i]);
		else if (json && !u)
			fputs("\\ufffd", f);
		else if (!json && (s[i] < 0x20 || s[i] == 0x7f || !u))
			fprintf(f, "\\x%02x", s[i]);
		else {
			fwrite(s + i, 1, u, f);
			i += u;
			continue;
		}
		i++;
	}
	fputc('"', f);
}

void tp_json_str(FILE *f, const char *s, size_t n)
{
	quote(f, s, n, true);
}

void tp_text_str(FILE *f, const char *s, size_t n)
{
	quote(f, s, n, false);
}
