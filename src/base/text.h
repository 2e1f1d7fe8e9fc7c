/* Text output shared by the commands: UTF-8 checks and JSON strings. */
#ifndef TP_BASE_TEXT_H
#define TP_BASE_TEXT_H

#include <stddef.h>
#include <stdio.h>

/* Length of the valid UTF-8 sequence at @s (at most @n bytes), 0 if there is none. */
size_t tp_text_utf8_len(const unsigned char *s, size_t n);
/* Length of the run of printable ASCII at @s, none of it in @special. */
size_t tp_text_plain_run(const unsigned char *s, size_t n, const char *special);
/* @len bytes at @s as a JSON string; bytes that are not UTF-8 become U+FFFD. */
void tp_json_str(FILE *f, const char *s, size_t len);
/* As text: quoted, with C escapes for what a terminal would interpret. */
void tp_text_str(FILE *f, const char *s, size_t len);

#endif
