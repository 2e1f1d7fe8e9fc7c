/* `tracepad markers record --fields POINT=NAME,...`: field names given explicitly, applied
 * by the recorder over those the program's formats give (record.h), for formats whose words
 * name nothing ("%d bytes from %s"). */
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

#include "markers/recorder.h"
#define TP_NO_SITE_REGISTRATION
#include "markers/record.h"

int tp_markers_fields_check(const char *spec, char *err, size_t errlen)
{
	const char *eq = strchr(spec, '='), *p;
	int k = 0;

	if (!eq || eq == spec || !eq[1]) {
		snprintf(err, errlen, "bad --fields '%s' (POINT=NAME,NAME,...)", spec);
		return -EINVAL;
	}
	for (p = eq + 1; p; k++) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);

		if (k == TP_MAX_ARGS) {
			snprintf(err, errlen, "bad --fields '%s': more than %d names", spec,
				 TP_MAX_ARGS);
			return -EINVAL;
		}
		if (n && !tp_markers_name_ok(p, n)) {
			snprintf(
			    err, errlen,
			    "bad --fields '%s': '%.*s' is no field name (letters, digits, '_'; "
			    "not aN, fmt or a TSDL keyword)",
			    spec, (int)n, p);
			return -EINVAL;
		}
		/* Twice in the list: two fields of one name. */
		for (const char *q = eq + 1; n && q < p;) {
			const char *qe = strchr(q, ',');

			if ((size_t)(qe - q) == n && !memcmp(q, p, n)) {
				snprintf(err, errlen, "bad --fields '%s': '%.*s' twice", spec,
					 (int)n, p);
				return -EINVAL;
			}
			q = qe + 1;
		}
		p = e ? e + 1 : NULL;
	}
	return 0;
}

void tp_markers_fields_apply(const char *const *specs, const char *point,
			     struct tp_trace_field_desc *f, int nf,
			     char buf[TP_MAX_ARGS][TP_MARKERS_NAME_MAX])
{
	static const char *const an[TP_MAX_ARGS] = {"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"};
	bool given[TP_MAX_ARGS + 1] = {false};
	char glob[TP_MARKERS_NAME_MAX * 4];
	const char *spec = NULL;

	/* The first spec whose POINT (a glob) matches. */
	for (; specs && *specs && !spec; specs++) {
		const char *eq = strchr(*specs, '=');

		if (eq && (size_t)(eq - *specs) < sizeof(glob)) {
			memcpy(glob, *specs, eq - *specs);
			glob[eq - *specs] = 0;
			if (!fnmatch(glob, point, 0))
				spec = eq + 1;
		}
	}
	for (int i = 1; spec && i < nf; i++) {
		const char *e = strchr(spec, ',');
		size_t n = e ? (size_t)(e - spec) : strlen(spec);

		if (n && n < TP_MARKERS_NAME_MAX) {
			memcpy(buf[i - 1], spec, n);
			buf[i - 1][n] = 0;
			f[i].name = buf[i - 1];
			given[i] = true;
		}
		spec = e ? e + 1 : NULL;
	}
	/* A name the format gave that is now given to another field: back to aN. */
	for (int i = 1; i < nf; i++)
		for (int j = 1; j < nf && !given[i]; j++)
			if (given[j] && !strcmp(f[i].name, f[j].name))
				f[i].name = an[i - 1];
}
