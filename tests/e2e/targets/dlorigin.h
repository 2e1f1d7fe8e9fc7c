/* libdlorigin: dlopens libdlplug.so, found through its own RUNPATH ($ORIGIN/plugins). */
#ifndef TP_E2E_DLORIGIN_H
#define TP_E2E_DLORIGIN_H

/* plug_value() of libdlplug.so, or -1 when it cannot be loaded. */
__attribute__((visibility("default"))) int dlorigin_plugin_value(void);

#endif
