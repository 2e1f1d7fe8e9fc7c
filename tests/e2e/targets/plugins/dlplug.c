/* The plugin libdlorigin finds through its RUNPATH. */
__attribute__((visibility("default"))) int plug_value(void);

int plug_value(void)
{
	return 42;
}
