"""Pure, sans-I/O core: no asyncio, no sockets, no clocks read, no global random."""
