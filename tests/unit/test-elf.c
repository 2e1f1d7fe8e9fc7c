/* Unit tests of src/elf's file API: load bias, imports, DT_NEEDED search, notes, bytes at
 * link-time addresses, on this test program and the system's /bin/true. */
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/procfs.h"
#include "elf/file.h"
#include "tap.h"

struct bias_check {
	uint64_t fn;
	int checked, good;
	char exe[4096];
};

static int check_map(void *arg, const struct tp_maps_ent *e)
{
	struct bias_check *c = arg;
	uint64_t bias;

	if (!tp_maps_exec(e) || strcmp(e->path, c->exe) || c->fn < e->start || c->fn >= e->end)
		return 0;
	c->checked++;
	if (!tp_elf_map_bias(e->path, e->start, e->offset, &bias) &&
	    bias == (uint64_t)_r_debug.r_map->l_addr)
		c->good++;
	return 0;
}

static int count_needed(void *arg, const char *lib)
{
	if (strstr(lib, "libc.so.6"))
		++*(int *)arg;
	return 0;
}

static int count_note(void *arg, const struct tp_elf_note *n)
{
	if (n->owner_size == 4 && !memcmp(n->owner, "GNU", 4))
		++*(int *)arg;
	return 0;
}

int main(void)
{
	struct bias_check c = {.fn = (uint64_t)(uintptr_t)main};
	struct tp_elf_file f;
	ssize_t len;
	int nlibc = 0, nnotes = 0;
	uint8_t code[16], mem[16];

	len = readlink("/proc/self/exe", c.exe, sizeof(c.exe) - 1);
	c.exe[len > 0 ? len : 0] = 0;
	is_int(tp_maps_foreach(0, check_map, &c), 0, "maps read");
	ok(c.checked == 1 && c.good == 1, "the load bias of our text mapping is the loader's");

	ok(tp_elf_imports("/bin/true", "exit") || tp_elf_imports("/bin/true", "__libc_start_main"),
	   "/bin/true imports from libc");
	ok(!tp_elf_imports("/bin/true", "no_such_symbol_tp"), "and not a made-up name");
	is_int(tp_elf_foreach_needed("/bin/true", count_needed, &nlibc), 0, "DT_NEEDED walked");
	is_int(nlibc, 1, "libc.so.6 found as the loader would");
	is_int(tp_elf_foreach_needed("/no/such/file", count_needed, &nlibc), -ENOENT,
	       "a missing file");

	is_int(tp_elf_file_open_any(&f, "/bin/true"), 0, "open /bin/true");
	is_int(tp_elf_file_foreach_note(&f, NULL, count_note, &nnotes), 0, "notes walked");
	ok(nnotes >= 1, "GNU notes seen (%d)", nnotes);
	tp_elf_file_close(&f);
	is_int(tp_elf_file_open_any(&f, "/proc/self/maps"), -ENOEXEC, "not an ELF file");

	/* Our own code at its link-time address equals what is mapped. */
	uint64_t vaddr = c.fn - (uint64_t)_r_debug.r_map->l_addr;
	is_int(tp_elf_read_loaded(c.exe, vaddr, code, sizeof(code)), sizeof(code),
	       "bytes of main from the file");
	memcpy(mem, main, sizeof(mem));
	ok(!memcmp(code, mem, sizeof(code)), "equal to main's bytes in memory");
	return tap_done();
}
