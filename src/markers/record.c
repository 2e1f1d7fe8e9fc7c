/* Marker events as trace-store payloads: the fields of a site's event class, and the
 * encoding of one event into (and back out of) a ring record. */
#include "record.h"

#include "rt/rt.h"

#include <errno.h>
#include <string.h>

int tp_markers_fields(const struct tp_site_desc *desc,
		      struct tp_trace_field_desc out[TP_MARKERS_MAX_FIELDS])
{
	if (desc->nargs > TP_MAX_ARGS || strlen(desc->types) != desc->nargs)
		return -EINVAL;
	return tp_markers_fields_of(desc->types, out);
}

const union tp_arg *tp_markers_safe_args(const struct tp_site_desc *desc, const union tp_arg *args,
					 struct tp_markers_safe_args *tmp)
{
	uint32_t n = desc->nargs < TP_MAX_ARGS ? desc->nargs : TP_MAX_ARGS;

	if (!strchr(desc->types, TP_ARG_STR))
		return args;
	for (uint32_t i = 0; i < n; i++) {
		tmp->args[i] = args[i];
		if (desc->types[i] != TP_ARG_STR)
			continue;
		if (!args[i].s)
			tmp->args[i].s = "(null)";
		else if (tp_rt_mem_strcpy((uint64_t)(uintptr_t)args[i].s, tmp->str[i],
					  sizeof(tmp->str[i])) < 0)
			tmp->args[i].s = "(bad pointer)";
		else
			tmp->args[i].s = tmp->str[i];
	}
	return tmp->args;
}

static size_t str_len(const char *s)
{
	return s ? strnlen(s, TP_MARKERS_STR_MAX) : 0;
}

size_t tp_markers_record_size(const struct tp_site_desc *desc, const union tp_arg *args)
{
	size_t n = 4;

	for (uint32_t i = 0; i < desc->nargs && i < TP_MAX_ARGS; i++) {
		char t = desc->types[i];
		n += t == TP_ARG_STR ? str_len(args[i].s) + 1 : (size_t)tp_markers_arg_bytes(t);
	}
	return n;
}

ssize_t tp_markers_encode(const struct tp_site_desc *desc, uint32_t fmt_id,
			  const union tp_arg *args, uint8_t *buf, size_t cap)
{
	size_t need = tp_markers_record_size(desc, args);
	uint8_t *p = buf;

	if (need > cap)
		return -ENOSPC;
	p = tp_trace_put_u32(p, fmt_id);
	for (uint32_t i = 0; i < desc->nargs && i < TP_MAX_ARGS; i++) {
		char t = desc->types[i];
		switch (tp_markers_arg_bytes(t)) {
		case 1:
			p = tp_trace_put_u8(p, (uint8_t)args[i].u);
			break;
		case 2:
			p = tp_trace_put_u16(p, (uint16_t)args[i].u);
			break;
		case 4:
			p = tp_trace_put_u32(p, (uint32_t)args[i].u);
			break;
		case 8:
			p = tp_trace_put_u64(p, args[i].u);
			break;
		default: /* string */
			p = tp_trace_put_str(p, args[i].s ? args[i].s : "", str_len(args[i].s));
			break;
		}
	}
	return (ssize_t)(p - buf);
}

int tp_markers_decode(const struct tp_site_desc *desc, const uint8_t *buf, size_t len,
		      uint32_t *fmt_id, union tp_arg args[TP_MAX_ARGS])
{
	const uint8_t *p = buf, *end = buf + len;

	if (len < 4 || desc->nargs > TP_MAX_ARGS)
		return -EINVAL;
	memcpy(fmt_id, p, 4);
	p += 4;
	for (uint32_t i = 0; i < desc->nargs; i++) {
		char t = desc->types[i];
		int n = tp_markers_arg_bytes(t);
		if (t == TP_ARG_STR) {
			const uint8_t *nul = memchr(p, 0, (size_t)(end - p));
			if (!nul)
				return -EINVAL;
			args[i].s = (const char *)p;
			p = nul + 1;
			continue;
		}
		if (!n || end - p < n)
			return -EINVAL;
		uint64_t u = 0;
		memcpy(&u, p, (size_t)n);
		p += n;
		/* Narrow signed values come back sign-extended, as tp__fire saw them. */
		if (t == TP_ARG_I8)
			args[i].i = (int8_t)u;
		else if (t == TP_ARG_I16)
			args[i].i = (int16_t)u;
		else if (t == TP_ARG_I32)
			args[i].i = (int32_t)u;
		else
			args[i].u = u;
	}
	return p == end ? 0 : -EINVAL;
}
