/* Shared by the files of libtracepad: the registry of loaded objects (markers.c) and the
 * recording sessions into tracepad's rings (session.c). */
#ifndef TP_MARKERS_PRIV_H
#define TP_MARKERS_PRIV_H

#include <tracepad/tracepoint.h>

#include <pthread.h>
#include <stdbool.h>

#define TP_PUBLIC __attribute__((visibility("default")))

/* One registered object: its section range, referenced once per translation unit. */
struct tp_markers_object {
	struct tp_markers_object *next;
	struct tp_site *start, *stop;
	unsigned refs;
};

extern pthread_mutex_t tp_markers_lock;
extern struct tp_markers_object *tp_markers_objects;

/* Once, under the lock, before the first object is registered: the session that
 * `tracepad markers record -- PROGRAM` prepared in the environment, if any. */
void tp_markers_session_env_locked(void);
/* Act on a pending request of `tracepad markers record -p` (under the lock). */
void tp_markers_session_poll_locked(void);
/* Declare the classes of newly registered sites to the current session (under the lock). */
void tp_markers_session_add_locked(struct tp_site *start, struct tp_site *stop);
/* Forget the sites of an object being unloaded (under the lock). */
void tp_markers_session_remove_locked(struct tp_site *start, struct tp_site *stop);
/* Record an event if a session is active; false when there is none. */
bool tp_markers_session_event(const struct tp_site_desc *desc, const union tp_arg *args);

#endif
